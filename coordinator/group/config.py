"""Settings of the group coordinator, with Kafka's defaults.

Built from the broker's ``group.*`` / ``offset(s).*`` properties by ``from_broker_config``;
settings the broker does not expose keep Kafka's defaults (the 5-minute join timeout for new
members, offsets.topic.segment.bytes). Consumer groups (KIP-848) read
``group.consumer.session.timeout.ms`` (45 s), ``group.consumer.heartbeat.interval.ms`` (5 s),
``group.consumer.max.size`` and ``group.consumer.assignors`` (uniform, range; the first is
the default) and ``group.consumer.migration.policy`` (bidirectional) when the broker
config has them.
"""

from __future__ import annotations

from semel.storage.config import config_class

INT32_MAX = 2**31 - 1
CONSUMER_SESSION_TIMEOUT_MS = 45000
CONSUMER_HEARTBEAT_INTERVAL_MS = 5000
CONSUMER_ASSIGNORS = ("uniform", "range")


@config_class
class GroupConfig:
    """The group coordinator's settings (see the module docstring), Kafka's defaults."""

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
    consumer_session_timeout_ms: int = CONSUMER_SESSION_TIMEOUT_MS
    consumer_heartbeat_interval_ms: int = CONSUMER_HEARTBEAT_INTERVAL_MS
    consumer_max_size: int = INT32_MAX
    consumer_assignors: tuple[str, ...] = CONSUMER_ASSIGNORS
    # group.consumer.migration.policy: disabled, upgrade, downgrade, bidirectional
    consumer_migration_policy: str = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.consumer_migration_policy in ("downgrade", "bidirectional")

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
            consumer_session_timeout_ms=getattr(
                config, "group_consumer_session_timeout_ms", CONSUMER_SESSION_TIMEOUT_MS),
            consumer_heartbeat_interval_ms=getattr(
                config, "group_consumer_heartbeat_interval_ms", CONSUMER_HEARTBEAT_INTERVAL_MS),
            consumer_max_size=getattr(config, "group_consumer_max_size", INT32_MAX),
            consumer_assignors=_assignors(getattr(config, "group_consumer_assignors", None)),
            consumer_migration_policy=str(getattr(
                config, "group_consumer_migration_policy", "bidirectional")).lower(),
        )


def _assignors(value) -> tuple[str, ...]:
    """``group.consumer.assignors``: a list or a comma-separated string; names as Kafka's
    (``uniform``, ``range``, or their class names)."""
    if not value:
        return CONSUMER_ASSIGNORS
    items = value.split(",") if isinstance(value, str) else list(value)
    names = []
    for item in items:
        name = item.strip()
        short = name.rsplit(".", 1)[-1].lower()
        if short in ("uniformassignor", "rangeassignor"):
            name = short.removesuffix("assignor")
        if name:
            names.append(name)
    return tuple(names) or CONSUMER_ASSIGNORS
