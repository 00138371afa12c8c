"""Real transactional producers against the transaction coordinator: confluent-kafka
(librdkafka) and kafka-python commit and abort, a second instance fences the first, a
vanished producer's transaction is aborted after its timeout, and the markers land in every
partition of each transaction.

The coordinator side only: read_committed consumption is the partition side's (issue 6), so
records are checked through the markers the partitions hold and the coordinator's state.
The broker runs with partition verification on (the default): first transactional batches
are checked with the coordinator before they are appended.
"""

from __future__ import annotations

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.records import ControlType, iter_batches, iter_records, parse_control_record
from tests.kafka_wire import FETCH, KafkaWire, fetch_request, make_topic
from tests.waiting import until

TIMEOUT_S = 30


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
                 "transaction.state.log.num.partitions": "4"}
    with BrokerThread(tmp_path_factory.mktemp("txn-clients"), overrides) as b:
        yield b


def batches(bootstrap: str, topic: str, partition: int = 0):
    """(producer id, epoch, control type or None, record count) per batch of a partition."""
    with KafkaWire.connect(bootstrap) as wire:
        response = wire.request(FETCH, 12, fetch_request([(topic, partition, 0)]))
    data = bytes(response.responses[0].partitions[0].records or b"")
    found = []
    for header in iter_batches(data):
        control = None
        if header.is_control:
            [record] = list(iter_records(data, header))
            control = parse_control_record(record)[0]
        found.append((header.producer_id, header.producer_epoch, control, header.record_count))
    return found


def txn_state(broker: BrokerThread, transactional_id: str) -> str:
    async def describe():
        return broker.broker.txn_coordinator.describe(transactional_id).state

    return broker.call(describe())



def test_confluent_commit_and_abort(shared_broker):
    from confluent_kafka import Producer

    make_topic(shared_broker, "cf-txn", 2)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "transactional.id": "cf-txn-1", "linger.ms": 1})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("cf-txn", value=b"c%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("cf-txn", value=b"a%d" % i, partition=0)
    producer.flush(TIMEOUT_S)  # else librdkafka drops them unsent and never tells us
    producer.abort_transaction(TIMEOUT_S)
    until(lambda: txn_state(shared_broker, "cf-txn-1") == "CompleteAbort")
    p0 = batches(shared_broker.bootstrap, "cf-txn", 0)
    p1 = batches(shared_broker.bootstrap, "cf-txn", 1)
    pid, epoch = p0[0][0], p0[0][1]
    assert [b[2] for b in p0 if b[2] is not None] == [ControlType.COMMIT, ControlType.ABORT]
    assert [b[2] for b in p1 if b[2] is not None] == [ControlType.COMMIT]  # not in the abort
    assert all(b[:2] == (pid, epoch) for b in p0 + p1)
    assert sum(b[3] for b in p0 + p1 if b[2] is None) == 14


def test_confluent_second_instance_fences_the_first(shared_broker):
    from confluent_kafka import KafkaException, Producer

    make_topic(shared_broker, "cf-fence")
    config = {"bootstrap.servers": shared_broker.bootstrap, "transactional.id": "cf-fence-1"}
    first = Producer(config)
    first.init_transactions(TIMEOUT_S)
    first.begin_transaction()
    first.produce("cf-fence", value=b"zombie", partition=0)
    first.flush(TIMEOUT_S)
    second = Producer(config)
    second.init_transactions(TIMEOUT_S)  # aborts the first's transaction, fencing it
    with pytest.raises(KafkaException) as e:
        first.commit_transaction(TIMEOUT_S)
    assert e.value.args[0].fatal()
    second.begin_transaction()
    second.produce("cf-fence", value=b"ok", partition=0)
    second.commit_transaction(TIMEOUT_S)
    found = batches(shared_broker.bootstrap, "cf-fence")
    markers = [(b[1], b[2]) for b in found if b[2] is not None]
    zombie_epoch = found[0][1]
    assert markers == [(zombie_epoch + 1, ControlType.ABORT),
                       (zombie_epoch + 2, ControlType.COMMIT)]


def test_vanished_producer_is_aborted_after_its_timeout(shared_broker):
    from confluent_kafka import Producer

    make_topic(shared_broker, "cf-timeout")
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "transactional.id": "cf-timeout-1", "transaction.timeout.ms": 1000})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("cf-timeout", value=b"lost", partition=0)
    producer.flush(TIMEOUT_S)
    assert txn_state(shared_broker, "cf-timeout-1") == "Ongoing"
    # the producer vanishes (never ends its transaction); the coordinator aborts it
    until(lambda: txn_state(shared_broker, "cf-timeout-1") == "CompleteAbort")
    found = batches(shared_broker.bootstrap, "cf-timeout")
    assert [(b[1], b[2]) for b in found] == [(found[0][1], None),
                                             (found[0][1] + 1, ControlType.ABORT)]


def test_kafka_python_commit(shared_broker):
    from kafka import KafkaProducer

    make_topic(shared_broker, "kp-txn")
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                             transactional_id="kp-txn-1")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send("kp-txn", value=b"v%d" % i, partition=0)
        producer.commit_transaction()
    finally:
        producer.close(timeout=TIMEOUT_S)
    until(lambda: txn_state(shared_broker, "kp-txn-1") == "CompleteCommit")
    found = batches(shared_broker.bootstrap, "kp-txn")
    assert [b[2] for b in found] == [None, ControlType.COMMIT]
    assert found[0][3] == 5


def test_aiokafka_commit_and_abort(shared_broker):
    import asyncio

    from aiokafka import AIOKafkaProducer

    make_topic(shared_broker, "aio-txn")

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap,
                                    transactional_id="aio-txn-1")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(3):
                    await producer.send_and_wait("aio-txn", b"c%d" % i, partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait("aio-txn", b"aborted", partition=0)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    until(lambda: txn_state(shared_broker, "aio-txn-1") == "CompleteAbort")
    found = batches(shared_broker.bootstrap, "aio-txn")
    assert [b[2] for b in found if b[2] is not None] == [ControlType.COMMIT, ControlType.ABORT]
    assert sum(b[3] for b in found if b[2] is None) == 4
