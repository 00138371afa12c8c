"""BufferedFrameReader (the BufferedProtocol framing): the same frames as FrameDecoder for
any chunking of the stream, zero-copy for large frames, limits checked before allocation."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import ProtocolError
from protocol.frame import BufferedFrameReader, FrameDecoder, FrameTooLarge


def stream_of(frames: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(f)) + f for f in frames)


def read_all(reader: BufferedFrameReader, data: bytes, chunks: list[int]) -> list[bytes]:
    """Deliver ``data`` the way a socket would: into the buffers the reader hands out."""
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        assert len(buf) > 0
        want = chunks[i % len(chunks)] if chunks else len(data)
        i += 1
        n = min(len(buf), want, len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        out += [bytes(f) for f in reader.buffer_updated(n)]
    return out


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(st.one_of(st.binary(max_size=40),
                                 st.binary(min_size=33000, max_size=140000)), max_size=6),
       chunks=st.lists(st.integers(min_value=1, max_value=70000), max_size=8))
def test_same_frames_as_frame_decoder_for_any_chunking(frames, chunks) -> None:
    data = stream_of(frames)
    expected = [bytes(f) for f in FrameDecoder().feed(data)]
    assert expected == frames
    assert read_all(BufferedFrameReader(scratch_size=65536), data, chunks) == frames


def test_byte_by_byte() -> None:
    frames = [b"a" * 10, b"b" * 40000, b"", b"c"]
    assert read_all(BufferedFrameReader(), stream_of(frames), [1]) == frames


def test_large_frame_is_read_in_place_and_writable() -> None:
    reader = BufferedFrameReader(scratch_size=65536)
    body = bytes(range(256)) * 1000
    data = stream_of([body])
    first = reader.get_buffer(-1)
    first[:1000] = data[:1000]
    assert reader.buffer_updated(1000) == []
    target = reader.get_buffer(-1)  # the frame's own buffer, after the 996 bytes already in
    assert len(target) == len(body) - 996
    target[:] = data[1000:]
    (frame,) = reader.buffer_updated(len(target))
    assert not frame.readonly and bytes(frame) == body


@pytest.mark.parametrize("size", [-1, -5, 1001])
def test_bad_sizes_fail_before_allocation(size: int) -> None:
    reader = BufferedFrameReader(max_frame_size=1000)
    buf = reader.get_buffer(-1)
    buf[:4] = struct.pack(">i", size)
    with pytest.raises(FrameTooLarge):
        reader.buffer_updated(4)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_only_protocol_errors(data: bytes) -> None:
    reader = BufferedFrameReader(max_frame_size=1 << 20)
    try:
        read_all(reader, data, [7])
    except ProtocolError:
        pass
