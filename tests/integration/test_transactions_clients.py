"""Exactly-once with real clients, partition verification on (the default): transactional
producers of confluent-kafka (librdkafka), kafka-python, aiokafka and Java kafka-clients
3.9.1 commit and abort; read_committed consumers of the same clients see exactly the
committed records, read_uncommitted ones see everything. A second producer with the same
transactional id fences the first (confluent-kafka, Java); a producer that vanishes mid-
transaction is aborted after its timeout and read_committed consumers move past it;
confluent-kafka's send_offsets_to_transaction commits a consumer group's offsets with the
output, and an aborted round leaves them as they were.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import require_java, run_java
from tests.kafka_wire import make_topic

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
                 "transaction.state.log.num.partitions": "4",
                 "offsets.topic.num.partitions": "4"}
    with BrokerThread(tmp_path_factory.mktemp("eos-clients"), overrides) as b:
        yield b


def transactions(count: int, per_txn: int, abort_every: int) -> list[tuple[list[bytes], bool]]:
    """(values, commit) per transaction: records 0..count-1, every `abort_every`th aborted."""
    out = []
    for t, first in enumerate(range(0, count, per_txn), 1):
        values = [b"v%d" % i for i in range(first, min(first + per_txn, count))]
        out.append((values, t % abort_every != 0))
    return out


def committed_values(txns) -> list[bytes]:
    return [v for values, commit in txns for v in values if commit]


def confluent_consume(bootstrap: str, topic: str, isolation: str, expected: int,
                      partitions: int = 1) -> list[bytes]:
    """Everything a confluent-kafka consumer of `isolation` gets from the start, until
    `expected` records or the partitions' end offsets (read_committed: the LSO)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, at_eof = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline and (len(got) < expected or
                                                len(at_eof) < partitions):
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


# -- commit/abort, read_committed vs read_uncommitted, per client --------------------------------


def test_confluent_kafka(shared_broker):
    from confluent_kafka import Producer

    make_topic(shared_broker, "eos-cf")
    txns = transactions(60, 10, 3)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "transactional.id": "eos-cf", "linger.ms": 1})
    producer.init_transactions(TIMEOUT_S)
    for values, commit in txns:
        producer.begin_transaction()
        for v in values:
            producer.produce("eos-cf", value=v, partition=0)
        producer.flush(TIMEOUT_S)
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
    expected = committed_values(txns)
    assert confluent_consume(shared_broker.bootstrap, "eos-cf", "read_committed",
                             len(expected)) == expected
    everything = confluent_consume(shared_broker.bootstrap, "eos-cf", "read_uncommitted", 60)
    assert everything == [v for values, _ in txns for v in values]


def test_kafka_python(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    make_topic(shared_broker, "eos-kp", 2)
    txns = transactions(40, 8, 2)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                             transactional_id="eos-kp", linger_ms=1)
    producer.init_transactions()
    for values, commit in txns:
        producer.begin_transaction()
        for i, v in enumerate(values):
            producer.send("eos-kp", value=v, partition=i % 2)
        producer.flush()
        (producer.commit_transaction if commit else producer.abort_transaction)()
    producer.close()
    expected = sorted(committed_values(txns))

    def consume(isolation: str, count: int) -> list[bytes]:
        """Until `count` records, then until nothing more comes for a second (iterating the
        consumer ends after consumer_timeout_ms without records)."""
        consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap,
                                 isolation_level=isolation, enable_auto_commit=False,
                                 consumer_timeout_ms=1000)
        consumer.assign([TopicPartition("eos-kp", p) for p in (0, 1)])
        consumer.seek_to_beginning()
        got: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            got.extend(m.value for m in consumer)
        consumer.close()
        return sorted(got)

    assert consume("read_committed", len(expected)) == expected
    assert consume("read_uncommitted", 40) == sorted(v for values, _ in txns for v in values)


def test_aiokafka(shared_broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    make_topic(shared_broker, "eos-aio")
    txns = transactions(30, 5, 3)

    async def run() -> tuple[list[bytes], list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                    transactional_id="eos-aio")
        await producer.start()
        try:
            for values, commit in txns:
                await producer.begin_transaction()
                for v in values:
                    await producer.send_and_wait("eos-aio", v, partition=0)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

        async def consume(isolation: str, count: int) -> list[bytes]:
            consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap,
                                        isolation_level=isolation, enable_auto_commit=False)
            await consumer.start()
            try:
                tp = TopicPartition("eos-aio", 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                end = (await consumer.end_offsets([tp]))[tp]
                got: list[bytes] = []
                deadline = time.monotonic() + TIMEOUT_S
                while (len(got) < count or await consumer.position(tp) < end) \
                        and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=200)
                    got.extend(m.value for ms in batches.values() for m in ms)
                return got
            finally:
                await consumer.stop()

        return (await consume("read_committed", len(committed_values(txns))),
                await consume("read_uncommitted", 30))

    committed, everything = asyncio.run(run())
    assert committed == committed_values(txns)
    assert everything == [v for values, _ in txns for v in values]


def test_java(shared_broker):
    require_java()
    make_topic(shared_broker, "eos-java", 2)
    [summary] = run_java("txn-produce", "--bootstrap", shared_broker.bootstrap,
                         "--topic", "eos-java", "--count", "100", "--per-txn", "10",
                         "--abort-every", "4", "--transactional-id", "eos-java")
    assert (summary["committed_transactions"], summary["aborted_transactions"]) == (8, 2)
    committed = run_java("consume", "--bootstrap", shared_broker.bootstrap, "--topic",
                         "eos-java", "--until-end", "--isolation", "read_committed")
    *records, consumed = committed
    assert consumed["count"] == 80 and consumed["checksum"] == summary["checksum"]
    expected = {f"value-{i}" for t in range(10) if (t + 1) % 4 for i in range(t * 10, t * 10 + 10)}
    assert {r["value"] for r in records} == expected
    everything = run_java("consume", "--bootstrap", shared_broker.bootstrap, "--topic",
                          "eos-java", "--until-end", "--isolation", "read_uncommitted",
                          "--summary-only")
    assert everything[-1]["count"] == 100
    # librdkafka reads what Java wrote, under the same rules
    assert len(confluent_consume(shared_broker.bootstrap, "eos-java", "read_committed", 80,
                                 partitions=2)) == 80


# -- fencing ------------------------------------------------------------------------------------------


def test_confluent_kafka_fencing(shared_broker):
    from confluent_kafka import KafkaException, Producer

    make_topic(shared_broker, "eos-fence-cf")
    config = {"bootstrap.servers": shared_broker.bootstrap, "transactional.id": "eos-fence-cf",
              "linger.ms": 1}
    first = Producer(config)
    first.init_transactions(TIMEOUT_S)
    first.begin_transaction()
    first.produce("eos-fence-cf", value=b"first", partition=0)
    first.flush(TIMEOUT_S)
    second = Producer(config)
    second.init_transactions(TIMEOUT_S)  # aborts the first's transaction, fences it
    second.begin_transaction()
    second.produce("eos-fence-cf", value=b"second", partition=0)
    second.commit_transaction(TIMEOUT_S)
    with pytest.raises(KafkaException) as excinfo:
        first.produce("eos-fence-cf", value=b"late", partition=0)
        first.flush(TIMEOUT_S)
        first.commit_transaction(TIMEOUT_S)
    error = excinfo.value.args[0]
    assert error.fatal(), error
    assert "fenced" in error.str().lower() or error.name() in (
        "_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), error
    assert confluent_consume(shared_broker.bootstrap, "eos-fence-cf", "read_committed",
                             1) == [b"second"]


def test_java_fencing(shared_broker):
    require_java()
    make_topic(shared_broker, "eos-fence-java")
    [result] = run_java("txn-fence", "--bootstrap", shared_broker.bootstrap, "--topic",
                        "eos-fence-java", "--transactional-id", "eos-fence-java")
    assert result["first_commit"] == "org.apache.kafka.common.errors.ProducerFencedException"
    *records, summary = run_java("consume", "--bootstrap", shared_broker.bootstrap, "--topic",
                                 "eos-fence-java", "--until-end", "--isolation",
                                 "read_committed")
    assert [r["value"] for r in records] == ["second"] and summary["count"] == 1


# -- timeout ------------------------------------------------------------------------------------------


def test_vanished_producer_is_aborted_after_its_timeout(shared_broker):
    """Real time, short timeout: the open transaction holds read_committed consumers back at
    its first offset until the coordinator aborts it; then they read what came after."""
    from confluent_kafka import Producer

    make_topic(shared_broker, "eos-timeout")
    vanishing = Producer({"bootstrap.servers": shared_broker.bootstrap,
                          "transactional.id": "eos-timeout", "transaction.timeout.ms": 2000,
                          "linger.ms": 1})
    vanishing.init_transactions(TIMEOUT_S)
    vanishing.begin_transaction()
    vanishing.produce("eos-timeout", value=b"never", partition=0)
    vanishing.flush(TIMEOUT_S)
    # the producer goes away without ending its transaction (no close: as if it crashed)
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 1})
    for i in range(3):
        plain.produce("eos-timeout", value=b"after-%d" % i, partition=0)
    plain.flush(TIMEOUT_S)
    plog = shared_broker.broker.log_manager.get_partition("eos-timeout", 0)
    assert plog.last_stable_offset == 0 and plog.high_watermark == 4
    # a read_committed consumer waits at the open transaction, then moves past it
    got = confluent_consume(shared_broker.bootstrap, "eos-timeout", "read_committed", 3)
    assert got == [b"after-0", b"after-1", b"after-2"]
    assert plog.last_stable_offset == plog.high_watermark == 5
    [(producer_id, first_offset)] = plog.collect_aborted_transactions(0, 5)
    assert first_offset == 0 and plog.producer_state.producers[producer_id].producer_epoch > 0


# -- send_offsets_to_transaction ------------------------------------------------------------------


def test_confluent_kafka_send_offsets_to_transaction(shared_broker):
    """Consume-transform-produce: each round's output and the group's input offsets commit
    together; an aborted round changes neither."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    make_topic(shared_broker, "eos-in")
    make_topic(shared_broker, "eos-out")
    feeder = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 1})
    for i in range(20):
        feeder.produce("eos-in", value=b"in-%d" % i, partition=0)
    feeder.flush(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "eos-ctp",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("eos-in", 0, 0)])
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "transactional.id": "eos-ctp", "linger.ms": 1})
    producer.init_transactions(TIMEOUT_S)
    for round_no in range(4):
        batch = consumer.consume(5, TIMEOUT_S)
        assert len(batch) == 5
        producer.begin_transaction()
        for m in batch:
            producer.produce("eos-out", value=m.value().replace(b"in", b"out"), partition=0)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), TIMEOUT_S)
        if round_no == 2:
            producer.abort_transaction(TIMEOUT_S)
            # rewind to the last committed offset, as an EOS application does after an abort
            [committed] = consumer.committed([TopicPartition("eos-in", 0)], TIMEOUT_S)
            assert committed.offset == 10
            consumer.seek(TopicPartition("eos-in", 0, committed.offset))
        else:
            producer.commit_transaction(TIMEOUT_S)
    # rounds: 0-4, 5-9 committed; 10-14 aborted; 10-14 again committed
    [committed] = consumer.committed([TopicPartition("eos-in", 0)], TIMEOUT_S)
    assert committed.offset == 15
    consumer.close()
    out = confluent_consume(shared_broker.bootstrap, "eos-out", "read_committed", 15)
    assert out == [b"out-%d" % i for i in range(15)]
