"""Offset index and time index: Kafka's byte formats, lookups, truncation, sanity checks."""

from __future__ import annotations

import struct

import pytest

from semel.storage.fs import RealFileSystem
from semel.storage.offset_index import CorruptIndexError, OffsetIndex
from semel.storage.time_index import TimeIndex

FS = RealFileSystem()


def test_offset_index_file_is_kafka_format(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    index = OffsetIndex(FS, path, 100, 1024)
    index.append(105, 4200)
    index.append(130, 9000)
    index.close()
    assert (tmp_path / "00000000000000000100.index").read_bytes() == (
        struct.pack(">ii", 5, 4200) + struct.pack(">ii", 30, 9000)
    )


def test_offset_index_lookup_is_largest_entry_at_or_below(tmp_path):
    index = OffsetIndex(FS, str(tmp_path / "i.index"), 100, 1024)
    for rel, pos in [(5, 100), (10, 200), (20, 300)]:
        index.append(100 + rel, pos)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(104) == (100, 0)
    assert index.lookup(105) == (105, 100)
    assert index.lookup(109) == (105, 100)
    assert index.lookup(110) == (110, 200)
    assert index.lookup(10_000) == (120, 300)
    assert index.lookup_position(250) == (110, 200)
    assert index.lookup_position(50) == (100, 0)


def test_offset_index_reopens_lazily_and_truncates(tmp_path):
    path = str(tmp_path / "i.index")
    index = OffsetIndex(FS, path, 0, 1024)
    for i in range(1, 11):
        index.append(i * 10, i * 1000)
    index.close()
    again = OffsetIndex(FS, path, 0, 1024)
    assert again.entries == 10 and again.last_offset == 100 and again.last_position == 10000
    assert again.lookup(55) == (50, 5000)
    again.truncate_to(50)  # removes entries with offset >= 50
    assert again.entries == 4 and again.last_offset == 40
    assert (tmp_path / "i.index").stat().st_size == 32
    again.truncate_to_position(2000)
    assert again.entries == 1 and again.lookup(1000) == (10, 1000)
    again.reset()
    assert again.entries == 0 and again.lookup(5) == (0, 0)


def test_offset_index_refuses_non_increasing_entries(tmp_path):
    index = OffsetIndex(FS, str(tmp_path / "i.index"), 0, 1024)
    index.append(10, 100)
    with pytest.raises(ValueError):
        index.append(10, 200)
    with pytest.raises(ValueError):
        index.append(11, 100)


def test_offset_index_full_at_segment_index_bytes(tmp_path):
    index = OffsetIndex(FS, str(tmp_path / "i.index"), 0, 8 * 3 + 5)
    for i in range(1, 4):
        assert not index.is_full
        index.append(i, i * 10)
    assert index.is_full


def test_offset_index_corruption_is_detected(tmp_path):
    path = tmp_path / "i.index"
    path.write_bytes(b"\x00" * 12)
    with pytest.raises(CorruptIndexError):
        OffsetIndex(FS, str(path), 0, 1024)
    path.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 200))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(FS, str(path), 0, 1024).sanity_check(log_size=1000)
    path.write_bytes(struct.pack(">ii", 5, 5000))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(FS, str(path), 0, 1024).sanity_check(log_size=1000)
    OffsetIndex(FS, str(path), 0, 1024).sanity_check(log_size=6000)


def test_time_index_file_is_kafka_format(tmp_path):
    path = str(tmp_path / "00000000000000000050.timeindex")
    index = TimeIndex(FS, path, 50, 1024)
    index.maybe_append(1000, 52)
    index.maybe_append(1000, 60)  # not larger: ignored
    index.maybe_append(999, 61)  # smaller: ignored
    index.maybe_append(2000, 70)
    index.close()
    assert (tmp_path / "00000000000000000050.timeindex").read_bytes() == (
        struct.pack(">qi", 1000, 2) + struct.pack(">qi", 2000, 20)
    )


def test_time_index_lookup_and_truncate(tmp_path):
    path = str(tmp_path / "t.timeindex")
    index = TimeIndex(FS, path, 0, 1024)
    for ts, off in [(100, 5), (200, 9), (300, 20)]:
        index.maybe_append(ts, off)
    index.close()
    again = TimeIndex(FS, path, 0, 1024)
    assert again.lookup(50) == (-1, 0)
    assert again.lookup(100) == (100, 5)
    assert again.lookup(250) == (200, 9)
    assert again.lookup(10**12) == (300, 20)
    again.truncate_to(9)
    assert again.entries == 1 and again.last_timestamp == 100
    with pytest.raises(ValueError):
        again.maybe_append(500, 3)  # offsets may not go back


def test_time_index_sanity_check(tmp_path):
    path = tmp_path / "t.timeindex"
    path.write_bytes(struct.pack(">qi", 500, 1) + struct.pack(">qi", 400, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(FS, str(path), 0, 1024).sanity_check(next_offset=10)
    path.write_bytes(struct.pack(">qi", 500, 30))
    with pytest.raises(CorruptIndexError):
        TimeIndex(FS, str(path), 0, 1024).sanity_check(next_offset=10)
    TimeIndex(FS, str(path), 0, 1024).sanity_check(next_offset=31)
