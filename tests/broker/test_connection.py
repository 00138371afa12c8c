"""Connection behaviour: back-pressure pauses reading while too many request bytes are in
flight and resumes after; idle connections are closed after connections.max.idle.ms
(on an injected monotonic clock: the test moves time, it does not wait for it)."""

from __future__ import annotations

import threading

from semel.broker.testing import BrokerThread
from tests.kafka_wire import (
    FETCH,
    KafkaWire,
    fetch_request,
    make_topic,
    produce_request,
    records_batch,
)
from tests.waiting import wait_for


def test_reading_pauses_above_pending_bytes_and_resumes(tmp_path) -> None:
    with BrokerThread(tmp_path / "d", {"connection.max.pending.bytes": "400"}) as b:
        make_topic(b, "t")
        with KafkaWire.connect(b.bootstrap) as wire:
            # parked long polls hold their request bytes in flight
            for _ in range(6):
                wire.send(FETCH, 12, fetch_request([("t", 0, 0)], max_wait_ms=30000))
            conns = lambda: list(b.broker.connections)
            assert wait_for(lambda: any(c.reading_paused for c in conns()))
            # data wakes the fetches; every response arrives, in order, and reading resumes
            with KafkaWire.connect(b.bootstrap) as producer:
                producer.request(0, 9, produce_request("t", 0, records_batch([b"v"])))
            for _ in range(6):
                resp = wire.receive()
                assert resp.responses[0].partitions[0].high_watermark == 1
            assert wait_for(lambda: not any(c.reading_paused for c in conns()))


class ManualClock:
    def __init__(self) -> None:
        self.now = 0
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            return self.now

    def advance(self, ms: int) -> None:
        with self.lock:
            self.now += ms


def test_idle_connections_are_closed_after_max_idle(tmp_path) -> None:
    clock = ManualClock()
    with BrokerThread(tmp_path / "d", {"connections.max.idle.ms": "200"},
                      monotonic=clock) as b:
        idle = KafkaWire.connect(b.bootstrap)
        busy = KafkaWire.connect(b.bootstrap)
        try:
            assert wait_for(lambda: len(b.broker.connections) == 2)
            clock.advance(150)
            busy.request(18, 3, busy_api_versions())
            clock.advance(100)  # idle: 250 ms without traffic; busy: 100 ms
            assert idle.is_closed_by_peer(timeout=20)
            assert busy.request(18, 3, busy_api_versions()).error_code == 0
        finally:
            idle.close()
            busy.close()


def busy_api_versions():
    from tests.kafka_wire import message
    return message(18, "request", client_software_name="t", client_software_version="1")
