"""One cleaning of one partition, end to end (Kafka's Cleaner.doClean), and the cleaner's
checkpoint.

``clean_partition`` (async, on the event loop):
1. on the loop: the cleanable range (selection.py), the segments to clean pinned (reads
   and a retention or topic deletion meanwhile do not close them under the worker), the
   aborted transactions of their ``.txnindex`` files and each active producer's last data
   offset taken;
2. in a worker thread (the loop keeps serving; the work is CPU and reads of immutable
   segments): the offset map over the dirty range, then each group of segments written
   as a ``.cleaned`` segment (writer.py);
3. on the loop: each cleaned segment swapped in (PartitionLog.replace_segments) if its
   group is still the log's (a group deleted meanwhile loses its cleaned copy), the
   segments unpinned, the checkpoint advanced to the end of what the map covered.
A worker thread rather than a process: the filter and the decompressors spend their time
in C (zlib, lz4, zstd, crc32c release the GIL), the segments are read through the same
LogSegment objects, and the swap needs the live PartitionLog.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from dataclasses import dataclass

from storage.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from storage.cleaner.filter import BatchFilter, FilterStats, build_offset_map
from storage.cleaner.offset_map import OffsetMap
from storage.cleaner.selection import cleanable_range
from storage.cleaner.writer import (
    discard_cleaned,
    group_segments,
    segment_batches,
    write_cleaned,
)
from storage.fs import RealFileSystem
from storage.partition_log import PartitionLog
from storage.segment import LogSegment
from storage.topic_partition import TopicPartition
from storage.transaction_index import AbortedTxn

log = logging.getLogger("storage.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass
class CleaningResult:
    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int  # the next cleaning's first dirty offset
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    stats: FilterStats


@dataclass
class CleanerStats:
    """What the cleaner did since the broker started (the broker's metrics read it)."""

    runs: int = 0
    bytes_read: int = 0  # of the segments cleaned
    bytes_written: int = 0  # of the cleaned segments that replaced them
    max_dirty_ratio: float = 0.0  # of the dirtiest compacted partition at the last check
    last_run_ms: int | None = None  # when the cleaner last looked for work

    def record(self, result: CleaningResult) -> None:
        self.runs += 1
        self.bytes_read += result.bytes_before
        self.bytes_written += result.bytes_after


class CleanerCheckpoint:
    """``cleaner-offset-checkpoint`` in the data directory: per partition, the first dirty
    offset (the end of its last cleaning)."""

    def __init__(self, fs: RealFileSystem, path: str) -> None:
        self.fs = fs
        self.path = path
        try:
            self.offsets = read_offset_checkpoint(fs, path)
        except ValueError as exc:
            log.error("ignoring malformed %s: %s", path, exc)
            self.offsets = {}

    def update(self, tp: TopicPartition, offset: int) -> None:
        self.offsets[tp] = offset
        write_offset_checkpoint(self.fs, self.path, self.offsets)

    def forget(self, tp: TopicPartition) -> None:
        if self.offsets.pop(tp, None) is not None:
            write_offset_checkpoint(self.fs, self.path, self.offsets)


async def clean_partition(plog: PartitionLog, checkpoint: CleanerCheckpoint,
                          executor: Executor | None, *, dedupe_buffer_bytes: int,
                          now_ms: int, fs: RealFileSystem,
                          load_factor: float = 0.9) -> CleaningResult | None:
    """Clean ``plog`` once, from its checkpoint to its cleanable end; None when there is
    nothing to clean."""
    tp = plog.topic_partition
    config = plog.config
    rng = cleanable_range(plog, checkpoint.offsets.get(tp), now_ms, config.min_compaction_lag_ms)
    if rng.reset_checkpoint:
        checkpoint.update(tp, rng.first_dirty_offset)
    uncleanable = rng.first_uncleanable_offset
    segments = [s for s in plog.segments[:-1] if s.base_offset < uncleanable]
    if not segments or rng.first_dirty_offset >= uncleanable:
        return None
    aborted = _aborted_transactions(segments)
    last_batches = {pid: entry.last_data_offset
                    for pid, entry in plog.producer_state.producers.items()
                    if entry.last_data_offset >= 0}
    for segment in segments:
        segment.pin()
    try:
        loop = asyncio.get_running_loop()
        work = await loop.run_in_executor(executor, _clean_segments, fs, plog.dir, config,
                                          segments, rng.first_dirty_offset, uncleanable,
                                          aborted, last_batches, now_ms, dedupe_buffer_bytes,
                                          load_factor)
    finally:
        for segment in segments:
            segment.unpin()
    if work is None:
        checkpoint.update(tp, uncleanable)
        return None
    end, pairs, stats = work
    before = sum(s.size for _, group in pairs for s in group)
    swapped = 0
    for cleaned, group in pairs:
        live = plog.segments
        if all(s in live for s in group) and not plog.closed:
            plog.replace_segments(cleaned, group)
            swapped += 1
        else:
            discard_cleaned(fs, cleaned)
    if swapped == len(pairs):
        checkpoint.update(tp, end)
    after = sum(c.size for c, _ in pairs)
    log.info("%s: cleaned offsets [%d, %d): %d segment(s) of %d bytes into %d of %d bytes",
             tp, rng.first_dirty_offset, end, sum(len(g) for _, g in pairs), before,
             len(pairs), after)
    return CleaningResult(tp, rng.first_dirty_offset, end, sum(len(g) for _, g in pairs),
                          len(pairs), before, after, stats)


def _aborted_transactions(segments: list[LogSegment]) -> list[AbortedTxn]:
    found: dict[AbortedTxn, None] = {}
    for segment in segments:
        txns, _ = segment.collect_aborted_txns(0, 2**63 - 1)
        found.update(dict.fromkeys(txns))
    return list(found)


def _clean_segments(fs: RealFileSystem, directory: str, config, segments: list[LogSegment],
                    first_dirty: int, uncleanable: int, aborted: list[AbortedTxn],
                    last_batches: dict[int, int], now_ms: int, buffer_bytes: int,
                    load_factor: float):
    """The worker thread's part: the map, then the cleaned groups (``.cleaned`` files)."""
    offset_map = OffsetMap(buffer_bytes, load_factor)
    dirty = [s for s in segments
             if s.next_offset > first_dirty]  # the segments holding the dirty range
    build_offset_map((b for s in dirty for b in segment_batches(s)), aborted, first_dirty, offset_map)
    if offset_map.latest_offset < 0:
        return None  # no key in the dirty range: nothing to deduplicate
    end = min(offset_map.latest_offset + 1, uncleanable)
    batch_filter = BatchFilter(offset_map, aborted, now_ms=now_ms,
                               delete_retention_ms=config.delete_retention_ms,
                               last_batch_of_producer=last_batches)
    pairs: list[tuple[LogSegment, list[LogSegment]]] = []
    try:
        for group in group_segments(segments, config.segment_bytes, config.segment_index_bytes,
                                    end):
            pairs.append((write_cleaned(fs, directory, group, batch_filter, config, now_ms),
                          group))
    except BaseException:
        for cleaned, _ in pairs:
            discard_cleaned(fs, cleaned)
        raise
    return end, pairs, batch_filter.stats
