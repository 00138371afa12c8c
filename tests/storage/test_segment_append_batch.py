"""LogSegment.append_batch (the produce fast path's one-batch append) against append with
one AppendedBatch: same .log bytes, index entries and cached values after every append, and
the same undo when a write fails (or SegmentRollbackError when the undo fails too)."""

from __future__ import annotations

import errno
import random

import pytest
from log_helpers import make_batch

from semel.protocol.records import BatchHeader, set_base_offset
from semel.storage.fs import FaultyFileSystem, RealFileSystem
from semel.storage.offset_index import WRITE_EVERY
from semel.storage.segment import AppendedBatch, LogSegment, SegmentRollbackError


def _segment(directory, interval: int, fs=None) -> LogSegment:
    directory.mkdir(exist_ok=True)
    return LogSegment(fs or RealFileSystem(), str(directory), 0, index_interval_bytes=interval,
                      max_index_size=10_000, created_ms=0, create=True)


def _batch(offset: int, count: int, size: int, timestamp: int) -> tuple[bytearray, BatchHeader]:
    data = bytearray(make_batch(count, value_size=size, timestamp=timestamp))
    set_base_offset(data, 0, offset)
    return data, BatchHeader(data)


def _state(segment: LogSegment) -> tuple:
    return (segment.size, segment.next_offset, segment._max_timestamp,
            segment._offset_of_max_timestamp, segment._rolling_based_timestamp,
            segment._bytes_since_last_index_entry, segment.offset_index.entries,
            segment.time_index.entries,
            [segment.offset_index.entry(i) for i in range(segment.offset_index.entries)],
            [segment.time_index.entry(i) for i in range(segment.time_index.entries)])


def _files(directory) -> dict[str, bytes]:
    return {path.suffix: path.read_bytes() for path in sorted(directory.iterdir())}


@pytest.mark.parametrize("interval", [0, 100, 700, 4096])
@pytest.mark.parametrize("seed", range(4))
def test_append_batch_is_append_of_one_batch(tmp_path, interval, seed):
    rng = random.Random(seed)
    general = _segment(tmp_path / "general", interval)
    single = _segment(tmp_path / "single", interval)
    offset, timestamp = 0, 1_700_000_000_000
    for _ in range(60):
        count, size = rng.randint(1, 5), rng.choice([1, 10, 90, 300, 1500])
        timestamp += rng.randint(-50, 100)  # max timestamps that also go back
        data, header = _batch(offset, count, size, timestamp)
        general.append(bytearray(data), [AppendedBatch(header.size, header.last_offset,
                                                       header.max_timestamp)])
        single.append_batch(memoryview(data), header.last_offset, header.max_timestamp)
        assert _state(single) == _state(general)
        offset = header.next_offset
    general.flush()
    single.flush()
    assert _files(tmp_path / "single") == _files(tmp_path / "general")
    if interval < 4096:
        assert single.offset_index.entries > 1  # the comparison covered index entries


def test_failed_append_batch_leaves_segment_unchanged(tmp_path):
    fs = FaultyFileSystem()
    segment = _segment(tmp_path, 0, fs)
    log_file = tmp_path / "00000000000000000000.log"
    offset = 0
    for count in (3, 1, 5):
        data, header = _batch(offset, count, 20, 1000 + offset)
        segment.append_batch(data, header.last_offset, header.max_timestamp)
        offset = header.next_offset
    before, state = log_file.read_bytes(), _state(segment)
    fs.write_error, fs.write_error_after = errno.ENOSPC, 17  # torn write, then ENOSPC
    data, header = _batch(offset, 2, 80, 5000)
    with pytest.raises(OSError) as info:
        segment.append_batch(data, header.last_offset, header.max_timestamp)
    assert info.value.errno == errno.ENOSPC
    assert _state(segment) == state and log_file.read_bytes() == before
    fs.clear_faults()
    fs.path_filter = ".index"  # the log write works, writing the index entries fails
    fs.write_error = errno.EIO
    for _ in range(WRITE_EVERY):  # entries are written WRITE_EVERY at a time
        before, state = log_file.read_bytes(), _state(segment)
        data, header = _batch(offset, 2, 80, 5000 + offset)
        try:
            segment.append_batch(data, header.last_offset, header.max_timestamp)
        except OSError:
            break
        offset = header.next_offset
    else:
        pytest.fail("no append failed")
    assert _state(segment) == state and log_file.read_bytes() == before
    fs.clear_faults()
    fs.write_error, fs.write_error_after = errno.EIO, 5
    fs.truncate_error = errno.EIO  # the undo fails as well
    with pytest.raises(SegmentRollbackError):
        segment.append_batch(data, header.last_offset, header.max_timestamp)
