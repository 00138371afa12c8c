"""acks=all Produce on a durable broker: the fast path's answers wait for the disk without a
task per request (``Dispatcher.dispatch``'s ``defer_on``, ``FastProduce.answer_when_durable``)
and leave in request order, several in one write. Pipelined requests, a timeout while the
disk holds, and a connection closed while its requests wait: nothing is left behind."""

from __future__ import annotations

import time

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.held_fsyncs import HeldFsyncs
from tests.kafka_wire import PRODUCE, KafkaWire, make_topic, produce_request, records_batch


def send_produce(wire: KafkaWire, topic: str, value: bytes, timeout_ms: int = 30_000) -> int:
    return wire.send(PRODUCE, 9, produce_request(topic, 0, records_batch([value]),
                                                 timeout_ms=timeout_ms))


def settled(broker_thread: BrokerThread, topic: str) -> bool:
    """No request of any connection in flight, no durable waiter left on the partition,
    no request memory held."""
    broker = broker_thread.broker

    async def look():
        plog = broker.log_manager.get_partition(topic, 0)
        return (all(not c.tasks and not c.slots for c in broker.connections)
                and all(future.done() for _, _, future in plog._waiters)
                and broker.request_memory.used == 0)

    return broker_thread.call(look())


def wait_settled(broker_thread: BrokerThread, topic: str) -> None:
    deadline = time.monotonic() + 30
    while not settled(broker_thread, topic):
        assert time.monotonic() < deadline, "requests still in flight"
        time.sleep(0.01)


def test_pipelined_acks_all_answers_in_order(tmp_path):
    with BrokerThread(tmp_path / "d", {"log.flush.mode": "fsync"}) as b:
        make_topic(b, "t")
        plog = b.broker.log_manager.get_partition("t", 0)
        with KafkaWire.connect(b.bootstrap) as w:
            for round_ in range(3):
                for i in range(5):
                    send_produce(w, "t", b"v%d" % i)
                for i in range(5):
                    part = w.receive().responses[0].partition_responses[0]
                    assert (part.error_code, part.base_offset) == (Error.NONE, 5 * round_ + i)
                    assert plog.high_watermark >= 5 * round_ + i + 1  # durable when answered
        wait_settled(b, "t")


def test_timeout_while_the_disk_holds_then_the_data_stays(tmp_path):
    fs = HeldFsyncs()
    with BrokerThread(tmp_path / "d", {"log.flush.mode": "fsync"}, fs=fs) as b:
        make_topic(b, "slow")
        with KafkaWire.connect(b.bootstrap) as w:
            fs.hold = "slow-0"
            send_produce(w, "slow", b"late", timeout_ms=50)
            send_produce(w, "slow", b"later", timeout_ms=50)
            parts = [w.receive().responses[0].partition_responses[0] for _ in range(2)]
            assert [p.error_code for p in parts] == [Error.REQUEST_TIMED_OUT] * 2
            fs.hold = None
            fs.release.set()
            # appended all the same (as in Kafka): the next batch comes after them
            send_produce(w, "slow", b"next")
            part = w.receive().responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (Error.NONE, 2)
        wait_settled(b, "slow")


def test_connection_closed_while_its_requests_wait(tmp_path):
    fs = HeldFsyncs()
    with BrokerThread(tmp_path / "d", {"log.flush.mode": "fsync"}, fs=fs) as b:
        make_topic(b, "gone")
        fs.hold = "gone-0"
        w = KafkaWire.connect(b.bootstrap)
        for i in range(3):
            send_produce(w, "gone", b"v%d" % i)
        assert fs.held.wait(30)
        w.close()
        deadline = time.monotonic() + 30
        while b.broker.connections:
            assert time.monotonic() < deadline, "the connection was not dropped"
            time.sleep(0.01)
        fs.hold = None
        fs.release.set()
        wait_settled(b, "gone")
        with KafkaWire.connect(b.bootstrap) as w:
            send_produce(w, "gone", b"after")
            part = w.receive().responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (Error.NONE, 3)
