"""Real clients produce and consume 10,000 records through the broker, every codec.

Each (client, codec) pair produces to its own one-partition topic with acks=all and reads
everything back with assign() (no consumer group: groups come later), checking every key
and value and their order (offsets 0..N-1). Clients: confluent-kafka (librdkafka),
kafka-python, aiokafka, kcat and the Java kafka-clients 3.9.1 (tests/javaclient.py).
One in-process broker (log.flush.mode=none) serves the module.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time

import pytest

from semel.broker.fetch_session import sessions_of
from semel.broker.testing import BrokerThread
from tests.javaclient import produced_key, produced_value, run_java
from tests.kafka_wire import make_topic

N = 10_000
KEY_PREFIX = "k"
VALUE_SIZE = 64
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TIMEOUT_S = 60
FIND_COORDINATOR = 10


def expected() -> list[tuple[int, bytes, bytes]]:
    return [(i, produced_key(i, KEY_PREFIX).encode(),
             produced_value(i, size=VALUE_SIZE).encode()) for i in range(N)]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("clients")) as b:
        yield b


@pytest.fixture
def topic(shared_broker, request) -> str:
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(shared_broker, name)
    return name


# -- confluent-kafka (librdkafka) -------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, codec: str) -> None:
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": codec, "enable.idempotence": False})
    for offset, key, value in expected():
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=0,
                                 on_delivery=lambda err, _msg: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []


def confluent_consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "semel-assign-only",
                         "enable.auto.commit": False, "enable.auto.offset.store": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = []
        deadline = _deadline()
        while len(got) < N and _before(deadline):
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append((msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


# -- kafka-python -----------------------------------------------------------------------------


def kafka_python_produce(bootstrap: str, topic: str, codec: str) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             enable_idempotence=False,
                             compression_type=None if codec == "none" else codec)
    try:
        futures = [producer.send(topic, value=value, key=key, partition=0)
                   for _, key, value in expected()]
        producer.flush(TIMEOUT_S)
        assert [f.get(TIMEOUT_S).offset for f in futures] == list(range(N))
    finally:
        producer.close(TIMEOUT_S)


def kafka_python_consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got = []
        deadline = _deadline()
        while len(got) < N and _before(deadline):
            for records in consumer.poll(timeout_ms=1000).values():
                got.extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


# -- aiokafka ---------------------------------------------------------------------------------


def aiokafka_produce(bootstrap: str, topic: str, codec: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                    compression_type=None if codec == "none" else codec)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=value, key=key, partition=0)
                       for _, key, value in expected()]
            metadata = await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
            assert [m.offset for m in metadata] == list(range(N))
        finally:
            await producer.stop()

    asyncio.run(run())


def aiokafka_consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[tuple[int, bytes, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            got = []
            deadline = _deadline()
            while len(got) < N and _before(deadline):
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    got.extend((r.offset, r.key, r.value) for r in records)
            return got
        finally:
            await consumer.stop()

    return asyncio.run(run())


# -- kcat -------------------------------------------------------------------------------------


def _kcat() -> str:
    path = shutil.which("kcat")
    if path is None:
        pytest.skip("kcat is not installed")
    return path


def kcat_produce(bootstrap: str, topic: str, codec: str) -> None:
    lines = "".join(f"{key.decode()}:{value.decode()}\n" for _, key, value in expected())
    subprocess.run([_kcat(), "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec,
                    "-X", "acks=all"],
                   input=lines.encode(), check=True, timeout=TIMEOUT_S, capture_output=True)


def kcat_consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    done = subprocess.run([_kcat(), "-b", bootstrap, "-C", "-t", topic, "-p", "0",
                           "-o", "beginning", "-e", "-q", "-f", "%o:%k:%s\n"],
                          check=True, timeout=TIMEOUT_S, capture_output=True)
    got = []
    for line in done.stdout.splitlines():
        offset, key, value = line.split(b":", 2)
        got.append((int(offset), key, value))
    return got


# -- Java kafka-clients -----------------------------------------------------------------------


def java_produce(bootstrap: str, topic: str, codec: str) -> None:
    results = run_java("produce", "--bootstrap", bootstrap, "--topic", topic, "--count", N,
                       "--partition", 0, "--compression", codec, "--acks", "all",
                       "--key-prefix", KEY_PREFIX, "--value-size", VALUE_SIZE,
                       "--idempotent", "false", timeout=TIMEOUT_S * 2)
    summary = results[-1]
    assert (summary["acked"], summary["errors"]) == (N, 0)
    assert summary["partitions"]["0"] == {"count": N, "first_offset": 0, "last_offset": N - 1}


def java_consume(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    results = run_java("consume", "--bootstrap", bootstrap, "--topic", topic, "--partition", 0,
                       "--count", N, "--from-beginning", "--timeout-ms", TIMEOUT_S * 1000,
                       timeout=TIMEOUT_S * 2)
    return [(r["offset"], r["key"].encode(), r["value"].encode())
            for r in results if r["type"] == "record"]


CLIENTS = {
    "confluent": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "kcat": (kcat_produce, kcat_consume),
    "java": (java_produce, java_consume),
}


def _deadline() -> float:
    return time.monotonic() + TIMEOUT_S


def _before(deadline: float) -> bool:
    return time.monotonic() < deadline


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_produce_and_consume_10k_records(shared_broker, topic, client, codec):
    produce, consume = CLIENTS[client]
    produce(shared_broker.bootstrap, topic, codec)
    got = consume(shared_broker.bootstrap, topic)
    assert len(got) == N
    assert got == expected()
    # the batches on disk carry the client's codec
    plog = shared_broker.broker.log_manager.get_partition(topic, 0)
    first = next(plog.iter_batches_from(0))[0]
    assert first.compression == expected_codec(shared_broker, client, codec)


def expected_codec(shared_broker, client: str, codec: str) -> int:
    """The codec the client really sends. librdkafka before 2.11.1 drops gzip, snappy and
    lz4 unless the broker serves some Produce version in [0, 0] (Kafka 4, like this broker,
    starts at v3, KIP-896); every librdkafka enables lz4 only when the broker advertises
    FindCoordinator (its marker for Kafka >= 0.8.2), which arrives with consumer groups."""
    if client not in ("confluent", "kcat"):
        return CODECS.index(codec)
    version = librdkafka_version(client)
    if codec in ("gzip", "snappy", "lz4") and version < (2, 11, 1):
        return 0
    if codec == "lz4" and FIND_COORDINATOR not in shared_broker.broker.dispatcher.supported:
        return 0
    return CODECS.index(codec)


def librdkafka_version(client: str) -> tuple[int, ...]:
    if client == "confluent":
        import confluent_kafka

        text = confluent_kafka.libversion()[0]
    else:
        text = subprocess.run([_kcat(), "-V"], check=True, capture_output=True,
                              text=True).stdout.split("librdkafka", 1)[1]
    return tuple(int(x) for x in re.search(r"(\d+)\.(\d+)\.(\d+)", text).groups())


def test_java_consumer_over_many_partitions_uses_fetch_sessions(shared_broker):
    """The Java consumer fetches through an incremental fetch session (KIP-227): 8
    partitions, keyed records spread by the default partitioner, all read back."""
    make_topic(shared_broker, "java-sessions", partitions=8)
    bootstrap = shared_broker.bootstrap
    produced = run_java("produce", "--bootstrap", bootstrap, "--topic", "java-sessions",
                        "--count", N, "--key-prefix", KEY_PREFIX, "--idempotent", "false",
                        timeout=TIMEOUT_S * 2)[-1]
    assert produced["acked"] == N
    cache = sessions_of(shared_broker.broker)
    created, closed = cache.created, len(cache)
    records = [r for r in run_java("consume", "--bootstrap", bootstrap, "--topic",
                                   "java-sessions", "--count", N, "--from-beginning",
                                   "--timeout-ms", TIMEOUT_S * 1000, timeout=TIMEOUT_S * 2)
               if r["type"] == "record"]
    assert cache.created > created  # it opened a session
    assert len(cache) == closed  # and closed it when it was done (epoch -1)
    assert sorted(int(r["key"].split("-")[1]) for r in records) == list(range(N))
    by_partition: dict[int, list[int]] = {}
    for r in records:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
    assert len(by_partition) == 8
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
    assert {p: s["count"] for p, s in produced["partitions"].items()} == {
        str(p): len(o) for p, o in by_partition.items()}
