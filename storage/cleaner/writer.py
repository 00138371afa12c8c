"""The cleaned copy of a group of segments: Kafka's LogCleaner.cleanSegments up to the swap.

``group_segments`` cuts the cleanable segments into groups whose cleaned output fits one
segment (Kafka's groupSegmentsBySize: the group's log bytes at most ``segment.bytes``, its
index bytes at most ``segment.index.bytes``, its offsets within an int32 of its base).
``write_cleaned`` writes one group's surviving batches (``BatchFilter``) into a new
segment at the group's base offset, as ``.cleaned`` files: the log, its offset and time
indexes (built by ``LogSegment.append``, as for any append) and its ``.txnindex`` (the
aborted transactions whose data remains in it), fsynced. The old segments are only read;
the caller swaps the result in.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.records import BatchHeader
from storage.cleaner.filter import BatchFilter
from storage.config import LogConfig
from storage.fs import RealFileSystem
from storage.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
)
from storage.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE

_INT32_MAX = 2**31 - 1
_READ_CHUNK = 1 << 20  # bytes of batches read from an old segment at a time


def group_segments(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                   first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Consecutive runs of ``segments`` (those below ``first_uncleanable_offset``) to be
    cleaned into one segment each."""
    todo = [s for s in segments if s.base_offset < first_uncleanable_offset]
    groups = []
    while todo:
        group = [todo.pop(0)]
        log_size = group[0].size
        index_size, time_size = _index_bytes(group[0])
        while todo:
            nxt = todo[0]
            nxt_index, nxt_time = _index_bytes(nxt)
            if (log_size + nxt.size > max_size
                    or index_size + nxt_index > max_index_size
                    or time_size + nxt_time > max_index_size
                    or nxt.next_offset - 1 - group[0].base_offset > _INT32_MAX):
                break
            group.append(todo.pop(0))
            log_size += nxt.size
            index_size += nxt_index
            time_size += nxt_time
        groups.append(group)
    return groups


def _index_bytes(segment: LogSegment) -> tuple[int, int]:
    return (segment.offset_index.entries * OFFSET_ENTRY_SIZE,
            segment.time_index.entries * TIME_ENTRY_SIZE)


def write_cleaned(fs: RealFileSystem, directory: str, group: Sequence[LogSegment],
                  batch_filter: BatchFilter, config: LogConfig, now_ms: int) -> LogSegment:
    """The group's cleaned segment, ``.cleaned`` files, fsynced. ``batch_filter`` carries
    the pass's state from earlier groups."""
    cleaned = LogSegment(fs, directory, group[0].base_offset,
                         index_interval_bytes=config.index_interval_bytes,
                         max_index_size=config.segment_index_bytes, created_ms=now_ms,
                         create=True, file_suffix=CLEANED_SUFFIX)
    tracker = batch_filter.tracker
    try:
        for old in group:
            for buf, header in segment_batches(old):
                kept_before = len(tracker.kept_aborted)
                out = batch_filter.filter(buf, header)
                for txn in tracker.kept_aborted[kept_before:]:
                    cleaned.update_txn_index(*txn)
                if out is None:
                    continue
                kept = BatchHeader(memoryview(out))
                cleaned.append(out, [AppendedBatch(len(out), kept.last_offset,
                                                   kept.max_timestamp)])
        cleaned.on_become_inactive()
        cleaned.flush()
    except BaseException:
        discard_cleaned(fs, cleaned)
        raise
    return cleaned


def discard_cleaned(fs: RealFileSystem, cleaned: LogSegment) -> None:
    """Close a cleaned segment that will not be swapped in and remove its files."""
    cleaned.close()
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        path = cleaned.path(suffix)
        if fs.exists(path):
            fs.remove(path)


def segment_batches(segment: LogSegment):
    """(buffer, header at position 0) for each batch of ``segment``, read a chunk at a time."""
    chunk_start = chunk_end = 0
    chunk = b""
    for position, header in segment.iter_headers(0):
        end = position + header.size
        if end > chunk_end:
            chunk_start = position
            chunk = segment.read(position, max(header.size, _READ_CHUNK))
            chunk_end = chunk_start + len(chunk)
        batch_start = position - chunk_start
        buf = memoryview(chunk)[batch_start : batch_start + header.size]
        yield buf, BatchHeader(buf)
