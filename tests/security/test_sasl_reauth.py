"""KIP-368 re-authentication (``connections.max.reauth.ms``) and the delay before a connection
whose authentication failed is closed (``connection.failed.authentication.delay.ms``).

On the wire, against a broker whose monotonic clock the test moves (``Broker(monotonic=)``):
SaslAuthenticate v1+ tells the client its session lifetime; a SaslHandshake + SaslAuthenticate
on an authenticated connection re-authenticates it and restarts the lifetime; changing the
principal fails and closes; once the lifetime is over, any request but a SaslHandshake closes
the connection without an answer, as Kafka's SocketServer does. With real clients (Java
kafka-clients 3.9.1 and librdkafka 2.16, which re-authenticate since Kafka 2.2 and librdkafka
2.2.0) a broker with a short lifetime keeps their connections producing: the handshakes
counted grow, and no connection is closed for an expired session.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Self

import pytest
from confluent_kafka import Producer

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests import javaclient
from tests.kafka_wire import KafkaWire, message

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret";')
LIFETIME_MS = 60_000
FAILED_DELAY_MS = 100  # connection.failed.authentication.delay.ms's default


class Clock:
    """The broker's monotonic clock in ms, moved by the test."""

    def __init__(self) -> None:
        self.ms = 10_000_000

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


def _listeners(reauth_ms: int, **extra: str) -> dict[str, str]:
    """SASL_PLAINTEXT with a session lifetime, ONCE (also SASL_PLAINTEXT, PLAIN) without."""
    return {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,ONCE://127.0.0.1:0",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,ONCE:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.once.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.connections.max.reauth.ms": str(reauth_ms),
        "auto.create.topics.enable": "true",
        **extra,
    }


def address(bt: BrokerThread, listener: str) -> str:
    port = next(e.port for e in bt.broker.endpoints if e.name == listener)
    return f"127.0.0.1:{port}"


@pytest.fixture(scope="module")
def clocked(tmp_path_factory):
    clock = Clock()
    bt = BrokerThread(tmp_path_factory.mktemp("reauth") / "data", _listeners(LIFETIME_MS),
                      monotonic=clock)
    with bt:
        bt.clock = clock
        yield bt


# -- raw frames ---------------------------------------------------------------------------


def handshake(wire: KafkaWire, mechanism: str = "PLAIN", version: int = 1):
    return wire.request(SASL_HANDSHAKE, version,
                        message(SASL_HANDSHAKE, "request", mechanism=mechanism))


def authenticate(wire: KafkaWire, user: str, password: str, version: int = 2):
    return wire.request(SASL_AUTHENTICATE, version, message(
        SASL_AUTHENTICATE, "request", auth_bytes=f"\0{user}\0{password}".encode()))


def login(wire: KafkaWire, user: str = "alice", version: int = 2):
    assert handshake(wire).error_code == Error.NONE
    response = authenticate(wire, user, f"{user}-secret", version)
    assert response.error_code == Error.NONE, response.error_message
    return response


def closed_unanswered(wire: KafkaWire) -> bool:
    """The broker closed the connection without answering what was sent (a reset counts:
    closing with our request unread resets the connection)."""
    try:
        return wire.read_frame() is None
    except ConnectionResetError:
        return True


def metadata(wire: KafkaWire):
    return wire.request(METADATA, 12, message(METADATA, "request", topics=None))


@pytest.mark.parametrize("version", [1, 2])
def test_authenticate_tells_the_session_lifetime(clocked, version):
    with KafkaWire.connect(address(clocked, "SASL_PLAINTEXT")) as wire:
        assert login(wire, version=version).session_lifetime_ms == LIFETIME_MS
    with KafkaWire.connect(address(clocked, "ONCE")) as wire:
        assert login(wire, version=version).session_lifetime_ms == 0


def test_reauthentication_before_expiry_restarts_the_lifetime(clocked):
    with KafkaWire.connect(address(clocked, "SASL_PLAINTEXT")) as wire:
        login(wire)
        clocked.clock.advance(LIFETIME_MS - 10_000)
        assert metadata(wire).brokers
        response = login(wire)  # re-authentication, on the same connection
        assert response.session_lifetime_ms == LIFETIME_MS
        clocked.clock.advance(30_000)  # past the first session's end, within the second's
        assert metadata(wire).brokers
        clocked.clock.advance(LIFETIME_MS - 30_000)  # the second session is over
        wire.send(METADATA, 12, message(METADATA, "request", topics=None))
        assert closed_unanswered(wire)  # closed without an answer


def test_reauthentication_as_another_user_fails_and_closes(clocked):
    with KafkaWire.connect(address(clocked, "SASL_PLAINTEXT")) as wire:
        login(wire, "alice")
        clocked.clock.advance(1_000)
        assert handshake(wire).error_code == Error.NONE
        response = authenticate(wire, "bob", "bob-secret")  # bob's own, valid password
        assert response.error_code == Error.SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals during re-authentication" in response.error_message
        wire.send(METADATA, 12, message(METADATA, "request", topics=None))
        clocked.clock.advance(FAILED_DELAY_MS)
        assert closed_unanswered(wire)


def test_reauthentication_with_a_wrong_password_closes(clocked):
    with KafkaWire.connect(address(clocked, "SASL_PLAINTEXT")) as wire:
        login(wire, "alice")
        clocked.clock.advance(1_000)
        assert handshake(wire).error_code == Error.NONE
        response = authenticate(wire, "alice", "not-alices")
        assert response.error_code == Error.SASL_AUTHENTICATION_FAILED
        clocked.clock.advance(FAILED_DELAY_MS)
        assert wire.is_closed_by_peer()


@pytest.mark.parametrize("api", ["metadata", "api_versions", "sasl_authenticate"])
def test_expired_session_closes_on_any_request_but_a_handshake(clocked, api):
    requests = {
        "metadata": (METADATA, 12, message(METADATA, "request", topics=None)),
        "api_versions": (API_VERSIONS, 3, message(
            API_VERSIONS, "request", client_software_name="t", client_software_version="1")),
        "sasl_authenticate": (SASL_AUTHENTICATE, 2, message(
            SASL_AUTHENTICATE, "request", auth_bytes=b"\0alice\0alice-secret")),
    }
    with KafkaWire.connect(address(clocked, "SASL_PLAINTEXT")) as wire:
        login(wire)
        clocked.clock.advance(LIFETIME_MS - 1)
        assert metadata(wire).brokers  # 1 ms before the end: still served
        clocked.clock.advance(1)
        wire.send(*requests[api])
        assert closed_unanswered(wire)
    counted = clocked.broker.metrics.registry.get_sample_value(
        "semel_bad_input_total", {"reason": "session_expired"})
    assert counted is not None and counted >= 1


def test_expired_session_may_still_reauthenticate(clocked):
    """Kafka begins a re-authentication before it looks at the session's expiry."""
    with KafkaWire.connect(address(clocked, "SASL_PLAINTEXT")) as wire:
        login(wire)
        clocked.clock.advance(LIFETIME_MS + 5_000)
        assert login(wire).session_lifetime_ms == LIFETIME_MS
        assert metadata(wire).brokers


def test_handshake_without_a_session_lifetime_is_illegal_but_harmless(clocked):
    """No lifetime (connections.max.reauth.ms=0): no re-authentication. Kafka's KafkaApis
    answers the handshake ILLEGAL_SASL_STATE and the connection goes on."""
    with KafkaWire.connect(address(clocked, "ONCE")) as wire:
        login(wire)
        clocked.clock.advance(3 * LIFETIME_MS)  # past any lifetime, within connections.max.idle.ms
        assert handshake(wire).error_code == Error.ILLEGAL_SASL_STATE
        assert metadata(wire).brokers


# -- the failed-authentication delay ---------------------------------------------------------

DELAY_MS = 60_000


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    clock = Clock()
    bt = BrokerThread(tmp_path_factory.mktemp("delay") / "data", _listeners(
        0, **{"connection.failed.authentication.delay.ms": str(DELAY_MS)}), monotonic=clock)
    with bt:
        bt.clock = clock
        yield bt


def silent(wire: KafkaWire, seconds: float) -> bool:
    """Nothing arrives and the connection stays open for ``seconds``."""
    wire.sock.settimeout(seconds)
    try:
        wire.sock.recv(1)
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False
    return False


def sweep(bt: BrokerThread) -> None:
    """Run the server's periodic sweep of stale connections now, on its loop."""
    async def run() -> None:
        bt.broker.close_stale_connections()
    bt.call(run())


def test_failed_authentication_closes_after_the_delay(delayed):
    """The answer comes at once; the connection stays open, answering nothing sent after the
    failure, until the broker's clock has moved the whole delay on, and is closed then."""
    with KafkaWire.connect(address(delayed, "SASL_PLAINTEXT")) as wire:
        assert handshake(wire).error_code == Error.NONE
        response = authenticate(wire, "alice", "wrong-password")
        assert response.error_code == Error.SASL_AUTHENTICATION_FAILED
        wire.send(METADATA, 12, message(METADATA, "request", topics=None))
        delayed.clock.advance(DELAY_MS - 1)
        sweep(delayed)
        assert silent(wire, 0.3)  # open, and nothing answered
        delayed.clock.advance(1)
        sweep(delayed)
        assert closed_unanswered(wire)  # closed, and the Metadata request never answered


# -- real clients ---------------------------------------------------------------------------

SHORT_MS = 1_500


@pytest.fixture(scope="module")
def short_lived(tmp_path_factory):
    bt = BrokerThread(tmp_path_factory.mktemp("short") / "data", _listeners(SHORT_MS))
    with bt:
        yield bt


class ReauthWatch:
    """Samples the broker's SASL_PLAINTEXT connections every 100 ms (on its loop) and keeps,
    per connection, the distinct times its re-authentications began: a connection listed with
    n of them was re-authenticated n times and stayed open through all of them but maybe the
    last. Also counts connections closed for an expired session."""

    def __init__(self, bt: BrokerThread) -> None:
        self.bt = bt
        self.starts: dict[str, set[int]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _expired(self) -> float:
        return self.bt.broker.metrics.registry.get_sample_value(
            "semel_bad_input_total", {"reason": "session_expired"}) or 0.0

    def __enter__(self) -> Self:
        self.expired_before = self._expired()
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        self.expired = self._expired() - self.expired_before

    def _run(self) -> None:
        async def sample():
            return [(c.peer, c.session.reauth_started_ms) for c in self.bt.broker.connections
                    if c.session.listener == "SASL_PLAINTEXT"]

        while not self.stop.wait(0.1):
            for peer, started in self.bt.call(sample()):
                starts = self.starts.setdefault(peer, set())
                if started is not None:
                    starts.add(started)

    @property
    def most_reauthentications(self) -> int:
        return max((len(s) for s in self.starts.values()), default=0)


def test_java_producer_reauthenticates(short_lived):
    """16 records, one every 500 ms, with a 1.5 s session lifetime: kafka-clients
    re-authenticates its connection several times and keeps producing on it."""
    javaclient.require_java()
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    with ReauthWatch(short_lived) as watch:
        results = javaclient.run_java(
            "produce", "--bootstrap", address(short_lived, "SASL_PLAINTEXT"), "--topic", topic,
            "--count", 16, "--interval-ms", 500, "--timeout-ms", 20000,
            "--prop", "security.protocol=SASL_PLAINTEXT", "--prop", "sasl.mechanism=PLAIN",
            "--prop", ("sasl.jaas.config=org.apache.kafka.common.security.plain."
                       'PlainLoginModule required username="alice" password="alice-secret";'))
    assert (results[-1]["acked"], results[-1]["errors"]) == (16, 0)
    assert watch.most_reauthentications >= 3, watch.starts
    assert watch.expired == 0


def test_librdkafka_producer_reauthenticates(short_lived):
    """The same with confluent-kafka (librdkafka re-authenticates since 2.2.0)."""
    producer = Producer({"bootstrap.servers": address(short_lived, "SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": "alice-secret",
                         "linger.ms": 0})
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    errors = []
    with ReauthWatch(short_lived) as watch:
        for i in range(16):
            producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: errors.append(e))
            assert producer.flush(20) == 0
            time.sleep(0.5)
    assert errors == [None] * 16
    assert watch.most_reauthentications >= 3, watch.starts
    assert watch.expired == 0
