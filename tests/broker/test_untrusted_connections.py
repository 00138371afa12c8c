"""What one hostile or buggy client can no longer do to the broker (issue 12), over real
sockets: pin memory with a size prefix, starve other clients by pipelining, hold a
connection open by trickling bytes, exceed the connection limits, crash the Metadata
encoder with a topic id in v10-11, or flood the log. Each test also checks that a real
client (confluent-kafka) keeps working and that stored data is untouched.

Timeouts run on an injected monotonic clock (the tests move it; they never sleep for it).
"""

from __future__ import annotations

import logging
import signal
import socket
import struct
import time

import pytest
from confluent_kafka import Producer

from semel.broker.testing import BrokerProcess, BrokerThread
from semel.protocol.errors import Error
from tests.broker.test_connection import ManualClock
from tests.kafka_wire import (
    METADATA,
    PRODUCE,
    KafkaWire,
    create_topic,
    make_topic,
    message,
    produce_request,
    records_batch,
)
from tests.waiting import wait_for

MiB = 1 << 20


def metadata_request(topics=None):
    return message(METADATA, "request", topics=topics, allow_auto_topic_creation=False)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def bad_input_count(broker, reason: str) -> float:
    return broker.metrics.registry.get_sample_value("semel_bad_input_total",
                                                    {"reason": reason}) or 0.0


def produce_confluent(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    """acks=all produce of ``values``; the offsets, in order."""
    offsets: list[int] = []
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for v in values:
        p.produce(topic, v, partition=0, on_delivery=done)
    assert p.flush(30) == 0
    assert not errors, errors
    return offsets


# -- item 2: memory grows with the bytes that arrive, and is bounded in total -----------------


def test_size_prefixes_alone_pin_no_memory(tmp_path) -> None:
    """Ten connections each announce a 100 MiB request and send one byte: before, each
    allocated the whole 100 MiB (RSS +1 GB); now only what arrived occupies memory."""
    with BrokerProcess(tmp_path / "d", {"log.flush.mode": "none"}) as broker:
        pid = broker.proc.pid
        socks = []
        try:
            with KafkaWire.connect(broker.bootstrap) as wire:  # warm up: one full round trip
                wire.request(METADATA, 12, metadata_request())
            before = rss_kib(pid)
            for _ in range(10):
                s = socket.create_connection(("127.0.0.1", broker.port))
                s.sendall(struct.pack(">i", 100 * MiB) + b"\x00")
                socks.append(s)
            with KafkaWire.connect(broker.bootstrap) as wire:  # served after the ten arrived
                assert wire.request(METADATA, 12, metadata_request()).brokers
            grown_kib = rss_kib(pid) - before
            assert grown_kib < 32 * 1024, f"RSS grew by {grown_kib} KiB"
        finally:
            for s in socks:
                s.close()


def test_request_memory_bound_pauses_large_requests_until_memory_is_given_back(tmp_path) -> None:
    """queued.max.request.bytes: three clients stall partway through 3 MiB requests and
    take 7/8 of the bound. Connections in the middle of a large request stop reading, and a
    new large request waits; small requests are still served. When the read timeout closes
    the stalled ones, the large request goes through."""
    clock = ManualClock()
    overrides = {"queued.max.request.bytes": str(4 * MiB),
                 "socket.request.max.bytes": str(4 * MiB), "message.max.bytes": str(4 * MiB),
                 "socket.request.read.timeout.ms": "30000"}
    with BrokerThread(tmp_path / "d", overrides, monotonic=clock) as b:
        make_topic(b, "t")
        memory = b.broker.request_memory
        stalled = []
        try:
            for _ in range(3):
                s = socket.create_connection(("127.0.0.1", b.broker.port))
                s.sendall(struct.pack(">i", 3 * MiB) + b"\x00" * (MiB + MiB // 5))
                stalled.append(s)
            assert wait_for(lambda: memory.large_full)
            assert not memory.full and memory.used <= 4 * MiB
            assert wait_for(lambda: sum(c.reading_paused for c in list(b.broker.connections)) == 3)
            assert produce_confluent(b.bootstrap, "t", [b"small"]) == [0]
            clock.advance(20_000)
            with KafkaWire.connect(b.bootstrap) as large:
                big = produce_request("t", 0, records_batch([b"x" * (2 * MiB)]))
                large.send(PRODUCE, 9, big)
                large.sock.settimeout(0.5)
                with pytest.raises(TimeoutError):
                    large.sock.recv(1)  # not answered: its bytes wait behind the stalled ones
                large.sock.settimeout(30)
                clock.advance(11_000)  # the stalled ones are past the read timeout, it is not
                response = large.receive()
            assert response.responses[0].partition_responses[0].base_offset == 1
            assert bad_input_count(b.broker, "read_timeout") == 3
            assert not memory.large_full
        finally:
            for s in stalled:
                s.close()
        assert wait_for(lambda: memory.used == 0)


# -- item 3: pipelining cannot crowd out other clients ----------------------------------------


def test_pipelined_requests_do_not_starve_another_client(tmp_path) -> None:
    """200 connections x 100 pipelined Metadata requests that never read their answers.
    Each connection runs one request at a time and stops reading while the next waits, so
    a producer's request is served after about a round of them, not behind all 20,000 (as
    before, when every frame became a task at once). The broker is frozen (SIGSTOP) the
    moment the producer's answer arrives, and the answers already written to the flooding
    connections are counted."""
    with BrokerProcess(tmp_path / "d", {"log.flush.mode": "none"}) as broker:
        with KafkaWire.connect(broker.bootstrap) as setup:
            create_topic(setup, "t")
            _, one = setup.encode(METADATA, 12, metadata_request())
        victim = KafkaWire.connect(broker.bootstrap)
        flood = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(200)]
        try:
            assert victim.request(METADATA, 12, metadata_request()).brokers
            for s in flood:
                s.sendall(one * 100)
            response = victim.request(PRODUCE, 9, produce_request(
                "t", 0, records_batch([b"not starved"])))
            broker.proc.send_signal(signal.SIGSTOP)
            try:
                handled = sum(count_frames(s) for s in flood)
            finally:
                broker.proc.send_signal(signal.SIGCONT)
            assert response.responses[0].partition_responses[0].error_code == Error.NONE
            assert handled < 20_000 // 4, f"{handled} flood requests answered before the produce"
        finally:
            victim.close()
            for s in flood:
                s.close()


def count_frames(sock: socket.socket) -> int:
    """Whole response frames already waiting in ``sock``'s receive buffer."""
    sock.setblocking(False)
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            break
        if not chunk:
            break
        data += chunk
    count = pos = 0
    while pos + 4 <= len(data):
        pos += 4 + struct.unpack_from(">i", data, pos)[0]
        count += pos <= len(data)
    return count


# -- item 4: slow clients are cut off; connection limits ------------------------------------


def test_trickling_client_is_closed_after_the_read_timeout(tmp_path) -> None:
    clock = ManualClock()
    with BrokerThread(tmp_path / "d", {"socket.request.read.timeout.ms": "30000"},
                      monotonic=clock) as b:
        make_topic(b, "t")
        with KafkaWire.connect(b.bootstrap) as slow, KafkaWire.connect(b.bootstrap) as fine:
            _, frame = slow.encode(METADATA, 12, metadata_request())
            slow.send_raw(frame[:5])
            assert wait_for(lambda: any(c.partial_since is not None
                                        for c in list(b.broker.connections)))
            for i in range(3):  # a byte every 10 s: each one used to reset the idle timer
                clock.advance(10_000)
                slow.send_raw(frame[5 + i:6 + i])
                time.sleep(0.05)
                assert fine.request(METADATA, 12, metadata_request()).brokers
            clock.advance(1_001)
            assert slow.is_closed_by_peer(timeout=20)
            assert fine.request(METADATA, 12, metadata_request()).brokers
        assert bad_input_count(b.broker, "read_timeout") == 1


def test_connection_limits_close_extra_connections(tmp_path) -> None:
    with BrokerThread(tmp_path / "d", {"max.connections.per.ip": "3",
                                       "max.connections": "5"}) as b:
        make_topic(b, "t")
        wires = [KafkaWire.connect(b.bootstrap) for _ in range(3)]
        try:
            for w in wires:
                assert w.request(METADATA, 12, metadata_request()).brokers
            extra = KafkaWire.connect(b.bootstrap)
            assert extra.is_closed_by_peer(timeout=20)
            extra.close()
            wires.pop().close()
            assert wait_for(lambda: len(b.broker.connections) == 2)
            again = KafkaWire.connect(b.bootstrap)
            wires.append(again)
            assert again.request(METADATA, 12, metadata_request()).brokers
            assert bad_input_count(b.broker, "connection_limit") == 1
        finally:
            for w in wires:
                w.close()


def test_max_connections_bounds_all_connections(tmp_path) -> None:
    with BrokerThread(tmp_path / "d", {"max.connections": "2"}) as b:
        first = KafkaWire.connect(b.bootstrap)
        second = KafkaWire.connect(b.bootstrap)
        try:
            assert wait_for(lambda: len(b.broker.connections) == 2)
            third = KafkaWire.connect(b.bootstrap)
            assert third.is_closed_by_peer(timeout=20)
            third.close()
            assert first.request(METADATA, 12, metadata_request()).brokers
            assert bad_input_count(b.broker, "connection_limit") == 1
        finally:
            first.close()
            second.close()


# -- item 6: Metadata v10-11 with a topic id -------------------------------------------------

# the reproduction from the issue: Metadata v11, one topic with id 11..11 and a null name
V11_TOPIC_ID = bytes.fromhex(
    "000000220003000b000000010001780002111111111111111111111111111111110000000000")


def test_metadata_v11_repro_by_topic_id_is_an_invalid_request(tmp_path) -> None:
    with BrokerThread(tmp_path / "d") as b, KafkaWire.connect(b.bootstrap) as wire:
        wire.send_raw(V11_TOPIC_ID)
        wire.pending.append((1, METADATA, 11))
        response = wire.receive()
        assert [(t.error_code, t.name) for t in response.topics] == [(Error.INVALID_REQUEST, "")]
        # the connection stays open and serves the next request
        assert wire.request(METADATA, 11, metadata_request()).brokers


@pytest.mark.parametrize("version", [10, 11])
@pytest.mark.parametrize("name", [None, "t"])
def test_metadata_topic_id_before_v12_is_an_invalid_request(tmp_path, version, name) -> None:
    from uuid import UUID

    with BrokerThread(tmp_path / "d") as b, KafkaWire.connect(b.bootstrap) as wire:
        make_topic(b, "t")
        topic = message(METADATA, "request", "MetadataRequestTopic",
                        topic_id=UUID(int=0x11 << 120), name=name)
        response = wire.request(METADATA, version, metadata_request([topic]))
        assert [(t.error_code, t.name) for t in response.topics] == [
            (Error.INVALID_REQUEST, name or "")]
        assert wire.request(METADATA, version, metadata_request()).brokers


def test_metadata_v12_unknown_topic_id(tmp_path) -> None:
    from uuid import UUID

    with BrokerThread(tmp_path / "d") as b, KafkaWire.connect(b.bootstrap) as wire:
        topic = message(METADATA, "request", "MetadataRequestTopic",
                        topic_id=UUID(int=0x11 << 120), name=None)
        response = wire.request(METADATA, 12, metadata_request([topic]))
        assert [t.error_code for t in response.topics] == [Error.UNKNOWN_TOPIC_ID]


# -- item 7: bad input is logged once per connection, rate-limited, without tracebacks -------


def test_bad_frames_are_counted_and_logged_without_tracebacks(tmp_path, caplog) -> None:
    clock = ManualClock()  # not advanced: the whole test is one rate-limit window
    caplog.set_level(logging.INFO, logger="broker")
    with BrokerThread(tmp_path / "d", monotonic=clock) as b:
        make_topic(b, "t")
        for payload in (b"\x00\x00\x00\x00",  # shorter than a request header
                        b"\x00\x00\x00\x08\x7f\x7f\x00\x00\x00\x00\x00\x01",  # unknown api
                        b"\xff\xff\xff\xfe"):  # negative size
            for _ in range(20):
                with KafkaWire.connect(b.bootstrap) as w:
                    w.send_raw(payload)
                    assert w.is_closed_by_peer()
        # one connection sending many bad frames logs once
        with KafkaWire.connect(b.bootstrap) as w:
            w.send_raw(b"\x00\x00\x00\x00" * 50)
            assert w.is_closed_by_peer()
        assert produce_confluent(b.bootstrap, "t", [b"still fine"]) == [0]
        registry = b.broker.metrics.registry
        total = sum(registry.get_sample_value("semel_bad_input_total", {"reason": r}) or 0
                    for r in ("malformed_request", "unknown_api", "framing"))
        assert total == 61
    records = [r for r in caplog.records if r.name.startswith("broker")]
    assert all(r.exc_info is None for r in records), [r.getMessage() for r in records]
    warnings = [r for r in records if r.levelno >= logging.WARNING
                and "closing" in r.getMessage()]
    assert 1 <= len(warnings) <= 10


# -- clients that leave while their acks=all produce waits for the disk -----------------------


def test_client_leaving_during_an_acks_all_wait_logs_nothing(tmp_path, caplog) -> None:
    """Found by the hostile soak: a produce cancelled while it waited for fsync left a gather
    whose exception nobody read ("exception was never retrieved", an ERROR traceback)."""
    import gc

    caplog.set_level(logging.WARNING)
    with BrokerThread(tmp_path / "d", {"log.flush.mode": "fsync"}) as b:
        make_topic(b, "t")
        for _ in range(40):
            with KafkaWire.connect(b.bootstrap) as w:
                w.send(PRODUCE, 9, produce_request("t", 0, records_batch([b"x" * 200_000]),
                                                   acks=-1))
        assert produce_confluent(b.bootstrap, "t", [b"after"])[0] >= 1
        b.call(_collect(gc))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


async def _collect(gc) -> None:
    gc.collect()


# -- item 5: decompressing and walking a large batch does not stall the event loop ----------


def test_large_compressed_batch_is_walked_while_the_loop_serves_others(tmp_path, monkeypatch):
    """A 4 MiB zstd batch: past the first MiB its walk moves to a worker thread. The walk is
    held there until another client has been answered by the loop, which shows the loop was
    free meanwhile (before, decompression ran on the loop: one bomb stalled every client)."""
    import os
    import threading

    from semel.protocol import validator
    from semel.protocol.records import build_batch

    off_loop = threading.Event()
    proceed = threading.Event()
    run = validator.RecordWalk.run

    def held_run(self, budget=None):
        if budget is None and not off_loop.is_set():  # the executor's call: the rest of it
            off_loop.set()
            proceed.wait(30)
        return run(self, budget)

    monkeypatch.setattr(validator.RecordWalk, "run", held_run)
    with BrokerThread(tmp_path / "d") as b:
        make_topic(b, "t")
        now = int(time.time() * 1000)
        rows = [(b"k%d" % i, os.urandom(64) * 16, [], now) for i in range(4000)]
        batch = build_batch(rows, compression=4)
        with KafkaWire.connect(b.bootstrap) as producer, KafkaWire.connect(b.bootstrap) as other:
            producer.send(PRODUCE, 9, produce_request("t", 0, batch))
            assert off_loop.wait(30), "the large walk never left the event loop"
            assert other.request(METADATA, 12, metadata_request()).brokers
            proceed.set()
            response = producer.receive()
        part = response.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (Error.NONE, 0)
