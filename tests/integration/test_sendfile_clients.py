"""Real clients consume through the zero-copy fetch path (os.sendfile from the segment files):
confluent-kafka (librdkafka), kafka-python, aiokafka and Java kafka-clients 3.9.1 read a
16 MB partition of large, medium and small batches and get every record - offset, key,
value - exactly as produced; then a partition of transactions, some aborted, read_committed,
gets exactly the committed values. One in-process broker (log.flush.mode=none) serves the
module; every os.sendfile call of the process is counted, so the tests also show the path
was taken."""

from __future__ import annotations

import asyncio
import os
import random
import time

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import record_checksum, run_java
from tests.kafka_wire import PRODUCE, KafkaWire, make_topic, produce_request, records_batch

TIMEOUT_S = 60
CLIENTS = ["confluent", "kafka-python", "aiokafka", "java"]
Record = tuple[int, bytes, bytes]  # offset, key, value


@pytest.fixture(scope="module")
def sendfile_bytes():
    """Bytes sent with os.sendfile in this process so far (a one-element list)."""
    sent = [0]
    real = os.sendfile

    def counting(out_fd, in_fd, offset, count):
        n = real(out_fd, in_fd, offset, count)
        sent[0] += n
        return n

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "sendfile", counting)
        yield sent


@pytest.fixture(scope="module")
def broker(tmp_path_factory, sendfile_bytes):
    with BrokerThread(tmp_path_factory.mktemp("sendfile")) as b:
        yield b


@pytest.fixture(scope="module")
def big_topic(broker) -> tuple[str, list[Record]]:
    """Batches of 15 x 60 KB, 40 x 20 KB and 200 x 500 B values in turn, keyed."""
    make_topic(broker, "big")
    rng = random.Random(3)
    shapes = ((15, 60_000), (40, 20_000), (200, 500))
    expected: list[Record] = []
    with KafkaWire.connect(broker.bootstrap) as wire:
        for i in range(24):
            count, size = shapes[i % 3]
            keys = [f"k-{len(expected) + j}".encode() for j in range(count)]
            values = [rng.randbytes(size) for _ in range(count)]
            batch = records_batch(values, keys=keys)
            resp = wire.request(PRODUCE, 9, produce_request("big", 0, batch))
            assert resp.responses[0].partition_responses[0].error_code == 0
            expected += [(len(expected) + j, k, v) for j, (k, v) in enumerate(zip(keys, values))]
    return "big", expected


def _deadline() -> float:
    return time.monotonic() + TIMEOUT_S


def confluent_consume(bootstrap: str, topic: str, n: int,
                      isolation: str = "read_uncommitted") -> list[Record]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "semel-assign-only",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Record] = []
        deadline = _deadline()
        while len(got) < n and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def kafka_python_consume(bootstrap: str, topic: str, n: int,
                         isolation: str = "read_uncommitted") -> list[Record]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, isolation_level=isolation)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[Record] = []
        deadline = _deadline()
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


def aiokafka_consume(bootstrap: str, topic: str, n: int,
                     isolation: str = "read_uncommitted") -> list[Record]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Record]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, isolation_level=isolation)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got: list[Record] = []
            deadline = _deadline()
            while len(got) < n and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend((r.offset, r.key, r.value) for r in records)
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


def java_summary(bootstrap: str, topic: str, n: int,
                 isolation: str = "read_uncommitted") -> dict:
    """The Java consumer's summary: count, checksum (of key and value) and offsets."""
    results = run_java("consume", "--bootstrap", bootstrap, "--topic", topic, "--partition", 0,
                       "--count", n, "--from-beginning", "--summary-only",
                       "--isolation", isolation, "--timeout-ms", TIMEOUT_S * 1000,
                       timeout=TIMEOUT_S * 2)
    return next(r for r in results if r["type"] == "consume_summary")


PYTHON_CLIENTS = {"confluent": confluent_consume, "kafka-python": kafka_python_consume,
                  "aiokafka": aiokafka_consume}


@pytest.mark.parametrize("client", CLIENTS)
def test_clients_read_a_large_partition_through_sendfile(broker, big_topic, sendfile_bytes,
                                                         client):
    topic, expected = big_topic
    before = sendfile_bytes[0]
    if client == "java":
        summary = java_summary(broker.bootstrap, topic, len(expected))
        assert summary["count"] == len(expected)
        assert summary["checksum"] == record_checksum((k, v) for _, k, v in expected)
        assert summary["partitions"]["0"] == {"count": len(expected), "first_offset": 0,
                                              "last_offset": len(expected) - 1}
    else:
        got = PYTHON_CLIENTS[client](broker.bootstrap, topic, len(expected))
        assert got == expected
    total = sum(len(v) for _, _, v in expected)
    assert sendfile_bytes[0] - before > total // 2  # most of it left by sendfile


@pytest.fixture(scope="module")
def txn_topic(broker) -> tuple[str, list[bytes]]:
    """Six transactions of 60 x 5 KB values; the second and the fifth aborted (after their
    records were written). The committed values."""
    from confluent_kafka import Producer

    make_topic(broker, "txn")
    rng = random.Random(4)
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": "sendfile-clients", "linger.ms": 5})
    producer.init_transactions(TIMEOUT_S)
    committed: list[bytes] = []
    for i in range(6):
        producer.begin_transaction()
        values = [rng.randbytes(5_000) for _ in range(60)]
        for value in values:
            producer.produce("txn", value, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        if i % 3 == 1:
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
            committed += values
    deadline = _deadline()
    while time.monotonic() < deadline:  # the last marker is written after the commit returns
        state = broker.partition("txn", 0)
        if state.last_stable_offset == state.log_end_offset:
            break
        time.sleep(0.05)
    return "txn", committed


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_through_sendfile_leaves_out_aborted_transactions(broker, txn_topic,
                                                                          sendfile_bytes, client):
    topic, committed = txn_topic
    before = sendfile_bytes[0]
    if client == "java":
        summary = java_summary(broker.bootstrap, topic, len(committed), "read_committed")
        assert summary["count"] == len(committed)
        assert summary["checksum"] == record_checksum((None, v) for v in committed)
    else:
        got = PYTHON_CLIENTS[client](broker.bootstrap, topic, len(committed), "read_committed")
        assert [v for _, _, v in got] == committed
    assert sendfile_bytes[0] > before
