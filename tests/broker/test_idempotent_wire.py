"""Idempotent produce over raw frames: InitProducerId (v0-6), the same Produce request
twice (one copy, the same offset in both answers), the duplicate window, sequence and epoch
errors, and producer state and producer ids across clean and SIGKILL restarts."""

from __future__ import annotations

import time

import pytest

from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests.kafka_wire import (
    FETCH,
    PRODUCE,
    KafkaWire,
    create_topic,
    decode_records,
    fetch_request,
    make_topic,
    message,
    produce_request,
    records_batch,
)

INIT_PRODUCER_ID = 22


def init_producer_id(wire: KafkaWire, version: int = 4, **fields):
    fields.setdefault("transactional_id", None)
    fields.setdefault("transaction_timeout_ms", 2**31 - 1)
    return wire.request(INIT_PRODUCER_ID, version,
                        message(INIT_PRODUCER_ID, "request", **fields))


def idempotent_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    # current timestamps: a producer whose last batch is older than producer.id.expiration.ms
    # (a day) is forgotten when a snapshot is loaded, as in Kafka
    return records_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                         timestamp=time.time_ns() // 1_000_000)


def produce(wire: KafkaWire, topic: str, records: bytes, *, version: int = 9, acks: int = -1):
    resp = wire.request(PRODUCE, version, produce_request(topic, 0, records, acks=acks))
    return resp.responses[0].partition_responses[0]


def fetch_values(wire: KafkaWire, topic: str) -> list[bytes]:
    resp = wire.request(FETCH, 12, fetch_request([(topic, 0, 0)]))
    part = resp.responses[0].partitions[0]
    assert part.error_code == Error.NONE
    return [r.value for r in decode_records(part.records)]


# -- InitProducerId --------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(7))
def test_init_producer_id_without_transactional_id(broker, version):
    with KafkaWire.connect(broker.bootstrap) as wire:
        first = init_producer_id(wire, version)
        second = init_producer_id(wire, version, transaction_timeout_ms=-1)
    assert first.error_code == second.error_code == Error.NONE
    assert first.producer_epoch == second.producer_epoch == 0
    assert 0 <= first.producer_id < second.producer_id


def test_idempotent_init_ignores_an_existing_producer_id_as_kafka_does(broker):
    with KafkaWire.connect(broker.bootstrap) as wire:
        first = init_producer_id(wire)
        again = init_producer_id(wire, producer_id=first.producer_id, producer_epoch=7)
    assert again.error_code == Error.NONE
    assert again.producer_id > first.producer_id and again.producer_epoch == 0


def test_init_producer_id_request_errors(broker):
    with KafkaWire.connect(broker.bootstrap) as wire:
        half = init_producer_id(wire, producer_id=5, producer_epoch=-1)
        other_half = init_producer_id(wire, producer_id=-1, producer_epoch=3)
        empty = init_producer_id(wire, transactional_id="")
        transactional = init_producer_id(wire, transactional_id="txn-1")
    assert half.error_code == other_half.error_code == empty.error_code == Error.INVALID_REQUEST
    assert (half.producer_id, half.producer_epoch) == (-1, -1)
    if broker.broker.txn_coordinator is None:  # issue 6 brings the transaction coordinator
        assert transactional.error_code == Error.COORDINATOR_NOT_AVAILABLE


# -- duplicates and sequence errors --------------------------------------------------------


@pytest.mark.parametrize("acks", [-1, 1])
def test_same_produce_request_twice_is_stored_once(broker, acks):
    make_topic(broker, "dup")
    with KafkaWire.connect(broker.bootstrap) as wire:
        pid = init_producer_id(wire).producer_id
        produce(wire, "dup", records_batch([b"before"], timestamp=time.time_ns() // 1_000_000))
        request = produce_request("dup", 0, idempotent_batch(pid, 0, 0, [b"a", b"b"]), acks=acks)
        first = wire.request(PRODUCE, 9, request).responses[0].partition_responses[0]
        again = wire.request(PRODUCE, 9, request).responses[0].partition_responses[0]
        assert first.error_code == again.error_code == Error.NONE
        assert first.base_offset == again.base_offset == 1
        assert again.log_start_offset == 0
        assert fetch_values(wire, "dup") == [b"before", b"a", b"b"]


def test_retries_within_the_window_get_the_original_offsets(broker):
    make_topic(broker, "window")
    with KafkaWire.connect(broker.bootstrap) as wire:
        pid = init_producer_id(wire).producer_id
        for n in range(6):  # pipelined: five in flight and one more
            wire.send(PRODUCE, 9, produce_request(
                "window", 0, idempotent_batch(pid, 0, 2 * n, [b"%d" % n, b"%d'" % n])))
        bases = [wire.receive().responses[0].partition_responses[0].base_offset
                 for _ in range(6)]
        assert bases == [0, 2, 4, 6, 8, 10]
        for n in range(1, 6):
            retry = produce(wire, "window", idempotent_batch(pid, 0, 2 * n, [b"x", b"y"]))
            assert (retry.error_code, retry.base_offset) == (Error.NONE, 2 * n)
        stale = produce(wire, "window", idempotent_batch(pid, 0, 0, [b"x", b"y"]))
        gap = produce(wire, "window", idempotent_batch(pid, 0, 13, [b"z"]))
        assert stale.error_code == gap.error_code == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert stale.base_offset == -1 and stale.log_start_offset == 0
        bumped = produce(wire, "window", idempotent_batch(pid, 1, 0, [b"e1"]))
        assert (bumped.error_code, bumped.base_offset) == (Error.NONE, 12)
        fenced = produce(wire, "window", idempotent_batch(pid, 0, 12, [b"e0"]))
        assert fenced.error_code == Error.INVALID_PRODUCER_EPOCH
        assert len(fetch_values(wire, "window")) == 13


# -- restarts -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["clean", "sigkill"])
def test_producer_state_and_ids_survive_a_restart(tmp_path, how):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            assert create_topic(wire, "state") == Error.NONE
            pid = init_producer_id(wire).producer_id
            bases = [produce(wire, "state", idempotent_batch(pid, 0, n, [b"%d" % n])).base_offset
                     for n in range(10)]
            assert bases == list(range(10))
    finally:
        if how == "clean":
            assert broker.stop() == 0
        else:
            broker.kill()
    restarted = BrokerProcess(data).start()
    try:
        with KafkaWire.connect(restarted.bootstrap) as wire:
            assert init_producer_id(wire).producer_id > pid  # ids are never handed out twice
            for n in range(5, 10):  # every batch of the window is still recognised
                replay = produce(wire, "state", idempotent_batch(pid, 0, n, [b"%d" % n]))
                assert (replay.error_code, replay.base_offset) == (Error.NONE, n)
            stale = produce(wire, "state", idempotent_batch(pid, 0, 4, [b"4"]))
            assert stale.error_code == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
            nxt = produce(wire, "state", idempotent_batch(pid, 0, 10, [b"10"]))
            assert (nxt.error_code, nxt.base_offset) == (Error.NONE, 10)
            assert fetch_values(wire, "state") == [b"%d" % n for n in range(11)]
    finally:
        restarted.stop()
