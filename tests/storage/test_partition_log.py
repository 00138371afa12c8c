"""PartitionLog: append validation and offset assignment, read semantics, rolls, timestamps,
DeleteRecords, retention, truncation (flush mode none unless a test says otherwise)."""

from __future__ import annotations

import dataclasses

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from log_helpers import FakeClock, headers, make_batch, offsets, open_log, read_all, values

from semel.protocol import validator
from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    BatchHeader,
    build_control_batch,
    set_max_timestamp_and_type,
    validate_batches,
)
from semel.storage.config import LogConfig
from semel.storage.partition_log import RecordValidationError
from tests.protocol.walk_fixtures import batch, records

T0 = 1_700_000_000_000


def kafka_error(excinfo) -> Error:
    return excinfo.value.code


# -- append -----------------------------------------------------------------------------------


def test_append_assigns_consecutive_offsets(tmp_path):
    plog = open_log(tmp_path)
    r1 = plog.append(make_batch(3))
    r2 = plog.append(make_batch(1) + make_batch(4))
    assert (r1.base_offset, r1.last_offset) == (0, 2)
    assert (r2.base_offset, r2.last_offset) == (3, 7)
    assert r2.next_offset == 8 and r2.log_append_time == -1 and r2.log_start_offset == 0
    assert plog.log_end_offset == plog.high_watermark == 8
    data = plog.read(0, 10**6).records
    assert offsets(data) == list(range(8))
    assert [h.base_offset for h in headers(data)] == [0, 3, 4]
    validate_batches(data, from_client=False)  # CRCs still valid: baseOffset is outside


def test_append_rewrites_writable_buffers_in_place_and_copies_bytes(tmp_path):
    plog = open_log(tmp_path)
    plog.append(make_batch(2))
    immutable = make_batch(1)
    plog.append(immutable)
    assert BatchHeader(immutable).base_offset == 0  # the caller's bytes are not touched
    writable = bytearray(make_batch(1))
    plog.append(writable)
    assert BatchHeader(writable).base_offset == 3
    view = memoryview(bytearray(make_batch(1)))
    plog.append(view)
    assert BatchHeader(view).base_offset == 4
    assert BatchHeader(view).partition_leader_epoch == plog.leader_epoch == 0


def test_empty_append(tmp_path):
    plog = open_log(tmp_path)
    result = plog.append(b"")
    assert (result.base_offset, result.last_offset) == (-1, -1)
    assert plog.log_end_offset == 0


def test_control_batches_only_from_the_coordinator(tmp_path):
    plog = open_log(tmp_path)
    marker = build_control_batch(
        commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp_ms=T0
    )
    with pytest.raises(KafkaError) as info:
        plog.append(marker)
    assert kafka_error(info) == Error.INVALID_RECORD
    assert plog.append(marker, origin="coordinator").base_offset == 0


def test_old_magic_is_invalid_record(tmp_path):
    plog = open_log(tmp_path)
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, timestamp=T0, key=None, value=b"v")
    with pytest.raises(KafkaError) as info:
        plog.append(bytes(builder.build()))
    assert kafka_error(info) == Error.INVALID_RECORD
    assert plog.log_end_offset == 0


def test_corrupt_batch_is_corrupt_message(tmp_path):
    plog = open_log(tmp_path)
    data = bytearray(make_batch(2))
    data[-1] ^= 0x01
    with pytest.raises(KafkaError) as info:
        plog.append(data)
    assert kafka_error(info) == Error.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as info:
        plog.append(make_batch(2)[:-3])
    assert kafka_error(info) == Error.CORRUPT_MESSAGE
    assert plog.log_end_offset == 0 and plog.active_segment.size == 0


def test_size_limits(tmp_path):
    config = LogConfig(max_message_bytes=200, segment_bytes=500)
    plog = open_log(tmp_path, config)
    with pytest.raises(KafkaError) as info:
        plog.append(make_batch(1, value_size=300))
    assert kafka_error(info) == Error.MESSAGE_TOO_LARGE
    small = make_batch(1, value_size=100)
    with pytest.raises(KafkaError) as info:
        plog.append(small * 5)
    assert kafka_error(info) == Error.RECORD_LIST_TOO_LARGE
    assert plog.append(small * 2).last_offset == 1


def test_create_time_bounds(tmp_path):
    clock = FakeClock(T0)
    config = LogConfig(message_timestamp_before_max_ms=1000)  # after: Kafka 4 default 1 h
    plog = open_log(tmp_path, config, clock=clock)
    plog.append(make_batch(1, timestamp=T0 - 1000))
    plog.append(make_batch(1, timestamp=T0 + 3_600_000))
    for ts in (T0 - 1001, T0 + 3_600_001):
        with pytest.raises(KafkaError) as info:
            plog.append(make_batch(1, timestamp=ts))
        assert kafka_error(info) == Error.INVALID_TIMESTAMP
    plog.append(make_batch(1, timestamp=-1))  # no timestamp: not checked
    assert plog.log_end_offset == 3


def test_log_append_time(tmp_path):
    clock = FakeClock(T0)
    plog = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    result = plog.append(make_batch(3, timestamp=5))  # ancient: not checked for LogAppendTime
    assert result.log_append_time == T0
    stored = plog.read(0, 10**6).records
    header = BatchHeader(stored)
    assert header.timestamp_type == LOG_APPEND_TIME and header.max_timestamp == T0
    validate_batches(stored, from_client=False)  # CRC was recomputed
    assert plog.max_timestamp_offset() == (0, T0)


# -- read -----------------------------------------------------------------------------------------


@pytest.fixture
def ten_batches(tmp_path):
    """Batches of 3 records (offsets 3i..3i+2, timestamps T0+10i..), one segment."""
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=200))
    sizes = []
    for i in range(10):
        batch = make_batch(3, timestamp=T0 + 10 * i, value_size=20 + 10 * i)
        sizes.append(len(batch))
        plog.append(batch)
    return plog, sizes


def test_read_starts_at_the_batch_containing_the_offset(ten_batches):
    plog, _ = ten_batches
    for fetch in range(30):
        data = plog.read(fetch, 1).records
        assert headers(data)[0].base_offset == fetch - fetch % 3
    result = plog.read(30, 1000)
    assert result.records == b"" and result.high_watermark == 30
    assert result.log_end_offset == 30 and result.last_stable_offset == 30


def test_read_max_bytes_gives_whole_batches(ten_batches):
    plog, sizes = ten_batches
    for max_bytes in (sizes[0], sizes[0] + sizes[1] - 1, sizes[0] + sizes[1], 10**6):
        data = plog.read(0, max_bytes).records
        assert len(data) <= max(max_bytes, sizes[0])
        total, count = 0, 0
        while count < 10 and total + sizes[count] <= max_bytes:
            total += sizes[count]
            count += 1
        assert len(headers(data)) == max(count, 1) and len(data) == max(total, sizes[0])


def test_read_min_one_batch(ten_batches):
    plog, sizes = ten_batches
    assert len(plog.read(6, 5).records) == sizes[2]
    assert plog.read(6, 5, min_one_batch=False).records == b""
    assert len(plog.read(6, sizes[2], min_one_batch=False).records) == sizes[2]


def test_read_upper_bound(ten_batches):
    plog, _ = ten_batches
    assert offsets(plog.read(0, 10**6, upper_bound=9).records) == list(range(9))
    assert offsets(plog.read(0, 10**6, upper_bound=10).records) == list(range(9))  # mid-batch
    assert plog.read(9, 10**6, upper_bound=9).records == b""
    assert offsets(plog.read(3, 10**6, upper_bound=12).records) == list(range(3, 12))


def test_read_out_of_range(ten_batches):
    plog, _ = ten_batches
    with pytest.raises(KafkaError) as info:
        plog.read(31, 100)
    assert kafka_error(info) == Error.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError) as info:
        plog.read(-1, 100)
    assert kafka_error(info) == Error.OFFSET_OUT_OF_RANGE


def test_reads_across_many_segments(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=1000, index_interval_bytes=150))
    expected = []
    for i in range(200):
        count = 1 + i % 4
        plog.append(make_batch(count, value_size=5 + (i * 37) % 90, fill=i % 250))
        expected.extend([bytes([i % 250]) * (5 + (i * 37) % 90)] * count)
    assert len(plog.segments) > 20
    assert all(s.size <= 1000 for s in plog.segments)
    bases = [s.base_offset for s in plog.segments]
    assert bases == sorted(bases) and bases[0] == 0
    for a, b in zip(plog.segments, plog.segments[1:], strict=False):
        assert a.next_offset == b.base_offset
    got, offset = [], 0
    while offset < plog.log_end_offset:
        data = plog.read(offset, 700).records
        assert data
        batch_headers = headers(data)
        got.extend(values(data)[offset - batch_headers[0].base_offset :])
        offset = batch_headers[-1].next_offset
    assert got == expected
    for fetch in range(0, plog.log_end_offset, 7):
        first = headers(plog.read(fetch, 1).records)[0]
        assert first.base_offset <= fetch < first.next_offset


def test_roll_on_segment_ms_uses_message_timestamps(tmp_path):
    clock = FakeClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=1000), clock=clock)
    plog.append(make_batch(1, timestamp=T0))
    plog.append(make_batch(1, timestamp=T0 + 1000))
    assert len(plog.segments) == 1
    plog.append(make_batch(1, timestamp=T0 + 1001))
    assert [s.base_offset for s in plog.segments] == [0, 2]
    clock.advance(10_000)  # wall time alone does not roll a segment that has timestamps
    plog.append(make_batch(1, timestamp=T0 + 1002))
    assert len(plog.segments) == 2


def test_roll_when_index_is_full(tmp_path):
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 4))
    for _ in range(12):
        plog.append(make_batch(1))
    assert all(s.offset_index.entries <= 4 for s in plog.segments)
    assert len(plog.segments) >= 3


def test_roll_writes_final_time_index_entry(tmp_path):
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=10**6))
    plog.append(make_batch(2, timestamps=[T0 + 5, T0 + 50]))
    plog.append(make_batch(1, timestamp=T0 + 7))
    first = plog.active_segment
    plog.roll()
    assert first.time_index.entries == 1
    assert (first.time_index.last_timestamp, first.time_index.last_offset) == (T0 + 50, 1)
    assert plog.roll() is plog.active_segment  # empty active segment: no roll


# -- timestamps -----------------------------------------------------------------------------


def test_offset_for_timestamp(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=400, index_interval_bytes=100))
    # records i: timestamps go up by 10, except a late record in each batch
    ts = []
    for b in range(30):
        stamps = [T0 + 30 * b, T0 + 30 * b + 25, T0 + 30 * b + 10]
        ts.extend(stamps)
        plog.append(make_batch(3, timestamps=stamps))
    assert len(plog.segments) > 3
    for target in [T0 - 5, T0, T0 + 11, T0 + 26, T0 + 30 * 14 + 3, T0 + 30 * 29 + 25]:
        want = next(((i, t) for i, t in enumerate(ts) if t >= target), None)
        assert plog.offset_for_timestamp(target) == want
    assert plog.offset_for_timestamp(T0 + 30 * 29 + 26) is None
    assert plog.offset_for_timestamp(T0 + 30 * 20, upper_bound=50) is None
    assert plog.max_timestamp_offset() == (88, T0 + 30 * 29 + 25)


def test_max_timestamp_offset_empty_and_earliest(tmp_path):
    plog = open_log(tmp_path)
    assert plog.max_timestamp_offset() is None
    plog.append(make_batch(3, timestamps=[T0, T0 + 9, T0 + 9]))
    plog.append(make_batch(1, timestamp=T0 + 9))
    assert plog.max_timestamp_offset() == (1, T0 + 9)


# -- deletion ---------------------------------------------------------------------------------------


def segmented_log(tmp_path, clock=None, **config):
    config = dataclasses.replace(LogConfig(segment_bytes=300), **config)
    plog = open_log(tmp_path, config, clock=clock)
    for i in range(20):
        plog.append(make_batch(2, value_size=40, timestamp=T0 + 1000 * i))
    return plog


def test_delete_records_before(tmp_path):
    plog = segmented_log(tmp_path)
    segments = plog.segments
    target = segments[2].base_offset + 1
    assert plog.delete_records_before(target) == target
    assert plog.log_start_offset == target
    assert plog.segments[0] is segments[2]
    assert not (tmp_path / "00000000000000000000.log").exists()
    assert all(
        p.name.endswith(".deleted")
        for p in tmp_path.iterdir()
        if p.name.startswith("00000000000000000000")
    )
    with pytest.raises(KafkaError) as info:
        plog.read(target - 1, 100)
    assert kafka_error(info) == Error.OFFSET_OUT_OF_RANGE
    first = headers(plog.read(target, 100).records)[0]
    assert first.base_offset == target - 1  # the batch containing the start offset
    assert plog.delete_records_before(3) == target  # never moves back
    with pytest.raises(KafkaError) as info:
        plog.delete_records_before(plog.high_watermark + 1)
    assert kafka_error(info) == Error.OFFSET_OUT_OF_RANGE
    assert plog.delete_records_before(plog.high_watermark) == 40
    assert plog.read(40, 100).records == b""
    deleted = plog.take_deleted_files()
    assert deleted and all(p.endswith(".deleted") for p in deleted)


def test_retention_by_time(tmp_path):
    clock = FakeClock(T0 + 19_000)
    plog = segmented_log(tmp_path, clock=clock, retention_ms=10_000)
    segments = plog.segments
    assert len(segments) > 4
    for step in (0, 5_000):
        clock.advance(step)
        expired = [s for s in segments if clock() - s.max_timestamp > 10_000]
        assert 0 < len(expired) < len(segments)
        plog.apply_retention(clock())
        assert plog.segments == [s for s in segments if s not in expired]
        assert plog.log_start_offset == plog.segments[0].base_offset
    clock.advance(10**9)
    plog.apply_retention(clock())
    assert len(plog.segments) == 1 and plog.active_segment.size == 0  # rolled, then deleted
    assert plog.log_start_offset == plog.log_end_offset == 40
    assert plog.append(make_batch(1, timestamp=clock())).base_offset == 40


def test_retention_by_size(tmp_path):
    plog = segmented_log(tmp_path, retention_bytes=1000)
    total = plog.size_in_bytes
    sizes = [s.size for s in plog.segments]
    # Kafka: drop the oldest segments while what is left stays >= retention.bytes
    excess, doomed = total - 1000, 0
    while excess - sizes[doomed] >= 0:
        excess -= sizes[doomed]
        doomed += 1
    assert 0 < doomed < len(sizes)
    assert plog.apply_retention(T0) == doomed
    assert plog.size_in_bytes == total - sum(sizes[:doomed]) >= 1000
    assert plog.apply_retention(T0) == 0


def test_retention_respects_cleanup_policy(tmp_path):
    plog = segmented_log(tmp_path, retention_bytes=0)
    plog.update_config(dataclasses.replace(plog.config, cleanup_policy=["compact"]))
    count = len(plog.segments)
    assert plog.apply_retention(T0 * 2) == 0 and len(plog.segments) == count


def test_retention_never_passes_the_high_watermark(tmp_path):
    config = LogConfig(segment_bytes=300, retention_bytes=0)
    plog = open_log(tmp_path, config, durable=True)
    for _ in range(10):
        plog.append(make_batch(2, value_size=40))
    assert plog.high_watermark == 0
    assert plog.apply_retention(T0) == 0
    plog.flush()
    assert plog.high_watermark == 20 and plog.apply_retention(T0) > 0


def test_truncate_to(tmp_path):
    plog = segmented_log(tmp_path)
    plog.truncate_to(13)  # inside batch 12-13: the batch goes
    assert plog.log_end_offset == plog.high_watermark == 12
    assert offsets(plog.read(0, 10**6).records)[-1] <= 11
    assert all(s.base_offset <= 12 for s in plog.segments)
    assert plog.append(make_batch(1)).base_offset == 12
    plog.truncate_to(0)
    assert plog.log_end_offset == 0 and len(plog.segments) == 1


# -- the record walk on client appends (protocol/validator.py) -----------------------------------


def _lying_batch() -> bytes:
    """Five records under a header (and CRC) that says two."""
    return batch(records(5), 2)


def test_client_append_walks_the_records_and_writes_nothing_invalid(tmp_path):
    plog = open_log(tmp_path)
    plog.append(make_batch(2))
    size = plog.size_in_bytes
    with pytest.raises(KafkaError) as info:
        plog.append(_lying_batch())
    assert kafka_error(info) == Error.INVALID_RECORD
    assert info.value.message == "bytes remain after the 2 records the batch declares"
    assert (plog.log_end_offset, plog.size_in_bytes) == (2, size)
    plog.append(_lying_batch(), origin="coordinator")  # only client appends are walked


def test_compacted_topic_refuses_keyless_records_with_record_errors(tmp_path):
    plog = open_log(tmp_path, LogConfig(cleanup_policy=["compact"]))
    with pytest.raises(RecordValidationError) as info:
        plog.append(make_batch(3))
    assert [i for i, _ in info.value.record_errors] == [0, 1, 2]
    assert plog.log_end_offset == 0


def test_max_timestamp_becomes_the_largest_record_timestamp(tmp_path):
    plog = open_log(tmp_path)
    data = bytearray(make_batch(3, timestamps=[T0, T0 + 40, T0 + 7]))
    set_max_timestamp_and_type(data, 0, T0, CREATE_TIME)  # the producer under-reports it
    plog.append(data)
    stored = headers(read_all(plog))[0]
    assert stored.max_timestamp == T0 + 40
    assert plog.max_timestamp_offset() == (1, T0 + 40)


def test_validated_append_is_not_walked_again(tmp_path, monkeypatch):
    plog = open_log(tmp_path)
    data = make_batch(4)
    validated = plog.validate_client_append(data, max_uncompressed=1 << 20)
    assert validated.run() is True
    monkeypatch.setattr(validator.RecordWalk, "run", lambda *a: pytest.fail("walked twice"))
    assert plog.append(data, validated=validated).last_offset == 3
