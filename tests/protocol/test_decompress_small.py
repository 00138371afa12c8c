"""``decompress_small`` (the quick walk's one-call decompression of a small lz4 or zstd
payload) agrees with ``stream_decompress``, the reference: on valid payloads of every frame
layout the two codecs' writers make, and on mutated ones (bit flips, truncations, inserted
bytes, lying headers), it returns exactly the bytes the stream yields, or None; it never
returns bytes the stream refuses, nor more than its limit."""

from __future__ import annotations

import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from semel.protocol.compression import CompressionType, decompress_small, stream_decompress
from semel.protocol.errors import ProtocolError

LZ4, ZSTD = CompressionType.LZ4, CompressionType.ZSTD
CAP = 1 << 20


def streamed(codec: int, payload: bytes, cap: int) -> bytes | None:
    try:
        return b"".join(bytes(p) for p in stream_decompress(codec, payload, cap, 64 * 1024))
    except ProtocolError:
        return None


def lz4_frame(data: bytes, *, block_size: int, checksum: bool, block_checksum: bool,
              store_size: bool) -> bytes:
    return lz4.frame.compress(data, block_size=block_size, content_checksum=checksum,
                              block_checksum=block_checksum, block_linked=False,
                              store_size=store_size)


def _streamed_zstd(c: zstandard.ZstdCompressor, data: bytes) -> bytes:
    obj = c.compressobj()  # no content size in the frame header, as a streaming writer
    return obj.compress(data) + obj.flush()


contents = st.one_of(
    st.binary(max_size=3000),
    st.builds(lambda word, n: word * n, st.binary(min_size=1, max_size=20), st.integers(0, 20000)),
)


@st.composite
def payloads(draw):
    data = draw(contents)
    if draw(st.booleans()):
        codec = LZ4
        payload = lz4_frame(
            data, block_size=draw(st.sampled_from([lz4.frame.BLOCKSIZE_MAX64KB,
                                                   lz4.frame.BLOCKSIZE_MAX256KB,
                                                   lz4.frame.BLOCKSIZE_MAX1MB])),
            checksum=draw(st.booleans()), block_checksum=draw(st.booleans()),
            store_size=draw(st.booleans()))
    else:
        codec = ZSTD
        store = draw(st.booleans())
        c = zstandard.ZstdCompressor(level=draw(st.integers(1, 5)),
                                     write_checksum=draw(st.booleans()), write_content_size=store)
        payload = c.compress(data) if store else _streamed_zstd(c, data)
        if draw(st.booleans()):  # two frames back to back
            payload += c.compress(data[:100])
    payload = bytearray(payload)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "byte"]))
        if not payload:
            break
        at = draw(st.integers(0, len(payload) - 1))
        if kind == "flip":
            payload[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del payload[at:]
        elif kind == "insert":
            payload[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            payload[at] = draw(st.integers(0, 255))
    return codec, bytes(payload)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads(), st.sampled_from([100, 5000, 64 * 1024, 256 * 1024]))
def test_agrees_with_the_stream(case, limit):
    codec, payload = case
    reference = streamed(codec, payload, CAP)
    quick = decompress_small(codec, payload, limit)
    event(f"{'lz4' if codec == LZ4 else 'zstd'}: "
          f"{'none' if quick is None else 'whole'}, stream {'refused' if reference is None else 'ok'}")
    if quick is not None:
        assert reference is not None and quick == reference
        assert len(quick) <= limit


@pytest.mark.parametrize("codec", [LZ4, ZSTD])
def test_valid_small_payloads_are_decompressed_whole(codec):
    data = b"kafka record bytes " * 800
    if codec == LZ4:
        payload = lz4_frame(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, checksum=False,
                            block_checksum=False, store_size=False)
    else:
        payload = _streamed_zstd(zstandard.ZstdCompressor(level=3), data)
    assert decompress_small(codec, payload, 64 * 1024) == data
    assert decompress_small(codec, memoryview(bytearray(payload)), 64 * 1024) == data
    assert decompress_small(codec, payload, len(data) - 1) is None  # over the limit


def test_what_it_leaves_to_the_stream():
    data = b"x" * 70_000
    linked = lz4.frame.compress(data, block_linked=True)
    assert decompress_small(LZ4, linked, CAP) is None  # dependent blocks: refused by the stream
    bomb = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * 300_000)
    assert decompress_small(ZSTD, bomb, 256 * 1024) is None  # declares more than the limit
    two = zstandard.ZstdCompressor().compress(b"a") * 2
    assert decompress_small(ZSTD, two, CAP) is None  # one frame only
    assert decompress_small(CompressionType.GZIP, b"\x1f\x8b", CAP) is None
