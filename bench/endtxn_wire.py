"""EndTxn latency on the wire: a raw transactional client built on our codecs.

One connection, one transactional id, transactions of ``records`` records on one partition:
InitProducerId v4 (with the transactional id) once, then per transaction
AddPartitionsToTxn v3 -> Produce v9 (acks=-1, a transactional v2 batch with the next
sequence) -> EndTxn v3 (commit). Only the EndTxn request -> response round trip is timed
(``time.perf_counter_ns`` just before the frame is written, just after the response is
read). These versions are the classic (pre transaction-version-2) client flow that both
semel and Tansu serve. CONCURRENT_TRANSACTIONS on the next AddPartitionsToTxn (the previous
commit's markers still being written) is retried after 1 ms and counted.
"""

from __future__ import annotations

import os
import time

from semel.protocol.errors import Error
from semel.protocol.records import build_batch
from tests.kafka_wire import PRODUCE, KafkaWire, message, produce_request

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 22, 24, 26
RETRIABLE = {Error.CONCURRENT_TRANSACTIONS, Error.COORDINATOR_LOAD_IN_PROGRESS,
             Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE}


class TxnFailed(RuntimeError):
    pass


def init_producer_id(wire: KafkaWire, transactional_id: str) -> tuple[int, int]:
    for _ in range(1000):
        response = wire.request(INIT_PRODUCER_ID, 4, message(
            INIT_PRODUCER_ID, "request", transactional_id=transactional_id,
            transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1))
        if response.error_code == Error.NONE:
            return response.producer_id, response.producer_epoch
        if response.error_code not in RETRIABLE:
            raise TxnFailed(f"InitProducerId: {Error(response.error_code).name}")
        time.sleep(0.01)
    raise TxnFailed("InitProducerId kept failing")


def add_partition(wire: KafkaWire, transactional_id: str, producer_id: int, epoch: int,
                  topic: str, partition: int) -> int:
    """Adds the partition; returns how many times CONCURRENT_TRANSACTIONS made it retry."""
    topics = [message(ADD_PARTITIONS_TO_TXN, "request", "AddPartitionsToTxnTopic", name=topic,
                      partitions=[partition])]
    body = message(ADD_PARTITIONS_TO_TXN, "request",
                   v3_and_below_transactional_id=transactional_id,
                   v3_and_below_producer_id=producer_id, v3_and_below_producer_epoch=epoch,
                   v3_and_below_topics=topics)
    for retries in range(100_000):
        response = wire.request(ADD_PARTITIONS_TO_TXN, 3, body)
        codes = {p.partition_error_code for t in response.results_by_topic_v3_and_below
                 for p in t.results_by_partition}
        if codes <= {Error.NONE}:
            return retries
        if not codes <= RETRIABLE:
            raise TxnFailed("AddPartitionsToTxn: " + ",".join(Error(c).name for c in codes))
        time.sleep(0.001)
    raise TxnFailed("AddPartitionsToTxn kept answering a retriable error")


def run(bootstrap: str, topic: str, transactions: int, *, records: int = 10,
        value_size: int = 100, transactional_id: str = "bench-endtxn", ready=None) -> dict:
    """Run ``transactions`` committed transactions; returns EndTxn latencies in ms and the
    wall time of the loop. ``ready()`` is called after setup (the caller's start barrier)."""
    value = os.urandom(value_size)
    with KafkaWire.connect(bootstrap, client_id="bench-endtxn", timeout=60) as wire:
        producer_id, epoch = init_producer_id(wire, transactional_id)
        if ready is not None:
            ready()
        latencies_ns = []
        retries = 0
        sequence = 0
        t0 = time.monotonic()
        for _ in range(transactions):
            retries += add_partition(wire, transactional_id, producer_id, epoch, topic, 0)
            now = time.time_ns() // 1_000_000
            batch = build_batch([(None, value, None, now)] * records, producer_id=producer_id,
                                producer_epoch=epoch, base_sequence=sequence,
                                is_transactional=True)
            sequence += records
            produced = wire.request(PRODUCE, 9, produce_request(
                topic, 0, batch, acks=-1, transactional_id=transactional_id))
            code = produced.responses[0].partition_responses[0].error_code
            if code != Error.NONE:
                raise TxnFailed(f"Produce: {Error(code).name}")
            _, frame = wire.encode(END_TXN, 3, message(
                END_TXN, "request", transactional_id=transactional_id, producer_id=producer_id,
                producer_epoch=epoch, committed=True))
            wire.pending.append((wire.correlation_id, END_TXN, 3))
            start = time.perf_counter_ns()
            wire.send_raw(frame)
            response = wire.receive()
            latencies_ns.append(time.perf_counter_ns() - start)
            if response.error_code != Error.NONE:
                raise TxnFailed(f"EndTxn: {Error(response.error_code).name}")
        elapsed = time.monotonic() - t0
    return {"latencies_ms": [n / 1e6 for n in latencies_ns], "elapsed_s": elapsed,
            "transactions": transactions, "add_partitions_retries": retries,
            "start": t0, "end": t0 + elapsed}
