"""Swapping cleaned segments into a partition log (PartitionLog.replace_segments) and the
recovery of a swap a crash interrupted (recovery._complete_swaps): at every phase a
reopened log holds either the old segments or the cleaned one, never a mixture, and the
idempotent producer's state survives."""

from __future__ import annotations

import errno
import os

import pytest

from semel.protocol.records import BatchHeader, iter_batches, iter_records
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
from semel.storage.fs import FaultyFileSystem, RealFileSystem
from semel.storage.segment import SWAP_SUFFIX
from tests.storage.cleaner.history import T0, History
from tests.storage.cleaner.test_writer import history
from tests.storage.log_helpers import FakeClock, open_log, read_all

DAY = 86_400_000
CONFIG = LogConfig.from_overrides(LogConfig(), {"segment.bytes": "700",
                                                "index.interval.bytes": "100",
                                                "cleanup.policy": "compact"})


def written_log(directory, fs=None):
    h: History = history()
    plog = open_log(directory, CONFIG, fs=fs, clock=FakeClock(T0))
    for batch in h.batches:
        control = BatchHeader(memoryview(batch)).is_control
        plog.append(bytearray(batch), origin="coordinator" if control else "client")
    plog.roll()
    return h, plog


def cleaning(h: History, plog):
    """The cleaned copies of the log's groups (.cleaned files) with their old segments."""
    segments = plog.segments
    end = plog.active_segment.base_offset
    fs = RealFileSystem()
    files = [SegmentFile.of(s) for s in segments[:-1]]
    offset_map = OffsetMap(1 << 20)
    build_offset_map((b for s in files for b in file_batches(fs, s)), h.aborted, 0, offset_map)
    f = BatchFilter(offset_map, h.aborted, now_ms=T0, delete_retention_ms=DAY,
                    last_batch_of_producer=h.last_batch)
    by_base = {s.base_offset: s for s in segments}
    pairs = []
    for group in group_segments(files, 3 * CONFIG.segment_bytes, CONFIG.segment_index_bytes,
                                end):
        write_cleaned(fs, plog.dir, group, f, CONFIG, T0)
        pairs.append((open_cleaned(fs, plog.dir, group[0].base_offset, CONFIG, T0),
                      [by_base[s.base_offset] for s in group]))
    return pairs


def records(data: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for h in iter_batches(data)
            for r in iter_records(data, h)]


def expected_after(plog, swapped: list) -> bytes:
    """The log's bytes once the ``swapped`` (cleaned, group) pairs replaced their groups."""
    replaced = {s.base_offset for _, group in swapped for s in group}
    out = []
    cleaned = {group[0].base_offset: c for c, group in swapped}
    for segment in plog.segments:
        if segment.base_offset in cleaned:
            c = cleaned[segment.base_offset]
            out.append(c.read(0, c.size))
        elif segment.base_offset not in replaced:
            out.append(segment.read(0, segment.size))
    return b"".join(out)


def remove_deleted(plog) -> None:
    for path in plog.take_deleted_files():
        os.remove(path)


def test_swapped_in_segments_serve_reads_and_survive_reopening(tmp_path):
    h, plog = written_log(tmp_path / "t-0")
    seq_before = plog.producer_state.last_entry(5).last_seq
    pairs = cleaning(h, plog)
    expected = expected_after(plog, pairs)
    before = read_all(plog)
    for cleaned, group in pairs:
        plog.replace_segments(cleaned, group)
    remove_deleted(plog)
    assert read_all(plog) == expected != before
    assert len(plog.segments) == len(pairs) + 1
    for header in iter_batches(expected):  # every kept offset found where it is
        got = plog.read(header.base_offset, 1 << 20).records
        assert next(iter_batches(got)).base_offset == header.base_offset
    names = os.listdir(tmp_path / "t-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    plog.close()
    for clean in (True, False):
        again = open_log(tmp_path / "t-0", CONFIG, clock=FakeClock(T0), clean=clean)
        assert read_all(again) == expected
        assert again.producer_state.last_entry(5).last_seq == seq_before
        again.close()


def aborted_in(segment) -> list:
    return segment.collect_aborted_txns(0, 2**63 - 1)[0]


@pytest.mark.parametrize("phase", ["cleaned", "log-swap-only", "swap", "old-deleted",
                                   "log-named"])
def test_a_crash_during_the_swap_leaves_old_or_new(tmp_path, phase):
    h, plog = written_log(tmp_path / "t-0")
    before = read_all(plog)
    # a group in the middle of the log whose cleaned .txnindex keeps aborted transactions
    cleaned, group = next((c, g) for c, g in cleaning(h, plog)[1:] if aborted_in(c))
    kept_aborted = aborted_in(cleaned)
    expected = expected_after(plog, [(cleaned, group)])
    log_path = cleaned.path(".log")
    if phase == "log-swap-only":  # the renaming to .swap stopped after the log
        os.rename(log_path, log_path.removesuffix(".cleaned") + SWAP_SUFFIX)
    if phase in ("swap", "old-deleted", "log-named"):
        cleaned.change_file_suffix(SWAP_SUFFIX)
    if phase in ("old-deleted", "log-named"):
        for segment in group:
            segment.rename_to_deleted()
    if phase == "log-named":  # the last renaming stopped after the log
        os.rename(cleaned.path(".log"), cleaned.path(".log").removesuffix(SWAP_SUFFIX))
    # the process dies here: nothing is closed or flushed further
    again = open_log(tmp_path / "t-0", CONFIG, clock=FakeClock(T0), clean=False)
    assert read_all(again) == (before if phase == "cleaned" else expected)
    assert records(read_all(again)) == (records(before) if phase == "cleaned"
                                        else records(expected))
    if phase != "cleaned":  # the cleaned segment came with its aborted-transaction index
        [swapped] = [s for s in again.segments if s.base_offset == group[0].base_offset]
        assert aborted_in(swapped) == kept_aborted
    names = os.listdir(tmp_path / "t-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    again.close()


def test_a_reader_holding_the_old_segments_reads_them_to_the_end(tmp_path):
    """A reader that took the segment list before the swap (the group coordinator loading
    its partition, a recovery scan) goes on reading the old segments' bytes: their files were
    renamed .deleted and the segments follow them, so reopening one never reads the cleaned
    segment that took its name."""
    h, plog = written_log(tmp_path / "t-0")
    before = read_all(plog)
    pairs = cleaning(h, plog)
    reader = plog.iter_batches_from(0, with_data=True)
    seen = [bytes(next(reader)[1])]
    for cleaned, group in pairs:
        plog.replace_segments(cleaned, group)
    remove_deleted(plog)  # the purge may come before the reader is done: open files stay
    seen += [bytes(data) for _, data in reader]
    assert b"".join(seen) == before
    plog.close()


def test_a_swap_on_a_failing_disk_writes_nothing_more(tmp_path):
    """The old segments still hold index entries not yet written (they are written at a
    flush or close) when the disk starts failing: the swap drops them instead of writing
    them, so it completes, and the log is the cleaned one, also after a restart (found by
    the chaos suite: a close that raised part way left the new segment in the log under its
    .swap names and the old files under their own)."""
    fs = FaultyFileSystem()
    h, plog = written_log(tmp_path / "t-0", fs)
    pairs = cleaning(h, plog)
    expected = expected_after(plog, pairs)
    assert any(s.time_index._deferred.pending for _, g in pairs for s in g)
    fs.write_error = errno.ENOSPC
    for cleaned, group in pairs:
        plog.replace_segments(cleaned, group)
    assert read_all(plog) == expected
    fs.clear_faults()
    remove_deleted(plog)
    again = open_log(tmp_path / "t-0", CONFIG, clock=FakeClock(T0), clean=False)
    assert read_all(again) == expected
    names = os.listdir(tmp_path / "t-0")
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    again.close()


def test_a_swap_whose_first_step_fails_leaves_the_log_as_it_was(tmp_path):
    """The directory fsync after the rename to .swap fails: the new files are removed, the
    old segments stay the log's, in memory and after a restart."""
    fs = FaultyFileSystem()
    h, plog = written_log(tmp_path / "t-0", fs)
    before = read_all(plog)
    cleaned, group = cleaning(h, plog)[1]
    fs.fsync_error = errno.EIO
    with pytest.raises(OSError):
        plog.replace_segments(cleaned, group)
    fs.clear_faults()
    assert read_all(plog) == before
    stem = f"{cleaned.base_offset:020d}."
    assert not [n for n in os.listdir(tmp_path / "t-0")
                if n.startswith(stem) and n.endswith((".cleaned", ".swap", ".deleted"))]
    plog.close()
    again = open_log(tmp_path / "t-0", CONFIG, clock=FakeClock(T0), clean=False)
    assert read_all(again) == before
    again.close()
