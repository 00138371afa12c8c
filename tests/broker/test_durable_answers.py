"""acks=all Produce on a durable broker: the fast path's answers wait for the disk without a
task per request (``Dispatcher.dispatch``'s ``defer_on``, ``FastProduce.answer_when_durable``)
and leave in request order, several in one write. Pipelined requests, a timeout while the
disk holds, and a connection closed while its requests wait: nothing is left behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def three_held(tmp_path, topic: str, timeout_ms: int = 30_000,
               ) -> Iterator[tuple[BrokerThread, HeldFsyncs, KafkaWire]]:
    """A durable broker whose fsyncs of ``topic``-0 are held, and a connection that sent three
    acks=all requests for it, waiting for the disk (the held round has started)."""
    fs = HeldFsyncs()
    with BrokerThread(tmp_path / "d", {"log.flush.mode": "fsync"}, fs=fs) as b:
        make_topic(b, topic)
        fs.hold = f"{topic}-0"
        w = KafkaWire.connect(b.bootstrap)
        for i in range(3):
            send_produce(w, topic, b"v%d" % i, timeout_ms=timeout_ms)
        assert fs.held.wait(30)
        yield b, fs, w


def close_then_release(b: BrokerThread, fs: HeldFsyncs, w: KafkaWire, topic: str) -> None:
    """Closes the connection, waits for the broker to drop it, then lets the held fsyncs go
    and waits until nothing of the requests is left."""
    w.close()
    deadline = time.monotonic() + 30
    while b.broker.connections:
        assert time.monotonic() < deadline, "the connection was not dropped"
        time.sleep(0.01)
    fs.hold = None
    fs.release.set()
    wait_settled(b, topic)


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
    with three_held(tmp_path, "gone") as (b, fs, w):
        close_then_release(b, fs, w, "gone")
        with KafkaWire.connect(b.bootstrap) as w:
            send_produce(w, "gone", b"after")
            part = w.receive().responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (Error.NONE, 3)


def test_one_partition_waits_without_a_future_and_leaves_no_timer(tmp_path):
    """A request for one partition waits as the log's own waiter (no future, no countdown
    per request); when its connection closed meanwhile, the log's answer still stops the
    request's timeout (nothing of the request is kept until the timeout)."""
    with three_held(tmp_path, "one", timeout_ms=600_000) as (b, fs, w):
        async def waiters():
            return [waiter for _, _, waiter in
                    b.broker.log_manager.get_partition("one", 0)._waiters]

        deadline = time.monotonic() + 30
        while len(found := b.call(waiters())) < 2:  # the first may be in the held round
            assert time.monotonic() < deadline, "the requests did not wait"
            time.sleep(0.01)
        assert all(waiter.__class__.__name__ == "_OneWait" for waiter in found)
        assert all(waiter.timeout is not None for waiter in found)
        close_then_release(b, fs, w, "one")
        assert all(waiter.timeout is None and waiter.result.cancelled() for waiter in found)


def test_timeouts_share_one_timer_per_tick():
    """Request timeouts are kept in buckets of TIMEOUT_TICK_MS: one timer of the loop per
    bucket, however many requests; an answered request leaves its bucket, the bucket's
    timer times out the rest, never before their timeout."""
    from semel.broker.handlers.produce import TIMEOUT_TICK_MS, Timeouts

    class Loop:
        def __init__(self):
            self.now = 100.0
            self.timers = []

        def time(self):
            return self.now

        def call_at(self, when, callback, *args):
            self.timers.append((when, callback, args))

    class Waiter:
        def __init__(self):
            self.timeout = None
            self.fired = False

        def timed_out(self):
            self.timeout = None
            self.fired = True

    loop = Loop()
    timeouts = Timeouts(loop)
    waiters = [Waiter() for _ in range(5)]
    for waiter in waiters[:4]:
        waiter.timeout = timeouts.add(waiter, 30_000)
    loop.now += TIMEOUT_TICK_MS / 1000  # a later tick: a second timer
    waiters[4].timeout = timeouts.add(waiters[4], 30_000)
    assert len(loop.timers) == 2
    assert all(when >= 100.0 + 30 for when, _, _ in loop.timers)
    first = waiters[0].timeout
    del first[waiters[0]]  # answered: as _OneWait.set_result does
    waiters[0].timeout = None
    _, callback, args = loop.timers[0]
    callback(*args)
    assert [w.fired for w in waiters] == [False, True, True, True, False]
    _, callback, args = loop.timers[1]
    callback(*args)
    assert waiters[4].fired and timeouts.buckets == {}
