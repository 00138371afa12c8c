"""What the per-request bookkeeping of the Produce fast path must leave behind, however the
connection, dispatcher and metrics inline it: every request's bytes given back to the
request memory and the connection's pending bytes, each request counted once in the
latency and queue-time histograms, answers in request order; and the latency histogram
bumped exactly as ``_Histogram.observe`` would (le: a value equal to a bound is in its
bucket)."""

from __future__ import annotations

import pytest

from semel.broker.metrics import LATENCY_BUCKETS, BrokerMetrics, _Histogram
from semel.broker.testing import BrokerThread
from tests.kafka_wire import PRODUCE, KafkaWire, make_topic, produce_request, records_batch
from tests.waiting import wait_for


@pytest.mark.parametrize("flush_mode", ["none", "fsync"])
@pytest.mark.parametrize("acks", [1, -1])
def test_pipelined_fast_produce_gives_every_byte_back(tmp_path, flush_mode: str,
                                                      acks: int) -> None:
    count = 40
    with BrokerThread(tmp_path / "d", {"log.flush.mode": flush_mode}) as b:
        make_topic(b, "t")
        broker = b.broker
        metrics = broker.metrics
        queued_before = sum(metrics.queue_time.counts)
        with KafkaWire.connect(b.bootstrap) as wire:
            # all sent before any answer is read: the broker runs them in bursts
            for i in range(count):
                wire.send(PRODUCE, 9, produce_request("t", 0, records_batch([b"v%d" % i]),
                                                      acks=acks))
            offsets = [wire.receive().responses[0].partition_responses[0].base_offset
                       for _ in range(count)]
            assert offsets == list(range(count))  # answered, in order
            conns = list(broker.connections)
            assert len(conns) == 1
            conn = conns[0]
            assert wait_for(lambda: not conn.slots)
            assert conn.pending_bytes == 0
            assert not conn.running
            assert broker.request_memory.used == 0
        latency = metrics.latency[PRODUCE]
        assert sum(latency.counts) == count
        assert sum(metrics.queue_time.counts) - queued_before == count


def test_latency_is_bucketed_as_histogram_observe() -> None:
    values = [0.0, 1e-9, *LATENCY_BUCKETS, *(b * 1.0000001 for b in LATENCY_BUCKETS), 1e6]
    reference = _Histogram(LATENCY_BUCKETS)
    metrics = BrokerMetrics()
    for value in values:
        reference.observe(value)
        metrics.observe_request(PRODUCE, value)
    assert metrics.latency[PRODUCE].snapshot() == reference.snapshot()
