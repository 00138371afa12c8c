"""Produce's fast path and the classic transaction flow (AddPartitionsToTxn before the
first batch): the transaction's first batch on a partition is verified with the coordinator
inside the fast path and appended there; a batch for a partition the transaction does not
have still goes the full way, which refuses it as before."""

from __future__ import annotations

import pytest

from semel.broker.handlers import produce as produce_handler
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import build_batch
from tests.kafka_wire import PRODUCE, KafkaWire, make_topic, message, produce_request

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 22, 24, 26


@pytest.fixture(scope="module", params=["none", "fsync"])
def broker(request, tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("txn-fast"),
                      {"log.flush.mode": request.param}) as b:
        yield b


@pytest.fixture
def taken(monkeypatch):
    """The Produce requests the fast path answered (their partitions' error codes)."""
    answered = []
    real = produce_handler.fast_path

    def fast_path(broker, frame, version):
        result = real(broker, frame, version)
        if result is not None:
            answered.append(result)
        return result

    monkeypatch.setattr(produce_handler, "fast_path", fast_path)
    return answered


def _add(wire, txn_id, pid, epoch, topic, partition) -> int:
    response = wire.request(ADD_PARTITIONS_TO_TXN, 3, message(
        ADD_PARTITIONS_TO_TXN, "request", v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[message(ADD_PARTITIONS_TO_TXN, "request",
                                     "AddPartitionsToTxnTopic", name=topic,
                                     partitions=[partition])]))
    return response.results_by_topic_v3_and_below[0].results_by_partition[0] \
        .partition_error_code


def _produce(wire, txn_id, pid, epoch, topic, partition, sequence) -> int:
    batch = build_batch([(None, b"v", None, 1_700_000_000_000)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    response = wire.request(PRODUCE, 9, produce_request(topic, partition, batch, acks=-1,
                                                        transactional_id=txn_id))
    return response.responses[0].partition_responses[0].error_code


def test_a_transactions_first_batch_takes_the_fast_path(broker, taken):
    topic = f"txn-fast-{broker.broker.config.log_flush_mode}"
    make_topic(broker, topic, partitions=2)
    txn_id = topic + "-id"
    with KafkaWire.connect(broker.bootstrap) as wire:
        init = wire.request(INIT_PRODUCER_ID, 4, message(
            INIT_PRODUCER_ID, "request", transactional_id=txn_id,
            transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
        pid, epoch = init.producer_id, init.producer_epoch
        assert _add(wire, txn_id, pid, epoch, topic, 0) == Error.NONE
        assert _produce(wire, txn_id, pid, epoch, topic, 0, 0) == Error.NONE
        assert len(taken) == 1  # verified and appended by the fast path
        # partition 1 was not added: the full path refuses it (v9: INVALID_TXN_STATE)
        assert _produce(wire, txn_id, pid, epoch, topic, 1, 1) == Error.INVALID_TXN_STATE
        assert len(taken) == 1
        assert _produce(wire, txn_id, pid, epoch, topic, 0, 1) == Error.NONE
        assert len(taken) == 2
        ended = wire.request(END_TXN, 3, message(
            END_TXN, "request", transactional_id=txn_id, producer_id=pid,
            producer_epoch=epoch, committed=True))
        assert ended.error_code == Error.NONE
