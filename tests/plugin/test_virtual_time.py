"""Virtual time (semel_broker.advance) with real clients: what the broker does on its clock
happens when the test moves it, without sleeping."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap: str, topic: str, partitions: int = 1, **config) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=config)])
    futures[topic].result(10)


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.subscribe([topic])
    values = []
    try:
        while True:
            msg = consumer.poll(10)
            assert msg is not None, "no partition EOF"
            if msg.error():
                break
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def test_a_hung_transaction_expires_in_milliseconds(semel_broker):
    """A producer begins a transaction and goes silent: after its transaction.timeout.ms
    of broker time the coordinator aborts it; the LSO moves past it, read_committed readers
    see nothing of it, and the producer is fenced."""
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "hung")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "hung-1",
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(5):
        producer.produce("hung", value=b"v%d" % i)
    producer.flush(10)
    part = semel_broker.partition("hung", 0)
    assert (part.last_stable_offset, part.high_watermark) == (0, 5)
    assert semel_broker.transaction("hung-1").state == "Ongoing"

    semel_broker.advance(59)
    assert semel_broker.transaction("hung-1").state == "Ongoing"
    semel_broker.advance(2)

    txn = semel_broker.transaction("hung-1")
    assert txn.state == "CompleteAbort" and txn.partitions == ()
    part = semel_broker.partition("hung", 0)
    assert part.last_stable_offset == part.high_watermark == 6  # 5 records + the ABORT marker
    assert read_committed(bootstrap, "hung") == []
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(10)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].txn_requires_abort()


def test_a_silent_consumer_leaves_its_group_after_the_session_timeout(semel_broker):
    """An aiokafka consumer in a group stops heartbeating (its loop is busy elsewhere); after
    session.timeout.ms of broker time the coordinator removes it."""
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "sessions", 2)

    async def run() -> tuple:
        consumer = AIOKafkaConsumer("sessions", bootstrap_servers=bootstrap, group_id="g-s",
                                    session_timeout_ms=10_000, heartbeat_interval_ms=3_000)
        await consumer.start()
        try:
            for _ in range(100):
                if consumer.assignment():
                    break
                await consumer.getmany(timeout_ms=100)
            joined = semel_broker.group("g-s")
            # the loop (and with it the consumer's heartbeats) is held while time jumps
            semel_broker.advance(9)
            still = semel_broker.group("g-s")
            semel_broker.advance(2)
            gone = semel_broker.group("g-s")
        finally:
            await consumer.stop()
        return joined, still, gone

    joined, still, gone = asyncio.run(run())
    assert joined.state == "Stable" and len(joined.members) == 1
    assert still.state == "Stable" and len(still.members) == 1
    assert gone.members == () and gone.state == "Empty"


def test_producer_and_transactional_ids_expire(semel_broker):
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "expiry")
    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    idempotent.produce("expiry", value=b"a")
    idempotent.flush(10)
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "exp-1"})
    transactional.init_transactions(10)
    transactional.begin_transaction()
    transactional.produce("expiry", value=b"b")
    transactional.commit_transaction(10)
    assert len(semel_broker.producers("expiry", 0)) == 2
    assert semel_broker.transaction("exp-1").state == "CompleteCommit"

    semel_broker.advance(24 * 3600 + 60)  # producer.id.expiration.ms: 1 day
    assert semel_broker.producers("expiry", 0) == []
    assert semel_broker.transaction("exp-1").state == "CompleteCommit"
    semel_broker.advance(6 * 24 * 3600)  # transactional.id.expiration.ms: 7 days
    assert "exp-1" not in {t.transactional_id for t in semel_broker.transactions()}


def test_retention_deletes_old_segments(semel_broker):
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "retained", **{"retention.ms": "3600000", "segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(40):
        producer.produce("retained", value=b"x" * 100)
        producer.flush(10)
    semel_broker.advance(0)
    assert semel_broker.partition("retained", 0).log_start_offset == 0
    semel_broker.advance(3601)
    part = semel_broker.partition("retained", 0)
    assert 0 < part.log_start_offset <= part.log_end_offset == 40


def test_compaction_waits_for_the_compaction_lag(semel_broker_factory):
    broker = semel_broker_factory({"log.cleaner.enable": "true",
                                   "log.cleaner.backoff.ms": "3600000"})
    create(broker.bootstrap, "compacted", **{
        "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.compaction.lag.ms": "3600000", "min.cleanable.dirty.ratio": "0.01"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(60):
        producer.produce("compacted", key=b"k%d" % (i % 3), value=b"%d" % i + b" " * 90)
        producer.flush(10)
    size = broker.partition("compacted", 0).size_bytes
    broker.advance(0)  # the cleaner runs, but every record is younger than the lag
    assert broker.partition("compacted", 0).size_bytes == size
    broker.advance(3601)
    assert broker.partition("compacted", 0).size_bytes < size
    values = read_committed(broker.bootstrap, "compacted")
    assert len(values) < 60 and {v.split()[0] for v in values} >= {b"57", b"58", b"59"}
