"""Share group administration (KIP-932) against a broker over real sockets: ListGroups,
DescribeGroups and DeleteGroups of a share group (confluent-kafka's AdminClient and the raw
wire), and DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets
(keys 90-92, which confluent-kafka 2.16's AdminClient does not expose) over the raw wire,
with confluent-kafka's ShareConsumer as the group's member.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import ConsumerGroupState, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.kafka_wire import KafkaWire, message

TOPIC = "share-admin-topic"
OTHER = "share-admin-other"
GROUP = "share-admin-group"
LIST_GROUPS, DESCRIBE_GROUPS = 16, 15
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92


@pytest.fixture
def broker(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic(OTHER, 1, 1)]).values():
            f.result(30)
        resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(10):
            p.produce(TOPIC, f"v{i}".encode(), partition=0)
        assert p.flush(30) == 0
        yield b


def consume(b: BrokerThread, want: int, deadline_s: float = 30) -> tuple[ShareConsumer, list]:
    """A member that received ``want`` records (implicitly acknowledged by a last poll)."""
    c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP})
    c.subscribe([TOPIC])
    got: list = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        got += [m for m in c.poll(0.5) if m.error() is None]
    c.poll(0.5)  # sends the implicit acknowledgements of the records above
    return c, got


def describe_offsets(wire: KafkaWire, topics=None, version: int = 1):
    group = message(DESCRIBE_OFFSETS, "request", "DescribeShareGroupOffsetsRequestGroup",
                    group_id=GROUP, topics=None if topics is None else [
                        message(DESCRIBE_OFFSETS, "request",
                                "DescribeShareGroupOffsetsRequestTopic",
                                topic_name=name, partitions=partitions)
                        for name, partitions in topics])
    resp = wire.request(DESCRIBE_OFFSETS, version,
                        message(DESCRIBE_OFFSETS, "request", groups=[group]))
    [answer] = resp.groups
    assert answer.error_code == 0, answer
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
            for t in answer.topics for p in t.partitions}


def alter_offsets(wire: KafkaWire, group: str, offsets: dict[tuple[str, int], int]):
    topics: dict[str, list] = {}
    for (name, partition), offset in offsets.items():
        topics.setdefault(name, []).append(message(
            ALTER_OFFSETS, "request", "AlterShareGroupOffsetsRequestPartition",
            partition_index=partition, start_offset=offset))
    return wire.request(ALTER_OFFSETS, 0, message(ALTER_OFFSETS, "request", group_id=group, topics=[
        message(ALTER_OFFSETS, "request", "AlterShareGroupOffsetsRequestTopic",
                topic_name=name, partitions=parts) for name, parts in topics.items()]))


def delete_offsets(wire: KafkaWire, group: str, names: list[str]):
    return wire.request(DELETE_OFFSETS, 0, message(
        DELETE_OFFSETS, "request", group_id=group, topics=[
            message(DELETE_OFFSETS, "request", "DeleteShareGroupOffsetsRequestTopic",
                    topic_name=n) for n in names]))


def list_groups(wire: KafkaWire, types: list[str]) -> dict[str, tuple[str, str, str]]:
    resp = wire.request(LIST_GROUPS, 5, message(LIST_GROUPS, "request", types_filter=types))
    assert resp.error_code == 0
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in resp.groups}


def test_share_group_offsets_admin(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with KafkaWire.connect(broker.bootstrap) as wire:
        c, got = consume(broker, 10)
        try:
            assert sorted(m.offset() for m in got) == list(range(10))
            # the member acknowledged all ten: partition 0 starts at 10, nothing to deliver
            offsets = describe_offsets(wire, [(TOPIC, [0, 1]), ("no-such-topic", [0])])
            assert offsets[(TOPIC, 0)] == (10, 0, 0)
            assert offsets[(TOPIC, 1)][2] == 0  # empty partition: initialized at 0 or not
            assert offsets[("no-such-topic", 0)] == (-1, -1, 0)  # absence of data
            v0 = describe_offsets(wire, [(TOPIC, [0])], version=0)
            assert v0[(TOPIC, 0)][:1] == (10,)
            assert set(describe_offsets(wire)) >= {(TOPIC, 0)}  # null topics: all with state
            assert list_groups(wire, ["share"]) == {GROUP: ("share", "Stable", "share")}
            assert GROUP not in list_groups(wire, ["classic", "consumer"])
            # not emptied: altering, deleting offsets and deleting the group are refused
            assert alter_offsets(wire, GROUP, {(TOPIC, 0): 3}).error_code \
                == Error.NON_EMPTY_GROUP
            assert delete_offsets(wire, GROUP, [TOPIC]).error_code == Error.NON_EMPTY_GROUP
            result = admin.delete_consumer_groups([GROUP])[GROUP]
            with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
                result.result(30)
        finally:
            c.close()
        assert list_groups(wire, [])[GROUP] == ("share", "Empty", "share")
        # librdkafka lists consumer groups only (protocol type "consumer"), as with Kafka;
        # its describe falls back to DescribeGroups, which does not describe a share group
        assert GROUP not in {g.group_id for g in admin.list_consumer_groups().result(30).valid}
        described = admin.describe_consumer_groups([GROUP])[GROUP].result(30)
        assert (described.state, described.members) == (ConsumerGroupState.DEAD, [])
        # DescribeGroups: a share group is not a classic group (Dead before v6)
        for version, error in ((5, 0), (6, Error.GROUP_ID_NOT_FOUND)):
            resp = wire.request(DESCRIBE_GROUPS, version,
                                message(DESCRIBE_GROUPS, "request", groups=[GROUP]))
            assert (resp.groups[0].group_state, resp.groups[0].error_code) == ("Dead", error)
        assert resp.groups[0].error_message == f"Group {GROUP} is not a classic group."

        # empty now: start partition 0 again at offset 3; a new member gets 3..9 again
        resp = alter_offsets(wire, GROUP, {(TOPIC, 0): 3, (TOPIC, 7): 0,
                                           ("no-such-topic", 0): 0})
        assert resp.error_code == 0
        errors = {(t.topic_name, p.partition_index): p.error_code
                  for t in resp.responses for p in t.partitions}
        assert errors == {(TOPIC, 0): 0, (TOPIC, 7): Error.UNKNOWN_TOPIC_OR_PARTITION,
                          ("no-such-topic", 0): Error.UNKNOWN_TOPIC_OR_PARTITION}
        assert describe_offsets(wire, [(TOPIC, [0])])[(TOPIC, 0)] == (3, 7, 0)
        c, got = consume(broker, 7)
        c.close()
        assert sorted(m.offset() for m in got) == list(range(3, 10))
        assert describe_offsets(wire, [(TOPIC, [0])])[(TOPIC, 0)] == (10, 0, 0)

        # DeleteShareGroupOffsets: the topic's state goes; OTHER never had any
        resp = delete_offsets(wire, GROUP, [TOPIC, OTHER, "no-such-topic"])
        assert resp.error_code == 0
        assert {t.topic_name: t.error_code for t in resp.responses} == {
            TOPIC: 0, OTHER: Error.UNKNOWN_TOPIC_OR_PARTITION,
            "no-such-topic": Error.UNKNOWN_TOPIC_OR_PARTITION}
        assert describe_offsets(wire, [(TOPIC, [0])])[(TOPIC, 0)] == (-1, -1, 0)
        # earliest again: a new member gets all ten once more
        c, got = consume(broker, 10)
        c.close()
        assert sorted(m.offset() for m in got) == list(range(10))

        # DeleteGroups of the empty share group (confluent-kafka's AdminClient)
        admin.delete_consumer_groups([GROUP])[GROUP].result(30)
        assert GROUP not in list_groups(wire, [])
        assert describe_offsets(wire, [(TOPIC, [0])])[(TOPIC, 0)] == (-1, -1, 0)
        assert delete_offsets(wire, GROUP, [TOPIC]).error_code == Error.GROUP_ID_NOT_FOUND


def test_share_offsets_apis_refuse_other_group_kinds(broker):
    """A classic group's id is not a share group's: Alter and Delete answer
    GROUP_ID_NOT_FOUND "Group ... is not a share group.", as Kafka."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "classic-group",
                  "auto.offset.reset": "earliest"})
    c.subscribe([TOPIC])
    end = time.monotonic() + 30
    while c.poll(0.5) is None and time.monotonic() < end:
        pass
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            resp = alter_offsets(wire, "classic-group", {(TOPIC, 0): 0})
            assert (resp.error_code, resp.error_message) == (
                Error.GROUP_ID_NOT_FOUND, "Group classic-group is not a share group.")
            resp = delete_offsets(wire, "classic-group", [TOPIC])
            assert resp.error_code == Error.GROUP_ID_NOT_FOUND
    finally:
        c.close()


def test_share_group_id_refused_by_classic_and_consumer_requests(broker):
    """Group ids are one namespace: while GROUP is a share group, JoinGroup answers
    INCONSISTENT_GROUP_PROTOCOL, ConsumerGroupHeartbeat and OffsetCommit GROUP_ID_NOT_FOUND
    (Kafka's GroupMetadataManager / ShareGroup.validateOffsetCommit), and confluent-kafka's
    classic consumer cannot join it; once the share group is deleted the id is free."""
    from confluent_kafka import Consumer, KafkaError

    from tests.group_wire import commit, join

    c, got = consume(broker, 10)
    c.close()  # the group stays (empty, with its state)
    assert len(got) == 10
    with KafkaWire.connect(broker.bootstrap) as wire:
        _, resp = join(wire, GROUP)
        assert (resp.error_code, resp.member_id) == (Error.INCONSISTENT_GROUP_PROTOCOL, "")
        heartbeat = wire.request(68, 0, message(
            68, "request", group_id=GROUP, member_id="m1", member_epoch=0,
            rebalance_timeout_ms=30000, subscribed_topic_names=[TOPIC],
            topic_partitions=[]))
        assert (heartbeat.error_code, heartbeat.error_message) == (
            Error.GROUP_ID_NOT_FOUND, f"Group {GROUP} is not a consumer group.")
        assert commit(wire, GROUP, {(TOPIC, 0): 5}) == {(TOPIC, 0): Error.GROUP_ID_NOT_FOUND}
        errors: list = []
        classic = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP,
                            "error_cb": errors.append})
        classic.subscribe([TOPIC])
        try:
            end = time.monotonic() + 10
            while not errors and time.monotonic() < end:
                msg = classic.poll(0.2)
                if msg is not None and msg.error():
                    errors.append(msg.error())
                assert msg is None or msg.error() is not None  # never a record
        finally:
            classic.close()
        assert any(e.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL for e in errors), errors

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_consumer_groups([GROUP])[GROUP].result(30)
        assert commit(wire, GROUP, {(TOPIC, 0): 5}) == {(TOPIC, 0): 0}
