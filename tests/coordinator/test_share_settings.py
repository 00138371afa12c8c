"""Share group settings: the broker's group.share.* keys reach the share-partition manager and
membership (``from_broker_config``), and a group's own share.* configs
(``ShareGroupSettings.from_configs``) override the session timeout and heartbeat interval
membership gives that group, on an injected clock."""

from __future__ import annotations

import asyncio
from uuid import UUID

from semel.broker.config import load_config
from semel.coordinator.share.config import ShareGroupConfig, ShareGroupSettings
from semel.coordinator.share.membership import ShareGroupMembership, ShareMembershipConfig
from tests.coordinator.test_share_membership import Clock, FakeService, hb

T1 = UUID(int=1)


def test_from_broker_config(tmp_path):
    config = load_config(None, ["group.share.delivery.count.limit=3",
                                "group.share.record.lock.duration.ms=20000",
                                "group.share.partition.max.record.locks=500",
                                "group.share.session.timeout.ms=50000",
                                "group.share.heartbeat.interval.ms=6000",
                                "group.share.max.size=10"], {}, data_dir=str(tmp_path))
    assert ShareGroupConfig.from_broker_config(config) == ShareGroupConfig(
        record_lock_duration_ms=20000, delivery_count_limit=3, partition_max_record_locks=500)
    assert ShareMembershipConfig.from_broker_config(config) == ShareMembershipConfig(
        50000, 6000, 10)
    defaults = load_config(None, [], {}, data_dir=str(tmp_path))
    assert ShareGroupConfig.from_broker_config(defaults) == ShareGroupConfig()
    assert ShareMembershipConfig.from_broker_config(defaults) == ShareMembershipConfig()


def test_settings_from_group_configs():
    settings = ShareGroupSettings.from_configs({
        "share.isolation.level": "read_committed", "share.session.timeout.ms": "46000",
        "share.heartbeat.interval.ms": "7000", "share.record.lock.duration.ms": "15000"})
    assert settings.read_committed
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms,
            settings.record_lock_duration_ms) == (46000, 7000, 15000)
    plain = ShareGroupSettings.from_configs({})
    assert not plain.read_committed
    assert (plain.session_timeout_ms, plain.heartbeat_interval_ms) == (None, None)


def test_group_timeouts_override_the_brokers():
    from types import SimpleNamespace

    log_manager = SimpleNamespace(topics={"a": SimpleNamespace(name="a", topic_id=T1,
                                                               num_partitions=1)})
    overrides = {"tuned": ShareGroupSettings.from_configs({
        "share.session.timeout.ms": "46000", "share.heartbeat.interval.ms": "7000"})}
    clock = Clock()
    m = ShareGroupMembership(FakeService(), log_manager, clock=clock,
                             config=ShareMembershipConfig(50000, 6000, 200),
                             group_settings=lambda g: overrides.get(g, ShareGroupSettings()))
    assert hb(m, "x", 0, ["a"], group="tuned").heartbeat_interval_ms == 7000
    assert hb(m, "y", 0, ["a"], group="plain").heartbeat_interval_ms == 6000
    clock.now += 46_000  # the tuned group's session timeout, not the broker's 50 s
    assert asyncio.run(m.expire_members()) == 1
    assert list(m.groups["tuned"].members) == [] and list(m.groups["plain"].members) == ["y"]
    clock.now += 4_000
    assert asyncio.run(m.expire_members()) == 1
    assert list(m.groups["plain"].members) == []
