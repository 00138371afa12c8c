"""Committed offsets and group generations survive SIGKILL.

The broker runs as a subprocess with the durable default (log.flush.mode=fsync). A
confluent-kafka consumer commits part of a topic and leaves; a raw client is the stable
member of a second group; the broker is killed with SIGKILL and restarted on the same data
directory. After the restart OffsetFetch returns the committed offsets, the stable group
is still in its generation (its member's heartbeats are accepted), and a new consumer of
the first group resumes exactly where the old one stopped.
"""

from __future__ import annotations

import time

from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests.group_wire import (
    DESCRIBE_GROUPS,
    commit,
    fetch_offsets,
    heartbeat,
    join,
    sync,
)
from tests.kafka_wire import KafkaWire, create_topic, message

PARTITIONS = 6
PER_PARTITION = 30
TIMEOUT_S = 60
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "5"}


def produce(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    values = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            values.append(f"{p}-{i}".encode())
            producer.produce(topic, value=values[-1], partition=p)
    assert producer.flush(30) == 0
    return values


def consume(bootstrap: str, group: str, topic: str, count: int, *,
            then_nothing: bool = False) -> dict[int, list[bytes]]:
    """``count`` records by partition, each committed right after it is read; with
    ``then_nothing``, check that no further record arrives."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            got.setdefault(msg.partition(), []).append(msg.value())
            consumer.commit(message=msg, asynchronous=False)
        if then_nothing:
            assert consumer.poll(0.5) is None
    finally:
        consumer.close()
    return got


def fetch_when_loaded(wire: KafkaWire, group: str, partitions):
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        error, offsets = fetch_offsets(wire, group, partitions)
        if error != Error.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return error, offsets
        time.sleep(0.05)


def test_offsets_and_generations_survive_sigkill(tmp_path):
    data = tmp_path / "data"
    topic, group, stable_group = "events", "resuming", "stable"
    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            assert create_topic(wire, topic, PARTITIONS) == Error.NONE
        values = produce(broker.bootstrap, topic)
        first = consume(broker.bootstrap, group, topic, len(values) // 2)
        with KafkaWire.connect(broker.bootstrap) as wire:
            member, joined = join(wire, stable_group)
            assert sync(wire, stable_group, member, joined.generation_id,
                        {member: b"kept"}).error_code == Error.NONE
            assert commit(wire, stable_group, {(topic, 0): 7}, generation=1,
                          member_id=member) == {(topic, 0): Error.NONE}
            _, before = fetch_offsets(wire, group, [(topic, p) for p in range(PARTITIONS)])
    finally:
        broker.kill()
    assert {p: o for (_, p), (o, *_rest) in before.items()} == {
        p: len(first[p]) if p in first else -1 for p in range(PARTITIONS)}

    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            error, after = fetch_when_loaded(wire, group,
                                             [(topic, p) for p in range(PARTITIONS)])
            assert error == Error.NONE
            assert after == before
            assert fetch_when_loaded(wire, stable_group, [(topic, 0)])[1][(topic, 0)][0] == 7
            # the stable group kept its generation, member and assignment
            described = wire.request(DESCRIBE_GROUPS, 5, message(
                DESCRIBE_GROUPS, "request", groups=[stable_group])).groups[0]
            assert described.group_state == "Stable"
            assert [m.member_id for m in described.members] == [member]
            assert described.members[0].member_assignment == b"kept"
            assert heartbeat(wire, stable_group, member, joined.generation_id) == Error.NONE
        rest = consume(broker.bootstrap, group, topic, len(values) - len(values) // 2,
                       then_nothing=True)
    finally:
        broker.stop()
    resumed = [v for p in range(PARTITIONS) for v in first.get(p, []) + rest.get(p, [])]
    assert sorted(resumed) == sorted(values)  # nothing twice, nothing missing
