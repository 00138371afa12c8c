"""Cleaned segments on disk (storage/cleaner/writer.py): a partition log written by the
normal append path, rolled into many segments, cleaned group by group into ``.cleaned``
files that hold exactly the filter's output, with offset, time and transaction indexes that
check out when the files are opened again."""

from __future__ import annotations

import os

from semel.protocol.records import BatchHeader, iter_batches
from semel.storage.cleaner.filter import BatchFilter, build_offset_map
from semel.storage.cleaner.offset_map import OffsetMap
from semel.storage.cleaner.writer import (
    SegmentFile,
    file_batches,
    group_segments,
    open_cleaned,
    write_cleaned,
)
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.segment import CLEANED_SUFFIX, LogSegment
from tests.storage.cleaner.history import T0, History, headers
from tests.storage.log_helpers import FakeClock, open_log

DAY = 86_400_000


def history() -> History:
    h = History(codec=3)
    for i in range(60):
        h.data([(b"k%d" % (i % 7), b"v%d" % i), (b"j%d" % (i % 3), b"w%d" % i)],
               pid=5 if i % 2 else -1)
        if i % 10 == 3:
            h.data([(b"k1", b"in-txn-%d" % i)], pid=9, transactional=True)
        if i % 10 == 6:
            h.end(9, commit=i % 20 == 6)
    return h


def test_cleaned_segments_hold_the_filter_output(tmp_path):
    h = history()
    config = LogConfig.from_overrides(LogConfig(), {"segment.bytes": "700",
                                                    "index.interval.bytes": "100"})
    plog = open_log(tmp_path / "t-0", config, clock=FakeClock(T0))
    for batch in h.batches:
        header = BatchHeader(memoryview(batch))
        plog.append(bytearray(batch), origin="coordinator" if header.is_control else "client")
    plog.roll()
    segments = plog.segments
    end = plog.active_segment.base_offset
    assert len(segments) > 5 and end == h.next_offset

    fs = RealFileSystem()
    files = [SegmentFile.of(s) for s in segments[:-1]]

    def all_batches():
        for file in files:
            yield from file_batches(fs, file)

    offset_map = OffsetMap(1 << 20)
    assert not build_offset_map(all_batches(), h.aborted, 0, offset_map)
    expected_filter = BatchFilter(offset_map, h.aborted, now_ms=T0, delete_retention_ms=DAY,
                                  last_batch_of_producer=h.last_batch)
    stored = [buf[h.position : h.position + h.size]  # with the log's leader epoch
              for buf, h in all_batches()]
    expected = [bytes(out) for buf, header in headers(stored)
                if (out := expected_filter.filter(buf, header)) is not None]
    assert len(expected) < len(stored) and set(expected) - set(stored)  # dropped and rebuilt
    assert expected_filter.stats.aborted_records_removed > 0

    batch_filter = BatchFilter(offset_map, h.aborted, now_ms=T0, delete_retention_ms=DAY,
                               last_batch_of_producer=h.last_batch)
    groups = group_segments(files, 3 * config.segment_bytes, config.segment_index_bytes, end)
    assert 1 < len(groups) < len(segments) - 1  # several segments a group, several groups
    sizes = [write_cleaned(fs, plog.dir, g, batch_filter, config, T0) for g in groups]
    written = [open_cleaned(fs, plog.dir, g[0].base_offset, config, T0) for g in groups]
    assert [s.size for s in written] == sizes
    got = b"".join(s.read(0, s.size) for s in written)
    assert got == b"".join(expected)
    assert batch_filter.tracker.kept_aborted == expected_filter.tracker.kept_aborted

    for segment, group in zip(written, groups, strict=True):
        segment.close()
        assert segment.base_offset == group[0].base_offset
        assert os.path.exists(segment.path(".log")) and segment.path(".log").endswith(
            ".log" + CLEANED_SUFFIX)
        again = LogSegment(fs, plog.dir, segment.base_offset, index_interval_bytes=100,
                           max_index_size=config.segment_index_bytes, created_ms=T0,
                           file_suffix=CLEANED_SUFFIX)
        again.sanity_check()
        data = again.read(0, again.size)
        for header in iter_batches(data):
            for offset in (header.base_offset, header.last_offset):
                position, found = again.translate_offset(offset)
                assert (position, found.base_offset) == (header.position, header.base_offset)
        in_group = [t for t in batch_filter.tracker.kept_aborted
                    if group[0].base_offset <= t.last_offset < group[-1].next_offset]
        assert again.collect_aborted_txns(group[0].base_offset, end)[0] == in_group
        again.close()


def test_group_segments_by_size(tmp_path):
    config = LogConfig.from_overrides(LogConfig(), {"segment.bytes": "500"})
    plog = open_log(tmp_path / "t-0", config, clock=FakeClock(T0))
    h = History()
    for i in range(30):
        h.data([(b"k", b"v" * 40)])
    for batch in h.batches:
        plog.append(bytearray(batch))
    segments = plog.segments
    end = plog.active_segment.base_offset
    files = [SegmentFile.of(s) for s in segments]
    groups = group_segments(files, 1000, config.segment_index_bytes, end)
    assert [s for g in groups for s in g] == [s for s in files if s.base_offset < end]
    assert all(sum(s.size for s in g) <= 1000 for g in groups)
    assert all(len(g) >= 2 for g in groups[:-1])
    assert group_segments(files, 10**9, 10**9, files[2].base_offset) == [files[:2]]
