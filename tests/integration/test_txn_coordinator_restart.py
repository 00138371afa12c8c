"""The transaction coordinator across SIGKILL (log.flush.mode=fsync): a commit acknowledged
to the client survives the broker being killed right after it - whether the markers and
COMPLETE_COMMIT were written before the kill or not, the restarted broker finishes the
transaction (markers in every partition, CompleteCommit) - and transactional ids with an
open transaction come back as they were, so the next InitProducerId aborts it.

Coordinator side only: what read_committed consumers see is the partition side's concern.
"""

from __future__ import annotations

from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from semel.protocol.records import ControlType, iter_batches, iter_records, parse_control_record
from tests.kafka_wire import FETCH, KafkaWire, create_topic, fetch_request, message
from tests.waiting import until

TIMEOUT_S = 30
DESCRIBE_TRANSACTIONS = 65
OVERRIDES = {"transaction.state.log.num.partitions": "3"}


def describe(bootstrap: str, transactional_id: str):
    with KafkaWire.connect(bootstrap) as wire:
        return wire.request(DESCRIBE_TRANSACTIONS, 0, message(
            DESCRIBE_TRANSACTIONS, "request", transactional_ids=[transactional_id])
        ).transaction_states[0]


def markers(bootstrap: str, topic: str, partition: int):
    with KafkaWire.connect(bootstrap) as wire:
        response = wire.request(FETCH, 12, fetch_request([(topic, partition, 0)]))
    data = bytes(response.responses[0].partitions[0].records or b"")
    found = []
    for header in iter_batches(data):
        if header.is_control:
            for record in iter_records(data, header):
                found.append((header.producer_id, header.producer_epoch,
                              parse_control_record(record)[0]))
    return found



def test_commit_survives_sigkill_right_after_the_answer(tmp_path):
    from confluent_kafka import Producer

    data = tmp_path / "data"
    for round_ in range(3):  # the kill lands at different points of the completion
        broker = BrokerProcess(data, OVERRIDES).start()
        topic = f"crash-{round_}"
        try:
            with KafkaWire.connect(broker.bootstrap) as wire:
                assert create_topic(wire, topic, 2) == Error.NONE
            producer = Producer({"bootstrap.servers": broker.bootstrap,
                                 "transactional.id": f"crash-txn-{round_}",
                                 "linger.ms": 0})
            producer.init_transactions(TIMEOUT_S)
            producer.begin_transaction()
            for i in range(20):
                producer.produce(topic, value=b"v%d" % i, partition=i % 2)
            producer.commit_transaction(TIMEOUT_S)
            broker.kill()
        finally:
            broker.kill()
        restarted = BrokerProcess(data, OVERRIDES).start()
        try:
            until(lambda b=restarted.bootstrap, tid=f"crash-txn-{round_}":
                     describe(b, tid).transaction_state == "CompleteCommit")
            for partition in (0, 1):
                found = markers(restarted.bootstrap, topic, partition)
                # a kill after the markers but before COMPLETE_COMMIT writes them again
                assert found and all(m[2] == ControlType.COMMIT for m in found)
        finally:
            restarted.stop()


def test_open_transaction_is_reloaded_and_aborted_by_the_next_instance(tmp_path):
    from confluent_kafka import Producer

    data = tmp_path / "data"
    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            assert create_topic(wire, "open", 1) == Error.NONE
        producer = Producer({"bootstrap.servers": broker.bootstrap,
                             "transactional.id": "open-txn"})
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce("open", value=b"pending", partition=0)
        producer.flush(TIMEOUT_S)
        before = describe(broker.bootstrap, "open-txn")
        assert before.transaction_state == "Ongoing"
    finally:
        broker.kill()
    restarted = BrokerProcess(data, OVERRIDES).start()
    try:
        after = describe(restarted.bootstrap, "open-txn")
        assert (after.transaction_state, after.producer_id, after.producer_epoch) == (
            "Ongoing", before.producer_id, before.producer_epoch)
        assert [(t.topic, t.partitions) for t in after.topics] == [("open", [0])]
        second = Producer({"bootstrap.servers": restarted.bootstrap,
                           "transactional.id": "open-txn"})
        second.init_transactions(TIMEOUT_S)  # aborts the reloaded transaction first
        assert markers(restarted.bootstrap, "open", 0) == [
            (before.producer_id, before.producer_epoch + 1, ControlType.ABORT)]
        assert describe(restarted.bootstrap, "open-txn").producer_epoch == \
            before.producer_epoch + 2
    finally:
        restarted.stop()
