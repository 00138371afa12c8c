"""Share group settings (KIP-932): the broker's ``group.share.*`` / ``share.coordinator.*``
properties and a group's own ``share.*`` configs, with Kafka's names and defaults.

``share.auto.offset.reset`` is ``latest`` (default), ``earliest`` or
``by_duration:<ISO-8601 duration>`` (``PnDTnHnMn.nS``: start at the first record no older
than the duration). ``share.isolation.level`` is ``read_uncommitted`` (default) or
``read_committed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DURATION = re.compile(
    r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """Broker-wide limits (Kafka's ShareGroupConfig and ShareCoordinatorConfig); the
    broker's ``group.share.*`` keys through ``from_broker_config``."""
    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    partition_max_record_locks: int = 2000  # group.share.partition.max.record.locks
    # share.coordinator.snapshot.update.records.per.snapshot
    snapshot_update_records_per_snapshot: int = 500
    state_topic_num_partitions: int = 50  # share.coordinator.state.topic.num.partitions
    state_topic_segment_bytes: int = 100 * 1024 * 1024  # ...state.topic.segment.bytes

    @classmethod
    def from_broker_config(cls, config) -> ShareGroupConfig:
        return cls(record_lock_duration_ms=config.group_share_record_lock_duration_ms,
                   delivery_count_limit=config.group_share_delivery_count_limit,
                   partition_max_record_locks=config.group_share_partition_max_record_locks)

    def __post_init__(self) -> None:
        if self.delivery_count_limit < 2:
            raise ValueError("group.share.delivery.count.limit must be at least 2")
        for name in ("record_lock_duration_ms", "partition_max_record_locks",
                     "snapshot_update_records_per_snapshot", "state_topic_num_partitions"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


@dataclass(frozen=True, slots=True)
class AutoOffsetReset:
    """``latest``, ``earliest``, or ``by_duration`` with ``duration_ms``."""
    strategy: str = "latest"
    duration_ms: int = 0

    @classmethod
    def parse(cls, value: str) -> AutoOffsetReset:
        text = value.strip().lower()
        if text in ("latest", "earliest"):
            return cls(text)
        if text.startswith("by_duration:"):
            match = _DURATION.match(text[len("by_duration:"):].strip())
            if match and any(match.groups()):
                days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
                ms = round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
                return cls("by_duration", ms)
        raise ValueError(f"invalid share.auto.offset.reset: {value!r}")


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """One group's ``share.*`` configs (Kafka's GroupConfig); None = the broker's."""
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset()
    isolation_level: str = "read_uncommitted"
    record_lock_duration_ms: int | None = None
    session_timeout_ms: int | None = None  # share.session.timeout.ms
    heartbeat_interval_ms: int | None = None  # share.heartbeat.interval.ms

    def __post_init__(self) -> None:
        if self.isolation_level not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"invalid share.isolation.level: {self.isolation_level!r}")

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"

    @classmethod
    def from_configs(cls, configs: dict[str, str]) -> ShareGroupSettings:
        def number(name: str) -> int | None:
            value = configs.get(name)
            return int(value) if value is not None else None

        return cls(AutoOffsetReset.parse(configs.get("share.auto.offset.reset", "latest")),
                   configs.get("share.isolation.level", "read_uncommitted").lower(),
                   number("share.record.lock.duration.ms"),
                   number("share.session.timeout.ms"), number("share.heartbeat.interval.ms"))
