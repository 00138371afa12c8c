"""What the broker keeps of the log cleaner while no cleaning runs: the checkpoint of each
partition's first dirty offset and the cleaner's statistics. Kept apart from the cleaning
itself (cleaner.py and the worker's modules) so that a broker imports those only when a
compacted partition first needs cleaning."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from semel.storage.checkpoint import read_offset_checkpoint, write_offset_checkpoint
from semel.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from semel.storage.cleaner.cleaner import CleaningResult
    from semel.storage.fs import RealFileSystem

log = logging.getLogger("storage.cleaner")

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


@dataclass
class CleanerStats:
    """What the cleaner did since the broker started (the broker's metrics read it)."""

    runs: int = 0
    bytes_read: int = 0  # of the segments cleaned
    bytes_written: int = 0  # of the cleaned segments that replaced them
    max_dirty_ratio: float = 0.0  # of the dirtiest compacted partition at the last check
    last_run_ms: int | None = None  # when the cleaner last looked for work
    worker_max_rss_bytes: int = 0  # peak memory of the cleaner process so far
    map_entries: int = 0  # keys in the offset map of the last cleaning
    # when each partition's last cleaning ended (broker clock, ms)
    last_cleaned_ms: dict[TopicPartition, int] = field(default_factory=dict)
    # partitions whose cleaning failed other than transiently: skipped until a restart
    uncleanable: set[TopicPartition] = field(default_factory=set)

    def record(self, result: CleaningResult, now_ms: int) -> None:
        self.last_cleaned_ms[result.topic_partition] = now_ms
        self.runs += 1
        self.bytes_read += result.bytes_before
        self.bytes_written += result.bytes_after
        self.worker_max_rss_bytes = max(self.worker_max_rss_bytes, result.worker_max_rss_bytes)
        self.map_entries = result.map_entries


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
