"""DescribeUserScramCredentials / AlterUserScramCredentials with a real client on a real
socket (confluent-kafka's AdminClient), raw frames for what clients never send, durability
across kill -9, and the stored credential authenticating kafka-python's SCRAM client."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka.net.sasl.scram import ScramClient

from semel.broker.security import CLUSTER_NAME, AclOperation, ResourceType
from semel.broker.security.sasl import SaslServer
from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests.kafka_wire import API_VERSIONS, KafkaWire, message

DESCRIBE, ALTER = 50, 51
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


@pytest.fixture
def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def upsert(user, mechanism, password, iterations=4096, salt=None):
    return UserScramCredentialUpsertion(
        user, ScramCredentialInfo(mechanism, iterations), password.encode(), salt
    )


def alter(admin, *alterations) -> dict[str, Exception | None]:
    futures = admin.alter_user_scram_credentials(list(alterations))
    return {user: f.exception(30) for user, f in futures.items()}


def code(exc) -> int:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


def described(admin, users=None) -> dict:
    if users is None:
        found = admin.describe_user_scram_credentials().result(30)
    else:
        found = {u: f.result(30) for u, f in admin.describe_user_scram_credentials(users).items()}
    return {
        user: sorted((info.mechanism, info.iterations) for info in d.scram_credential_infos)
        for user, d in found.items()
    }


def scram_login(broker, mechanism: str, user: str, password: str):
    """kafka-python's SCRAM client against the broker's store, through SaslServer."""
    sasl = SaslServer([mechanism], None, broker.broker.scram_credentials)
    assert sasl.handshake(mechanism)[0] == Error.NONE
    client = ScramClient(user, password, mechanism)
    step = sasl.step(client.first_message())
    if step.error:
        return step
    client.process_server_first_message(step.challenge)
    step = sasl.step(client.final_message())
    if step.done:
        client.process_server_final_message(step.challenge)
    return step


def test_both_apis_are_advertised(bootstrap):
    with KafkaWire.connect(bootstrap) as wire:
        versions = wire.request(
            API_VERSIONS,
            3,
            message(API_VERSIONS, "request", client_software_name="t", client_software_version="1"),
        ).api_keys
    keys = {v.api_key: (v.min_version, v.max_version) for v in versions}
    assert keys[DESCRIBE] == (0, 0) and keys[ALTER] == (0, 0)


def test_upsert_describe_authenticate_delete(admin, broker):
    assert alter(
        admin, upsert("alice", SHA256, "alice-secret", 8192), upsert("bob", SHA512, "bob-secret")
    ) == {"alice": None, "bob": None}
    assert alter(admin, upsert("alice", SHA256, "alice-new-secret", 4096)) == {"alice": None}
    assert alter(admin, upsert("alice", SHA512, "alice-secret", 16384)) == {"alice": None}
    assert described(admin) == {"alice": [(SHA256, 4096), (SHA512, 16384)], "bob": [(SHA512, 4096)]}
    assert described(admin, ["bob"]) == {"bob": [(SHA512, 4096)]}

    # the credential the client hashed verifies a SCRAM exchange (the new password only)
    step = scram_login(broker, "SCRAM-SHA-256", "alice", "alice-new-secret")
    assert step.done and str(step.principal) == "User:alice"
    assert (
        scram_login(broker, "SCRAM-SHA-256", "alice", "alice-secret").error
        == Error.SASL_AUTHENTICATION_FAILED
    )
    assert scram_login(broker, "SCRAM-SHA-512", "bob", "bob-secret").done

    assert alter(admin, UserScramCredentialDeletion("alice", SHA256)) == {"alice": None}
    assert described(admin) == {"alice": [(SHA512, 16384)], "bob": [(SHA512, 4096)]}
    assert (
        scram_login(broker, "SCRAM-SHA-256", "alice", "alice-new-secret").error
        == Error.SASL_AUTHENTICATION_FAILED
    )
    assert alter(
        admin,
        UserScramCredentialDeletion("alice", SHA512),
        UserScramCredentialDeletion("bob", SHA512),
    ) == {"alice": None, "bob": None}
    assert described(admin) == {}


def test_client_visible_errors(admin):
    assert alter(admin, upsert("alice", SHA256, "pw")) == {"alice": None}
    results = alter(
        admin,
        UserScramCredentialDeletion("ghost", SHA256),
        UserScramCredentialDeletion("alice", SHA512),
        upsert("weak", SHA256, "pw", iterations=1000),
        upsert("slow", SHA256, "pw", iterations=16385),
    )
    assert code(results["ghost"]) == Error.RESOURCE_NOT_FOUND
    assert code(results["alice"]) == Error.RESOURCE_NOT_FOUND
    assert code(results["weak"]) == Error.UNACCEPTABLE_CREDENTIAL
    assert code(results["slow"]) == Error.UNACCEPTABLE_CREDENTIAL
    futures = admin.describe_user_scram_credentials(["alice", "ghost"])
    assert futures["alice"].result(30).user == "alice"
    assert code(futures["ghost"].exception(30)) == KafkaError.RESOURCE_NOT_FOUND
    assert described(admin) == {"alice": [(SHA256, 4096)]}  # nothing else was stored


# ------------------------------------------------------------------- raw frames, edge cases


@pytest.fixture
def wire(bootstrap):
    with KafkaWire.connect(bootstrap) as w:
        yield w


def raw_alter(wire, deletions=(), upsertions=()):
    req = message(
        ALTER,
        "request",
        deletions=[
            message(ALTER, "request", "ScramCredentialDeletion", name=n, mechanism=m)
            for n, m in deletions
        ],
        upsertions=[
            message(
                ALTER,
                "request",
                "ScramCredentialUpsertion",
                name=n,
                mechanism=m,
                iterations=i,
                salt=s,
                salted_password=p,
            )
            for n, m, i, s, p in upsertions
        ],
    )
    return {r.user: (r.error_code, r.error_message) for r in wire.request(ALTER, 0, req).results}


def raw_describe(wire, users):
    req = message(
        DESCRIBE,
        "request",
        users=None
        if users is None
        else [message(DESCRIBE, "request", "UserName", name=u) for u in users],
    )
    return wire.request(DESCRIBE, 0, req)


SALTED = b"\x01" * 32


def test_alter_validation_as_kafkas_controller(wire):
    assert raw_alter(
        wire, upsertions=[("dup", 1, 4096, b"s", SALTED), ("dup2", 1, 4096, b"s", SALTED)]
    ) == {"dup": (0, None), "dup2": (0, None)}
    results = raw_alter(
        wire,
        deletions=[
            ("dup", 1),
            ("dup", 1),
            ("", 1),
            ("mech", 3),
            ("ghost", 1),
            ("ghost", 1),
            ("dup2", 2),
        ],
        upsertions=[
            ("twice", 1, 4096, b"s", SALTED),
            ("twice", 2, 4096, b"s", SALTED),
            ("twice", 2, 4096, b"s", SALTED),
            ("nosalt", 1, 4096, b"", SALTED),
            ("nopw", 1, 4096, b"s", b""),
            ("unknown", 0, 4096, b"s", SALTED),
            ("few", 1, 4095, b"s", SALTED),
            ("many", 1, 16385, b"s", SALTED),
            ("ok", 2, 4096, b"s", b"\x02" * 64),
        ],
    )
    duplicate = (
        Error.DUPLICATE_RESOURCE,
        "A user credential cannot be altered twice in the same request",
    )
    assert results == {
        "dup": duplicate,
        "": (Error.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "mech": (Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        # the first failure of a user stands, later mentions are not looked at (as Kafka)
        "ghost": (
            Error.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
        "dup2": (
            Error.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        ),
        "twice": duplicate,
        "nosalt": (Error.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"),
        "nopw": (Error.UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty"),
        "unknown": (Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "few": (Error.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "many": (Error.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "ok": (Error.NONE, None),
    }
    found = {
        r.user: [(c.mechanism, c.iterations) for c in r.credential_infos]
        for r in raw_describe(wire, None).results
    }
    assert found == {"dup": [(1, 4096)], "dup2": [(1, 4096)], "ok": [(2, 4096)]}


def test_deletion_and_upsertion_of_one_user_in_one_request_is_a_duplicate(wire):
    assert raw_alter(wire, upsertions=[("u", 1, 4096, b"s", SALTED)]) == {"u": (0, None)}
    results = raw_alter(wire, deletions=[("u", 1)], upsertions=[("u", 2, 4096, b"s", SALTED)])
    assert results["u"][0] == Error.DUPLICATE_RESOURCE
    assert [r.user for r in raw_describe(wire, ["u"]).results] == ["u"]  # still there


def test_describe_duplicates_missing_and_everyone(wire):
    raw_alter(wire, upsertions=[("a", 1, 4096, b"s", SALTED), ("b", 2, 8192, b"s", SALTED * 2)])
    response = raw_describe(wire, ["a", "a", "ghost", "b"])
    assert response.error_code == 0
    by_user = {r.user: r for r in response.results}
    assert len(response.results) == 3
    assert by_user["a"].error_code == Error.DUPLICATE_RESOURCE
    assert by_user["ghost"].error_code == Error.RESOURCE_NOT_FOUND
    assert "does not exist: ghost" in by_user["ghost"].error_message
    assert [(c.mechanism, c.iterations) for c in by_user["b"].credential_infos] == [(2, 8192)]
    everyone = {r.user for r in raw_describe(wire, []).results}
    assert everyone == {r.user for r in raw_describe(wire, None).results} == {"a", "b"}


class Deny:
    """An authorizer that refuses everything and records what it was asked."""

    def __init__(self) -> None:
        self.asked = []

    def authorize(self, principal, host, operation, resource_type, name):
        self.asked.append((operation, resource_type, name))
        return False

    def cache_for(self, principal, host):
        """The per-connection view the broker asks (as Authorizer.cache_for)."""
        deny = self

        class View:
            def authorize(self, operation, resource_type, name):
                return deny.authorize(principal, host, operation, resource_type, name)

        return View()


def test_cluster_authorization(wire, broker):
    raw_alter(wire, upsertions=[("a", 1, 4096, b"s", SALTED)])
    deny = Deny()
    broker.broker.authorizer = deny
    try:
        response = raw_describe(wire, ["a"])
        assert response.error_code == Error.CLUSTER_AUTHORIZATION_FAILED
        assert [(r.user, r.error_code) for r in response.results] == [
            ("a", Error.CLUSTER_AUTHORIZATION_FAILED)
        ]
        results = raw_alter(wire, deletions=[("a", 1)], upsertions=[("z", 1, 4096, b"s", SALTED)])
        assert results == {
            "a": (Error.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
            "z": (Error.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
        }
        assert deny.asked == [
            (AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME),
            (AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME),
        ]
    finally:
        broker.broker.authorizer = None
    assert [r.user for r in raw_describe(wire, None).results] == ["a"]  # nothing changed


def test_credentials_survive_kill_9(tmp_path):
    data = tmp_path / "data"
    with BrokerProcess(data) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        assert alter(admin, upsert("alice", SHA512, "pw", 8192)) == {"alice": None}
        proc.kill()
    with BrokerProcess(data) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        assert described(admin) == {"alice": [(SHA512, 8192)]}
