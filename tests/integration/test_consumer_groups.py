"""Consumer groups with real clients: every record is consumed exactly once across a group
whose membership changes, with offsets committed as records are processed.

Each scenario runs in phases. In a phase the group is first left to settle (the union of
the members' assignments is the topic's 6 partitions, evenly spread), then a batch is
produced and consumed; between phases a member leaves or joins, which rebalances the group.
Clients: confluent-kafka (eager ``range`` and ``cooperative-sticky``, 2 and 3 members),
kafka-python, aiokafka and the Java KafkaConsumer (subscribe; it hands over to
confluent-kafka and back through committed offsets). One in-process broker with
``group.initial.rebalance.delay.ms=0`` serves the module.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import run_java
from tests.kafka_wire import make_topic

PARTITIONS = 6
PER_PARTITION = 20
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    overrides = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "10"}
    with BrokerThread(tmp_path_factory.mktemp("groups"), overrides) as b:
        yield b


@pytest.fixture
def topic(shared_broker, request) -> str:
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(shared_broker, name, PARTITIONS)
    return name


def produce_batch(bootstrap: str, topic: str, phase: int) -> list[bytes]:
    """PER_PARTITION records to every partition; returns their values."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            value = f"{phase}-{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            values.append(value)
    assert producer.flush(30) == 0
    return values


def balanced(assignments: list[set[tuple[str, int]]]) -> bool:
    """Every partition owned by exactly one member, evenly spread."""
    union = set().union(*assignments)
    sizes = [len(a) for a in assignments]
    return (len(union) == PARTITIONS and sum(sizes) == PARTITIONS
            and max(sizes) - min(sizes) <= 1)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                 timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


# -- confluent-kafka (librdkafka) -------------------------------------------------------


class ConfluentGroup:
    def __init__(self, bootstrap: str, topic: str, group: str, strategy: str) -> None:
        self.bootstrap, self.topic, self.group, self.strategy = bootstrap, topic, group, strategy
        self.members: list = []
        self.consumed: list[bytes] = []
        self.assignment_sizes: list[list[int]] = []
        # what happened, for a failure's message: (seconds, phase, member, what)
        self.trace: list[tuple[float, str, int, str]] = []
        self.phase = "start"
        self._started = time.monotonic()
        self._ids: dict[int, int] = {}  # id(consumer) -> member number

    def _note(self, consumer, what: str) -> None:
        member = self._ids.setdefault(id(consumer), len(self._ids))
        self.trace.append((round(time.monotonic() - self._started, 3), self.phase, member, what))

    def explain(self, produced: list[bytes]) -> str:
        """The trace lines of every value consumed twice or never, and every assignment."""
        counts, expected = Counter(self.consumed), Counter(produced)
        wrong = {v.decode() for v in (counts | expected) if counts[v] != expected[v]}
        lines = [f"{t:8.3f} {phase:<10} member {m}: {what}" for t, phase, m, what in self.trace
                 if what.startswith("assigned") or what.split()[-1] in wrong]
        return "consumed != produced; trace:\n" + "\n".join(lines)

    def add(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "partition.assignment.strategy": self.strategy, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300, "topic.metadata.refresh.interval.ms": 60000})
        consumer.subscribe([self.topic])
        self.members.append(consumer)

    def remove(self) -> None:
        self.members.pop(0).close()  # LeaveGroup

    def _poll_all(self) -> None:
        for consumer in self.members:
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            self.consumed.append(msg.value())
            self._note(consumer, f"p{msg.partition()}@{msg.offset()} {msg.value().decode()}")
            consumer.commit(message=msg, asynchronous=False)

    def settle(self) -> None:
        self.phase = f"settle{len(self.assignment_sizes) + 1}"
        deadline = time.monotonic() + TIMEOUT_S
        seen: list = []
        while time.monotonic() < deadline:
            self._poll_all()
            assignments = [{(tp.topic, tp.partition) for tp in c.assignment()}
                           for c in self.members]
            if assignments != seen:
                seen = assignments
                for c, a in zip(self.members, assignments, strict=True):
                    self._note(c, f"assigned {sorted(p for _, p in a)}")
            if balanced(assignments):
                self.assignment_sizes.append(sorted(len(a) for a in assignments))
                self.phase = f"consume{len(self.assignment_sizes)}"
                return
        raise AssertionError(f"group did not settle: {assignments}")

    def consume(self, expected_total: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while len(self.consumed) < expected_total and time.monotonic() < deadline:
            self._poll_all()
        assert len(self.consumed) == expected_total

    def close(self) -> None:
        while self.members:
            self.remove()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("members", [2, 3])
def test_confluent_group_members_join_and_leave(shared_broker, topic, strategy, members):
    bootstrap = shared_broker.bootstrap
    group = ConfluentGroup(bootstrap, topic, topic + "-group", strategy)
    produced: list[bytes] = []
    try:
        for _ in range(members):
            group.add()
        group.settle()
        produced += produce_batch(bootstrap, topic, 1)
        group.consume(len(produced))

        group.remove()  # a member leaves: the others take over its partitions
        group.settle()
        produced += produce_batch(bootstrap, topic, 2)
        group.consume(len(produced))

        group.add()  # a member joins
        group.settle()
        produced += produce_batch(bootstrap, topic, 3)
        group.consume(len(produced))
    finally:
        group.close()
    assert Counter(group.consumed) == Counter(produced), group.explain(produced)  # exactly once
    expected_sizes = {2: [3, 3], 3: [2, 2, 2]}[members]
    assert group.assignment_sizes == [expected_sizes, {2: [6], 3: [3, 3]}[members],
                                      expected_sizes]
    assert committed_offsets(bootstrap, topic + "-group", topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


def test_confluent_member_that_stops_heartbeating_is_evicted(tmp_path):
    """A member whose process hangs (no heartbeats) leaves the group after its session
    timeout; the survivor takes its partitions and consumes what it left behind."""
    from confluent_kafka import Consumer

    from tests.group_wire import join_request, sync
    from tests.kafka_wire import KafkaWire

    overrides = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "200",
                 "offsets.topic.num.partitions": "3"}
    with BrokerThread(tmp_path / "data", overrides) as b:
        make_topic(b, "t", PARTITIONS)
        survivor = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
        survivor.subscribe(["t"])
        deadline = time.monotonic() + TIMEOUT_S
        while not survivor.assignment() and time.monotonic() < deadline:
            survivor.poll(0.05)
        # a raw client joins with a 500 ms session, takes part in the rebalance, then hangs
        with KafkaWire.connect(b.bootstrap) as hung:
            first = hung.request(11, 9, join_request("g", session_ms=500))
            hung.send(11, 9, join_request("g", first.member_id, session_ms=500))
            while len(survivor.assignment()) != PARTITIONS // 2 and time.monotonic() < deadline:
                survivor.poll(0.05)  # survivor rejoins (and, as leader, assigns) in here
            joined = hung.receive()
            assert joined.error_code == 0
            assert sync(hung, "g", joined.member_id, joined.generation_id,
                        protocol_name=joined.protocol_name).error_code == 0
            assert len(survivor.assignment()) == PARTITIONS // 2
            values = produce_batch(b.bootstrap, "t", 1)
            consumed = []
            while len(consumed) < len(values) and time.monotonic() < deadline:
                msg = survivor.poll(0.05)
                if msg is not None and msg.error() is None:
                    consumed.append(msg.value())
                    survivor.commit(message=msg, asynchronous=False)
            assert sorted(consumed) == sorted(values)  # all six partitions after eviction
            assert len(survivor.assignment()) == PARTITIONS
        survivor.close()


# -- kafka-python -----------------------------------------------------------------------


def test_kafka_python_group(shared_broker, topic):
    from kafka import KafkaConsumer

    bootstrap = shared_broker.bootstrap

    def member():
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=topic + "-group",
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 heartbeat_interval_ms=300)
        consumer.subscribe([topic])
        return consumer

    members = [member(), member()]
    consumed: list[bytes] = []
    produced: list[bytes] = []

    def poll_all():
        for consumer in members:
            batch = consumer.poll(timeout_ms=50)
            for records in batch.values():
                consumed.extend(r.value for r in records)
            if batch:
                consumer.commit()

    def settle():
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            poll_all()
            if balanced([{(tp.topic, tp.partition) for tp in c.assignment()}
                         for c in members]):
                return
        raise AssertionError("kafka-python group did not settle")

    def consume():
        deadline = time.monotonic() + TIMEOUT_S
        while len(consumed) < len(produced) and time.monotonic() < deadline:
            poll_all()

    try:
        settle()
        produced += produce_batch(bootstrap, topic, 1)
        consume()
        members.pop(0).close()  # leaves the group
        settle()
        produced += produce_batch(bootstrap, topic, 2)
        consume()
    finally:
        for consumer in members:
            consumer.close()
    assert Counter(consumed) == Counter(produced)
    assert committed_offsets(bootstrap, topic + "-group", topic) == {
        p: 2 * PER_PARTITION for p in range(PARTITIONS)}


# -- aiokafka ---------------------------------------------------------------------------


def test_aiokafka_group(shared_broker, topic):
    bootstrap = shared_broker.bootstrap
    produced: list[bytes] = []

    async def scenario() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer

        async def member():
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                        group_id=topic + "-group", enable_auto_commit=False,
                                        auto_offset_reset="earliest", heartbeat_interval_ms=300)
            await consumer.start()
            return consumer

        members = [await member(), await member()]
        consumed: list[bytes] = []

        async def poll_all():
            for consumer in members:
                batch = await consumer.getmany(timeout_ms=50)
                for records in batch.values():
                    consumed.extend(r.value for r in records)
                if batch:
                    await consumer.commit()

        async def settle():
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                await poll_all()
                if balanced([{(tp.topic, tp.partition) for tp in c.assignment()}
                             for c in members]):
                    return
            raise AssertionError("aiokafka group did not settle")

        async def consume():
            deadline = time.monotonic() + TIMEOUT_S
            while len(consumed) < len(produced) and time.monotonic() < deadline:
                await poll_all()

        try:
            await settle()
            produced.extend(await asyncio.to_thread(produce_batch, bootstrap, topic, 1))
            await consume()
            await members.pop(0).stop()  # leaves the group
            await settle()
            produced.extend(await asyncio.to_thread(produce_batch, bootstrap, topic, 2))
            await consume()
        finally:
            for consumer in members:
                await consumer.stop()
        return consumed

    consumed = asyncio.run(scenario())
    assert Counter(consumed) == Counter(produced)
    assert committed_offsets(bootstrap, topic + "-group", topic) == {
        p: 2 * PER_PARTITION for p in range(PARTITIONS)}


# -- Java KafkaConsumer -----------------------------------------------------------------


def test_java_consumer_group_hands_over_through_committed_offsets(shared_broker, topic):
    """Java consumes part and commits; confluent-kafka in the same group resumes from
    there; the Java consumer then resumes from confluent-kafka's commits."""
    from confluent_kafka import Consumer

    bootstrap = shared_broker.bootstrap
    group = topic + "-group"
    first = produce_batch(bootstrap, topic, 1)
    records = run_java("consume", "--bootstrap", bootstrap, "--topic", topic,
                       "--group", group, "--count", 50, "--from-beginning",
                       "--timeout-ms", 30000)
    java_values = [r["value"].encode() for r in records if r["type"] == "record"]
    assert len(java_values) == 50

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    rest: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(rest) < len(first) - 50 and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            rest.append(msg.value())
            consumer.commit(message=msg, asynchronous=False)
    consumer.close()
    assert Counter(java_values + rest) == Counter(first)

    second = produce_batch(bootstrap, topic, 2)
    records = run_java("consume", "--bootstrap", bootstrap, "--topic", topic,
                       "--group", group, "--count", len(second), "--timeout-ms", 30000)
    assert Counter(r["value"].encode() for r in records if r["type"] == "record") == \
        Counter(second)
    assert committed_offsets(bootstrap, group, topic) == {
        p: 2 * PER_PARTITION for p in range(PARTITIONS)}


def test_deleting_a_topic_drops_its_committed_offsets(broker) -> None:
    """DeleteTopics tells the group coordinator; a re-created topic starts with no offsets."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("doomed", 1)])["doomed"].result(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-doomed",
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("doomed", 0, 0)], asynchronous=False)
        assert consumer.committed([TopicPartition("doomed", 0)], timeout=10)[0].offset == 0
        admin.delete_topics(["doomed"])["doomed"].result(30)
        admin.create_topics([NewTopic("doomed", 1)])["doomed"].result(30)
        assert consumer.committed([TopicPartition("doomed", 0)], timeout=10)[0].offset < 0
    finally:
        consumer.close()
