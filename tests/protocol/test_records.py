"""Record batch v2: validation, in-place rewrites, record decoding and builders.

Fixtures come from two independent encoders: Java kafka-clients 3.9.1 (checked-in
java_*.bin, see fixtures/JavaRecords.java) and kafka-python's builder (made in-process).
"""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from record_fixtures import CODECS, COUNT, FIXTURES, fixture_records, fixture_timestamp

from semel.protocol.errors import Error, ProtocolError
from semel.protocol.records import (
    HEADER,
    HEADER_SIZE,
    BatchHeader,
    ControlType,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    build_batch,
    build_control_batch,
    iter_batches,
    iter_records,
    parse_control_record,
    set_base_offset,
    set_max_timestamp_and_type,
    set_partition_leader_epoch,
    validate_batches,
)

PID, EPOCH, SEQ = 4242, 3, 17


def expected_records(base_offset: int = 0, log_append_time: int | None = None) -> list[Record]:
    return [
        Record(
            base_offset + i,
            log_append_time if log_append_time is not None else ts,
            key,
            value,
            headers,
        )
        for i, (key, value, headers, ts) in enumerate(fixture_records())
    ]


def read(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def with_fields(batch: bytes, **fields) -> bytes:
    """A copy of a single-batch buffer with header fields replaced and the CRC fixed."""
    names = [
        "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc", "attributes",
        "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
        "base_sequence", "record_count",
    ]  # fmt: skip
    values = dict(zip(names, HEADER.unpack_from(batch), strict=True))
    values.update(fields)
    out = bytearray(batch)
    HEADER.pack_into(out, 0, *(values[n] for n in names))
    if "crc" not in fields:
        struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def raw_batch(records: bytes, count: int, **fields) -> bytes:
    """A batch around hand-made record bytes, with a correct CRC."""
    header = build_batch([(None, None, None, 0)])[:HEADER_SIZE]
    fields.setdefault("last_offset_delta", count - 1)
    return with_fields(
        header + records, batch_length=49 + len(records), record_count=count, **fields
    )


def kafka_python_batch(codec: int, producer: bool, transactional: bool) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=PID if producer else -1,
        producer_epoch=EPOCH if producer else -1,
        base_sequence=SEQ if producer else -1,
        batch_size=1 << 22,
    )
    for i, (key, value, headers, ts) in enumerate(fixture_records()):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(builder.build())


# --- batches written by real clients ------------------------------------------------------


@pytest.mark.parametrize("codec", range(5), ids=CODECS)
def test_java_batches_validate_and_decode(codec):
    buf = read(f"java_{CODECS[codec]}.bin")
    (h,) = validate_batches(buf)
    assert h.compression == codec
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (PID, EPOCH, SEQ)
    assert h.last_sequence == SEQ + COUNT - 1
    assert (h.record_count, h.last_offset_delta) == (COUNT, COUNT - 1)
    assert (h.last_offset, h.next_offset) == (COUNT - 1, COUNT)
    assert h.size == len(buf)
    assert h.base_timestamp == fixture_timestamp(0)
    assert h.max_timestamp == max(fixture_timestamp(i) for i in range(COUNT))
    assert not h.is_transactional and not h.is_control and h.timestamp_type == 0
    assert list(iter_records(buf, h)) == expected_records()


def test_java_transactional_batch():
    buf = read("java_txn_none.bin")
    (h,) = validate_batches(buf)
    assert h.is_transactional and not h.is_control
    assert list(iter_records(memoryview(buf), h)) == expected_records()


def test_java_batch_without_producer_id():
    (h,) = validate_batches(read("java_plain_gzip.bin"))
    assert not h.has_producer_id
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence) == (-1, -1, -1, -1)


def test_java_log_append_time_records_carry_the_batch_max_timestamp():
    buf = read("java_log_append_time_lz4.bin")
    (h,) = validate_batches(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 1700000099999
    assert list(iter_records(buf, h)) == expected_records(log_append_time=1700000099999)


@pytest.mark.parametrize("transactional", [False, True])
def test_build_batch_is_byte_identical_to_java(transactional):
    name = "java_txn_none.bin" if transactional else "java_none.bin"
    ours = build_batch(
        fixture_records(),
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=SEQ,
        is_transactional=transactional,
    )
    assert ours == read(name)


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch_is_byte_identical_to_java(commit):
    ours = build_control_batch(
        commit=commit,
        producer_id=PID,
        producer_epoch=EPOCH,
        coordinator_epoch=9,
        base_offset=100,
        timestamp_ms=1700000000123,
        partition_leader_epoch=7,
    )
    java = read("java_commit.bin" if commit else "java_abort.bin")
    assert ours == java
    (h,) = validate_batches(java, from_client=False)
    assert h.is_control and h.is_transactional and h.base_offset == 100
    (record,) = iter_records(java, h)
    assert record.offset == 100 and record.timestamp == 1700000000123
    expected_type = ControlType.COMMIT if commit else ControlType.ABORT
    assert parse_control_record(record) == (expected_type, 9)


@pytest.mark.parametrize("codec", range(5), ids=CODECS)
@pytest.mark.parametrize(
    ("producer", "transactional"), [(False, False), (True, False), (True, True)],
    ids=["plain", "idempotent", "transactional"],
)  # fmt: skip
def test_kafka_python_batches(codec, producer, transactional):
    buf = kafka_python_batch(codec, producer, transactional)
    (h,) = validate_batches(buf)
    assert h.compression == codec
    assert h.is_transactional == transactional
    assert h.has_producer_id == producer
    if producer:
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (PID, EPOCH, SEQ)
    assert list(iter_records(buf, h)) == expected_records()


# --- validation failures -------------------------------------------------------------------


def good() -> bytes:
    return build_batch(
        [(b"k", b"v" * 50, [("h", b"x")], 1000), (None, b"w", None, 1001)],
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=0,
    )


def test_flipped_byte_under_the_crc_is_corrupt():
    buf = bytearray(good())
    buf[HEADER_SIZE + 3] ^= 0x01
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(buf)
    assert e.value.reason.startswith("crc mismatch: stored 0x")
    assert "computed 0x" in e.value.reason
    assert e.value.error_code == Error.CORRUPT_MESSAGE
    assert e.value.position == 0


def test_flipped_stored_crc_is_corrupt():
    buf = bytearray(good())
    buf[17] ^= 0x80
    with pytest.raises(CorruptRecordError, match="crc mismatch"):
        validate_batches(buf)


def test_bytes_outside_the_crc_are_not_checked():
    buf = bytearray(good())
    set_base_offset(buf, 0, 123456)
    set_partition_leader_epoch(buf, 0, 99)
    (h,) = validate_batches(buf)
    assert (h.base_offset, h.partition_leader_epoch) == (123456, 99)


def test_truncated_batch():
    buf = good()
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(buf[:-1])
    assert e.value.reason == (
        f"truncated batch: batch length {len(buf) - 12} needs {len(buf)} bytes, "
        f"{len(buf) - 1} remain"
    )


def test_truncated_header():
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(good()[:40])
    assert e.value.reason == "truncated batch: 40 bytes remain, a batch header needs 61"


def test_trailing_partial_bytes_after_a_good_batch():
    buf = good()
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(buf + buf[:20])
    assert e.value.position == len(buf)
    assert "truncated batch" in e.value.reason


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_invalid_not_corrupt(magic):
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(with_fields(good(), magic=magic))
    assert type(e.value) is InvalidRecordError
    assert e.value.reason == f"magic {magic} not supported, only magic 2"
    assert e.value.error_code == Error.INVALID_RECORD


def test_unknown_magic_is_corrupt():
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(with_fields(good(), magic=7))
    assert e.value.reason == "invalid magic 7"


def test_record_count_mismatch():
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(with_fields(good(), record_count=5))
    assert e.value.reason == "record count 5 != lastOffsetDelta+1 (2)"
    assert e.value.error_code == Error.INVALID_RECORD


def test_empty_batch_from_client():
    buf = with_fields(good(), record_count=0, last_offset_delta=-1)
    with pytest.raises(InvalidRecordError, match="invalid record count 0"):
        validate_batches(buf)
    # stored logs may hold empty batches (compaction keeps them for producer state)
    assert len(validate_batches(buf, from_client=False)) == 1


@pytest.mark.parametrize("batch_length", [0, 10, 48, -5])
def test_batch_length_below_a_header(batch_length):
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(with_fields(good(), batch_length=batch_length))
    assert e.value.reason == f"batch length {batch_length} is below the minimum 49"


def test_absurd_batch_length():
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(with_fields(good(), batch_length=2**31 - 1))
    assert e.value.reason.startswith("truncated batch: batch length 2147483647 needs 2147483659")


def test_control_batch_from_client():
    batch = build_control_batch(
        commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp_ms=0
    )
    with pytest.raises(InvalidRecordError, match="not allowed to write control batches"):
        validate_batches(batch)
    assert validate_batches(batch, from_client=False)[0].is_control


def test_producer_id_without_sequence():
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(with_fields(good(), base_sequence=-1))
    assert e.value.reason == f"invalid base sequence -1 for producer id {PID}"


def test_unknown_compression_codec():
    with pytest.raises(InvalidRecordError, match="unknown compression codec 6"):
        validate_batches(with_fields(good(), attributes=6))


def test_empty_buffer_has_no_batches():
    assert validate_batches(b"") == []


def test_errors_are_protocol_errors():
    assert issubclass(CorruptRecordError, InvalidRecordError)
    assert issubclass(InvalidRecordError, ProtocolError)


# --- several batches, in-place rewrites ----------------------------------------------------


def three_batches() -> bytearray:
    return bytearray(
        build_batch([(b"a", b"1", None, 10)], producer_id=1, producer_epoch=0, base_sequence=0)
        + build_batch([(b"b", b"2", None, 11), (b"c", b"3", None, 12)], compression=1)
        + build_batch([(None, b"4", [("k", None)], 13)], compression=4)
    )


def test_assign_offsets_in_place_across_batches():
    buf = three_batches()
    headers = validate_batches(buf)
    assert [h.position for h in headers] == [0, headers[0].size, headers[0].size + headers[1].size]
    next_offset = 500
    for h in headers:
        set_base_offset(buf, h.position, next_offset)
        next_offset += h.last_offset_delta + 1
    rewritten = validate_batches(buf)  # CRCs still hold
    assert [h.base_offset for h in rewritten] == [500, 501, 503]
    offsets = [r.offset for h in rewritten for r in iter_records(buf, h)]
    assert offsets == [500, 501, 502, 503]


def test_set_base_offset_on_a_memoryview():
    buf = three_batches()
    view = memoryview(buf)[validate_batches(buf)[1].position :]
    set_base_offset(view, 0, 77)
    assert validate_batches(buf)[1].base_offset == 77


def test_set_max_timestamp_and_type_recomputes_the_crc():
    buf = bytearray(good())
    set_max_timestamp_and_type(buf, 0, 5555)
    (h,) = validate_batches(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 5555
    assert [r.timestamp for r in iter_records(buf, h)] == [5555, 5555]
    assert h.base_timestamp == 1000  # untouched, as in Kafka


def test_set_max_timestamp_and_type_back_to_create_time():
    buf = bytearray(good())
    set_max_timestamp_and_type(buf, 0, 5555)
    set_max_timestamp_and_type(buf, 0, 1001, 0)
    assert bytes(buf) == good()


def test_set_max_timestamp_and_type_is_a_no_op_when_unchanged():
    buf = bytearray(good())
    set_max_timestamp_and_type(buf, 0, 1001, 0)
    assert bytes(buf) == good()


def test_set_max_timestamp_at_a_later_position():
    buf = three_batches()
    h = validate_batches(buf)[2]
    set_max_timestamp_and_type(buf, h.position, 99)
    assert validate_batches(buf)[2].max_timestamp == 99


# --- header properties ---------------------------------------------------------------------


def test_last_sequence_wraps_like_kafka():
    batch = build_batch(
        [(None, b"x", None, 0)] * 5, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2
    )
    h = BatchHeader(batch)
    assert h.last_sequence == 2  # 2147483646, 2147483647, 0, 1, 2


def test_attribute_bits():
    batch = build_batch(
        [(None, b"x", None, 0)],
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        compression=3,
        timestamp_type=1,
    )
    h = BatchHeader(batch)
    assert (h.compression, h.timestamp_type) == (3, 1)
    assert h.is_transactional and not h.is_control
    assert not h.has_delete_horizon
    assert BatchHeader(with_fields(batch, attributes=0x40)).has_delete_horizon


def test_batch_header_at_position_and_truncated():
    buf = three_batches()
    second = validate_batches(buf)[1]
    assert BatchHeader(buf, second.position) == second
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        BatchHeader(buf[:30])


def test_batch_header_is_read_only():
    h = BatchHeader(good())
    with pytest.raises(AttributeError):
        h.base_offset = 5


def test_batch_header_copies():
    import copy
    import pickle

    h = validate_batches(three_batches())[1]
    assert copy.copy(h) == h and pickle.loads(pickle.dumps(h)) == h
    assert copy.copy(h).position == h.position


# --- reading stored logs -------------------------------------------------------------------


def test_iter_batches_whole_log():
    buf = three_batches()
    assert list(iter_batches(buf)) == validate_batches(buf)
    assert list(iter_batches(buf, strict=True)) == validate_batches(buf)


def test_iter_batches_from_a_position():
    buf = three_batches()
    headers = validate_batches(buf)
    assert list(iter_batches(buf, headers[1].position)) == headers[1:]


def test_iter_batches_stops_at_a_torn_tail():
    buf = three_batches()
    headers = validate_batches(buf)
    torn = buf[: headers[2].position + 20]
    assert list(iter_batches(torn)) == headers[:2]
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches(torn, strict=True))
    assert e.value.position == headers[2].position
    assert e.value.reason.startswith("torn tail")
    assert list(iter_batches(buf[: headers[2].position + headers[2].size - 1])) == headers[:2]


def test_iter_batches_crc_only_in_strict_mode():
    buf = three_batches()
    headers = validate_batches(buf)
    buf[headers[1].position + HEADER_SIZE] ^= 0xFF
    assert len(list(iter_batches(buf))) == 3
    with pytest.raises(CorruptRecordError, match="crc mismatch") as e:
        list(iter_batches(buf, strict=True))
    assert e.value.position == headers[1].position


def test_iter_batches_garbage_length_raises_in_both_modes():
    buf = three_batches()
    pos = validate_batches(buf)[1].position
    struct.pack_into(">i", buf, pos + 8, 3)
    for strict in (False, True):
        with pytest.raises(CorruptRecordError, match="below the minimum") as e:
            list(iter_batches(buf, strict=strict))
        assert e.value.position == pos


# --- record decoding failures --------------------------------------------------------------


def zz(n: int) -> bytes:
    """zigzag varint"""
    v = (n << 1) ^ (n >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record_bytes(body: bytes) -> bytes:
    return zz(len(body)) + body


SIMPLE_BODY = b"\x00" + zz(0) + zz(0) + zz(1) + b"k" + zz(1) + b"v" + zz(0)


def test_hand_made_record_decodes():
    batch = raw_batch(record_bytes(SIMPLE_BODY), 1)
    (r,) = iter_records(batch, BatchHeader(batch))
    assert (r.key, r.value, r.headers) == (b"k", b"v", [])


@pytest.mark.parametrize(
    ("records", "count", "message"),
    [
        (record_bytes(SIMPLE_BODY) + b"\x00", 1, "1 bytes remain after 1 records"),
        (record_bytes(SIMPLE_BODY), 2, "varint runs past the end"),
        (
            zz(len(SIMPLE_BODY) + 1) + SIMPLE_BODY + b"\x00",
            1,
            f"declared length {len(SIMPLE_BODY) + 1}, fields take {len(SIMPLE_BODY)}",
        ),
        (zz(100) + SIMPLE_BODY, 1, "record 0: length 100 exceeds"),
        (b"\xff\xff\xff\xff\xff\x01" + SIMPLE_BODY, 1, "varint longer than 5 bytes"),
        (record_bytes(b"\x00" + b"\xff" * 10 + b"\x01" + zz(0)), 1, "varlong longer than 10"),
        (record_bytes(b"\x00" + zz(0) + zz(0) + zz(50) + b"k"), 1, "key length 50 exceeds"),
        (record_bytes(b"\x00" + zz(0) + zz(0) + zz(-1) + zz(9) + b"v"), 1, "value length 9"),
        (record_bytes(b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(-3)), 1, "header count -3"),
        (
            record_bytes(b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(-1) + zz(-1)),
            1,
            "invalid header key length -1",
        ),
        (record_bytes(SIMPLE_BODY), 1000, "record count 1000 cannot fit"),
    ],
)
def test_malformed_records(records, count, message):
    batch = raw_batch(records, count)
    with pytest.raises(ProtocolError, match=message):
        list(iter_records(batch, BatchHeader(batch)))


def test_iter_records_on_a_short_buffer():
    batch = good()
    h = BatchHeader(batch)
    with pytest.raises(ProtocolError, match="truncated batch"):
        list(iter_records(batch[:-3], h))


def test_decompression_bomb_is_refused():
    batch = build_batch([(None, bytes(1 << 20), None, 0)], compression=1)
    h = BatchHeader(batch)
    assert h.size < 10_000
    with pytest.raises(ProtocolError, match="exceeds"):
        list(iter_records(batch, h, max_uncompressed=64 * 1024))
    assert len(next(iter_records(batch, h)).value) == 1 << 20


def test_corrupt_compressed_payload():
    batch = bytearray(build_batch([(None, b"x" * 1000, None, 0)], compression=4))
    batch[HEADER_SIZE + 8 :] = b"\x00" * (len(batch) - HEADER_SIZE - 8)
    with pytest.raises(ProtocolError):
        list(iter_records(batch, BatchHeader(batch)))


def test_parse_control_record_errors_and_other_types():
    with pytest.raises(ProtocolError, match="need 4"):
        parse_control_record(Record(0, 0, b"\x00", None, []))
    with pytest.raises(ProtocolError, match="key version -1"):
        parse_control_record(Record(0, 0, b"\xff\xff\x00\x01", b"\x00" * 6, []))
    with pytest.raises(ProtocolError, match="need 6"):
        parse_control_record(Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00", []))
    # a newer value version is read as version 0, as Kafka does
    newer = Record(0, 0, b"\x00\x00\x00\x00", b"\x00\x03\x00\x00\x00\x05xx", [])
    assert parse_control_record(newer) == (ControlType.ABORT, 5)
    assert parse_control_record(Record(0, 0, b"\x00\x00\x00\x02", None, [])) == (
        ControlType.LEADER_CHANGE,
        None,
    )
    assert parse_control_record(Record(0, 0, b"\x00\x00\x00\x63", None, [])) == (99, None)


def test_build_batch_needs_records():
    with pytest.raises(ValueError):
        build_batch([])


# --- round trip ----------------------------------------------------------------------------

maybe_bytes = st.none() | st.binary(max_size=300)
record_tuples = st.tuples(
    maybe_bytes,
    maybe_bytes,
    st.lists(st.tuples(st.text(max_size=10), maybe_bytes), max_size=3),
    st.integers(min_value=-(2**40), max_value=2**42),
)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(record_tuples, min_size=1, max_size=20),
    codec=st.integers(min_value=0, max_value=4),
    base_offset=st.integers(min_value=0, max_value=2**62),
    producer=st.booleans(),
    base_sequence=st.integers(min_value=0, max_value=2**31 - 1),
    transactional=st.booleans(),
    leader_epoch=st.integers(min_value=-1, max_value=2**31 - 1),
)
def test_round_trip(
    records, codec, base_offset, producer, base_sequence, transactional, leader_epoch
):
    batch = build_batch(
        records,
        base_offset=base_offset,
        producer_id=7 if producer else -1,
        producer_epoch=1 if producer else -1,
        base_sequence=base_sequence if producer else -1,
        is_transactional=transactional and producer,
        compression=codec,
        partition_leader_epoch=leader_epoch,
    )
    (h,) = validate_batches(batch)
    assert h.size == len(batch)
    assert h.base_offset == base_offset and h.partition_leader_epoch == leader_epoch
    assert h.base_timestamp == records[0][3]
    assert h.max_timestamp == max(r[3] for r in records)
    decoded = list(iter_records(batch, h))
    assert decoded == [
        Record(base_offset + i, ts, key, value, list(headers or []))
        for i, (key, value, headers, ts) in enumerate(records)
    ]
