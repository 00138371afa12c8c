"""Compression codecs: round trips, formats other clients read and write, output bounds."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import pytest
from kafka import codec as kafka_python_codec
from record_fixtures import CODECS, describe, java_read

from semel.protocol.compression import XERIAL_MAGIC, CompressionType, compress, decompress
from semel.protocol.errors import ProtocolError
from semel.protocol.records import build_batch, iter_records, validate_batches

ALL = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]


def sample(size: int) -> bytes:
    """Half random, half repetitive: compresses somewhat, like real payloads."""
    half = size // 2
    return os.urandom(half) + bytes(i % 7 for i in range(size - half))


@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("size", [0, 1, 1000, 32 * 1024, 32 * 1024 + 1, 200_000])
def test_round_trip(codec, size):
    data = sample(size)
    compressed = compress(codec, data)
    assert decompress(codec, compressed, size) == data
    assert decompress(codec, memoryview(compressed), size) == data
    assert decompress(codec, bytearray(compressed), size) == data


@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name)
def test_compress_accepts_any_buffer(codec):
    data = sample(5000)
    for arg in (bytearray(data), memoryview(data)):
        assert decompress(codec, compress(codec, arg), len(data)) == data


@pytest.mark.parametrize("codec", ALL, ids=lambda c: c.name)
def test_output_above_max_output_is_refused(codec):
    data = sample(100_000)
    compressed = compress(codec, data)
    with pytest.raises(ProtocolError):
        decompress(codec, compressed, len(data) - 1)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_bomb_is_refused(codec):
    compressed = compress(codec, bytes(16 << 20))
    assert len(compressed) < (1 << 20)
    with pytest.raises(ProtocolError):
        decompress(codec, compressed, 1 << 20)


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_corrupt_and_truncated_input(codec):
    compressed = compress(codec, sample(50_000))
    with pytest.raises(ProtocolError):
        decompress(codec, compressed[: len(compressed) // 2], 1 << 20)
    with pytest.raises(ProtocolError):
        decompress(codec, b"\x00" * 40, 1 << 20)
    with pytest.raises(ProtocolError):
        decompress(codec, b"", 1 << 20)


def test_unknown_codec():
    with pytest.raises(ProtocolError, match="unknown compression codec 5"):
        decompress(5, b"abc", 100)
    with pytest.raises(ValueError):
        compress(7, b"abc")


def test_gzip_concatenated_members():
    assert decompress(1, gzip.compress(b"ab") + gzip.compress(b"cd"), 4) == b"abcd"


def test_gzip_lying_size_trailer_is_refused_early():
    compressed = bytearray(gzip.compress(b"x" * 100))
    struct.pack_into("<I", compressed, len(compressed) - 4, 1 << 30)
    with pytest.raises(ProtocolError, match="declared output"):
        decompress(1, compressed, 1 << 20)


# --- snappy: xerial framing (Java) and raw (librdkafka) ------------------------------------


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = sample(70_000)
    out = compress(CompressionType.SNAPPY, data)
    assert out[:8] == XERIAL_MAGIC
    assert struct.unpack_from(">ii", out, 8) == (1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (length,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(b) for b in blocks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(blocks) == data


def test_snappy_reads_raw_blocks():
    data = sample(10_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(CompressionType.SNAPPY, raw, len(data)) == data
    with pytest.raises(ProtocolError, match="declared output"):
        decompress(CompressionType.SNAPPY, raw, len(data) - 1)


def test_snappy_reads_concatenated_xerial_streams():
    a, b = sample(40_000), sample(3000)
    joined = compress(CompressionType.SNAPPY, a) + compress(CompressionType.SNAPPY, b)
    assert decompress(CompressionType.SNAPPY, joined, len(a) + len(b)) == a + b


@pytest.mark.parametrize(
    "bad",
    [
        XERIAL_MAGIC + b"\x00\x00\x00\x01",  # header cut short
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, 1000) + b"abc",  # block longer than data
        XERIAL_MAGIC + struct.pack(">iii", 1, 1, -4),  # negative block length
        XERIAL_MAGIC + struct.pack(">ii", 1, 1) + b"\x00\x00",  # block length cut short
    ],
)
def test_snappy_malformed_xerial(bad):
    with pytest.raises(ProtocolError):
        decompress(CompressionType.SNAPPY, bad, 1 << 20)


# --- lz4: frames Java's Lz4BlockInputStream accepts ----------------------------------------


def test_lz4_frames_have_independent_blocks_and_no_content_size():
    out = compress(CompressionType.LZ4, sample(200_000))
    assert out[:4] == b"\x04\x22\x4d\x18"
    flg = out[4]
    assert flg >> 6 == 1  # version 1
    assert flg & 0x20  # block independence: Java rejects dependent blocks
    assert not flg & 0x08  # no content size
    assert flg & 0x03 == 0  # reserved bits


def test_lz4_declared_content_size_is_honoured():
    data = sample(1000)
    compressor = cramjam.lz4.Compressor(content_checksum=True, block_linked=True)
    compressor.compress(data)
    frame = bytes(compressor.finish())
    assert decompress(CompressionType.LZ4, frame, 1000) == data


# --- other clients' encoders and decoders --------------------------------------------------

KAFKA_PYTHON = {
    CompressionType.GZIP: (kafka_python_codec.gzip_encode, kafka_python_codec.gzip_decode),
    CompressionType.SNAPPY: (kafka_python_codec.snappy_encode, kafka_python_codec.snappy_decode),
    CompressionType.LZ4: (kafka_python_codec.lz4_encode, kafka_python_codec.lz4_decode),
    CompressionType.ZSTD: (kafka_python_codec.zstd_encode, kafka_python_codec.zstd_decode),
}


@pytest.mark.parametrize("codec", COMPRESSED, ids=lambda c: c.name)
def test_kafka_python_reads_ours_and_we_read_theirs(codec):
    encode, decode = KAFKA_PYTHON[codec]
    data = sample(150_000)
    assert decode(compress(codec, data)) == data
    assert decompress(codec, encode(data), len(data)) == data


def test_kafka_python_raw_snappy():
    data = sample(20_000)
    raw = kafka_python_codec.snappy_encode(data, xerial_compatible=False)
    assert decompress(CompressionType.SNAPPY, raw, len(data)) == data


def test_java_reads_our_batches(tmp_path):
    """Kafka's own reader (ensureValid + record iteration) over batches we built."""
    paths, expected = [], []
    for codec in CompressionType:
        records = [
            (f"k{i}".encode() if i % 4 else None, sample(i * 700) if i % 5 else None,
             [("h", b"v"), ("n", None)] if i % 2 else [], 1_700_000_000_000 + i)
            for i in range(40)
        ]  # fmt: skip
        batch = build_batch(
            records,
            base_offset=1000 * codec,
            producer_id=9,
            producer_epoch=2,
            base_sequence=5,
            is_transactional=codec % 2 == 1,
            compression=codec,
            partition_leader_epoch=4,
        )
        path = tmp_path / f"ours_{CODECS[codec]}.bin"
        path.write_bytes(batch)
        paths.append(path)
        h = validate_batches(batch)[0]
        expected += describe([(h, list(iter_records(batch, h)))])
    assert java_read(paths) == expected


def test_corrupt_input_fails_fast_without_growing_to_the_cap() -> None:
    """A small corrupt payload must not be retried into ever larger buffers (cheap DoS)."""
    import cramjam

    from semel.protocol.compression import CompressionType, decompress
    from semel.protocol.errors import ProtocolError

    for codec, mod in ((CompressionType.GZIP, cramjam.gzip), (CompressionType.LZ4, cramjam.lz4)):
        data = bytearray(bytes(mod.compress(bytes(range(256)) * 400)))
        data[len(data) // 2] ^= 0xFF
        with pytest.raises(ProtocolError, match="corrupt"):
            decompress(codec, bytes(data), max_output=1 << 40)
