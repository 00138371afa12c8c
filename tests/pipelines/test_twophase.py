"""pipelines.twophase (KIP-939) against semel over the wire: a confluent-kafka producer writes
and flushes a transaction, the helper prepares it (fencing the producer; read_committed
readers see nothing), then commits or aborts it by its stored identity - idempotently, and
aborting another transaction that is ongoing under the id instead (Kafka's
completeTransaction). A prepared transaction is never timed out (the broker's clock is
advanced and the reaper called), also after a restart. Refusals: two-phase commit off
(transaction.two.phase.commit.enable), no TwoPhaseCommit ACL, a broker without InitProducerId
v6, no broker, an untrusted TLS certificate - each a TwoPhaseCommitError naming the cause.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from semel.broker.testing import BrokerThread
from semel.pipelines.twophase import (
    NoOngoingTransaction,
    Outcome,
    PreparedTxn,
    TwoPhaseCommitClient,
    TwoPhaseCommitError,
)
from semel.protocol import api
from semel.protocol.frame import encode_response_header, parse_request_header
from tests.kafka_wire import make_topic

TIMEOUT_S = 30
MAX_INT32 = 2**31 - 1
TOPIC = "payments"
TWO_PC_ON = {"transaction.two.phase.commit.enable": "true",
             # timed-out transactions are aborted only when a test calls the reaper
             "transaction.abort.timed.out.transaction.cleanup.interval.ms": "3600000"}


# a prepared transaction's producer is left unused (it is fenced), not closed; the producers
# are destroyed at the end of the test
_alive: list[Producer] = []


class Clock:
    def __init__(self) -> None:
        self.ms = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def broker(tmp_path, clock):
    with BrokerThread(tmp_path / "data", TWO_PC_ON, clock=clock) as b:
        make_topic(b, TOPIC)
        yield b
        _alive.clear()  # the producers go before their broker


@pytest.fixture
def client(broker):
    with TwoPhaseCommitClient(broker.bootstrap, timeout_s=TIMEOUT_S) as c:
        yield c


def write_transaction(bootstrap: str, transactional_id: str, values: list[bytes]) -> Producer:
    """A confluent-kafka producer that has begun a transaction, written ``values`` to TOPIC
    and flushed them - but not committed."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 0})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for value in values:
        producer.produce(TOPIC, value)
    assert producer.flush(TIMEOUT_S) == 0
    _alive.append(producer)
    return producer


def commit_transaction(bootstrap: str, transactional_id: str, values: list[bytes]) -> None:
    write_transaction(bootstrap, transactional_id, values).commit_transaction(TIMEOUT_S)


def read(bootstrap: str, isolation: str, expected: int = 0) -> list[bytes]:
    """TOPIC's values from offset 0 until ``expected`` of them and the end of the partition
    (read_committed: the last stable offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10, "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got, at_end = [], False
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not (at_end and len(got) >= expected):
            assert time.monotonic() < deadline, f"read {got}, expected {expected} values"
            message = consumer.poll(0.1)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                at_end = True
                continue
            at_end = False
            got.append(message.value())
    finally:
        consumer.close()
    return got


def wait_for_state(client: TwoPhaseCommitClient, transactional_id: str, state: str) -> None:
    """Markers are written after EndTxn answers: wait until the coordinator completed them."""
    deadline = time.monotonic() + TIMEOUT_S
    while (now := client.describe(transactional_id).state) != state:
        assert time.monotonic() < deadline, f"{transactional_id} stuck in {now}"
        time.sleep(0.02)


def values(prefix: str, n: int = 3) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# -- prepare and complete ------------------------------------------------------------------


def test_prepare_then_commit(broker, client):
    written = values("a")
    producer = write_transaction(broker.bootstrap, "txn-a", written)
    prepared = client.prepare("txn-a")

    assert prepared.transactional_id == "txn-a"
    desc = client.describe("txn-a")
    assert desc.state == "Ongoing"
    assert desc.transaction_timeout_ms == MAX_INT32
    assert desc.partitions == {(TOPIC, 0)}
    assert (desc.producer_id, desc.producer_epoch) != (prepared.producer_id,
                                                       prepared.producer_epoch)
    assert client.prepare("txn-a") == prepared  # the ongoing pair stays the transaction's

    # the records are in the log, but not stable
    assert read(broker.bootstrap, "read_uncommitted", len(written)) == written
    assert read(broker.bootstrap, "read_committed") == []

    # the producer that wrote them is fenced: it cannot end the prepared transaction
    with pytest.raises(KafkaException) as fenced:
        producer.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].fatal()
    assert client.describe("txn-a").state == "Ongoing"

    # from another process: the stored identity is all that is needed
    stored = prepared.to_json()
    with TwoPhaseCommitClient(broker.bootstrap) as other:
        assert other.complete(PreparedTxn.from_json(stored)) is Outcome.COMMITTED
    assert read(broker.bootstrap, "read_committed", len(written)) == written
    wait_for_state(client, "txn-a", "CompleteCommit")
    assert client.complete(prepared) is Outcome.NOTHING_ONGOING
    assert client.complete(prepared, commit=False) is Outcome.NOTHING_ONGOING
    assert read(broker.bootstrap, "read_committed", len(written)) == written


def test_prepare_then_abort(broker, client):
    write_transaction(broker.bootstrap, "txn-b", values("aborted"))
    prepared = client.prepare("txn-b")
    assert client.complete(prepared, commit=False) is Outcome.ABORTED
    wait_for_state(client, "txn-b", "CompleteAbort")
    assert client.complete(prepared) is Outcome.NOTHING_ONGOING

    # a later committed transaction is read; the aborted one below it never is
    commit_transaction(broker.bootstrap, "txn-b", values("later"))
    assert read(broker.bootstrap, "read_committed", 3) == values("later")


def test_complete_again_while_markers_are_written(broker, client):
    """Between EndTxn's answer and the last marker the coordinator answers InitProducerId with
    CONCURRENT_TRANSACTIONS: retried until ``timeout_s``, then done once the markers are."""
    coordinator = broker.broker.txn_coordinator
    release = asyncio.Event()

    async def park(transactional_id, md):
        coordinator.before_markers = None
        await release.wait()

    write_transaction(broker.bootstrap, "txn-h", values("h"))
    prepared = client.prepare("txn-h")
    coordinator.before_markers = park
    assert client.complete(prepared) is Outcome.COMMITTED
    assert client.describe("txn-h").state == "PrepareCommit"
    with (TwoPhaseCommitClient(broker.bootstrap, timeout_s=0.3) as impatient,
          pytest.raises(TwoPhaseCommitError, match="still failing") as busy):
        impatient.complete(prepared)
    assert busy.value.error_name == "CONCURRENT_TRANSACTIONS"

    broker.loop.call_soon_threadsafe(release.set)
    assert client.complete(prepared) is Outcome.NOTHING_ONGOING
    assert client.describe("txn-h").state == "Empty"  # that InitProducerId began anew
    assert read(broker.bootstrap, "read_committed", 3) == values("h")


def test_complete_aborts_another_ongoing_transaction(broker, client):
    """Kafka's completeTransaction: the stored pair is not the ongoing transaction's (that
    one was completed before, a new one began) -> the ongoing one is aborted."""
    write_transaction(broker.bootstrap, "txn-c", values("first"))
    first = client.prepare("txn-c")
    assert client.complete(first) is Outcome.COMMITTED
    wait_for_state(client, "txn-c", "CompleteCommit")

    write_transaction(broker.bootstrap, "txn-c", values("second"))
    second = client.prepare("txn-c")
    assert second != first
    assert client.complete(first) is Outcome.MISMATCH_ABORTED  # a replayed decision
    wait_for_state(client, "txn-c", "CompleteAbort")
    assert client.complete(second) is Outcome.NOTHING_ONGOING

    commit_transaction(broker.bootstrap, "txn-c", values("third"))
    assert read(broker.bootstrap, "read_committed", 6) == values("first") + values("third")


def test_complete_with_a_wrong_epoch_aborts(broker, client):
    write_transaction(broker.bootstrap, "txn-d", values("d"))
    prepared = client.prepare("txn-d")
    wrong = PreparedTxn("txn-d", prepared.producer_id, prepared.producer_epoch + 1)
    assert client.complete(wrong) is Outcome.MISMATCH_ABORTED
    wait_for_state(client, "txn-d", "CompleteAbort")
    commit_transaction(broker.bootstrap, "txn-d", values("after"))
    assert read(broker.bootstrap, "read_committed", 3) == values("after")


def test_an_ordinary_producer_taking_the_id_over_aborts_the_prepared_transaction(
        broker, client):
    """initTransactions without keepPreparedTxn aborts whatever is ongoing, a prepared
    transaction too; completing it afterwards finds nothing."""
    write_transaction(broker.bootstrap, "txn-o", values("prepared"))
    prepared = client.prepare("txn-o")
    commit_transaction(broker.bootstrap, "txn-o", values("taken-over"))
    assert client.complete(prepared) is Outcome.NOTHING_ONGOING
    assert read(broker.bootstrap, "read_committed", 3) == values("taken-over")


def test_prepare_without_an_ongoing_transaction(broker, client):
    with pytest.raises(NoOngoingTransaction):
        client.prepare("never-used")
    commit_transaction(broker.bootstrap, "txn-e", values("e"))
    with pytest.raises(NoOngoingTransaction, match="txn-e"):
        client.prepare("txn-e")


def test_prepared_transaction_is_not_timed_out(broker, client, clock):
    write_transaction(broker.bootstrap, "txn-f", values("kept"))
    prepared = client.prepare("txn-f")
    write_transaction(broker.bootstrap, "plain", values("plain"))
    clock.ms += 2 * 3600 * 1000  # librdkafka's transaction.timeout.ms is 60 s

    aborted = broker.call(broker.broker.txn_coordinator.abort_timed_out_transactions())
    assert aborted == 1
    assert client.describe("plain").state in ("PrepareAbort", "CompleteAbort")
    assert client.describe("txn-f").state == "Ongoing"
    assert client.complete(prepared) is Outcome.COMMITTED
    assert read(broker.bootstrap, "read_committed", 3) == values("kept")


def test_prepared_transaction_survives_a_broker_restart(tmp_path, clock):
    """What makes a transaction prepared (the kept pair, the endless timeout) is durable."""
    with BrokerThread(tmp_path / "data", TWO_PC_ON, clock=clock) as b:
        make_topic(b, TOPIC)
        write_transaction(b.bootstrap, "txn-r", values("r"))
        with TwoPhaseCommitClient(b.bootstrap) as client:
            prepared = client.prepare("txn-r")
        _alive.clear()
    clock.ms += 2 * 3600 * 1000
    with (BrokerThread(tmp_path / "data", TWO_PC_ON, clock=clock) as b,
          TwoPhaseCommitClient(b.bootstrap, timeout_s=TIMEOUT_S) as client):
        assert b.call(b.broker.txn_coordinator.abort_timed_out_transactions()) == 0
        desc = client.describe("txn-r")
        assert (desc.state, desc.transaction_timeout_ms) == ("Ongoing", MAX_INT32)
        assert client.prepare("txn-r") == prepared
        assert client.complete(prepared) is Outcome.COMMITTED
        assert read(b.bootstrap, "read_committed", 3) == values("r")


# -- refusals ------------------------------------------------------------------------------


def test_broker_with_two_phase_commit_off(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        make_topic(b, TOPIC)
        producer = write_transaction(b.bootstrap, "txn-g", values("g"))
        with (TwoPhaseCommitClient(b.bootstrap, timeout_s=TIMEOUT_S) as client,
              pytest.raises(TwoPhaseCommitError,
                            match="transaction.two.phase.commit.enable") as refused):
            client.prepare("txn-g")
        assert refused.value.error_name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
        producer.commit_transaction(TIMEOUT_S)  # untouched: its producer still owns it
        assert read(b.bootstrap, "read_committed", 3) == values("g")
        del producer
        _alive.clear()


def test_authorizer_needs_the_two_phase_commit_acl(tmp_path):
    from semel.broker.security import AclOperation, AclPermissionType, PatternType, ResourceType
    from semel.broker.security.acl import AclBinding

    def grant(*acls: tuple[ResourceType, str, AclOperation]) -> None:
        bindings = [AclBinding(rtype, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op,
                               AclPermissionType.ALLOW) for rtype, name, op in acls]

        async def create():
            assert await b.broker.authorizer.create_acls(bindings) == [None] * len(bindings)

        b.call(create())

    overrides = {**TWO_PC_ON,
                 "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
    with BrokerThread(tmp_path / "data", overrides) as b:
        make_topic(b, TOPIC)
        grant((ResourceType.TOPIC, TOPIC, AclOperation.WRITE),
              (ResourceType.TOPIC, TOPIC, AclOperation.READ),
              (ResourceType.GROUP, "reader", AclOperation.READ),
              (ResourceType.TRANSACTIONAL_ID, "txn-acl", AclOperation.WRITE))
        write_transaction(b.bootstrap, "txn-acl", values("acl"))
        with TwoPhaseCommitClient(b.bootstrap, timeout_s=TIMEOUT_S) as client:
            with pytest.raises(TwoPhaseCommitError, match="TWO_PHASE_COMMIT") as denied:
                client.prepare("txn-acl")
            assert denied.value.error_name == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
            assert client.describe("txn-acl").state == "Ongoing"

            grant((ResourceType.TRANSACTIONAL_ID, "txn-acl", AclOperation.TWO_PHASE_COMMIT))
            assert client.complete(client.prepare("txn-acl")) is Outcome.COMMITTED
        assert read(b.bootstrap, "read_committed", 3) == values("acl")
        _alive.clear()


def test_broker_without_init_producer_id_v6():
    """A broker advertising InitProducerId up to v5: a clear error before any is sent."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    seen: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while head := conn.recv(4, socket.MSG_WAITALL):
                frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                key, version = struct.unpack_from(">hh", frame)
                header, _ = parse_request_header(frame, api.request_header_version(key, version))
                seen.append(key)
                mod = api.codec(key, "response")
                if key == 18:
                    body = mod.ApiVersionsResponse(api_keys=[
                        mod.ApiVersion(api_key=k, min_version=0, max_version=v)
                        for k, v in ((18, 3), (10, 4), (22, 5), (26, 4))])
                else:  # FindCoordinator v4: this broker
                    body = mod.FindCoordinatorResponse(coordinators=[mod.Coordinator(
                        key="t", node_id=1, host="127.0.0.1", port=port)])
                out = bytearray(encode_response_header(
                    header.correlation_id, api.response_header_version(key, version)))
                mod.encode(version, body, out)
                conn.sendall(struct.pack(">i", len(out)) + out)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with server, TwoPhaseCommitClient(f"127.0.0.1:{port}", timeout_s=5) as client:
        with pytest.raises(TwoPhaseCommitError, match="KIP-939") as refused:
            client.prepare("t")
        assert refused.value.error_name == "UNSUPPORTED_VERSION"
    thread.join(5)
    assert seen == [18, 10]


def test_unreachable_broker_is_a_network_error():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed below: nothing listens there
    started = time.monotonic()
    with (TwoPhaseCommitClient(f"127.0.0.1:{port}", timeout_s=0.5) as client,
          pytest.raises(TwoPhaseCommitError) as failed):
        client.prepare("t")
    assert failed.value.error_name == "NETWORK_EXCEPTION"
    assert time.monotonic() - started < 5


def test_over_tls(tmp_path):
    from tests.security.certs import make_tls_files

    tls = make_tls_files(tmp_path / "tls", clients=())
    overrides = {**TWO_PC_ON, "listeners": "SSL://127.0.0.1:0",
                 "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tls.server_p12),
                 "ssl.keystore.password": tls.password}
    context = ssl.create_default_context(cafile=str(tls.ca_pem))
    with (BrokerThread(tmp_path / "data", overrides) as b,
          TwoPhaseCommitClient(b.bootstrap, ssl_context=context) as client):
        with pytest.raises(NoOngoingTransaction):
            client.prepare("over-tls")
        assert client.describe("over-tls").state == "Empty"
        with (TwoPhaseCommitClient(b.bootstrap, ssl_context=ssl.create_default_context()) as
              untrusting, pytest.raises(TwoPhaseCommitError, match="TLS handshake")):
            untrusting.describe("over-tls")


# -- the stored form -----------------------------------------------------------------------


def test_prepared_txn_json_round_trip():
    txn = PreparedTxn("orders-7", 4001, 12)
    assert PreparedTxn.from_json(txn.to_json()) == txn


@pytest.mark.parametrize("text", [
    "[]", "{}", '{"transactional_id": "t", "producer_id": 1}',
    '{"transactional_id": "", "producer_id": 1, "producer_epoch": 0}',
    '{"transactional_id": "t", "producer_id": -1, "producer_epoch": 0}',
    '{"transactional_id": "t", "producer_id": 1, "producer_epoch": 32768}',
    '{"transactional_id": "t", "producer_id": "1", "producer_epoch": 0}',
    '{"transactional_id": "t", "producer_id": true, "producer_epoch": 0}',
])
def test_prepared_txn_from_bad_json(text):
    with pytest.raises(ValueError):
        PreparedTxn.from_json(text)


def test_bootstrap_servers_are_checked():
    for bad in ("", "localhost", "localhost:x", ":9092"):
        with pytest.raises(ValueError):
            TwoPhaseCommitClient(bad)
