"""Which compacted partition the cleaner takes next, and how far: Kafka's LogCleanerManager
(cleanableOffsets, calculateCleanableBytes, maxCompactionDelay, grabFilthiestCompactedLog).

- The dirty range starts at the partition's ``cleaner-offset-checkpoint`` entry (the log
  start offset when there is none, or when the entry is below the log start or past the log
  end: then the checkpoint is rewritten).
- It ends at the first uncleanable offset: the smallest of the last stable offset, the
  active segment's base offset, and, with ``min.compaction.lag.ms``, the base offset of the
  first dirty segment whose largest timestamp is within the lag; rounded down to a segment
  boundary.
- Dirty ratio = cleanable bytes / (clean bytes + cleanable bytes), by whole segments. A
  partition is cleanable when its ratio exceeds ``min.cleanable.dirty.ratio``, or when
  ``max.compaction.lag.ms`` has passed since its earliest dirty segment's first batch
  (its compaction delay is then positive) and it has cleanable bytes. The dirtiest goes first.
"""

from __future__ import annotations

from typing import Protocol

from semel.storage.config import config_class
from semel.storage.topic_partition import TopicPartition


class SegmentView(Protocol):
    base_offset: int
    size: int

    @property
    def largest_timestamp(self) -> int: ...

    @property
    def rolling_based_timestamp(self) -> int | None: ...


class LogView(Protocol):
    """What selection reads of a partition log (storage.partition_log.PartitionLog)."""

    log_start_offset: int

    @property
    def log_end_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...

    @property
    def segments(self) -> list[SegmentView]: ...


@config_class
class CleanableRange:
    """A partition's dirty range, [first dirty offset, first uncleanable offset)."""

    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset: the range's exclusive end
    reset_checkpoint: bool  # the checkpoint entry was invalid: rewrite it


def cleanable_range(log: LogView, checkpoint: int | None, now_ms: int,
                    min_compaction_lag_ms: int) -> CleanableRange:
    start = log.log_start_offset
    dirty = start if checkpoint is None else checkpoint
    reset = False
    if dirty < start or dirty > log.log_end_offset:
        dirty, reset = start, True
    segments = log.segments
    active = segments[-1]
    limits = [log.last_stable_offset, active.base_offset]
    lag = max(min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _non_active_from(segments, dirty):
            if segment.largest_timestamp > now_ms - lag:
                limits.append(segment.base_offset)
                break
    uncleanable = max(dirty, min(limits))
    # down to the first segment at or after it (the active one at worst): whole segments
    boundary = next((s.base_offset for s in _non_active_from(segments, uncleanable)),
                    active.base_offset)
    return CleanableRange(first_dirty_offset=dirty,
                          first_uncleanable_offset=max(dirty, min(uncleanable, boundary)),
                          reset_checkpoint=reset)


def _non_active_from(segments: list[SegmentView], offset: int) -> list[SegmentView]:
    """Kafka's nonActiveLogSegmentsFrom: the segments that hold ``offset`` or come after it,
    but the active one."""
    result = []
    for i, segment in enumerate(segments[:-1]):
        next_base = segments[i + 1].base_offset
        if next_base > offset:
            result.append(segment)
    return result


def max_compaction_delay(log: LogView, first_dirty_offset: int, now_ms: int,
                         max_compaction_lag_ms: int) -> int:
    """How long past ``max.compaction.lag.ms`` the earliest dirty record is (0: not past)."""
    firsts = [t for s in _non_active_from(log.segments, first_dirty_offset)
              if (t := s.rolling_based_timestamp) is not None and t > 0]
    if not firsts:
        return 0
    clean_until = now_ms - max(max_compaction_lag_ms, 0)
    earliest = min(firsts)
    return clean_until - earliest if earliest < clean_until else 0


@config_class
class LogToClean:
    """A candidate cleaning: its dirty range, its clean and cleanable bytes (whole segments)
    and how long past ``max.compaction.lag.ms`` it is."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def log_to_clean(tp: TopicPartition, log: LogView, checkpoint: int | None, now_ms: int, *,
                 min_compaction_lag_ms: int, max_compaction_lag_ms: int
                 ) -> tuple[LogToClean, bool]:
    """The partition's candidate cleaning, and whether its checkpoint must be reset."""
    rng = cleanable_range(log, checkpoint, now_ms, min_compaction_lag_ms)
    clean = _bytes_between(log.segments, -1, rng.first_dirty_offset)
    cleanable = _bytes_between(log.segments, rng.first_dirty_offset,
                               rng.first_uncleanable_offset)
    delay = max_compaction_delay(log, rng.first_dirty_offset, now_ms, max_compaction_lag_ms)
    return LogToClean(topic_partition=tp, first_dirty_offset=rng.first_dirty_offset,
                      first_uncleanable_offset=rng.first_uncleanable_offset, clean_bytes=clean,
                      cleanable_bytes=cleanable, compaction_delay_ms=delay), rng.reset_checkpoint


def _bytes_between(segments: list[SegmentView], start: int, end: int) -> int:
    """Bytes of the segments overlapping [start, end) (Kafka's logSegments(from, to), so a
    segment holding the dirty offset counts as clean and as cleanable, as there)."""
    total = 0
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if segment.base_offset < end and (next_base is None or next_base > start):
            total += segment.size
    return total


def filthiest(candidates: list[tuple[LogToClean, float]]) -> LogToClean | None:
    """Out of (candidate, its min.cleanable.dirty.ratio), the one to clean now: the highest
    ratio among those above their threshold or past their max compaction lag."""
    eligible = [c for c, min_ratio in candidates if c.total_bytes > 0 and (
        (c.compaction_delay_ms > 0 and c.cleanable_bytes > 0) or c.cleanable_ratio > min_ratio)]
    return max(eligible, key=lambda c: c.cleanable_ratio, default=None)
