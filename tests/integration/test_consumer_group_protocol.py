"""The KIP-848 consumer group protocol (``group.protocol=consumer``) with real clients.

- confluent-kafka (librdkafka 2.16, ConsumerGroupHeartbeat v1): two or three members consume
  a 6-partition topic committing as they go; a member leaves, one joins; every record is
  consumed exactly once and the committed offsets are the end offsets. The assignment is
  the server's (uniform: 3+3 or 2+2+2, then 6 or 3+3).
- a regular expression subscription picks up a topic created after the consumer joined.
- a transactional copier whose consumer uses the new protocol (send_offsets_to_transaction
  with the consumer's group metadata: member id and member epoch) is exactly-once, with
  aborts; and across two SIGKILLs of a broker process, each inside a transaction whose
  offsets were sent (the same with a classic group).
- Java kafka-clients 3.9.1 (the protocol is a preview there; ConsumerGroupHeartbeat v0,
  member ids given by the coordinator; a Pattern subscription is resolved by the client,
  which sends topic names): two members, a third joins, one leaves, every record once with
  exact committed offsets; a pattern member picks up a topic created later; the exactly-once
  copier with a KIP-848 consumer (tests/java/Kip848Members.java drives the members).
- the group's state survives a broker restart (ConsumerGroupDescribe before and after).

The broker hands members a 300 ms heartbeat interval so that reconciliation takes a few
hundred milliseconds instead of Kafka's 5 s.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest

from semel.broker.testing import BrokerProcess, BrokerThread
from tests.javaclient import program_command, require_java, run_java
from tests.kafka_wire import KafkaWire, create_topic, make_topic

JAVA_MEMBERS = Path(__file__).resolve().parents[1] / "java" / "Kip848Members.java"
PARTITIONS = 6
PER_PARTITION = 20
TIMEOUT_S = 60
OVERRIDES = {"offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4",
             "group.consumer.heartbeat.interval.ms": "300"}


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("kip848"), OVERRIDES) as b:
        yield b


@pytest.fixture
def topic(shared_broker, request) -> str:
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(shared_broker, name, PARTITIONS)
    return name


def consumer_config(bootstrap: str, group: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest", **extra}


def produce(bootstrap: str, topic: str, phase: int, partitions: int = PARTITIONS) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = []
    for p in range(partitions):
        for i in range(PER_PARTITION):
            value = f"{topic}-{phase}-{p}-{i}".encode()
            producer.produce(topic, value=value, partition=p)
            values.append(value)
    assert producer.flush(30) == 0
    return values


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)],
                                 timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


class Group:
    """confluent-kafka members of one KIP-848 group, polled in turn from this thread."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.members: list = []
        self.consumed: list[bytes] = []
        self.assignment_sizes: list[list[int]] = []

    def add(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(consumer_config(self.bootstrap, self.group))
        consumer.subscribe([self.topic])
        self.members.append(consumer)

    def remove(self) -> None:
        self.members.pop(0).close()  # ConsumerGroupHeartbeat with epoch -1

    def poll_all(self) -> None:
        for consumer in self.members:
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            self.consumed.append(msg.value())
            consumer.commit(message=msg, asynchronous=False)

    def settle(self) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        assignments: list = []
        while time.monotonic() < deadline:
            self.poll_all()
            assignments = [{tp.partition for tp in c.assignment()} for c in self.members]
            union = set().union(*assignments)
            sizes = sorted(len(a) for a in assignments)
            if len(union) == PARTITIONS and sum(sizes) == PARTITIONS and \
                    sizes[-1] - sizes[0] <= 1:
                self.assignment_sizes.append(sizes)
                return
        raise AssertionError(f"group did not settle: {assignments}")

    def consume(self, expected_total: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while len(self.consumed) < expected_total and time.monotonic() < deadline:
            self.poll_all()
        assert len(self.consumed) == expected_total

    def close(self) -> None:
        while self.members:
            self.remove()


@pytest.mark.parametrize("members", [2, 3])
def test_confluent_members_join_and_leave(shared_broker, topic, members):
    bootstrap = shared_broker.bootstrap
    group = Group(bootstrap, topic, topic + "-group")
    produced: list[bytes] = []
    try:
        for _ in range(members):
            group.add()
        group.settle()
        produced += produce(bootstrap, topic, 1)
        group.consume(len(produced))

        group.remove()  # a member leaves: the others take over its partitions
        group.settle()
        produced += produce(bootstrap, topic, 2)
        group.consume(len(produced))

        group.add()  # a member joins
        group.settle()
        produced += produce(bootstrap, topic, 3)
        group.consume(len(produced))
    finally:
        group.close()
    assert Counter(group.consumed) == Counter(produced)  # exactly once
    even = {2: [3, 3], 3: [2, 2, 2]}[members]
    assert group.assignment_sizes == [even, {2: [6], 3: [3, 3]}[members], even]
    assert committed_offsets(bootstrap, topic + "-group", topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


class JavaGroup:
    """Java 3.9.1 members of one KIP-848 group in one JVM (Kip848Members), one command at a
    time over its stdin; each answers one JSON line."""

    def __init__(self, bootstrap: str, group: str) -> None:
        require_java()
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(program_command(JAVA_MEMBERS, "Kip848Members", bootstrap,
                                                     group),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)

    def send(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        self.proc.wait(10)
        self.stderr.seek(0)
        raise AssertionError(f"Kip848Members ended at {command!r}: {self.stderr.read()[-3000:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.send("quit")
            self.proc.wait(30)
        self.stderr.close()


def test_java_members_join_and_leave(shared_broker, topic):
    bootstrap = shared_broker.bootstrap
    java = JavaGroup(bootstrap, topic + "-group")
    produced: list[bytes] = []
    sizes = []
    try:
        java.send(f"add {topic}")
        java.send(f"add {topic}")
        sizes.append(java.send(f"settle {PARTITIONS}")["sizes"])
        produced += produce(bootstrap, topic, 1)
        assert java.send(f"consume {len(produced)}") == {"consumed": len(produced)}

        java.send(f"add {topic}")  # a member joins
        sizes.append(java.send(f"settle {PARTITIONS}")["sizes"])
        produced += produce(bootstrap, topic, 2)
        assert java.send(f"consume {len(produced)}") == {"consumed": len(produced)}

        java.send("remove")  # a member leaves: the others take over its partitions
        sizes.append(java.send(f"settle {PARTITIONS}")["sizes"])
        produced += produce(bootstrap, topic, 3)
        assert java.send(f"consume {len(produced)}") == {"consumed": len(produced)}
        consumed = [v.encode() for v in java.send("values")["values"]]
    finally:
        java.close()
    assert Counter(consumed) == Counter(produced)  # exactly once
    assert sizes == [[3, 3], [2, 2, 2], [3, 3]]
    assert committed_offsets(bootstrap, topic + "-group", topic) == {
        p: 3 * PER_PARTITION for p in range(PARTITIONS)}


def test_java_pattern_subscription_picks_up_new_topic(shared_broker):
    bootstrap = shared_broker.bootstrap
    make_topic(shared_broker, "kip848jrx_a", 2)
    make_topic(shared_broker, "other848jrx", 2)  # does not match
    expected = produce(bootstrap, "kip848jrx_a", 1, partitions=2)
    produce(bootstrap, "other848jrx", 1, partitions=2)
    java = JavaGroup(bootstrap, "kip848jrx-group")
    try:
        java.send("add-pattern kip848jrx_.*")
        assert java.send(f"consume {len(expected)}") == {"consumed": len(expected)}
        make_topic(shared_broker, "kip848jrx_b", 3)  # created after the member joined
        expected += produce(bootstrap, "kip848jrx_b", 2, partitions=3)
        assert java.send(f"consume {len(expected)}") == {"consumed": len(expected)}
        assigned = java.send("assigned")["assigned"]
        consumed = [v.encode() for v in java.send("values")["values"]]
    finally:
        java.close()
    assert Counter(consumed) == Counter(expected)
    assert assigned == ["kip848jrx_a-0", "kip848jrx_a-1", "kip848jrx_b-0", "kip848jrx_b-1",
                        "kip848jrx_b-2"]


def test_confluent_regex_subscription_picks_up_new_topic(shared_broker):
    from confluent_kafka import Consumer

    bootstrap = shared_broker.bootstrap
    make_topic(shared_broker, "kip848rx_a", 2)
    make_topic(shared_broker, "other848rx", 2)  # does not match
    expected = produce(bootstrap, "kip848rx_a", 1, partitions=2)
    produce(bootstrap, "other848rx", 1, partitions=2)
    consumer = Consumer(consumer_config(bootstrap, "kip848rx-group"))
    consumer.subscribe(["^kip848rx_.*"])
    got: list[bytes] = []

    def consume_until(n: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())

    try:
        consume_until(len(expected))
        make_topic(shared_broker, "kip848rx_b", 3)  # created after the member joined
        expected += produce(bootstrap, "kip848rx_b", 2, partitions=3)
        consume_until(len(expected))
        assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
    finally:
        consumer.close()
    assert Counter(got) == Counter(expected)
    assert assigned == {("kip848rx_a", 0), ("kip848rx_a", 1), ("kip848rx_b", 0),
                        ("kip848rx_b", 1), ("kip848rx_b", 2)}


# -- exactly-once copier with a KIP-848 consumer --------------------------------------------


def seed_input(bootstrap: str, topic: str, count: int) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    values = [f"in-{i}".encode() for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(30) == 0
    return values


def read_committed(bootstrap: str, topic: str, partitions: int = 2) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, at_eof = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    at_eof.add(msg.partition())
                    continue
                raise AssertionError(msg.error())
            at_eof.discard(msg.partition())
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def run_copier(bootstrap: str, input_: str, output: str, group: str, seed: int,
               on_transaction=None, consumer_extra: dict | None = None,
               producer_extra: dict | None = None) -> int:
    """Copy ``input_`` to ``output`` ("in-" -> "out-") in transactions with the consumer's
    offsets, aborting about one in three; returns the number of aborts.
    ``on_transaction(n, offsets)`` runs before the n-th commit, with the offsets that
    transaction sent."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    rng = random.Random(seed)
    consumer = Consumer(consumer_config(bootstrap, group, **{"isolation.level": "read_committed"},
                                        **(consumer_extra or {})))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": group,
                         "linger.ms": 1, **(producer_extra or {})})
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([input_])
    aborts = transactions = 0
    deadline = time.monotonic() + 2 * TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(7, 0.5) if not m.error()]
            if not batch:
                assigned = consumer.assignment()
                committed = consumer.committed(assigned, TIMEOUT_S)
                ends = [consumer.get_watermark_offsets(tp, TIMEOUT_S)[1] for tp in assigned]
                if len(assigned) == 2 and [tp.offset for tp in committed] == ends:
                    break
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(output, value=m.value().replace(b"in-", b"out-", 1),
                                 partition=m.partition())
            offsets = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(),
                                                 TIMEOUT_S)
            transactions += 1
            abort = rng.random() < 1 / 3
            if not abort and on_transaction is not None:
                on_transaction(transactions, offsets)
            for _attempt in range(5):
                try:
                    if abort:
                        producer.abort_transaction(TIMEOUT_S)
                    else:
                        producer.commit_transaction(TIMEOUT_S)
                    break
                except KafkaException as e:
                    if e.args[0].retriable():
                        continue  # the broker is coming back: the same call again
                    if not e.args[0].txn_requires_abort():
                        raise
                    abort = True
            if abort:
                aborts += 1
                for tp in consumer.committed(consumer.assignment(), TIMEOUT_S):
                    consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
    finally:
        consumer.close()
    return aborts


def assert_exactly_once(bootstrap: str, values: list[bytes], input_: str, output: str,
                        group: str) -> None:
    out = read_committed(bootstrap, output)
    assert Counter(out) == Counter(v.replace(b"in-", b"out-", 1) for v in values)
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(input_, p) for p in range(2)]
        committed = [tp.offset for tp in consumer.committed(tps, TIMEOUT_S)]
        ends = [consumer.get_watermark_offsets(tp, TIMEOUT_S)[1] for tp in tps]
    finally:
        consumer.close()
    assert committed == ends and sum(ends) == len(values)


def test_confluent_transactional_copier(shared_broker):
    bootstrap = shared_broker.bootstrap
    make_topic(shared_broker, "kip848-ctp-in", 2)
    make_topic(shared_broker, "kip848-ctp-out", 2)
    values = seed_input(bootstrap, "kip848-ctp-in", 60)
    aborts = run_copier(bootstrap, "kip848-ctp-in", "kip848-ctp-out", "kip848-ctp", seed=3)
    assert aborts >= 1
    assert_exactly_once(bootstrap, values, "kip848-ctp-in", "kip848-ctp-out", "kip848-ctp")


def test_java_transactional_copier(shared_broker):
    """Java kafka-clients 3.9.1 with group.protocol=consumer (a preview in 3.9)."""
    require_java()
    bootstrap = shared_broker.bootstrap
    make_topic(shared_broker, "kip848-java-in", 2)
    make_topic(shared_broker, "kip848-java-out", 2)
    values = seed_input(bootstrap, "kip848-java-in", 60)
    events = run_java("copier", "--bootstrap", bootstrap, "--input", "kip848-java-in",
                      "--output", "kip848-java-out", "--group", "kip848-java",
                      "--transactional-id", "kip848-java", "--process", "java", "--seed", "7",
                      "--txn-size", "7", "--abort-ratio", "0.33", "--until-end",
                      "--timeout-ms", "30000", "--prop", "group.protocol=consumer",
                      timeout=TIMEOUT_S)
    assert sum(1 for e in events if e["f"] == "abort" and e["type"] == "ok") >= 1
    assert sum(1 for e in events if e["f"] == "commit" and e["type"] == "ok") >= 1
    assert Counter(read_committed(bootstrap, "kip848-java-out")) == Counter(values)
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip848-java"})
    try:
        tps = [TopicPartition("kip848-java-in", p) for p in range(2)]
        committed = [tp.offset for tp in consumer.committed(tps, TIMEOUT_S)]
    finally:
        consumer.close()
    assert sum(committed) == 60


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_confluent_transactional_copier_across_sigkill(tmp_path, protocol):
    """The copier above against a broker process that is SIGKILLed twice, each time inside
    a transaction whose offsets were already sent (AddOffsetsToTxn and TxnOffsetCommit
    done, commit not yet asked), and restarted on the same data directory and port: in
    the first transaction to commit, and in the one whose offsets reach the end of the
    input (no later commit can cover its offsets). The pending offsets and the output
    records must commit together once the broker is back (or be aborted and copied again),
    never one without the other. The KIP-848 member goes on at its member epoch after the
    restart. The classic group runs the same scenario.

    The producer sets ``metadata.recovery.strategy=none``: with librdkafka's default
    (rebootstrap) a client that sees its only broker down decommissions the broker handle
    but keeps it in its coordinator cache, so the next send_offsets_to_transaction after
    the restart waits for that dead handle forever (AddOffsetsToTxn answered, TxnOffsetCommit
    never sent; librdkafka issue #5511, open as of 2.16, for both group protocols and
    against Kafka alike)."""
    data = tmp_path / "data"
    overrides = {**OVERRIDES, "group.initial.rebalance.delay.ms": "0"}  # the classic group
    broker = BrokerProcess(data, overrides).start()
    kills: list[int] = []  # the transactions in which the broker died
    # the latest offset sent by partition (one the consumer has read nothing from since a
    # seek has no position, and librdkafka sends no offset for it)
    sent: dict[int, int] = {}

    def sigkill_and_restart(transaction: int, offsets) -> None:
        nonlocal broker
        sent.update((tp.partition, tp.offset) for tp in offsets if tp.offset >= 0)
        at_end = sum(sent.values()) == len(values)
        if not kills or (at_end and kills[-1] != transaction and len(kills) < 2):
            port = broker.port
            broker.kill()  # SIGKILL to the broker's own pid
            broker = BrokerProcess(data, overrides, port=port).start()
            kills.append(transaction)

    try:
        bootstrap = broker.bootstrap
        with KafkaWire.connect(bootstrap) as wire:
            create_topic(wire, "crash-in", 2)
            create_topic(wire, "crash-out", 2)
        values = seed_input(bootstrap, "crash-in", 60)
        extra = {} if protocol == "consumer" else {"group.protocol": "classic"}
        run_copier(bootstrap, "crash-in", "crash-out", "crash-copier", seed=5,
                   on_transaction=sigkill_and_restart, consumer_extra=extra,
                   producer_extra={"metadata.recovery.strategy": "none"})
        assert len(kills) == 2
        assert_exactly_once(bootstrap, values, "crash-in", "crash-out", "crash-copier")
    finally:
        broker.stop()


# -- state across a restart, over the wire ---------------------------------------------------


def _heartbeat(wire, member_id: str, epoch: int, owned=None, names=None):
    from tests.kafka_wire import message

    partitions = None if owned is None else [
        message(68, "request", "TopicPartitions", topic_id=t, partitions=sorted(ps))
        for t, ps in owned.items()]
    return wire.request(68, 1, message(
        68, "request", group_id="kip848-restart", member_id=member_id, member_epoch=epoch,
        rebalance_timeout_ms=30000 if epoch == 0 else -1, subscribed_topic_names=names,
        topic_partitions=partitions))


def _describe(wire):
    from tests.kafka_wire import message

    return wire.request(69, 1, message(69, "request", group_ids=["kip848-restart"])).groups[0]


def _commit(wire, epoch: int) -> int:
    from tests.kafka_wire import message

    req = message(8, "request", group_id="kip848-restart", generation_id_or_member_epoch=epoch,
                  member_id="m1", topics=[message(8, "request", "OffsetCommitRequestTopic",
                                                  name="kip848-rs", partitions=[message(
                                                      8, "request",
                                                      "OffsetCommitRequestPartition",
                                                      partition_index=0, committed_offset=7)])])
    return wire.request(8, 9, req).topics[0].partitions[0].error_code


def test_consumer_group_state_survives_restart(tmp_path):
    from semel.protocol.errors import Error
    from tests.kafka_wire import message

    with BrokerThread(tmp_path, OVERRIDES) as b:
        make_topic(b, "kip848-rs", 4)
        with KafkaWire.connect(b.bootstrap) as wire:
            joined = _heartbeat(wire, "m1", 0, {}, ["kip848-rs"])
            assert (joined.error_code, joined.member_epoch) == (Error.NONE, 1)
            owned = {tp.topic_id: set(tp.partitions)
                     for tp in joined.assignment.topic_partitions}
            assert [len(ps) for ps in owned.values()] == [4]
            assert _commit(wire, 1) == Error.NONE
            before = _describe(wire)
            assert (before.group_state, before.group_epoch, before.assignment_epoch) == \
                ("Stable", 1, 1)
            # DescribeGroups does not describe consumer groups (v6: an error, as Kafka)
            dg = wire.request(15, 6, message(15, "request", groups=["kip848-restart"]))
            assert dg.groups[0].error_code == Error.GROUP_ID_NOT_FOUND
            listed = wire.request(16, 5, message(16, "request", types_filter=["consumer"]))
            assert ("kip848-restart", "consumer", "Stable") in {
                (g.group_id, g.group_type, g.group_state) for g in listed.groups}
        b.restart()
        b.call(b.broker.group_coordinator.wait_loaded())
        with KafkaWire.connect(b.bootstrap) as wire:
            after = _describe(wire)
            assert after == before
            # the member goes on at its epoch; commits are still checked against it
            again = _heartbeat(wire, "m1", 1, owned)
            assert (again.error_code, again.member_epoch) == (Error.NONE, 1)
            assert _commit(wire, 0) == Error.STALE_MEMBER_EPOCH
            fetched = wire.request(9, 9, message(9, "request", groups=[message(
                9, "request", "OffsetFetchRequestGroup", group_id="kip848-restart",
                member_id="m1", member_epoch=1, topics=None)]))
            assert fetched.groups[0].topics[0].partitions[0].committed_offset == 7
            # the session timeout runs on the broker's clock: the member is fenced
            b.advance(ms=45000)
            gone = _describe(wire)
            assert (gone.group_state, gone.group_epoch, gone.members) == ("Empty", 2, [])
