"""One cleaning of one partition, end to end (Kafka's Cleaner.doClean), and the cleaner's
checkpoint.

``clean_partition`` (async, on the event loop):
1. on the loop: the cleanable range (selection.py), the segments to clean pinned (reads
   and a retention or topic deletion meanwhile do not close them), and a ``CleaningJob``
   taken: the segments' files, the aborted transactions of their ``.txnindex`` files, each
   active producer's last data offset;
2. in the worker (process.py: the broker's cleaner process, or a thread in tests): the
   offset map over the dirty range, then each group of segments written as ``.cleaned``
   files (worker.py, writer.py);
3. on the loop: each cleaned segment opened and swapped in (PartitionLog.replace_segments)
   if its group is still the log's (a group deleted meanwhile loses its cleaned copy), the
   segments unpinned, the checkpoint advanced to the end of what the map covered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from semel.storage.cleaner.filter import FilterStats
from semel.storage.cleaner.offset_map import DEFAULT_LOAD_FACTOR
from semel.storage.cleaner.process import CleanerProcess, CleanerThread
from semel.storage.cleaner.selection import cleanable_range
from semel.storage.cleaner.state import (  # noqa: F401 - re-exported: the cleaner's names
    CLEANER_OFFSET_CHECKPOINT,
    CleanerCheckpoint,
    CleanerStats,
)
from semel.storage.cleaner.worker import UNLIMITED, CleaningJob
from semel.storage.cleaner.writer import READ_CHUNK, SegmentFile, open_cleaned, remove_cleaned
from semel.storage.fs import RealFileSystem
from semel.storage.partition_log import PartitionLog
from semel.storage.segment import LogSegment
from semel.storage.topic_partition import TopicPartition
from semel.storage.transaction_index import AbortedTxn

log = logging.getLogger("storage.cleaner")

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
    map_entries: int  # keys in the offset map
    worker_max_rss_bytes: int  # peak memory of the cleaner process (0 in a thread)
    worker_seconds: float


async def clean_partition(plog: PartitionLog, checkpoint: CleanerCheckpoint,
                          worker: CleanerProcess | CleanerThread, *, dedupe_buffer_bytes: int,
                          now_ms: int, fs: RealFileSystem,
                          load_factor: float = DEFAULT_LOAD_FACTOR,
                          max_io_bytes_per_second: float = UNLIMITED,
                          max_cpu_share: float = 1.0,
                          read_chunk_bytes: int = READ_CHUNK) -> CleaningResult | None:
    """Clean ``plog`` once, from its checkpoint to its cleanable end; None when there is
    nothing to clean. Raises CleanerError when the worker failed (nothing changed)."""
    tp = plog.topic_partition
    config = plog.config
    rng = cleanable_range(plog, checkpoint.offsets.get(tp), now_ms, config.min_compaction_lag_ms)
    if rng.reset_checkpoint:
        checkpoint.update(tp, rng.first_dirty_offset)
    uncleanable = rng.first_uncleanable_offset
    segments = [s for s in plog.segments[:-1] if s.base_offset < uncleanable]
    if not segments or rng.first_dirty_offset >= uncleanable:
        return None
    job = CleaningJob(
        plog.dir, config, tuple(SegmentFile.of(s) for s in segments), rng.first_dirty_offset,
        uncleanable, tuple(_aborted_transactions(plog.segments, uncleanable)),
        {pid: entry.last_data_offset for pid, entry in plog.producer_state.producers.items()
         if entry.last_data_offset >= 0},
        now_ms, dedupe_buffer_bytes, load_factor, max_io_bytes_per_second, max_cpu_share,
        read_chunk_bytes)
    for segment in segments:
        segment.pin()
    try:
        output = await worker.run(job)
    finally:
        for segment in segments:
            segment.unpin()
    if output is None:
        checkpoint.update(tp, uncleanable)
        return None
    by_base = {s.base_offset: s for s in segments}
    before = after = swapped = 0
    for i, cleaned in enumerate(output.groups):
        group = [by_base[base] for base in cleaned.old_base_offsets]
        before += sum(s.size for s in group)
        after += cleaned.size
        live = plog.segments
        if all(s in live for s in group) and not plog.closed and not plog.offline:
            try:
                plog.replace_segments(open_cleaned(fs, plog.dir, cleaned.base_offset, config,
                                                   now_ms), group)
            except OSError:  # nothing of this group changed; the rest are not swapped
                for rest in output.groups[i + 1 :]:
                    remove_cleaned(fs, plog.dir, rest.base_offset)
                raise
            swapped += 1
        else:
            remove_cleaned(fs, plog.dir, cleaned.base_offset)
    if swapped == len(output.groups):
        checkpoint.update(tp, output.end_offset)
    replaced = sum(len(g.old_base_offsets) for g in output.groups)
    log.info("%s: cleaned offsets [%d, %d): %d segment(s) of %d bytes into %d of %d bytes "
             "in %.2f s", tp, rng.first_dirty_offset, output.end_offset, replaced, before,
             len(output.groups), after, output.seconds)
    return CleaningResult(tp, rng.first_dirty_offset, output.end_offset, replaced,
                          len(output.groups), before, after, output.stats,
                          output.map_entries, output.max_rss_bytes, output.seconds)


def _aborted_transactions(segments: list[LogSegment], upper_bound: int = 2**63 - 1
                          ) -> list[AbortedTxn]:
    """The aborted transactions with data below ``upper_bound``, from every segment's
    ``.txnindex`` (Kafka's collectAbortedTransactions): an entry sits in the segment of its
    ABORT marker, which may come after the cleanable range, even in the active segment."""
    found: dict[AbortedTxn, None] = {}
    for segment in segments:
        txns, complete = segment.collect_aborted_txns(0, upper_bound)
        found.update(dict.fromkeys(txns))
        if complete:  # no later segment holds one
            break
    return list(found)
