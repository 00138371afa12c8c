"""Which compacted partition the cleaner takes and how far (storage/cleaner/selection.py),
Kafka's LogCleanerManager rules, over fake logs."""

from __future__ import annotations

from dataclasses import dataclass, field

from semel.storage.cleaner.selection import cleanable_range, filthiest, log_to_clean
from semel.storage.topic_partition import TopicPartition

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)


@dataclass
class Seg:
    base_offset: int
    size: int = 1000
    largest_timestamp: int = NOW - 3_600_000
    rolling_based_timestamp: int | None = NOW - 3_600_000


@dataclass
class Log:
    segments: list[Seg] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 400
    last_stable_offset: int = 400


def four_segments(**kw) -> Log:
    return Log([Seg(0), Seg(100), Seg(200), Seg(300)], **kw)  # 300: the active segment


def test_from_the_log_start_to_the_active_segment():
    r = cleanable_range(four_segments(), None, NOW, 0)
    assert (r.first_dirty_offset, r.first_uncleanable_offset, r.reset_checkpoint) == (0, 300, False)


def test_never_at_or_past_the_last_stable_offset_rounded_down_to_a_segment():
    r = cleanable_range(four_segments(last_stable_offset=150), None, NOW, 0)
    assert r.first_uncleanable_offset == 100


def test_an_invalid_checkpoint_is_reset_to_the_log_start():
    log = four_segments(log_start_offset=50)
    assert cleanable_range(log, 20, NOW, 0).reset_checkpoint
    assert cleanable_range(log, 500, NOW, 0).first_dirty_offset == 50
    r = cleanable_range(log, 200, NOW, 0)
    assert (r.first_dirty_offset, r.reset_checkpoint) == (200, False)


def test_min_compaction_lag_holds_back_recent_segments():
    log = four_segments()
    log.segments[1].largest_timestamp = NOW - 1_000
    assert cleanable_range(log, None, NOW, 60_000).first_uncleanable_offset == 100
    assert cleanable_range(log, None, NOW, 500).first_uncleanable_offset == 300


def test_dirty_ratio_and_the_choice():
    log = four_segments()
    half, _ = log_to_clean(TP, log, 200, NOW, min_compaction_lag_ms=0,
                           max_compaction_lag_ms=2**63 - 1)
    assert (half.clean_bytes, half.cleanable_bytes) == (2000, 1000)
    assert abs(half.cleanable_ratio - 1 / 3) < 1e-9
    assert filthiest([(half, 0.5)]) is None
    assert filthiest([(half, 0.3)]) == half
    whole, _ = log_to_clean(TopicPartition("t", 1), log, None, NOW, min_compaction_lag_ms=0,
                            max_compaction_lag_ms=2**63 - 1)
    assert whole.cleanable_ratio == 1.0
    assert filthiest([(half, 0.3), (whole, 0.5)]) == whole


def test_max_compaction_lag_forces_a_cleaning_below_the_ratio():
    log = four_segments()
    lazy, _ = log_to_clean(TP, log, 200, NOW, min_compaction_lag_ms=0,
                           max_compaction_lag_ms=60_000)
    assert lazy.compaction_delay_ms == 3_600_000 - 60_000
    assert filthiest([(lazy, 0.9)]) == lazy
    empty_range, _ = log_to_clean(TP, log, 300, NOW, min_compaction_lag_ms=0,
                                  max_compaction_lag_ms=60_000)
    assert empty_range.cleanable_bytes == 0 and filthiest([(empty_range, 0.9)]) is None
