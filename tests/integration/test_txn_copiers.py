"""Consume-transform-produce with each client, exactly once: a copier reads an input topic
read_committed in a consumer group, writes every record transformed ("in-<i>" -> "out-<i>")
to an output topic inside a transaction together with the group's next input offsets
(sendOffsetsToTransaction), and aborts about one transaction in three at random, seeking
back to the group's committed offsets after each abort. When the input is exhausted the
output under read_committed must hold every input value exactly once and the group's
committed offsets must equal the input's end offsets.

Copiers: Java kafka-clients 3.9.1 (SemelClient copier --until-end --out-prefix, consumer
group metadata), confluent-kafka (group metadata), kafka-python (group metadata), aiokafka (group id only).
Each copier runs at least COUNT / 7 transactions; the seeds are chosen so that one of the
first two is aborted.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import require_java, run_java
from tests.kafka_wire import make_topic

TIMEOUT_S = 60
COUNT = 60
PARTITIONS = 2
ABORT_RATIO = 1 / 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    overrides = {"transaction.state.log.num.partitions": "4",
                 "offsets.topic.num.partitions": "4",
                 "group.initial.rebalance.delay.ms": "0"}
    with BrokerThread(tmp_path_factory.mktemp("eos-copiers"), overrides) as b:
        yield b


def transform(value: bytes) -> bytes:
    return value.replace(b"in-", b"out-", 1)


def seed_input(bootstrap: str, topic: str) -> list[bytes]:
    """COUNT distinct values spread over the input's partitions (plain producer)."""
    from confluent_kafka import Producer

    values = [b"in-%d" % i for i in range(COUNT)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0
    return values


def make_topics(broker, name: str) -> tuple[str, str]:
    make_topic(broker, f"{name}-in", PARTITIONS)
    make_topic(broker, f"{name}-out", PARTITIONS)
    return f"{name}-in", f"{name}-out"


def read_committed_output(bootstrap: str, topic: str) -> list[bytes]:
    """Everything in `topic` under read_committed, from the start to the LSO of each partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, at_eof = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_eof) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                if message.error().code() == -191:  # _PARTITION_EOF
                    at_eof.add(message.partition())
                    continue
                raise AssertionError(message.error())
            at_eof.discard(message.partition())
            got.append(message.value())
    finally:
        consumer.close()
    return got


def group_offsets(bootstrap: str, group: str, topic: str) -> tuple[list[int], list[int]]:
    """(committed offsets of `group`, end offsets) per partition of `topic`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = [tp.offset for tp in consumer.committed(tps, TIMEOUT_S)]
        ends = [consumer.get_watermark_offsets(tp, TIMEOUT_S)[1] for tp in tps]
    finally:
        consumer.close()
    return committed, ends


def assert_exactly_once(broker, values: list[bytes], output: str, group: str, input_: str):
    out = read_committed_output(broker.bootstrap, output)
    assert Counter(out) == Counter(transform(v) for v in values)
    committed, ends = group_offsets(broker.bootstrap, group, input_)
    assert committed == ends and sum(ends) == COUNT


# -- Java -----------------------------------------------------------------------------------------


def test_java_copier(broker):
    require_java()
    input_, output = make_topics(broker, "ctp-java")
    values = seed_input(broker.bootstrap, input_)
    events = run_java("copier", "--bootstrap", broker.bootstrap, "--input", input_,
                      "--output", output, "--group", "ctp-java", "--transactional-id",
                      "ctp-java", "--process", "java", "--seed", "7", "--txn-size", "7",
                      "--abort-ratio", str(ABORT_RATIO), "--until-end", "--out-prefix", "x",
                      "--timeout-ms", "30000",
                      timeout=TIMEOUT_S)
    aborts = sum(1 for e in events if e["f"] == "abort" and e["type"] == "ok")
    commits = sum(1 for e in events if e["f"] == "commit" and e["type"] == "ok")
    assert aborts >= 1 and commits >= 1
    out = read_committed_output(broker.bootstrap, output)
    assert Counter(out) == Counter(b"x" + v for v in values)
    committed, ends = group_offsets(broker.bootstrap, "ctp-java", input_)
    assert committed == ends and sum(ends) == COUNT


# -- confluent-kafka ------------------------------------------------------------------------------


def test_confluent_kafka_copier(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    input_, output = make_topics(broker, "ctp-ck")
    values = seed_input(broker.bootstrap, input_)
    rng = random.Random(3)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp-ck",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "ctp-ck",
                         "linger.ms": 1})
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([input_])
    aborts = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(7, 0.5) if not m.error()]
            if not batch:
                # librdkafka keeps no position for a partition sought to its end, so the
                # group's committed offsets tell when everything is copied
                assigned = consumer.assignment()
                committed = consumer.committed(assigned, TIMEOUT_S)
                ends = [consumer.get_watermark_offsets(tp, TIMEOUT_S)[1] for tp in assigned]
                if assigned and [tp.offset for tp in committed] == ends:
                    break
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(output, value=transform(m.value()), partition=m.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), TIMEOUT_S)
            if rng.random() < ABORT_RATIO:
                producer.abort_transaction(TIMEOUT_S)
                aborts += 1
                for tp in consumer.committed(consumer.assignment(), TIMEOUT_S):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 max(tp.offset, 0)))
            else:
                producer.commit_transaction(TIMEOUT_S)
    finally:
        consumer.close()
    assert aborts >= 1
    assert_exactly_once(broker, values, output, "ctp-ck", input_)


# -- kafka-python ---------------------------------------------------------------------------------


def test_kafka_python_copier(broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata

    input_, output = make_topics(broker, "ctp-kp")
    values = seed_input(broker.bootstrap, input_)
    rng = random.Random(13)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="ctp-kp",
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="ctp-kp",
                             linger_ms=1)
    producer.init_transactions()
    consumer.subscribe([input_])
    aborts = 0
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=500, max_records=7)
            if not polled:
                assigned = consumer.assignment()
                if assigned:
                    ends = consumer.end_offsets(list(assigned))
                    if all(consumer.position(tp) == ends[tp] for tp in assigned):
                        break
                continue
            producer.begin_transaction()
            for tp, records in polled.items():
                for r in records:
                    producer.send(output, value=transform(r.value), partition=tp.partition)
            offsets = {tp: OffsetAndMetadata(records[-1].offset + 1, "", -1)
                       for tp, records in polled.items()}
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            if rng.random() < ABORT_RATIO:
                producer.abort_transaction()
                aborts += 1
                for tp in consumer.assignment():
                    committed = consumer.committed(tp)
                    consumer.seek(tp, committed if committed is not None else 0)
            else:
                producer.commit_transaction()
    finally:
        consumer.close()
        producer.close()
    assert aborts >= 1
    assert_exactly_once(broker, values, output, "ctp-kp", input_)


# -- aiokafka -------------------------------------------------------------------------------------


def test_aiokafka_copier(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import OffsetAndMetadata

    input_, output = make_topics(broker, "ctp-aio")
    values = seed_input(broker.bootstrap, input_)
    rng = random.Random(7)

    async def run() -> int:
        consumer = AIOKafkaConsumer(input_, bootstrap_servers=broker.bootstrap,
                                    group_id="ctp-aio", isolation_level="read_committed",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap,
                                    transactional_id="ctp-aio")
        await consumer.start()
        await producer.start()
        aborts = 0
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                polled = await consumer.getmany(timeout_ms=500, max_records=7)
                polled = {tp: rs for tp, rs in polled.items() if rs}
                if not polled:
                    assigned = consumer.assignment()
                    if assigned:
                        ends = await consumer.end_offsets(list(assigned))
                        positions = [await consumer.position(tp) for tp in assigned]
                        if positions == [ends[tp] for tp in assigned]:
                            break
                    continue
                await producer.begin_transaction()
                for tp, records in polled.items():
                    for r in records:
                        await producer.send(output, transform(r.value), partition=tp.partition)
                offsets = {tp: OffsetAndMetadata(records[-1].offset + 1, "")
                           for tp, records in polled.items()}
                await producer.send_offsets_to_transaction(offsets, "ctp-aio")
                if rng.random() < ABORT_RATIO:
                    await producer.abort_transaction()
                    aborts += 1
                    for tp in consumer.assignment():
                        committed = await consumer.committed(tp)
                        consumer.seek(tp, committed if committed is not None else 0)
                else:
                    await producer.commit_transaction()
        finally:
            await producer.stop()
            await consumer.stop()
        return aborts

    assert asyncio.run(run()) >= 1
    assert_exactly_once(broker, values, output, "ctp-aio", input_)
