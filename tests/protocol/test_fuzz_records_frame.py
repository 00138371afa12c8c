"""Fuzz invariant: on any input our decoders return a value or raise ProtocolError.

Random bytes, and valid batches/frames mutated (bytes flipped, cut, inserted), go through
validate_batches, iter_batches, iter_records, decompress, parse_request_header,
decode_response_header and FrameDecoder. Mutated batches get their CRC fixed, so the
mutation reaches the record decoder instead of stopping at the checksum.
"""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semel.protocol.compression import compress, decompress
from semel.protocol.errors import ProtocolError
from semel.protocol.frame import FrameDecoder, decode_response_header, parse_request_header
from semel.protocol.records import (
    HEADER_SIZE,
    BatchHeader,
    build_batch,
    iter_batches,
    iter_records,
    validate_batches,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SEEDS = [
    build_batch(
        [(b"key", b"value" * 20, [("h", b"v"), ("n", None)], 1000), (None, None, None, 999)],
        producer_id=5,
        producer_epoch=1,
        base_sequence=0,
        compression=codec,
    )
    for codec in range(5)
]


def fix_crc(batch: bytearray) -> None:
    if len(batch) >= HEADER_SIZE:
        struct.pack_into(">I", batch, 17, crc32c(memoryview(batch)[21:]))


@st.composite
def mutated(draw, seeds=SEEDS):
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del data[i : i + draw(st.integers(1, 8))]
    return data


def decode_everything(buf) -> None:
    """Every read path over one buffer; only ProtocolError may escape."""
    for from_client in (True, False):
        try:
            validate_batches(buf, from_client=from_client)
        except ProtocolError:
            pass
    for strict in (True, False):
        try:
            for header in iter_batches(buf, strict=strict):
                try:
                    list(iter_records(buf, header, max_uncompressed=1 << 20))
                except ProtocolError:
                    pass
        except ProtocolError:
            pass
    try:
        header = BatchHeader(buf)
        list(iter_records(buf, header, max_uncompressed=1 << 20))
    except ProtocolError:
        pass


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_as_batches(data):
    decode_everything(data)


@FUZZ
@given(mutated())
def test_mutated_batches(data):
    decode_everything(bytes(data))


@FUZZ
@given(mutated())
def test_mutated_batches_with_fixed_crc(data):
    fix_crc(data)
    decode_everything(bytes(data))


@FUZZ
@given(st.binary(max_size=300), st.data())
def test_random_record_bytes_inside_a_valid_header(records, data):
    """Arbitrary record bytes behind a consistent header and CRC."""
    count = data.draw(st.integers(-2, 12))
    codec = data.draw(st.integers(0, 4))
    payload = records if codec == 0 or data.draw(st.booleans()) else compress(codec, records)
    batch = bytearray(SEEDS[0][:HEADER_SIZE] + payload)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, codec)
    struct.pack_into(">ii", batch, 23, count - 1, 0)
    struct.pack_into(">i", batch, 57, count)
    fix_crc(batch)
    decode_everything(bytes(batch))


@FUZZ
@given(st.integers(0, 7), st.binary(max_size=300))
def test_decompress_random_bytes(codec, data):
    try:
        out = decompress(codec, data, 4096)
    except ProtocolError:
        return
    assert len(out) <= 4096


@FUZZ
@given(st.integers(1, 4), st.data())
def test_decompress_mutated_streams(codec, data):
    seeds = [compress(codec, b"hello world " * 500)]
    stream = bytes(data.draw(mutated(seeds)))
    try:
        out = decompress(codec, stream, 8000)
    except ProtocolError:
        return
    assert len(out) <= 8000


def request_headers() -> list[bytes]:
    return [
        struct.pack(">hhih", 18, 3, 1, 3) + b"cli" + b"\x01\x00\x02ab" + b"body",
        struct.pack(">hhih", 0, 9, 7, -1) + b"\x00",
        struct.pack(">hhi", 1, 12, 99),
    ]


@FUZZ
@given(st.binary(max_size=64) | mutated(request_headers()), st.integers(0, 2))
def test_request_headers(frame, header_version):
    try:
        _, pos = parse_request_header(bytes(frame), header_version)
    except ProtocolError:
        return
    assert 8 <= pos <= len(frame)


@FUZZ
@given(st.binary(max_size=32), st.integers(0, 1))
def test_response_headers(frame, header_version):
    try:
        _, pos = decode_response_header(frame, header_version)
    except ProtocolError:
        return
    assert 4 <= pos <= len(frame)


@FUZZ
@given(st.binary(max_size=600), st.lists(st.integers(1, 50), max_size=30))
def test_frame_decoder_random_stream(stream, cuts):
    d = FrameDecoder(max_frame_size=256)
    pos = 0
    try:
        for cut in [*cuts, len(stream)]:
            for frame in d.feed(stream[pos : pos + cut]):
                assert len(frame) <= 256
            pos += cut
    except ProtocolError:
        pass


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=8), st.lists(st.integers(1, 80), max_size=40))
def test_frame_decoder_any_split_gives_the_same_frames(bodies, cuts):
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)
    d = FrameDecoder(max_frame_size=300)
    frames, pos = [], 0
    for cut in [*cuts, len(stream)]:
        frames += [bytes(f) for f in d.feed(stream[pos : pos + cut])]
        pos += cut
    assert frames == bodies
    assert d.buffered == 0
