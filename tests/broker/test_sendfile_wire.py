"""Zero-copy Fetch over real sockets: records of 32 KiB and more go from the segment file to
the socket with os.sendfile (storage/file_region.py, broker/connection.py), on uvloop and on
the default asyncio loop.

Every response's records are byte for byte what the storage layer reads for the same fetch
(the path used before, and still used with socket.sendfile.enable=false and on TLS
listeners). A slow reader pauses the connection's reading while a region waits for the
socket and gets every response, in order; a segment deleted by retention, a topic deleted,
or a log truncated after a failed fsync while a region is pending leaves the response whole;
a client that goes away mid-response releases the region (the segment is no longer
pinned)."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import ssl
from collections import deque

import pytest

from semel.broker.connection import Connection
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import data_records
from semel.storage.file_region import FileRegion
from tests.kafka_wire import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    KafkaWire,
    batch_headers,
    decode_records,
    fetch_request,
    make_topic,
    message,
    produce_request,
    records_batch,
)
from tests.waiting import wait_for

FETCH_VERSION = 12
BIG_VALUE = 60_000  # 15 of them: a batch of ~900 KB


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_kind(request, monkeypatch) -> str:
    """The broker's event loop: BrokerThread's uvloop, or asyncio's default loop."""
    if request.param == "asyncio":
        import uvloop

        monkeypatch.setattr(uvloop, "new_event_loop", asyncio.new_event_loop)
    return request.param


@pytest.fixture
def sendfile_calls(monkeypatch) -> list[int]:
    """The byte counts of every os.sendfile call in this process (the broker's)."""
    calls: list[int] = []
    real = os.sendfile

    def counting(out_fd, in_fd, offset, count):
        sent = real(out_fd, in_fd, offset, count)
        calls.append(sent)
        return sent

    monkeypatch.setattr(os, "sendfile", counting)
    return calls


@pytest.fixture
def broker(tmp_path, loop_kind):
    with BrokerThread(tmp_path / "data") as b:
        yield b


class SlowWire(KafkaWire):
    """A client with a 16 KiB receive buffer that reads only when the test says so."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.settimeout(60)
        sock.connect((host, int(port)))
        self.sock = sock
        self.client_id = "slow-reader"
        self.correlation_id = 0
        self.pending = deque()


def fill(b: BrokerThread, topic: str, *, big: int = 14, small: int = 14,
         seed: int = 0) -> list[bytes]:
    """Large batches (15 x 60 KB values) and small ones (50 x 1 KB) in turn; the values."""
    rng = random.Random(seed)
    values: list[bytes] = []
    with KafkaWire.connect(b.bootstrap) as wire:
        for i in range(big + small):
            large = (i % 2 == 0 and big > 0) or small == 0
            if large:
                big -= 1
                batch = [rng.randbytes(BIG_VALUE) for _ in range(15)]
            else:
                small -= 1
                batch = [rng.randbytes(1000) for _ in range(50)]
            resp = wire.request(PRODUCE, 9, produce_request(topic, 0, records_batch(batch)))
            assert resp.responses[0].partition_responses[0].error_code == 0
            values += batch
    return values


def stored(b: BrokerThread, topic: str, offset: int, max_bytes: int,
           read_committed: bool = False) -> tuple[bytes, list | None]:
    """What the storage layer reads (into memory) for this fetch, and for read_committed
    the aborted transactions it reports."""

    async def read():
        plog = b.broker.log_manager.get_partition(topic, 0)
        bound = plog.last_stable_offset if read_committed else plog.high_watermark
        data = plog.read(offset, max_bytes, upper_bound=bound).records
        aborted = plog.aborted_transactions_in(offset, data) if read_committed else None
        return bytes(data), aborted

    return b.call(read())


def pins(b: BrokerThread, topic: str) -> int:
    async def count():
        plog = b.broker.log_manager.get_partition(topic, 0)
        return sum(s.pinned for s in plog.segments) if plog is not None else 0

    return b.call(count())


def fetch_all(wire: KafkaWire, b: BrokerThread, topic: str, *, partition_max: int,
              isolation: int = 0) -> tuple[list[bytes], list]:
    """Fetch the partition from offset 0 to its end; checks every response against the
    storage layer's bytes for the same fetch. The records blobs and aborted lists."""
    blobs, aborted = [], []
    offset = 0
    while True:
        resp = wire.request(FETCH, FETCH_VERSION, fetch_request(
            [(topic, 0, offset)], partition_max_bytes=partition_max, isolation_level=isolation))
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0
        records = bytes(part.records or b"")
        if not records:
            return blobs, aborted
        want, want_aborted = stored(b, topic, offset, partition_max, isolation == 1)
        assert records == want
        got_aborted = part.aborted_transactions
        if isolation == 1:
            assert [(t.producer_id, t.first_offset) for t in got_aborted] == want_aborted
            aborted += got_aborted
        blobs.append(records)
        offset = batch_headers(records)[-1].next_offset


def values_of(blobs: list[bytes]) -> list[bytes]:
    return [r.value for blob in blobs for r in decode_records(blob)]


def connection_with_out(b: BrokerThread) -> Connection | None:
    return next((c for c in list(b.broker.connections) if c.out), None)


# -- the data path ------------------------------------------------------------------------------


def test_large_fetches_go_out_with_sendfile(broker, sendfile_calls):
    make_topic(broker, "big")
    values = fill(broker, "big")
    with KafkaWire.connect(broker.bootstrap) as wire:
        blobs, _ = fetch_all(wire, broker, "big", partition_max=3_000_000)
    assert values_of(blobs) == values
    assert sum(sendfile_calls) >= sum(len(blob) for blob in blobs) - 32 * 1024 * len(blobs)
    # MessagesOut from the batch headers, BytesOut from the lengths: as from the bytes
    assert broker.broker.metrics.topic_out["big"] == [sum(map(len, blobs)),
                                                       sum(map(data_records, blobs))]
    assert wait_for(lambda: pins(broker, "big") == 0)


def test_without_sendfile_the_bytes_are_read_and_written(tmp_path, sendfile_calls):
    with BrokerThread(tmp_path / "data", {"socket.sendfile.enable": "false"}) as b:
        make_topic(b, "big")
        values = fill(b, "big", big=4, small=4)
        with KafkaWire.connect(b.bootstrap) as wire:
            blobs, _ = fetch_all(wire, b, "big", partition_max=2_000_000)
        assert values_of(blobs) == values
        assert b.broker.metrics.topic_out["big"] == [sum(map(len, blobs)),
                                                      sum(map(data_records, blobs))]
    assert sendfile_calls == []


def test_several_partitions_and_small_records_in_one_response(broker, sendfile_calls):
    """Regions and in-memory records side by side in one response, in partition order."""
    make_topic(broker, "mixed", partitions=3)
    rng = random.Random(5)
    with KafkaWire.connect(broker.bootstrap) as wire:
        for partition, size in ((0, 200_000), (1, 100), (2, 200_000)):
            batch = records_batch([rng.randbytes(size) for _ in range(4)])
            wire.request(PRODUCE, 9, produce_request("mixed", partition, batch))
        resp = wire.request(FETCH, FETCH_VERSION, fetch_request(
            [("mixed", p, 0) for p in range(3)], partition_max_bytes=1 << 20))
    parts = resp.responses[0].partitions
    assert [len(decode_records(p.records)) for p in parts] == [4, 4, 4]
    assert len(sendfile_calls) >= 2


# -- back-pressure --------------------------------------------------------------------------------


def test_a_slow_reader_pauses_the_connection_and_gets_everything_in_order(broker):
    make_topic(broker, "slow")
    values = fill(broker, "slow")
    want, _ = stored(broker, "slow", 0, 50 << 20)
    wire = SlowWire(broker.bootstrap)
    with wire:
        wire.send(FETCH, FETCH_VERSION, fetch_request([("slow", 0, 0)],
                                                      partition_max_bytes=50 << 20))
        for _ in range(3):  # pipelined behind the fetch
            wire.send(API_VERSIONS, 3, message(API_VERSIONS, "request",
                                               client_software_name="t",
                                               client_software_version="1"))
        wire.send(METADATA, 12, message(METADATA, "request", topics=None))
        assert wait_for(lambda: connection_with_out(broker) is not None)
        conn = connection_with_out(broker)
        assert wait_for(lambda: conn.reading_paused and conn.out_waiting)
        assert pins(broker, "slow") >= 1
        fetched = wire.receive().responses[0].partitions[0].records
        assert bytes(fetched) == want
        for _ in range(3):
            assert wire.receive().error_code == 0
        assert wire.receive().brokers
        assert values_of([bytes(fetched)]) == values
        assert wait_for(lambda: not conn.out and not conn.reading_paused)
        assert conn.out_fd is None
    assert wait_for(lambda: pins(broker, "slow") == 0)


def test_a_region_waits_for_the_transport_to_drain_first(broker):
    """A response written through the transport (records under 32 KiB, in memory) that the
    socket has not taken yet: the region of the next response waits behind it."""
    make_topic(broker, "many", partitions=200)
    rng = random.Random(8)
    with KafkaWire.connect(broker.bootstrap) as wire:
        for p in range(200):
            batch = records_batch([rng.randbytes(30_000)])
            wire.request(PRODUCE, 9, produce_request("many", p, batch))
    make_topic(broker, "after")
    fill(broker, "after", big=6, small=2)
    want, _ = stored(broker, "after", 0, 50 << 20)
    wire = SlowWire(broker.bootstrap)
    with wire:
        # both requests in one write: they arrive together, before the first answer fills
        # the transport's buffer and pauses reading (else the second may wait unread)
        frames = []
        for body in (fetch_request([("many", p, 0) for p in range(200)],
                                   partition_max_bytes=1 << 20),
                     fetch_request([("after", 0, 0)], partition_max_bytes=50 << 20)):
            correlation_id, frame = wire.encode(FETCH, FETCH_VERSION, body)
            wire.pending.append((correlation_id, FETCH, FETCH_VERSION))
            frames.append(frame)
        wire.send_raw(b"".join(frames))
        assert wait_for(lambda: connection_with_out(broker) is not None)
        conn = connection_with_out(broker)
        assert conn.out_waiting and conn.transport.get_write_buffer_size() > 0
        first = wire.receive().responses[0].partitions
        assert [len(decode_records(p.records)) for p in first] == [1] * 200
        assert bytes(wire.receive().responses[0].partitions[0].records) == want
    assert wait_for(lambda: pins(broker, "after") == 0)


def test_a_client_gone_mid_response_releases_the_region(broker):
    make_topic(broker, "gone")
    fill(broker, "gone")
    wire = SlowWire(broker.bootstrap)
    wire.send(FETCH, FETCH_VERSION, fetch_request([("gone", 0, 0)], partition_max_bytes=50 << 20))
    assert wait_for(lambda: connection_with_out(broker) is not None)
    conn = connection_with_out(broker)
    wire.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    wire.close()  # a reset: the broker's next write or read fails
    assert wait_for(lambda: conn.closed and not conn.out and conn not in broker.broker.connections)
    assert conn.out_fd is None
    assert wait_for(lambda: pins(broker, "gone") == 0)


# -- the segment changing under a pending region -------------------------------------------------


def pending_fetch(b: BrokerThread, topic: str) -> tuple[SlowWire, Connection]:
    wire = SlowWire(b.bootstrap)
    wire.send(FETCH, FETCH_VERSION, fetch_request([(topic, 0, 0)], partition_max_bytes=50 << 20))
    assert wait_for(lambda: connection_with_out(b) is not None)
    return wire, connection_with_out(b)


def test_retention_deleting_the_segment_under_a_pending_region(broker):
    make_topic(broker, "ret", configs={"segment.bytes": str(8 << 20)})
    fill(broker, "ret")
    want, _ = stored(broker, "ret", 0, 50 << 20)
    wire, conn = pending_fetch(broker, "ret")

    async def delete_all():
        plog = broker.broker.log_manager.get_partition("ret", 0)
        first = plog.segments[0]
        plog.delete_records_before(plog.log_end_offset)
        await broker.broker.log_manager.run_retention()  # purges what is not pinned
        return first.path(".log")

    first_log = broker.call(delete_all())
    assert conn.out_regions  # the region was still waiting for the socket
    assert first_log.endswith(".deleted") and os.path.exists(first_log)  # still pinned
    with wire:
        assert bytes(wire.receive().responses[0].partitions[0].records) == want
    assert wait_for(lambda: pins(broker, "ret") == 0)
    broker.call(broker.broker.log_manager.run_retention())
    assert not os.path.exists(first_log)


def test_a_topic_deleted_under_a_pending_region(broker):
    make_topic(broker, "doomed")
    fill(broker, "doomed")
    want, _ = stored(broker, "doomed", 0, 50 << 20)
    wire, conn = pending_fetch(broker, "doomed")

    async def delete():
        broker.broker.log_manager.delete_topic("doomed")
        await broker.broker.log_manager.purge_deleted()

    broker.call(delete())
    assert conn.out_regions
    with wire:
        assert bytes(wire.receive().responses[0].partitions[0].records) == want
    assert wait_for(lambda: not conn.out)


def test_truncation_after_a_failed_fsync_under_a_pending_region(tmp_path, loop_kind):
    with BrokerThread(tmp_path / "data", {"log.flush.mode": "fsync"}) as b:
        make_topic(b, "sync")
        fill(b, "sync", big=8, small=2)
        want, _ = stored(b, "sync", 0, 50 << 20)
        wire, conn = pending_fetch(b, "sync")
        b.faults.fail_fsync(times=1, path_contains="sync-0")
        with KafkaWire.connect(b.bootstrap) as producer:
            batch = records_batch([b"x" * 50_000 for _ in range(10)])
            resp = producer.request(PRODUCE, 9, produce_request("sync", 0, batch))
        assert resp.responses[0].partition_responses[0].error_code == Error.KAFKA_STORAGE_ERROR
        state = b.partition("sync", 0)
        assert state.log_end_offset == state.high_watermark  # cut back to the durable end
        assert conn.out_regions  # the region was still waiting for the socket
        with wire:
            assert bytes(wire.receive().responses[0].partitions[0].records) == want
        assert wait_for(lambda: pins(b, "sync") == 0)


# -- read_committed, TLS, a transport without a socket -------------------------------------------


def test_read_committed_with_aborted_transactions(broker, sendfile_calls):
    from confluent_kafka import Producer

    make_topic(broker, "txn")
    rng = random.Random(9)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "sf-txn",
                         "linger.ms": 5})
    producer.init_transactions(30)
    committed = []
    for round_ in range(6):
        producer.begin_transaction()
        batch = [rng.randbytes(5_000) for _ in range(60)]
        for value in batch:
            producer.produce("txn", value, partition=0)
        if round_ % 3 == 1:
            assert producer.flush(30) == 0  # on disk before the abort (else it is purged)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += batch
    producer.flush(30)

    def settled() -> bool:  # the last COMMIT marker is written after commit_transaction
        state = broker.partition("txn", 0)
        return state.last_stable_offset == state.log_end_offset

    assert wait_for(settled)
    with KafkaWire.connect(broker.bootstrap) as wire:
        blobs, aborted = fetch_all(wire, broker, "txn", partition_max=600_000, isolation=1)
    assert len(aborted) == 2
    assert sendfile_calls
    # dropping the aborted producer's batches between its first offset and its marker, as
    # clients do, leaves the committed values
    aborted_starts = sorted(t.first_offset for t in aborted)
    kept, dropping = [], None
    for blob in blobs:
        for header in batch_headers(blob):
            if aborted_starts and header.base_offset >= aborted_starts[0] and dropping is None:
                dropping = aborted_starts.pop(0)
            if header.is_control:
                dropping = None
                continue
            if dropping is None:
                kept += [r.value for r in decode_records(blob)
                         if header.base_offset <= r.offset <= header.last_offset]
    assert kept == committed


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    from tests.security.certs import make_tls_files

    return make_tls_files(tmp_path_factory.mktemp("tls"))


def test_tls_listener_reads_the_records_into_memory(tmp_path, tls, sendfile_calls):
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
             "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tls.server_p12),
             "ssl.keystore.password": tls.password}
    with BrokerThread(tmp_path / "data", props) as b:
        make_topic(b, "secure")
        values = fill(b, "secure", big=4, small=4)
        port = next(e.port for e in b.broker.endpoints if e.name == "SSL")
        context = ssl.create_default_context(cafile=str(tls.ca_pem))
        wire = KafkaWire("127.0.0.1", port)
        wire.sock = context.wrap_socket(wire.sock, server_hostname="localhost")
        with wire:
            blobs, _ = fetch_all(wire, b, "secure", partition_max=2_000_000)
        assert values_of(blobs) == values
        assert sendfile_calls == []
        with KafkaWire.connect(b.bootstrap) as plain:  # the plaintext listener still sends files
            assert values_of(fetch_all(plain, b, "secure", partition_max=2_000_000)[0]) == values
        assert sendfile_calls


class SocketlessTransport(asyncio.Transport):
    """A transport with no socket behind it: what it is given to write, collected."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 1)}.get(name, default)

    def writelines(self, buffers) -> None:
        for buffer in buffers:
            self.written += buffer

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_transport_without_a_socket_gets_the_bytes(broker):
    make_topic(broker, "nosock")
    fill(broker, "nosock", big=2, small=0)

    async def write_through_connection():
        plog = broker.broker.log_manager.get_partition("nosock", 0)
        region = plog.read(0, 50 << 20, region_min=1).records
        assert isinstance(region, FileRegion)
        expected = region.read()
        conn = Connection(broker.broker)
        transport = SocketlessTransport()
        conn.connection_made(transport)
        assert conn.socket_fd is None
        conn._write([b"head", region, b"tail"])
        released = region.released
        conn.connection_lost(None)
        return bytes(transport.written), expected, released

    written, expected, released = broker.call(write_through_connection())
    assert written == b"head" + expected + b"tail"
    assert released
    assert pins(broker, "nosock") == 0
