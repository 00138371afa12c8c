"""LogSegment: .log bytes as Kafka stores them, index entries per index.interval.bytes,
reads, recovery that rebuilds byte-identical indexes, truncation, rollback on write errors."""

from __future__ import annotations

import errno
import struct

import pytest
from kafka.record import MemoryRecords
from log_helpers import make_batch

from semel.protocol.records import BatchHeader, set_base_offset
from semel.storage.fs import FaultyFileSystem, RealFileSystem
from semel.storage.offset_index import WRITE_EVERY
from semel.storage.segment import (
    AppendedBatch,
    LogSegment,
    parse_segment_file_name,
    segment_file_name,
)

FS = RealFileSystem()


def new_segment(tmp_path, base=0, interval=100, fs=FS, max_index=10_000) -> LogSegment:
    return LogSegment(
        fs,
        str(tmp_path),
        base,
        index_interval_bytes=interval,
        max_index_size=max_index,
        created_ms=0,
        create=True,
    )


def append_batches(segment: LogSegment, specs: list[tuple[int, int, int]], first_offset: int):
    """specs: (record count, value size, first timestamp); returns (bytes, [(pos, header)])."""
    offset = first_offset
    written = []
    for count, size, ts in specs:
        data = bytearray(make_batch(count, value_size=size, timestamp=ts))
        set_base_offset(data, 0, offset)
        header = BatchHeader(data)
        position = segment.size
        segment.append(data, [AppendedBatch(header.size, header.last_offset, header.max_timestamp)])
        written.append((position, header, bytes(data)))
        offset = header.next_offset
    return written


def expected_index(written, interval):
    """Kafka 4's rule: before a batch, if more than `interval` bytes were written since the
    last entry, add (batch last offset, batch position) and (max ts so far, its offset)."""
    offset_entries, time_entries = [], []
    since, max_ts, max_ts_offset = 0, -1, None
    for position, header, _ in written:
        if header.max_timestamp > max_ts:
            max_ts, max_ts_offset = header.max_timestamp, header.last_offset
        if since > interval:
            offset_entries.append((header.last_offset, position))
            if not time_entries or max_ts > time_entries[-1][0]:
                time_entries.append((max_ts, max_ts_offset))
            since = 0
        since += header.size
    return offset_entries, time_entries


def index_bytes(base, offset_entries, time_entries):
    return (
        b"".join(struct.pack(">ii", o - base, p) for o, p in offset_entries),
        b"".join(struct.pack(">qi", t, o - base) for t, o in time_entries),
    )


SPECS = [
    (3, 20, 1000),
    (1, 200, 1005),
    (5, 10, 1003),
    (2, 80, 1010),
    (1, 5, 1009),
    (4, 60, 1020),
    (1, 300, 1030),
    (2, 10, 1031),
    (6, 30, 1029),
    (1, 1, 1040),
]


def test_file_names():
    assert segment_file_name(42, ".log") == "00000000000000000042.log"
    assert segment_file_name(2**40, ".snapshot") == "00000001099511627776.snapshot"
    assert parse_segment_file_name("00000000000000000042.timeindex") == (42, ".timeindex")
    assert parse_segment_file_name("00000000000000000042.log.deleted") == (42, ".log.deleted")
    assert parse_segment_file_name("42.log") is None
    assert parse_segment_file_name("leader-epoch-checkpoint") is None


def test_new_segment_has_three_empty_files(tmp_path):
    new_segment(tmp_path, base=7).close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "00000000000000000007.index",
        "00000000000000000007.log",
        "00000000000000000007.timeindex",
    ]
    assert all(p.stat().st_size == 0 for p in tmp_path.iterdir())


def test_log_file_is_the_concatenated_batches_and_kafka_can_read_it(tmp_path):
    segment = new_segment(tmp_path, base=50)
    written = append_batches(segment, SPECS, 50)
    segment.close()
    data = (tmp_path / "00000000000000000050.log").read_bytes()
    assert data == b"".join(w[2] for w in written)
    records = MemoryRecords(data)  # kafka-python's reader checks the framing and CRCs
    seen = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        seen.extend(r.offset for r in batch)
    assert seen == list(range(50, 50 + sum(c for c, _, _ in SPECS)))


def test_index_entries_follow_index_interval(tmp_path):
    segment = new_segment(tmp_path, base=50, interval=100)
    written = append_batches(segment, SPECS, 50)
    segment.close()
    offset_entries, time_entries = expected_index(written, 100)
    assert len(offset_entries) >= 4
    want_index, want_time = index_bytes(50, offset_entries, time_entries)
    assert (tmp_path / "00000000000000000050.index").read_bytes() == want_index
    assert (tmp_path / "00000000000000000050.timeindex").read_bytes() == want_time


def test_on_become_inactive_writes_the_max_timestamp_entry(tmp_path):
    segment = new_segment(tmp_path, interval=10**6)
    written = append_batches(segment, SPECS, 0)
    segment.on_become_inactive()
    segment.close()
    max_header = max((w[1] for w in written), key=lambda h: h.max_timestamp)
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == struct.pack(
        ">qi", max_header.max_timestamp, max_header.last_offset
    )


def test_translate_offset_and_read(tmp_path):
    segment = new_segment(tmp_path, base=50, interval=100)
    written = append_batches(segment, SPECS, 50)
    for position, header, data in written:
        for offset in range(header.base_offset, header.next_offset):
            found = segment.translate_offset(offset)
            assert found is not None and found[0] == position
            assert found[1].base_offset == header.base_offset
        assert segment.read(position, header.size) == data
    assert segment.translate_offset(written[-1][1].next_offset) is None
    assert segment.translate_offset(0)[0] == 0  # below the base: first batch


def test_find_offset_by_timestamp(tmp_path):
    segment = new_segment(tmp_path, interval=50)
    written = append_batches(segment, SPECS, 0)
    for target in (0, 1004, 1010, 1025, 1031, 1040):
        want = next(w for w in written if w[1].max_timestamp >= target)
        assert segment.find_offset_by_timestamp(target)[0] == want[0]
    assert segment.find_offset_by_timestamp(1041) is None


@pytest.mark.parametrize("interval", [0, 50, 100, 4096])
def test_recover_rebuilds_identical_indexes(tmp_path, interval):
    segment = new_segment(tmp_path, interval=interval)
    append_batches(segment, SPECS * 3, 0)
    next_offset = segment.next_offset
    segment.close()
    index = (tmp_path / "00000000000000000000.index").read_bytes()
    time_index = (tmp_path / "00000000000000000000.timeindex").read_bytes()
    (tmp_path / "00000000000000000000.index").write_bytes(b"")
    (tmp_path / "00000000000000000000.timeindex").write_bytes(b"")
    again = LogSegment(
        FS, str(tmp_path), 0, index_interval_bytes=interval, max_index_size=10_000, created_ms=0
    )
    assert again.recover(0) == 0
    assert again.next_offset == next_offset
    again.close()
    assert (tmp_path / "00000000000000000000.index").read_bytes() == index
    assert (tmp_path / "00000000000000000000.timeindex").read_bytes() == time_index


def test_recover_truncates_at_first_invalid_batch(tmp_path):
    segment = new_segment(tmp_path)
    written = append_batches(segment, SPECS, 0)
    segment.close()
    path = tmp_path / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    bad_position = written[6][0]
    data[bad_position + 70] ^= 0xFF  # a record byte: the CRC no longer matches
    path.write_bytes(bytes(data))
    again = LogSegment(
        FS, str(tmp_path), 0, index_interval_bytes=100, max_index_size=10_000, created_ms=0
    )
    assert again.recover(0) == len(data) - bad_position
    assert again.size == bad_position
    assert again.next_offset == written[5][1].next_offset
    assert path.read_bytes() == bytes(data[:bad_position])


def test_tail_recover_from_last_index_entry(tmp_path):
    segment = new_segment(tmp_path, interval=100)
    written = append_batches(segment, SPECS, 0)
    entries = segment.offset_index.entries
    segment.close()
    path = tmp_path / "00000000000000000000.log"
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 3)  # torn last batch
    again = LogSegment(
        FS, str(tmp_path), 0, index_interval_bytes=100, max_index_size=10_000, created_ms=0
    )
    assert again.recover(again.offset_index.last_position) == written[-1][1].size - 3
    assert again.next_offset == written[-2][1].next_offset
    assert again.offset_index.entries <= entries


def test_truncate_to(tmp_path):
    segment = new_segment(tmp_path, interval=50)
    written = append_batches(segment, SPECS, 0)
    cut_position, cut_header, _ = written[5]  # 4 records
    removed = segment.truncate_to(cut_header.base_offset + 1)  # mid-batch: batch goes
    assert removed == sum(w[1].size for w in written[5:])
    assert segment.size == cut_position
    assert segment.next_offset == cut_header.base_offset
    assert segment.offset_index.last_position < cut_position
    assert segment.time_index.last_offset < cut_header.base_offset
    assert segment.max_timestamp == max(w[1].max_timestamp for w in written[:5])
    append_batches(segment, SPECS[:2], cut_header.base_offset)  # appends continue


def test_failed_append_leaves_segment_unchanged(tmp_path):
    fs = FaultyFileSystem()
    segment = new_segment(tmp_path, interval=0, fs=fs)
    append_batches(segment, SPECS[:3], 0)
    size, entries = segment.size, segment.offset_index.entries
    before = (tmp_path / "00000000000000000000.log").read_bytes()
    fs.write_error, fs.write_error_after = errno.ENOSPC, 17  # torn write, then ENOSPC
    with pytest.raises(OSError) as info:
        append_batches(segment, SPECS[3:4], 9)
    assert info.value.errno == errno.ENOSPC
    assert segment.size == size and segment.offset_index.entries == entries
    assert (tmp_path / "00000000000000000000.log").read_bytes() == before
    fs.clear_faults()
    fs.path_filter = ".index"  # the log writes work, writing the index entries fails
    fs.write_error = errno.EIO
    # entries are written WRITE_EVERY at a time: the append whose entry completes a group
    # fails, and is undone, while the entries before it stay pending
    offset = 9
    for _ in range(WRITE_EVERY):
        before = (tmp_path / "00000000000000000000.log").read_bytes()
        size, entries = segment.size, segment.offset_index.entries
        try:
            offset = append_batches(segment, SPECS[3:4], offset)[-1][1].next_offset
        except OSError:
            break
    else:
        pytest.fail("no append failed")
    assert (tmp_path / "00000000000000000000.log").read_bytes() == before
    assert segment.size == size and segment.offset_index.entries == entries
    fs.clear_faults()
    append_batches(segment, SPECS[3:4], offset)
    assert segment.next_offset == offset + 2
    segment.flush()  # every entry, the pending ones included, reaches the file
    index = (tmp_path / "00000000000000000000.index").read_bytes()
    assert len(index) == segment.offset_index.entries * 8
    assert segment.offset_index.entry(segment.offset_index.entries - 1)[0] == offset + 1
