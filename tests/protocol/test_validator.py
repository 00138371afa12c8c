"""The record walk (protocol/validator.py): every rule with its error and exact message, for
every codec, with the records handed over whole, in byte-sized pieces, and with records
walked field by field; per-record errors; the true max timestamp; decompression bombs
stopped at the cap with little memory."""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from walk_fixtures import T0, batch, body, field, record, records, varint

from semel.protocol import validator
from semel.protocol.compression import CompressionType, compress, stream_decompress
from semel.protocol.errors import ProtocolError
from semel.protocol.records import (
    ATTRIBUTES_OFFSET,
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    build_batch,
    iter_records,
    validate_batches,
)
from semel.protocol.validator import (
    MAX_RECORD_ERRORS,
    TS_ALL,
    TS_NONE,
    TS_RANGE,
    RecordWalk,
    _timestamp_rule,
    validate_records,
)

CODECS = list(CompressionType)
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


@pytest.fixture(params=["whole", "byte-chunks", "field-by-field"])
def windows(request, monkeypatch):
    """How compressed records reach the walker: in 256 KiB pieces; one byte at a time (every
    record straddles pieces); or with every record longer than the window (read field by
    field as it streams past)."""
    if request.param == "byte-chunks":
        monkeypatch.setattr(validator, "STREAM_CHUNK", 1)
    elif request.param == "field-by-field":
        monkeypatch.setattr(validator, "WINDOW", 0)
        monkeypatch.setattr(validator, "STREAM_CHUNK", 3)
    return request.param


@pytest.fixture(params=["C", "python"])
def walker(request, monkeypatch):
    if request.param == "C" and validator._recordwalk is None:
        pytest.skip("the C walker is not built")
    monkeypatch.setattr(validator, "_walk", validator._walk if request.param == "C"
                        else validator._walk_py)  # fmt: skip
    return request.param


def walk(data: bytes, **kw):
    return validate_records(data, BatchHeader(data), **kw)


def refusal(data: bytes, **kw) -> InvalidRecordError:
    with pytest.raises(InvalidRecordError) as info:
        walk(data, **kw)
    assert not isinstance(info.value, CorruptRecordError)
    return info.value


# -- valid batches ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_valid_batches_of_every_shape(codec, windows, walker):
    n, size = (40, 5) if windows == "byte-chunks" else (200, 37)
    rows = [
        (f"k{i}".encode() if i % 4 else None, os.urandom(i * size) if i % 5 else None,
         [("h", b"v"), ("n", None)] if i % 2 else [], T0 + (i * 7919) % 1000 - 500)
        for i in range(n)
    ]  # fmt: skip
    data = build_batch(rows, compression=codec)
    summary = walk(data, timestamp_bounds=(T0 - 1000, T0 + 1000))
    assert summary.record_count == n
    assert summary.max_timestamp == max(r[3] for r in rows)
    assert summary.uncompressed_bytes == len(batch_records_bytes(rows))


def batch_records_bytes(rows) -> bytes:
    data = build_batch(rows)
    return data[61:]


def test_large_records_are_walked_without_holding_them(monkeypatch):
    """Records longer than WINDOW stream past field by field."""
    big = os.urandom(3 << 20)
    data = build_batch([(b"k", big, [("h", b"x")], T0), (b"k", b"small", [], T0 + 1)],
                       compression=CompressionType.ZSTD)  # fmt: skip
    assert walk(data).record_count == 2
    assert walk(data).uncompressed_bytes > 3 << 20


# -- framing rules: exact messages, the same whatever the codec and chunking -----------------


def _raw_body(*parts: bytes) -> bytes:
    return b"".join(parts)


def _with_length(b: bytes, length: int | None = None) -> bytes:
    return varint(len(b) if length is None else length) + b


_PREFIX = bytes([0]) + varint(0) + varint(0)  # attributes, timestamp delta, offset delta 0
_FULL = body(0)  # key "k", value "v", no headers: 8 bytes

FRAMING = [
    ("garbage", b"\xff" * 20, 1, "record 0: record length is a varint longer than 5 bytes"),
    ("negative length", varint(-3) + _FULL, 1, "record 0: invalid record length -3"),
    ("empty record", varint(0) + _FULL, 1,
     "record 0: attributes runs past the end of the record (record length 0)"),
    ("offset delta", record(0, offset_delta=1), 1, "record 0: offset delta 1, expected 0"),
    ("second offset delta", record(0) + record(1, offset_delta=0), 2,
     "record 1: offset delta 0, expected 1"),
    ("timestamp varlong", _with_length(bytes([0]) + b"\x80" * 10 + b"\x00" + varint(0) + b"\x01\x01\x00"),
     1, "record 0: timestamp delta is a varlong longer than 10 bytes"),
    ("offset varint", _with_length(bytes([0, 0]) + b"\x80" * 5 + b"\x00\x01\x01\x00"), 1,
     "record 0: offset delta is a varint longer than 5 bytes"),
    ("key length", _with_length(_PREFIX + varint(-2) + field(b"v") + varint(0)), 1,
     "record 0: invalid key length -2"),
    ("key past the record", _with_length(_PREFIX + varint(10) + b"abc"), 1,
     "record 0: key of 10 bytes runs past the end of the record (record length 7)"),
    ("value length", _with_length(_PREFIX + field(b"k") + varint(-5) + varint(0)), 1,
     "record 0: invalid value length -5"),
    ("value past the record", _with_length(_PREFIX + field(b"k") + varint(4) + b"ab" + varint(0)),
     1, "record 0: value of 4 bytes runs past the end of the record (record length 9)"),
    ("negative header count", _with_length(_PREFIX + field(b"k") + field(b"v") + varint(-1)), 1,
     "record 0: invalid header count -1"),
    ("header count too large", _with_length(_PREFIX + field(b"k") + field(b"v") + varint(5)), 1,
     "record 0: 5 headers cannot fit in the 0 bytes left of the record"),
    ("null header key", record(0, headers=[(None, b"v")]), 1, "record 0: header 0 has a null key"),
    ("header key length",
     _with_length(_PREFIX + field(b"k") + field(b"v") + varint(1) + varint(-3) + varint(0)), 1,
     "record 0: invalid header 0 key length -3"),
    ("header value length",
     _with_length(_PREFIX + field(b"k") + field(b"v") + varint(1) + field(b"h") + varint(-2)), 1,
     "record 0: invalid header 0 value length -2"),
    ("header value past the record",
     _with_length(_PREFIX + field(b"k") + field(b"v") + varint(1) + field(b"h") + varint(9)), 1,
     "record 0: header 0 value of 9 bytes runs past the end of the record (record length 11)"),
    ("record longer than its fields", _with_length(_FULL + b"xy"), 1,
     "record 0: record length 10, but its fields take 8 bytes"),
    ("record shorter than its fields", _with_length(_FULL, 7) + b"\x00", 1,
     "record 0: header count runs past the end of the record (record length 7)"),
    ("count below the records", records(5), 2, "bytes remain after the 2 records the batch declares"),
    ("count above the records", records(5), 1000, "the batch declares 1000 records but holds 5"),
    ("no records at all", b"", 1, "the batch declares 1 records but holds 0"),
    ("truncated record", records(2)[:-2], 2,
     "record 1: truncated, the records end 7 bytes into it"),
    ("truncated length varint", records(1) + b"\x80", 2,
     "record 1: truncated, the records end 1 bytes into it"),
    ("trailing byte", records(3) + b"\x00", 3, "bytes remain after the 3 records the batch declares"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "data", "count", "message"), FRAMING, ids=[f[0] for f in FRAMING])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_framing_rules(name, data, count, message, codec, windows, walker):
    error = refusal(batch(data, count, compression=codec))
    assert (error.reason, error.position, error.record_errors) == (message, 0, [])


def test_garbage_under_a_valid_crc_is_invalid_record_not_corrupt():
    data = batch(os.urandom(64) + b"\xff" * 8, 3)
    assert validate_batches(data)  # header and CRC are fine
    error = refusal(data)
    assert error.error_code == InvalidRecordError.error_code


def test_position_names_the_batch():
    first = build_batch([(b"k", b"v", [], T0)])
    bad = batch(records(5), 2)
    data = first + bad
    headers = validate_batches(data)
    with pytest.raises(InvalidRecordError) as info:
        validate_records(data, headers[1])
    assert info.value.position == len(first)
    assert str(info.value).endswith(f"(batch at position {len(first)})")


def test_header_lengths_in_range_are_accepted():
    data = batch(record(0, headers=[(b"", None), (b"key", b""), (b"x" * 300, b"y" * 300)]), 1)
    assert walk(data).record_count == 1


def test_varint_upper_bits_are_dropped_like_kafka():
    """A 5-byte varint's bits past 32 are ignored (Kafka's ByteUtils.readVarint)."""
    key_length = b"\x86\x80\x80\x80\x70"  # raw 6 + garbage in bits 32-34 -> 3
    data = batch(_with_length(_PREFIX + key_length + b"abc" + field(b"v") + varint(0)), 1)
    assert walk(data).record_count == 1


# -- compressed data ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=lambda c: CompressionType(c).name)
def test_corrupt_compressed_data_is_invalid_record(codec):
    payload = bytearray(compress(codec, records(50, value=os.urandom(200))))
    for i in range(20, len(payload) - 20, 7):
        payload[i] ^= 0x5A
    data = _with_payload(batch(b"", 50), bytes(payload), codec)
    with pytest.raises(InvalidRecordError):
        walk(data)


def _with_payload(template: bytes, payload: bytes, codec: int) -> bytes:
    """``template``'s header around ``payload`` (already compressed with ``codec``)."""
    buf = bytearray(template[:HEADER_SIZE] + payload)
    struct.pack_into(">i", buf, BATCH_LENGTH_OFFSET, MIN_BATCH_LENGTH + len(payload))
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, codec)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _linked(frame: bytes) -> bytes:
    """The frame with its FLG saying dependent blocks (the check precedes the header CRC)."""
    return frame[:4] + bytes([frame[4] & ~0x20]) + frame[5:]


@pytest.mark.parametrize(
    ("codec", "payload", "message"),
    [
        (1, gzip.compress(records(3))[:-5], "gzip: the compressed data is truncated"),
        (1, gzip.compress(records(3)) + b"junk", "gzip: 4 bytes that are not a gzip member follow the data"),
        (3, _linked(lz4.frame.compress(records(3), block_linked=False)),
         "lz4: dependent blocks are not supported (Kafka reads independent blocks only)"),
        (3, lz4.frame.compress(records(3), block_linked=False) + b"\x00",
         "lz4: 1 bytes follow the end of the frame"),
        (3, lz4.frame.compress(records(3), block_linked=False)[:-3], "lz4: the compressed data is truncated"),
        (4, zstandard.ZstdCompressor().compress(records(3))[:-2], "zstd: the compressed data is truncated"),
        (4, zstandard.ZstdCompressor().compress(records(3)) + b"\x01\x02\x03\x04\x05\x06\x07\x08",
         "zstd: bytes that are not a frame at "),
        (2, b"\xff\xff\xff\xff\xff\xff", "snappy: "),
    ],
)  # fmt: skip
def test_bad_compressed_streams(codec, payload, message):
    data = _with_payload(batch(b"", 3), payload, codec)
    error = refusal(data)
    assert error.reason.startswith(message)


def test_concatenated_gzip_members_and_zstd_frames_are_read():
    data = records(4)
    gz = gzip.compress(data[:10]) + gzip.compress(data[10:])
    assert walk(_with_payload(batch(b"", 4), gz, 1)).record_count == 4
    z = zstandard.ZstdCompressor()
    zs = z.compress(data[:5]) + z.compress(data[5:])
    assert walk(_with_payload(batch(b"", 4), zs, 4)).record_count == 4


def test_raw_snappy_is_read():
    data = records(6)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert walk(_with_payload(batch(b"", 6), raw, 2)).record_count == 6


BOMB = 32 << 20
CAP = 4 << 20


def _one_huge_record() -> bytes:
    return record(0, key=b"k", value=bytes(BOMB))


def _many_records() -> bytes:
    one = body(0, value=bytes(1000))
    return b"".join(varint(len(b)) + b for b in (body(i, value=bytes(1000)) for i in
                                                  range(BOMB // (len(one) + 2))))  # fmt: skip


@pytest.mark.parametrize("shape", [_one_huge_record, _many_records], ids=["one-record", "records"])
@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=lambda c: CompressionType(c).name)
def test_bombs_stop_at_the_cap_with_little_memory(codec, shape):
    data_records = shape()
    count = 1 if shape is _one_huge_record else len(list(_count(data_records)))
    data = batch(data_records, count, compression=codec)
    del data_records
    assert len(data) < BOMB // 16  # snappy compresses least: about 20 to 1
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecordError) as info:
            walk(data, max_uncompressed=CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"records decompress to more than {CAP} bytes" in info.value.reason
    assert peak < 2 << 20, f"peak {peak} bytes"


def _count(data: bytes):
    pos = 0
    while pos < len(data):
        b, n, shift, length = 0, 0, 0, 0
        while True:
            b = data[pos + n]
            length |= (b & 0x7F) << shift
            n += 1
            shift += 7
            if b < 0x80:
                break
        length = (length >> 1) ^ -(length & 1)
        pos += n + length
        yield pos


def test_raw_snappy_bomb_refused_from_its_declared_size():
    data = _one_huge_record()
    raw = bytes(cramjam.snappy.compress_raw(data))
    error = refusal(_with_payload(batch(b"", 1), raw, 2), max_uncompressed=CAP)
    assert error.reason == f"snappy: declared output of {len(data)} bytes exceeds {CAP}"


def test_uncompressed_batches_are_not_capped():
    data = batch(records(3, value=bytes(5000)), 3)
    assert walk(data, max_uncompressed=100).record_count == 3


def test_stream_decompress_pieces_are_bounded():
    data = os.urandom(1000) * 3000
    for codec in (1, 3, 4):
        pieces = list(stream_decompress(codec, compress(codec, data), len(data), 4096))
        assert max(len(p) for p in pieces) <= 4096
        assert b"".join(bytes(p) for p in pieces) == data
        with pytest.raises(ProtocolError):
            list(stream_decompress(codec, compress(codec, data), len(data) - 1, 4096))


# -- per-record errors (Kafka's RecordValidationException) -------------------------------------


def test_keyless_records_on_a_compacted_topic(walker):
    data = build_batch([(b"k" if i % 2 == 0 else None, b"v", [], T0) for i in range(5)])
    error = refusal(data, require_keys=True, topic_partition="t-0")
    message = "Compacted topic cannot accept message without key in topic partition t-0."
    assert type(error) is InvalidRecordError
    assert error.record_errors == [(1, message), (3, message)]
    assert error.reason == (
        "One or more records have been rejected due to 2 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
        f"RecordError(batchIndex=3, message='{message}')]"
    )


def test_timestamps_out_of_range(walker):
    stamps = [T0, T0 + 100, T0 - 100, -1, T0 + 10]
    data = build_batch([(b"k", b"v", [], ts) for ts in stamps])
    error = refusal(data, timestamp_bounds=(T0 - 10, T0 + 10))
    assert type(error) is InvalidTimestampError
    assert error.reason == "One or more records have been rejected due to invalid timestamp"
    window = f"The timestamp should be within [{T0 - 10}, {T0 + 10}]"
    assert error.record_errors == [
        (1, f"Timestamp {T0 + 100} of message with offset 1 is out of range. {window}"),
        (2, f"Timestamp {T0 - 100} of message with offset 2 is out of range. {window}"),
    ]


def test_key_error_comes_first_and_any_timestamp_error_makes_it_invalid_timestamp(walker):
    data = build_batch([(None, b"v", [], T0 + 100), (b"k", b"v", [], T0 + 100), (None, b"v", [], T0)])
    error = refusal(data, require_keys=True, timestamp_bounds=(T0 - 10, T0 + 10),
                    topic_partition="t-0")  # fmt: skip
    assert type(error) is InvalidTimestampError
    assert [i for i, _ in error.record_errors] == [0, 1, 2]
    assert "without key" in error.record_errors[0][1]
    assert "out of range" in error.record_errors[1][1]


def test_a_framing_error_anywhere_wins_over_record_errors(walker):
    data = batch(records(3, key=None) + record(3, offset_delta=9), 4)
    error = refusal(data, require_keys=True)
    assert (error.reason, error.record_errors) == ("record 3: offset delta 9, expected 3", [])


def test_record_errors_are_listed_up_to_the_cap(walker):
    n = MAX_RECORD_ERRORS + 500
    data = batch(records(n, key=None), n)
    error = refusal(data, require_keys=True)
    assert len(error.record_errors) == MAX_RECORD_ERRORS
    assert error.record_errors[-1][0] == MAX_RECORD_ERRORS - 1
    assert error.reason.startswith(f"One or more records have been rejected due to {n} record")


def test_log_append_time_batch_from_a_producer():
    recs = records(3)
    # CreateTime topic: records carry the batch's maxTimestamp, range checked
    ok = batch(recs, 3, log_append_time=True, max_timestamp=T0 + 5)
    assert walk(ok, timestamp_bounds=(T0, T0 + 10)).max_timestamp == T0 + 5
    late = batch(recs, 3, log_append_time=True, max_timestamp=T0 + 50)
    error = refusal(late, timestamp_bounds=(T0, T0 + 10))
    assert type(error) is InvalidTimestampError and len(error.record_errors) == 3
    assert error.record_errors[2][1].startswith(f"Timestamp {T0 + 50} of message with offset 2")
    # no timestamp at all, or a LogAppendTime topic: "should not set timestamp type"
    for data, kw in ((batch(recs, 3, log_append_time=True, max_timestamp=-1),
                      {"timestamp_bounds": (T0, T0 + 10)}),
                     (ok, {"log_append_time": True})):  # fmt: skip
        error = refusal(data, **kw)
        assert type(error) is InvalidTimestampError
        assert error.record_errors[0] == (0, (
            "Invalid timestamp type in message with offset 0. Producer should not set "
            "timestamp type to LogAppendTime."))  # fmt: skip


def test_log_append_time_topic_checks_no_create_time():
    data = build_batch([(b"k", b"v", [], 5)])
    assert walk(data, log_append_time=True).max_timestamp == 5


# -- the true max timestamp ----------------------------------------------------------------------


def test_max_timestamp_is_the_largest_record_timestamp():
    data = batch(records(1, ts_delta=5) + record(1, ts_delta=50) + record(2, ts_delta=7), 3,
                 max_timestamp=T0)  # fmt: skip
    assert walk(data).max_timestamp == T0 + 50
    assert walk(batch(records(2), 2, base_timestamp=-1)).max_timestamp == -1
    assert walk(batch(records(2), 2, base_timestamp=-7)).max_timestamp == -1


def test_timestamps_beyond_int64_are_out_of_range():
    data = batch(record(0, ts_delta=2**62 + 5), 1, base_timestamp=2**62)
    error = refusal(data, timestamp_bounds=(0, INT64_MAX))
    assert f"Timestamp {2**63 + 5} of message" in error.record_errors[0][1]


def test_timestamp_rule_deltas():
    header = BatchHeader(batch(records(1), 1, base_timestamp=1000))
    assert _timestamp_rule(header, None, False)[0] == TS_NONE
    assert _timestamp_rule(header, (900, 1100), False) == (TS_RANGE, -100, 100)
    assert _timestamp_rule(header, (INT64_MIN, INT64_MAX), False) == (
        TS_RANGE, INT64_MIN, INT64_MAX - 1000)
    low_base = BatchHeader(batch(records(1), 1, base_timestamp=INT64_MIN + 5))
    # every timestamp is below the lowest accepted: the range is empty
    assert _timestamp_rule(low_base, (INT64_MAX - 1, INT64_MAX), False) == (
        TS_RANGE, INT64_MAX, INT64_MIN)
    assert _timestamp_rule(header, None, True)[0] == TS_NONE
    lat = BatchHeader(batch(records(1), 1, log_append_time=True, max_timestamp=-1))
    assert _timestamp_rule(lat, (0, 10), False)[0] == TS_ALL


def test_run_in_steps_within_a_budget():
    data = build_batch([(b"k", os.urandom(1000), [], T0)] * 1 + [
        (b"k", os.urandom(1000), [], T0 + i) for i in range(1, 3000)], compression=3)
    walk_ = RecordWalk(data, BatchHeader(data))
    steps = 1
    while not walk_.run(256 << 10):
        steps += 1
    assert steps > 3 and walk_.summary.record_count == 3000
    assert walk_.run() is True


def test_iter_records_agrees_on_what_is_valid():
    data = build_batch([(b"k", b"v", [("a", b"b")], T0 + i) for i in range(10)], compression=4)
    assert walk(data).record_count == len(list(iter_records(data, BatchHeader(data))))


def test_zstd_frames_needing_a_large_window_are_refused():
    """A few KiB of zstd can demand a 128 MiB decoder window; levels up to 19 need 8 MiB."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    payload = zstandard.ZstdCompressor(compression_params=params).compress(bytes(130 << 20))
    error = refusal(_with_payload(batch(b"", 1), payload, 4))
    assert error.reason.startswith("zstd: a frame needs a window of ")
    level19 = zstandard.ZstdCompressor(level=19, write_content_size=False).compress(records(300))
    assert walk(_with_payload(batch(b"", 300), level19, 4)).record_count == 300
