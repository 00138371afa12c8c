"""Real clients over every security protocol and SASL mechanism, against one broker with four
listeners (PLAINTEXT, SSL with required client certificates, SASL_PLAINTEXT, SASL_SSL) and the
authorizer on: each client produces records and reads them back through a secured listener,
as a principal allowed everything (super.users). Then what a wrong client gets: a wrong
password, an unknown mechanism, a request before authenticating, a certificate the authorizer
does not know. Certificates are made by the test (tests/security/certs.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from semel.broker.security.ssl_principal import principal_from_certificate
from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests import javaclient
from tests.kafka_wire import KafkaWire, message
from tests.security.certs import make_tls_files

ROOT = Path(__file__).resolve().parents[2]
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_admin="admin-secret";')
SASL_HANDSHAKE, SASL_AUTHENTICATE, METADATA = 17, 36, 3


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"), clients=("alice", "mallory"),
                          java=javaclient.java_available())


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls):
    data = tmp_path_factory.mktemp("data")
    for spec in ("SCRAM-SHA-256=[name=bob,password=bob-secret]",
                 "SCRAM-SHA-512=[name=carol,password=carol-secret,iterations=8192]"):
        subprocess.run([sys.executable, "-m", "semel.broker", "scram", "--data-dir", str(data),
                        "--add", spec], check=True, cwd=ROOT, capture_output=True)
    alice_dn = principal_from_certificate(tls.clients["alice"].der())
    props = {
        "listeners": ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                      "SASL_SSL://127.0.0.1:0"),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.server_p12),
        "ssl.keystore.password": tls.password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
        "ssl.client.auth": "required",  # the SSL listener; SASL_SSL only with the prefix
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:alice;User:bob;User:carol;User:admin;{alice_dn}",
        "log.flush.mode": "none",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": "0",
    }
    with BrokerProcess(data, props) as b:
        assert set(b.ports) == {"SSL", "SASL_PLAINTEXT", "SASL_SSL"}, b.lines[-3:]
        yield b


def _address(broker, listener: str) -> str:
    return f"127.0.0.1:{broker.ports[listener]}"


def sasl(broker, protocol: str, mechanism: str, user: str, password: str) -> dict:
    return {"bootstrap.servers": _address(broker, protocol), "security.protocol": protocol,
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def mutual_tls(broker, tls, cn: str = "alice") -> dict:
    return {"bootstrap.servers": _address(broker, "SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(tls.ca_pem),
            "ssl.certificate.location": str(tls.client_pem[cn].cert),
            "ssl.key.location": str(tls.client_pem[cn].key)}


def with_tls(config: dict, tls) -> dict:
    return {**config, "ssl.ca.location": str(tls.ca_pem)}


def round_trip_confluent(config: dict, n: int = 5) -> list[bytes]:
    """Produce n records to a new topic and read them back with the same security settings."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    errors = []
    producer = Producer({**config, "message.timeout.ms": 20000})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0
    assert errors == [None] * n
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values = []
    try:
        for _ in range(200):
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                values.append(m.value())
            if len(values) == n:
                break
    finally:
        consumer.close()
    return values


EXPECTED = [f"v{i}".encode() for i in range(5)]


def test_confluent_sasl_ssl_plain(broker, tls):
    config = with_tls(sasl(broker, "SASL_SSL", "PLAIN", "alice", "alice-secret"), tls)
    assert round_trip_confluent(config) == EXPECTED


def test_confluent_sasl_plaintext_scram_sha_256(broker):
    config = sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "bob-secret")
    assert round_trip_confluent(config) == EXPECTED


def test_confluent_mutual_tls(broker, tls):
    assert round_trip_confluent(mutual_tls(broker, tls)) == EXPECTED


def test_mutual_tls_principal_is_the_certificate_subject(broker, tls):
    """alice's certificate maps to a super user; mallory's, from the same CA, to a principal
    the authorizer knows nothing of: the same request is allowed to one and refused to the
    other (CreateAcls needs Alter on the Cluster)."""
    binding = AclBinding(ResourceType.TOPIC, "mtls-check", ResourcePatternType.LITERAL,
                         "User:nobody", "*", AclOperation.READ, AclPermissionType.ALLOW)
    for cn, allowed in (("alice", True), ("mallory", False)):
        admin = AdminClient(mutual_tls(broker, tls, cn))
        future = admin.create_acls([binding], request_timeout=20)[binding]
        if allowed:
            assert future.result() is None
        else:
            with pytest.raises(KafkaException) as e:
                future.result()
            assert e.value.args[0].code() == Error.CLUSTER_AUTHORIZATION_FAILED


def test_confluent_wrong_password_fails_authentication(broker):
    errors = []
    config = sasl(broker, "SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", "not-bobs")
    producer = Producer({**config, "error_cb": errors.append, "message.timeout.ms": 3000})
    producer.produce("wrong-password", b"x")
    producer.flush(5)
    assert any(e.code() == -169 for e in errors), errors  # _AUTHENTICATION (librdkafka)


def test_kafka_python_sasl_plain_and_ssl(broker, tls):
    from kafka import KafkaConsumer, KafkaProducer

    common = [
        {"bootstrap_servers": _address(broker, "SASL_PLAINTEXT"),
         "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
         "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"},
        {"bootstrap_servers": _address(broker, "SSL"), "security_protocol": "SSL",
         "ssl_cafile": str(tls.ca_pem), "ssl_certfile": str(tls.client_pem["alice"].cert),
         "ssl_keyfile": str(tls.client_pem["alice"].key)},
    ]
    for config in common:
        topic = f"kp-{uuid.uuid4().hex[:8]}"
        producer = KafkaProducer(**config)
        for i in range(5):
            producer.send(topic, f"v{i}".encode()).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(topic, auto_offset_reset="earliest",
                                 consumer_timeout_ms=10000, **config)
        values = [m.value for m in consumer][:5]
        consumer.close()
        assert values == EXPECTED, config["security_protocol"]


def test_aiokafka_sasl_plain_and_ssl(broker, tls):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def round_trip(config: dict) -> list[bytes]:
        topic = f"ak-{uuid.uuid4().hex[:8]}"
        producer = AIOKafkaProducer(**config)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **config)
        await consumer.start()
        try:
            batch = await consumer.getmany(timeout_ms=10000, max_records=5)
            return [m.value for records in batch.values() for m in records]
        finally:
            await consumer.stop()

    context = create_ssl_context(cafile=str(tls.ca_pem),
                                 certfile=str(tls.client_pem["alice"].cert),
                                 keyfile=str(tls.client_pem["alice"].key))
    configs = [
        {"bootstrap_servers": _address(broker, "SASL_PLAINTEXT"),
         "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
         "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"},
        {"bootstrap_servers": _address(broker, "SSL"), "security_protocol": "SSL",
         "ssl_context": context},
    ]
    for config in configs:
        assert asyncio.run(round_trip(config)) == EXPECTED, config["security_protocol"]


def test_kcat_sasl_ssl_scram(broker, tls):
    kcat = __import__("shutil").which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed (apt-get install kcat)")
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    security = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512",
                "-X", "sasl.username=carol", "-X", "sasl.password=carol-secret",
                "-X", f"ssl.ca.location={tls.ca_pem}", "-b", _address(broker, "SASL_SSL")]
    done = subprocess.run([kcat, *security, "-P", "-t", topic], input=b"a\nb\nc\n", check=False,
                          timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    out = subprocess.run([kcat, *security, "-C", "-t", topic, "-e", "-o", "beginning"],
                         check=True, timeout=60, capture_output=True)
    assert out.stdout.split() == [b"a", b"b", b"c"]


def test_java_sasl_ssl_scram_sha_512_pkcs12_truststore(broker, tls):
    javaclient.require_java()
    assert tls.java_truststore_p12 is not None
    topic = f"java-{uuid.uuid4().hex[:8]}"
    props = ["--prop", "security.protocol=SASL_SSL", "--prop", "sasl.mechanism=SCRAM-SHA-512",
             "--prop", ("sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
                        ' required username="carol" password="carol-secret";'),
             "--prop", "ssl.truststore.type=PKCS12",
             "--prop", f"ssl.truststore.location={tls.java_truststore_p12}",
             "--prop", f"ssl.truststore.password={tls.password}"]
    bootstrap = _address(broker, "SASL_SSL")
    produced = javaclient.run_java("produce", "--bootstrap", bootstrap, "--topic", topic,
                                   "--count", 20, *props)
    summary = produced[-1]
    assert (summary["type"], summary["acked"], summary["errors"]) == ("produce_summary", 20, 0)
    consumed = javaclient.run_java("consume", "--bootstrap", bootstrap, "--topic", topic,
                                   "--count", 20, "--from-beginning", "--summary-only", *props)
    assert consumed[-1]["count"] == 20
    assert consumed[-1]["checksum"] == summary["checksum"]


# -- what a wrong client gets, on the wire -------------------------------------------------


def _handshake(wire: KafkaWire, mechanism: str, version: int = 1):
    return wire.request(SASL_HANDSHAKE, version,
                        message(SASL_HANDSHAKE, "request", mechanism=mechanism))


def test_unknown_mechanism_is_refused_then_closed(broker):
    with KafkaWire.connect(_address(broker, "SASL_PLAINTEXT")) as wire:
        response = _handshake(wire, "GSSAPI")
        assert response.error_code == Error.UNSUPPORTED_SASL_MECHANISM
        assert response.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert wire.is_closed_by_peer()


def test_wrong_password_answers_then_closes(broker):
    with KafkaWire.connect(_address(broker, "SASL_PLAINTEXT")) as wire:
        assert _handshake(wire, "PLAIN").error_code == Error.NONE
        response = wire.request(SASL_AUTHENTICATE, 2, message(
            SASL_AUTHENTICATE, "request", auth_bytes=b"\0alice\0wrong"))
        assert response.error_code == Error.SASL_AUTHENTICATION_FAILED
        assert "wrong" not in (response.error_message or "")
        assert wire.is_closed_by_peer()


def test_request_before_authentication_closes_the_connection(broker):
    with KafkaWire.connect(_address(broker, "SASL_PLAINTEXT")) as wire:
        wire.send(METADATA, 12, message(METADATA, "request", topics=None))
        assert wire.is_closed_by_peer()
        assert wire.read_frame() is None  # no answer was sent


def test_plain_v0_handshake_then_raw_tokens(broker):
    """SaslHandshake v0: the tokens follow as bare size-prefixed frames (Kafka 0.10 clients)."""
    with KafkaWire.connect(_address(broker, "SASL_PLAINTEXT")) as wire:
        assert _handshake(wire, "PLAIN", version=0).error_code == Error.NONE
        token = b"\0admin\0admin-secret"
        wire.send_raw(len(token).to_bytes(4, "big") + token)
        assert wire.read_frame() == b""  # PLAIN's empty server token
        response = wire.request(METADATA, 12, message(METADATA, "request", topics=None))
        assert response.brokers  # authenticated: requests are served


def test_describe_configs_hides_passwords_as_kafka_does(broker, tls):
    """A password setting is described with a null value and is_sensitive, never its text."""
    from confluent_kafka.admin import ConfigResource

    admin = AdminClient(with_tls(sasl(broker, "SASL_SSL", "PLAIN", "admin", "admin-secret"),
                                 tls))
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    entries = admin.describe_configs([resource], request_timeout=20)[resource].result()
    password = entries["ssl.keystore.password"]
    assert password.is_sensitive and password.value is None
    assert not entries["ssl.keystore.location"].is_sensitive
    assert all(tls.password not in (e.value or "") for e in entries.values())
