"""Produce's fast path (``produce.fast_path``) against the full handler: the same requests,
sent over a socket to two brokers - one taking the fast path where it can, one with it
turned off - get the same answers and leave the same bytes in the logs. Covers every
version, acks 1 and all, several topics and partitions, idempotent retries and
out-of-order sequences, transactions (the first batch goes through the coordinator, the
next ones take the fast path), what the fast path leaves to the full one (unknown
partitions, corrupt batches, internal topics, acks 0), and that the fast path is taken."""

from __future__ import annotations

import time

import pytest

from semel.broker.handlers import produce as produce_handler
from semel.broker.testing import BrokerThread
from semel.protocol.records import build_batch
from tests.kafka_wire import (
    FETCH,
    PRODUCE,
    KafkaWire,
    fetch_request,
    make_topic,
    message,
)

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 22, 24, 26
TS = 1_700_000_000_000


@pytest.fixture(scope="module", params=["none", "fsync"])
def brokers(request, tmp_path_factory):
    """(fast, full): two brokers with the same topics; durable (acks=all waits for the
    fsync) or not."""
    overrides = {"log.flush.mode": request.param}
    with BrokerThread(tmp_path_factory.mktemp("fast"), overrides) as fast, \
            BrokerThread(tmp_path_factory.mktemp("full"), overrides) as full:
        yield fast, full


@pytest.fixture
def counting(monkeypatch):
    """Counts requests the fast path answered; ``off`` turns it off."""
    taken = []
    real = produce_handler.fast_path
    state = {"off": False}

    def fast_path(broker, frame, version):
        if state["off"]:
            return None
        result = real(broker, frame, version)
        if result is not None:
            taken.append(version)
        return result

    monkeypatch.setattr(produce_handler, "fast_path", fast_path)
    return taken, state


def _batch(values, *, producer_id=-1, epoch=-1, sequence=-1, transactional=False,
           crc_ok=True, compression=0) -> bytes:
    data = bytearray(build_batch([(b"k", v, None, TS + i) for i, v in enumerate(values)],
                                 producer_id=producer_id, producer_epoch=epoch,
                                 base_sequence=sequence, is_transactional=transactional,
                                 compression=compression))
    if not crc_ok:
        data[-1] ^= 0xFF
    return bytes(data)


def _produce(acks, partitions, transactional_id=None):
    """``partitions``: [(topic, index, records)] -> a ProduceRequest body."""
    topics: dict[str, list] = {}
    for topic, index, records in partitions:
        topics.setdefault(topic, []).append(
            message(PRODUCE, "request", "PartitionProduceData", index=index, records=records))
    return message(PRODUCE, "request", acks=acks, timeout_ms=30_000,
                   transactional_id=transactional_id,
                   topic_data=[message(PRODUCE, "request", "TopicProduceData", name=name,
                                       partition_data=parts) for name, parts in topics.items()])


def _answers(wire: KafkaWire, version: int, body) -> list:
    response = wire.request(PRODUCE, version, body)
    return [(t.name, [(p.index, p.error_code, p.base_offset, p.log_append_time_ms,
                       p.log_start_offset, p.error_message,
                       [(e.batch_index, e.batch_index_error_message) for e in p.record_errors])
                      for p in t.partition_responses]) for t in response.responses]


def _stored(wire: KafkaWire, topic: str, partitions: int) -> list[bytes]:
    response = wire.request(FETCH, 12, fetch_request(
        [(topic, p, 0) for p in range(partitions)], max_bytes=1 << 24))
    return [bytes(p.records or b"") for t in response.responses for p in t.partitions]


def _init(wire: KafkaWire, transactional_id=None) -> tuple[int, int]:
    response = wire.request(INIT_PRODUCER_ID, 4, message(
        INIT_PRODUCER_ID, "request", transactional_id=transactional_id,
        transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
    assert response.error_code == 0
    return response.producer_id, response.producer_epoch


def _scenario(broker: BrokerThread, topic: str, version: int) -> list:
    """The requests, run against one broker; every answer and the stored bytes."""
    make_topic(broker, topic, partitions=2)
    make_topic(broker, topic + "-b", partitions=1)
    out = []
    with KafkaWire.connect(broker.bootstrap) as wire:
        pid, epoch = _init(wire)
        for acks in (1, -1):
            out.append(_answers(wire, version, _produce(acks, [
                (topic, 0, _batch([b"a", b"b"])), (topic, 1, _batch([b"c"])),
                (topic + "-b", 0, _batch([b"d"] * 5))])))
        first = _batch([b"i1", b"i2"], producer_id=pid, epoch=epoch, sequence=0)
        out.append(_answers(wire, version, _produce(-1, [(topic, 0, first)])))
        out.append(_answers(wire, version, _produce(-1, [(topic, 0, first)])))  # retried
        gap = _batch([b"i9"], producer_id=pid, epoch=epoch, sequence=9)  # out of order
        out.append(_answers(wire, version, _produce(-1, [(topic, 0, gap), (topic, 1, _batch(
            [b"ok"]))])))
        out.append(_answers(wire, version, _produce(-1, [
            (topic, 0, _batch([b"i3"], producer_id=pid, epoch=epoch, sequence=2))])))
        out.append(_answers(wire, version, _produce(1, [(topic, 7, _batch([b"x"]))])))
        out.append(_answers(wire, version, _produce(1, [(topic, 0, _batch([b"x"], crc_ok=False))])))
        out.append(_answers(wire, version, _produce(1, [("__consumer_offsets", 0, _batch([b"x"]))])))
        out.append(_answers(wire, version, _produce(1, [(topic, 1, _batch(
            [b"z" * 300] * 20, compression=1 if version < 7 else 4))])))
        # transactions: the first batch is verified with the coordinator, the next ones
        # find the transaction open
        txn_id = f"{topic}-txn"
        tpid, tepoch = _init(wire, txn_id)
        added = wire.request(ADD_PARTITIONS_TO_TXN, 3, message(
            ADD_PARTITIONS_TO_TXN, "request", v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=tpid, v3_and_below_producer_epoch=tepoch,
            v3_and_below_topics=[message(ADD_PARTITIONS_TO_TXN, "request",
                                         "AddPartitionsToTxnTopic", name=topic,
                                         partitions=[0])]))
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0] \
            .partition_error_code == 0
        for sequence in range(3):
            out.append(_answers(wire, min(version, 11), _produce(-1, [(topic, 0, _batch(
                [b"t"], producer_id=tpid, epoch=tepoch, sequence=sequence,
                transactional=True))], transactional_id=txn_id)))
        ended = wire.request(END_TXN, 3, message(
            END_TXN, "request", transactional_id=txn_id, producer_id=tpid,
            producer_epoch=tepoch, committed=True))
        out.append(ended.error_code)
        # the next transaction's batch was never added: refused by verification (once the
        # commit is complete; NOT_ENOUGH_REPLICAS while its markers are written)
        for _ in range(500):
            answer = _answers(wire, min(version, 11), _produce(-1, [(topic, 1, _batch(
                [b"t"], producer_id=tpid, epoch=tepoch, sequence=3, transactional=True))],
                transactional_id=txn_id))
            if answer[0][1][0][1] != 19:
                break
            time.sleep(0.01)
        out.append(answer)
        out.append(_stored(wire, topic, 2))
        out.append(_stored(wire, topic + "-b", 1))
    return out


@pytest.mark.parametrize("version", [3, 5, 7, 8, 9, 11])
def test_fast_path_answers_as_the_full_handler(brokers, counting, version: int) -> None:
    fast, full = brokers
    taken, state = counting
    topic = f"fastpath-v{version}"
    with_fast = _scenario(fast, topic, version)
    fast_requests = len(taken)
    state["off"] = True
    without = _scenario(full, topic, version)
    assert with_fast == without
    # acks 1 and all, the first idempotent batch, its retry, the in-order one, the
    # compressed one, two of the three transactional ones
    assert fast_requests >= 7
    assert len(taken) == fast_requests


def test_fault_rules_turn_the_fast_path_off(brokers, counting) -> None:
    """With a request rule armed, Produce goes through the interceptor (the full path)."""
    fast, _ = brokers
    taken, _ = counting
    make_topic(fast, "fastpath-faults")
    rule = fast.faults.fail("Produce", "NOT_ENOUGH_REPLICAS", topic="fastpath-faults")
    with KafkaWire.connect(fast.bootstrap) as wire:
        answer = _answers(wire, 9, _produce(-1, [("fastpath-faults", 0, _batch([b"x"]))]))
        assert answer[0][1][0][1] == 19  # NOT_ENOUGH_REPLICAS
        assert rule.fired == 1 and not taken
        answer = _answers(wire, 9, _produce(-1, [("fastpath-faults", 0, _batch([b"x"]))]))
        assert answer[0][1][0][1] == 0 and taken == [9]
