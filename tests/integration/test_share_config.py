"""Share group settings over real sockets: the broker's ``group.share.*`` keys (broker/config.py)
and a group's own ``share.session.timeout.ms`` / ``share.heartbeat.interval.ms`` (GROUP
configs set with confluent-kafka's IncrementalAlterConfigs) as ShareGroupHeartbeat answers
them, member expiry on the broker's virtual clock, and ``group.share.delivery.count.limit``
with confluent-kafka's ShareConsumer.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from semel.broker.config import ConfigError, load_config
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.kafka_wire import KafkaWire, message

TOPIC, GROUP = "share-config-topic", "share-config-group"
SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE = 76, 77


def set_group_configs(b: BrokerThread, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)


def heartbeat(wire: KafkaWire, member_id: str, epoch: int):
    resp = wire.request(SHARE_GROUP_HEARTBEAT, 1, message(
        SHARE_GROUP_HEARTBEAT, "request", group_id=GROUP, member_id=member_id,
        member_epoch=epoch, subscribed_topic_names=[TOPIC] if epoch == 0 else None))
    assert resp.error_code == 0, resp
    return resp


def members(wire: KafkaWire) -> list[str]:
    resp = wire.request(SHARE_GROUP_DESCRIBE, 1, message(
        SHARE_GROUP_DESCRIBE, "request", group_ids=[GROUP]))
    return [m.member_id for m in resp.groups[0].members]


def test_broker_and_group_timeouts(tmp_path):
    overrides = {"group.share.heartbeat.interval.ms": "6000",
                 "group.share.session.timeout.ms": "50000"}
    with BrokerThread(tmp_path / "data", overrides) as b, \
            KafkaWire.connect(b.bootstrap) as wire:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        first = heartbeat(wire, "member-a", 0)
        assert first.heartbeat_interval_ms == 6000  # the broker's key
        b.advance(49)
        assert members(wire) == ["member-a"]  # 50 s broker session timeout
        set_group_configs(b, {"share.heartbeat.interval.ms": "7000",
                              "share.session.timeout.ms": "46000"})
        again = heartbeat(wire, "member-a", first.member_epoch)
        assert again.heartbeat_interval_ms == 7000  # the group's own
        b.advance(45)
        assert members(wire) == ["member-a"]
        b.advance(2)  # 47 s since the last heartbeat: past the group's 46 s
        assert members(wire) == []
        # the group's values stay within the broker's bounds (group.share.max...=60000)
        with pytest.raises(KafkaException, match="share.session.timeout.ms"):
            set_group_configs(b, {"share.session.timeout.ms": "61000"})
        resp = wire.request(SHARE_GROUP_HEARTBEAT, 1, message(
            SHARE_GROUP_HEARTBEAT, "request", group_id=GROUP, member_id="member-a",
            member_epoch=again.member_epoch))
        assert resp.error_code == Error.UNKNOWN_MEMBER_ID  # expired


def test_delivery_count_limit_from_broker_config(tmp_path):
    """group.share.delivery.count.limit=2: a record released twice is archived."""
    with BrokerThread(tmp_path / "data", {"group.share.delivery.count.limit": "2"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        set_group_configs(b, {"share.auto.offset.reset": "earliest"})
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        p.produce(TOPIC, b"poison")
        assert p.flush(30) == 0
        c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([TOPIC])
        try:
            for attempt in (1, 2):
                got: list = []
                end = time.monotonic() + 30
                while not got and time.monotonic() < end:
                    got = [m for m in c.poll(0.5) if m.error() is None]
                assert [(m.offset(), m.delivery_count()) for m in got] == [(0, attempt)]
                c.acknowledge(got[0], AcknowledgeType.RELEASE)
                c.commit_sync()
            end = time.monotonic() + 3
            while time.monotonic() < end:
                assert [m for m in c.poll(0.5) if m.error() is None] == []
        finally:
            c.close()


@pytest.mark.parametrize("props, message_part", [
    ({"group.share.delivery.count.limit": "11"}, "group.share.delivery.count.limit"),
    ({"group.share.max.size": "1001"}, "group.share.max.size"),
    ({"group.share.session.timeout.ms": "40000"}, "group.share.min.session.timeout.ms"),
    ({"group.share.heartbeat.interval.ms": "16000"}, "group.share.max.heartbeat.interval.ms"),
    ({"group.share.record.lock.duration.ms": "90000"},
     "group.share.max.record.lock.duration.ms"),
    ({"group.share.min.session.timeout.ms": "4000",
      "group.share.session.timeout.ms": "5000"}, "less than group.share.session.timeout.ms"),
])
def test_broker_keys_validated(tmp_path, props, message_part):
    with pytest.raises(ConfigError, match=message_part):
        load_config(None, [f"{k}={v}" for k, v in props.items()], {},
                    data_dir=str(tmp_path))
