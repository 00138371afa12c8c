"""Framing and request/response headers: whole, byte by byte, with trailing bytes."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.api_header import RequestHeader as KafkaPythonRequestHeader
from kafka.protocol.api_header import ResponseHeader as KafkaPythonResponseHeader

from semel.protocol.errors import ProtocolError
from semel.protocol.frame import (
    FrameDecoder,
    FrameTooLarge,
    RequestHeader,
    decode_response_header,
    encode_request_header,
    encode_response_header,
    frame_response,
    parse_request_header,
    peek_api_key_version,
    size_prefix,
)


def framed(*bodies: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(b)) + b for b in bodies)


BODIES = [b"first", b"", b"x" * 1000, bytes(range(256)) * 3]
STREAM = framed(*BODIES)


def feed_in_chunks(decoder: FrameDecoder, data: bytes, size: int) -> list[bytes]:
    out = []
    for i in range(0, len(data), size):
        out += [bytes(f) for f in decoder.feed(data[i : i + size])]
    return out


def test_whole_stream_in_one_feed():
    d = FrameDecoder()
    assert [bytes(f) for f in d.feed(STREAM)] == BODIES
    assert d.buffered == 0


def test_byte_by_byte():
    d = FrameDecoder()
    assert feed_in_chunks(d, STREAM, 1) == BODIES
    assert d.buffered == 0


@pytest.mark.parametrize("size", [2, 3, 4, 5, 7, 64, 999, 1001])
def test_every_chunk_size(size):
    assert feed_in_chunks(FrameDecoder(), STREAM, size) == BODIES


def test_trailing_bytes_stay_buffered():
    d = FrameDecoder()
    partial = framed(b"next-frame")[:7]
    assert [bytes(f) for f in d.feed(STREAM + partial)] == BODIES
    assert d.buffered == 7
    assert [bytes(f) for f in d.feed(framed(b"next-frame")[7:])] == [b"next-frame"]
    assert d.buffered == 0


def test_split_size_prefix_is_buffered():
    d = FrameDecoder()
    assert d.feed(b"\x00\x00") == []
    assert d.buffered == 2
    assert d.feed(b"\x00\x03ab") == []
    assert d.buffered == 6
    assert [bytes(f) for f in d.feed(b"c")] == [b"abc"]


def test_whole_frame_in_a_bytes_chunk_is_not_copied():
    data = framed(b"hello", b"world")
    frames = FrameDecoder().feed(data)
    assert all(f.obj is data for f in frames)


def test_frame_from_a_reused_bytearray_is_a_copy():
    chunk = bytearray(framed(b"hello"))
    (frame,) = FrameDecoder().feed(chunk)
    chunk[4:9] = b"XXXXX"
    chunk.extend(b"more")  # the decoder holds no export of the caller's buffer
    assert bytes(frame) == b"hello"


def test_spanning_frame_from_reused_bytearray_is_copied():
    d = FrameDecoder()
    data = framed(b"abcdefgh")
    buf = bytearray(data[:6])
    assert d.feed(buf) == []
    buf[:] = b"ZZZZZZ"
    assert [bytes(f) for f in d.feed(bytearray(data[6:]))] == [b"abcdefgh"]


def test_large_frame_in_small_chunks():
    body = bytes(range(256)) * 4096  # 1 MiB
    d = FrameDecoder()
    assert feed_in_chunks(d, framed(body), 1000) == [body]


def test_oversize_frame_is_refused_before_its_body_arrives():
    d = FrameDecoder(max_frame_size=1000)
    with pytest.raises(FrameTooLarge) as e:
        d.feed(struct.pack(">i", 1001))
    assert e.value.size == 1001
    assert "exceeds the maximum of 1000" in str(e.value)
    assert d.buffered == 0


def test_oversize_size_prefix_fed_byte_by_byte():
    d = FrameDecoder(max_frame_size=1000)
    prefix = struct.pack(">i", 2**31 - 1)
    for b in prefix[:3]:
        assert d.feed(bytes([b])) == []
    with pytest.raises(FrameTooLarge):
        d.feed(prefix[3:])


def test_frame_of_exactly_max_size_is_accepted():
    d = FrameDecoder(max_frame_size=10)
    assert [bytes(f) for f in d.feed(framed(b"0123456789"))] == [b"0123456789"]


def test_negative_size():
    with pytest.raises(FrameTooLarge, match="invalid frame size -1") as e:
        FrameDecoder().feed(b"\xff\xff\xff\xff" + b"x" * 10)
    assert isinstance(e.value, ProtocolError)


# --- request headers -----------------------------------------------------------------------


def kafka_python_header(flexible: bool, client_id: str | None = "cli") -> bytes:
    header = KafkaPythonRequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=77, client_id=client_id
    )
    return header.encode(flexible=flexible)


@pytest.mark.parametrize("header_version", [1, 2])
def test_parse_kafka_python_request_header(header_version):
    frame = kafka_python_header(flexible=header_version == 2) + b"BODY"
    header, pos = parse_request_header(memoryview(frame), header_version)
    assert header == RequestHeader(18, 3, 77, "cli")
    assert frame[pos:] == b"BODY"


def test_header_v0():
    frame = struct.pack(">hhi", 0, 9, -5) + b"rest"
    assert parse_request_header(frame, 0) == (RequestHeader(0, 9, -5, None), 8)


def test_null_client_id():
    frame = encode_request_header(1, 12, 3, None, 1)
    assert parse_request_header(frame, 1) == (RequestHeader(1, 12, 3, None), 10)


@pytest.mark.parametrize("header_version", [0, 1, 2])
def test_encode_request_header_round_trip(header_version):
    frame = encode_request_header(3, 12, 99, "ünïcode", header_version)
    client_id = None if header_version == 0 else "ünïcode"
    assert parse_request_header(frame, header_version) == (
        RequestHeader(3, 12, 99, client_id),
        len(frame),
    )


def test_unknown_tagged_fields_are_skipped():
    tagged = b"\x02" + b"\x00\x03abc" + b"\x05\x00"  # tag 0 (3 bytes), tag 5 (0 bytes)
    frame = struct.pack(">hhih", 18, 3, 1, 1) + b"c" + tagged + b"BODY"
    header, pos = parse_request_header(frame, 2)
    assert header.client_id == "c"
    assert frame[pos:] == b"BODY"


def test_multi_byte_varint_tagged_field():
    field = b"y" * 200
    tagged = b"\x01" + b"\x80\x01" + b"\xc8\x01" + field  # tag 128, size 200
    frame = struct.pack(">hhih", 18, 3, 1, -1) + tagged
    assert parse_request_header(frame, 2)[1] == len(frame)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"\x00\x12\x00\x03\x00\x00", "shorter than a request header"),
        (struct.pack(">hhi", 18, 3, 1), "before the client id length"),
        (struct.pack(">hhih", 18, 3, 1, 10) + b"abc", "client id of 10 bytes"),
        (struct.pack(">hhih", 18, 3, 1, -2), "invalid client id length -2"),
        (struct.pack(">hhih", 18, 3, 1, -1), "truncated varint"),
        (struct.pack(">hhih", 18, 3, 1, -1) + b"\x01\x00\x05ab", "length 5 exceeds the 2 remaining bytes"),
        (struct.pack(">hhih", 18, 3, 1, -1) + b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
        (struct.pack(">hhih", 18, 3, 1, -1) + b"\x7f", "127 tagged fields cannot fit"),
    ],
)
def test_malformed_request_headers(frame, message):
    with pytest.raises(ProtocolError, match=message):
        parse_request_header(frame, 2)


def test_peek_api_key_version():
    frame = kafka_python_header(flexible=True)
    assert peek_api_key_version(frame) == (18, 3, 77)
    with pytest.raises(ProtocolError):
        peek_api_key_version(frame[:7])


# --- response headers ----------------------------------------------------------------------


@pytest.mark.parametrize("header_version", [0, 1])
def test_response_header_matches_kafka_python(header_version):
    ours = encode_response_header(123, header_version)
    theirs = KafkaPythonResponseHeader(correlation_id=123).encode(flexible=header_version == 1)
    assert ours == theirs
    assert decode_response_header(ours + b"body", header_version) == (123, len(ours))


def test_decode_response_header_errors():
    with pytest.raises(ProtocolError):
        decode_response_header(b"\x00\x00", 0)
    with pytest.raises(ProtocolError):
        decode_response_header(b"\x00\x00\x00\x01", 1)


def test_frame_response_round_trips_through_the_decoder():
    out = frame_response(encode_response_header(5, 1), b"payload")
    assert out[:4] == size_prefix(len(out) - 4)
    (frame,) = FrameDecoder().feed(out)
    assert decode_response_header(frame, 1) == (5, 5)
    assert bytes(frame[5:]) == b"payload"
