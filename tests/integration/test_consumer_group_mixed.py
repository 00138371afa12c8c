"""A classic member and a consumer-protocol (KIP-848) member in one group, with real clients.

Kafka 4.x's online migration (``group.consumer.migration.policy=bidirectional``): a
confluent-kafka consumer with ``group.protocol=classic`` forms a classic group over a
6-partition topic; a confluent-kafka consumer with ``group.protocol=consumer`` joins it, which
upgrades the group to a consumer group keeping the classic member (it keeps using JoinGroup /
SyncGroup / Heartbeat, answered from the server-side assignment). Both then own partitions,
never the same ones, and every record is consumed once with commits. When the
consumer-protocol member leaves, the group is converted back to a classic group and the
classic member gets every partition. A broker with the policy ``disabled`` refuses the
upgrade as Kafka does (GROUP_ID_NOT_FOUND, which librdkafka reports as a fatal error; the
classic member keeps every partition).
"""

from __future__ import annotations

import re
import time
from collections import Counter

import pytest

from semel.broker.testing import BrokerThread
from tests.kafka_wire import make_topic

PARTITIONS = 6
PER_PARTITION = 20
TIMEOUT_S = 60
OVERRIDES = {"offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4",
             "group.consumer.heartbeat.interval.ms": "300",
             "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("kip848mix"), OVERRIDES) as b:
        yield b


def _config(bootstrap: str, group: str, protocol: str) -> dict:
    config = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
              "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if protocol == "classic":
        config.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    return config


def _produce(bootstrap: str, topic: str, phase: int) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{topic}-{phase}-{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            values.append(value)
    assert producer.flush(30) == 0
    return values


def _poll(consumers: dict, seen: Counter, owners: dict, until) -> None:
    """Poll every consumer in turn, committing each record before the next, until
    ``until()`` holds."""
    deadline = time.monotonic() + TIMEOUT_S
    while not until():
        assert time.monotonic() < deadline, f"timed out: {len(seen)} records seen"
        for name, consumer in consumers.items():
            msg = consumer.poll(0.05)
            if msg is None or msg.error():
                continue
            seen[msg.value()] += 1
            owners.setdefault(msg.partition(), set()).add(name)
            consumer.commit(message=msg, asynchronous=False)


def _assigned(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _group_type(bootstrap: str, group: str) -> str:
    """The group's type as ListGroups v5 reports it ("classic" or "consumer")."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result(30)
    types = {g.group_id: g.type for g in listed.valid}
    return types[group].name.lower()


def _topic(broker, request) -> str:
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(broker, name, PARTITIONS)
    return name


def test_classic_and_consumer_members_share_a_group(shared_broker, request):
    from confluent_kafka import Consumer

    bootstrap = shared_broker.bootstrap
    topic = _topic(shared_broker, request)
    group = f"mixed-{topic}"
    expected = _produce(bootstrap, topic, 0)
    seen: Counter = Counter()
    owners: dict = {}
    classic = Consumer(_config(bootstrap, group, "classic"))
    classic.subscribe([topic])
    modern = None
    try:
        # 1. a classic group with one member consuming
        _poll({"classic": classic}, seen, owners, lambda: len(seen) >= 30)
        assert _assigned(classic) == set(range(PARTITIONS))
        # 2. a consumer-protocol member joins: online upgrade, the partitions are shared
        modern = Consumer(_config(bootstrap, group, "consumer"))
        modern.subscribe([topic])
        both = {"classic": classic, "modern": modern}

        def shared() -> bool:
            a, b = _assigned(classic), _assigned(modern)
            return bool(a) and bool(b) and not (a & b) and a | b == set(range(PARTITIONS))

        _poll(both, seen, owners, lambda: shared() and len(seen) >= len(expected))
        expected += _produce(bootstrap, topic, 1)
        _poll(both, seen, owners, lambda: len(seen) >= len(expected))
        a, b = _assigned(classic), _assigned(modern)
        assert a and b and not (a & b) and a | b == set(range(PARTITIONS)), (a, b)
        assert {p for p, names in owners.items() if "modern" in names}
        assert _group_type(bootstrap, group) == "consumer"
        # 3. the consumer-protocol member leaves: back to a classic group, one member
        modern.close()
        modern = None
        expected += _produce(bootstrap, topic, 2)
        _poll({"classic": classic}, seen, owners, lambda: len(seen) >= len(expected)
              and _assigned(classic) == set(range(PARTITIONS)))
        assert _group_type(bootstrap, group) == "classic"
        assert set(seen) == set(expected)
        assert all(n == 1 for n in seen.values()), \
            [v for v, n in seen.items() if n > 1][:5]
    finally:
        if modern is not None:
            modern.close()
        classic.close()
    assert _committed(bootstrap, group, topic) == {p: 3 * PER_PARTITION
                                                   for p in range(PARTITIONS)}


def test_policy_disabled_refuses_the_upgrade(tmp_path, request):
    """Kafka answers the ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND: the consumer-protocol
    member gets nothing, the classic member keeps every partition."""
    from confluent_kafka import Consumer

    overrides = {**OVERRIDES, "group.consumer.migration.policy": "disabled"}
    with BrokerThread(tmp_path, overrides) as broker:
        bootstrap = broker.bootstrap
        topic = _topic(broker, request)
        group = f"disabled-{topic}"
        expected = _produce(bootstrap, topic, 0)
        seen: Counter = Counter()
        owners: dict = {}
        classic = Consumer(_config(bootstrap, group, "classic"))
        classic.subscribe([topic])
        modern = Consumer(_config(bootstrap, group, "consumer"))
        try:
            _poll({"classic": classic}, seen, owners, lambda: len(seen) >= 30)
            modern.subscribe([topic])
            errors = []
            for _ in range(40):  # a few heartbeat intervals of the new member
                msg = modern.poll(0.1)
                if msg is not None and msg.error():
                    errors.append(msg.error())
                msg = classic.poll(0.01)
                if msg is not None and not msg.error():
                    seen[msg.value()] += 1
                    classic.commit(message=msg, asynchronous=False)
            # librdkafka treats GROUP_ID_NOT_FOUND from ConsumerGroupHeartbeat as fatal
            assert any("group id does not exist" in e.str() for e in errors), errors
            assert modern.assignment() == []
            _poll({"classic": classic}, seen, owners, lambda: len(seen) >= len(expected))
            assert _assigned(classic) == set(range(PARTITIONS))
            assert _group_type(bootstrap, group) == "classic"
            assert all(n == 1 for n in seen.values())
        finally:
            modern.close()
            classic.close()
