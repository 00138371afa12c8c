"""SCRAM users managed from Java's AdminClient (alterUserScramCredentials and
describeUserScramCredentials, kafka-clients 3.9.1): a user the Java client creates can then
authenticate with its password over SASL; deleting it ends that. The client hashes the
password itself and sends the salted password; the broker keeps only the keys derived from
it (tests/security/test_scram_admin_wire.py covers confluent-kafka and the raw API)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from semel.broker.testing import BrokerProcess
from tests import javaclient


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    javaclient.require_java()
    props = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
             "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512", "log.flush.mode": "none"}
    with BrokerProcess(tmp_path_factory.mktemp("data"), props) as b:
        yield b


def java_admin(broker, *args):
    return javaclient.run_java("admin", "--bootstrap", broker.bootstrap, *args)


def authenticates(broker, mechanism: str, user: str, password: str) -> bool:
    """Whether a librdkafka producer with these credentials gets a record acknowledged."""
    errors, acked = [], []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": user, "sasl.password": password,
                         "message.timeout.ms": 4000, "error_cb": errors.append})
    producer.produce(f"scram-{uuid.uuid4().hex[:6]}", b"x",
                     on_delivery=lambda e, m: acked.append(e is None))
    producer.flush(6)
    return acked == [True]


def test_java_admin_creates_describes_and_deletes_scram_users(broker):
    java_admin(broker, "upsert-scram", "dora", "SCRAM-SHA-512", "dora-secret", 8192)
    java_admin(broker, "upsert-scram", "dora", "SCRAM-SHA-256", "dora-secret-256", 4096)
    java_admin(broker, "upsert-scram", "emil", "SCRAM-SHA-256", "emil-secret", 4096)
    described = {line["user"]: sorted((c["mechanism"], c["iterations"])
                                      for c in line["credentials"])
                 for line in java_admin(broker, "describe-scram")}
    assert described == {"dora": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
                         "emil": [("SCRAM-SHA-256", 4096)]}
    assert authenticates(broker, "SCRAM-SHA-512", "dora", "dora-secret")
    assert authenticates(broker, "SCRAM-SHA-256", "dora", "dora-secret-256")
    assert not authenticates(broker, "SCRAM-SHA-512", "dora", "dora-secret-256")

    java_admin(broker, "delete-scram", "dora", "SCRAM-SHA-512")
    [line] = java_admin(broker, "describe-scram", "dora")
    assert line["credentials"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]
    assert not authenticates(broker, "SCRAM-SHA-512", "dora", "dora-secret")


def test_java_admin_errors_are_kafkas(broker):
    # a user without credentials: RESOURCE_NOT_FOUND in its result, which Java's all() does
    # not fail on (it maps the user to no credentials)
    [line] = java_admin(broker, "describe-scram", "nobody")
    assert (line["user"], line["credentials"]) == ("nobody", [])
    with pytest.raises(javaclient.JavaClientError) as e:
        java_admin(broker, "upsert-scram", "flo", "SCRAM-SHA-256", "pw", 100)  # < 4096
    assert e.value.exception_class.endswith("UnacceptableCredentialException")
