"""The cleaned copy of a group of segments: Kafka's LogCleaner.cleanSegments up to the swap.

The cleaner's worker (worker.py, usually in its own process) sees the segments to clean as
``SegmentFile`` descriptions taken on the event loop (base offset, next offset, byte size,
index sizes, the ``.log`` path); it reads their bytes by path, up to the size taken (closed
segments do not change). ``group_segments`` cuts them into groups whose cleaned output fits
one segment (Kafka's groupSegmentsBySize: the group's log bytes at most ``segment.bytes``,
its index bytes at most ``segment.index.bytes``, its offsets within an int32 of its base).
``write_cleaned`` writes one group's surviving batches (``BatchFilter``) into a new segment
at the group's base offset, as ``.cleaned`` files: the log, its offset and time indexes
(built by ``LogSegment.append``, as for any append) and its ``.txnindex`` (the aborted
transactions whose data remains in it), fsynced and closed. The broker opens them again
(``open_cleaned``) and swaps them in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from semel.protocol.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC, BatchHeader, CorruptRecordError
from semel.storage.cleaner.filter import BatchFilter
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.offset_index import ENTRY_SIZE as OFFSET_ENTRY_SIZE
from semel.storage.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
    segment_file_name,
)
from semel.storage.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE

_INT32_MAX = 2**31 - 1
READ_CHUNK = 1 << 18  # bytes of a segment read at a time (log.cleaner.io.buffer.size / 2)
CLEANED_FILES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A closed segment as the worker sees it (taken on the loop, picklable)."""

    base_offset: int
    next_offset: int
    size: int
    index_bytes: int
    time_index_bytes: int
    log_path: str

    @classmethod
    def of(cls, segment: LogSegment) -> SegmentFile:
        return cls(segment.base_offset, segment.next_offset, segment.size,
                   segment.offset_index.entries * OFFSET_ENTRY_SIZE,
                   segment.time_index.entries * TIME_ENTRY_SIZE, segment.path(LOG_SUFFIX))


def group_segments(segments: Sequence[SegmentFile], max_size: int, max_index_size: int,
                   first_uncleanable_offset: int) -> list[list[SegmentFile]]:
    """Consecutive runs of ``segments`` (those below ``first_uncleanable_offset``) to be
    cleaned into one segment each."""
    todo = [s for s in segments if s.base_offset < first_uncleanable_offset]
    groups = []
    while todo:
        group = [todo.pop(0)]
        log_size = group[0].size
        index_size, time_size = group[0].index_bytes, group[0].time_index_bytes
        while todo:
            nxt = todo[0]
            if (log_size + nxt.size > max_size
                    or index_size + nxt.index_bytes > max_index_size
                    or time_size + nxt.time_index_bytes > max_index_size
                    or nxt.next_offset - 1 - group[0].base_offset > _INT32_MAX):
                break
            group.append(todo.pop(0))
            log_size += nxt.size
            index_size += nxt.index_bytes
            time_size += nxt.time_index_bytes
        groups.append(group)
    return groups


def file_batches(fs: RealFileSystem, segment: SegmentFile,
                 on_read: Callable[[int], None] | None = None, chunk_size: int = READ_CHUNK
                 ) -> Iterator[tuple[bytes, BatchHeader]]:
    """(chunk, header) for each batch of ``segment``'s log, read a chunk at a time; the
    header's position is the batch's place in the chunk. ``on_read`` hears each chunk's
    size (the throttle). Bytes that cannot be a batch raise CorruptRecordError."""
    handle = fs.open(segment.log_path, create=False)
    try:
        position = 0
        while position + LOG_OVERHEAD <= segment.size:
            chunk = handle.pread(min(chunk_size, segment.size - position), position)
            if on_read is not None:
                on_read(len(chunk))
            rel = 0
            while rel + HEADER_SIZE <= len(chunk):
                header = BatchHeader(chunk, rel)
                if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != MAGIC:
                    raise CorruptRecordError(
                        f"no batch at position {position + rel} of {segment.log_path}",
                        position + rel)
                if rel + header.size > len(chunk):
                    break
                yield chunk, header
                rel += header.size
            if rel == 0:  # one batch larger than a chunk
                chunk = handle.pread(BatchHeader(chunk).size, position)
                if on_read is not None:
                    on_read(len(chunk))
                header = BatchHeader(chunk)
                if header.size > len(chunk):
                    return  # a torn tail
                yield chunk, header
                rel = header.size
            position += rel
    finally:
        handle.close()


def write_cleaned(fs: RealFileSystem, directory: str, group: Sequence[SegmentFile],
                  batch_filter: BatchFilter, config: LogConfig, now_ms: int,
                  on_io: Callable[[int], None] | None = None,
                  chunk_size: int = READ_CHUNK) -> int:
    """Write the group's cleaned segment as ``.cleaned`` files, fsynced and closed; returns
    its size in bytes. ``batch_filter`` carries the pass's state from earlier groups;
    ``on_io`` hears the bytes read and written (the throttle)."""
    base = group[0].base_offset
    remove_cleaned(fs, directory, base)  # left by a cleaner process that died part way
    cleaned = LogSegment(fs, directory, base,
                         index_interval_bytes=config.index_interval_bytes,
                         max_index_size=config.segment_index_bytes, created_ms=now_ms,
                         create=True, file_suffix=CLEANED_SUFFIX)
    tracker = batch_filter.tracker
    try:
        for old in group:
            for buf, header in file_batches(fs, old, on_io, chunk_size):
                kept_before = len(tracker.kept_aborted)
                out = batch_filter.filter(buf, header)
                for txn in tracker.kept_aborted[kept_before:]:
                    cleaned.update_txn_index(*txn)
                if out is None:
                    continue
                kept = BatchHeader(out)
                cleaned.append(out, [AppendedBatch(len(out), kept.last_offset,
                                                   kept.max_timestamp)])
                if on_io is not None:
                    on_io(len(out))
        cleaned.on_become_inactive()
        cleaned.flush()
        size = cleaned.size
        cleaned.close()
    except BaseException:
        cleaned.close()
        remove_cleaned(fs, directory, base)
        raise
    return size


def open_cleaned(fs: RealFileSystem, directory: str, base_offset: int, config: LogConfig,
                 now_ms: int) -> LogSegment:
    """The ``.cleaned`` segment a worker wrote, opened for the swap."""
    return LogSegment(fs, directory, base_offset,
                      index_interval_bytes=config.index_interval_bytes,
                      max_index_size=config.segment_index_bytes, created_ms=now_ms,
                      file_suffix=CLEANED_SUFFIX)


def remove_cleaned(fs: RealFileSystem, directory: str, base_offset: int) -> None:
    """Remove the ``.cleaned`` files of ``base_offset``, if any."""
    for suffix in CLEANED_FILES:
        path = os.path.join(directory, segment_file_name(base_offset, suffix) + CLEANED_SUFFIX)
        if fs.exists(path):
            fs.remove(path)
