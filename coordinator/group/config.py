"""Settings of the group coordinator, with Kafka's defaults.

Built from the broker's ``group.*`` / ``offset(s).*`` properties by ``from_broker_config``;
settings the broker does not expose keep Kafka's defaults (the 5-minute join timeout for new
members, offsets.topic.segment.bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = INT32_MAX
    new_member_join_timeout_ms: int = 300000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024

    @classmethod
    def from_broker_config(cls, config) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offsets_topic_num_partitions=config.offsets_topic_num_partitions,
            offsets_topic_segment_bytes=config.offsets_topic_segment_bytes,
        )
