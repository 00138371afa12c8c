"""CreateAcls / DescribeAcls / DeleteAcls over real sockets: confluent-kafka's and Java's
AdminClient, raw frames for what clients refuse to send, and ACLs surviving kill -9.

The principal of a PLAINTEXT connection is User:ANONYMOUS, so these tests grant or deny
User:ANONYMOUS, or name it a super user to administer ACLs. The broker's authorizer is
installed by the test (broker.authorizer) until broker.server opens it from
authorizer.class.name.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from semel.broker.security import AclOperation as Op
from semel.broker.security import AclPermissionType as Perm
from semel.broker.security import PatternType
from semel.broker.security import ResourceType as RType
from semel.broker.security.acl import AclBinding as Acl
from semel.broker.security.authorizer import Authorizer
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.javaclient import JavaClientError, run_java
from tests.kafka_wire import KafkaWire, message

ROOT = Path(__file__).resolve().parents[2]
ANON = "User:ANONYMOUS"
CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = 30, 29, 31


def install_authorizer(
    bt: BrokerThread, super_users: str = "", allow_everyone: bool = False
) -> Authorizer:
    authorizer = Authorizer.open(bt.data_dir, super_users, allow_everyone)

    async def install() -> None:
        bt.broker.authorizer = authorizer

    bt.call(install())
    return authorizer


def admin(bt) -> AdminClient:
    return AdminClient({"bootstrap.servers": bt.bootstrap, "socket.timeout.ms": 10000})


def key(b: AclBinding) -> tuple:
    return (
        b.restype.name,
        b.name,
        b.resource_pattern_type.name,
        b.principal,
        b.host,
        b.operation.name,
        b.permission_type.name,
    )


def describe_error(bootstrap: str) -> Error:
    """DescribeAcls' top-level error over a raw frame: librdkafka (2.16) drops it and
    answers an empty list, so confluent-kafka cannot show it."""
    with KafkaWire.connect(bootstrap) as wire:
        response = wire.request(
            DESCRIBE_ACLS,
            3,
            message(
                DESCRIBE_ACLS,
                "request",
                resource_type_filter=RType.ANY,
                resource_name_filter=None,
                pattern_type_filter=PatternType.ANY,
                principal_filter=None,
                host_filter=None,
                operation=Op.ANY,
                permission_type=Perm.ANY,
            ),
        )
    return Error(response.error_code)


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        future.result(timeout=30)
    return e.value.args[0]


CREATED = [
    AclBinding(
        ResourceType.TOPIC,
        "orders",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    ),
    AclBinding(
        ResourceType.TOPIC,
        "orders-",
        ResourcePatternType.PREFIXED,
        "User:*",
        "*",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    ),
    AclBinding(
        ResourceType.TOPIC,
        "*",
        ResourcePatternType.LITERAL,
        "User:ops",
        "10.0.0.1",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    ),
    AclBinding(
        ResourceType.GROUP,
        "app",
        ResourcePatternType.PREFIXED,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    ),
    AclBinding(
        ResourceType.TRANSACTIONAL_ID,
        "tx-1",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.WRITE,
        AclPermissionType.ALLOW,
    ),
    AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.IDEMPOTENT_WRITE,
        AclPermissionType.ALLOW,
    ),
]


def test_acl_apis_answer_security_disabled_without_authorizer(broker):
    client = admin(broker)
    (future,) = client.create_acls([CREATED[0]]).values()
    assert error_of(future).code() == KafkaError.SECURITY_DISABLED
    assert describe_error(broker.bootstrap) == Error.SECURITY_DISABLED
    (future,) = client.delete_acls(
        [
            AclBindingFilter(
                ResourceType.ANY,
                None,
                ResourcePatternType.ANY,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ]
    ).values()
    assert error_of(future).code() == KafkaError.SECURITY_DISABLED


def test_confluent_create_describe_delete(broker):
    authorizer = install_authorizer(broker, super_users=ANON)
    client = admin(broker)
    for future in client.create_acls(CREATED).values():
        assert future.result(timeout=30) is None
    assert len(authorizer.acls()) == len(CREATED)
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    described = client.describe_acls(every).result(timeout=30)
    assert sorted(map(key, described)) == sorted(map(key, CREATED))

    # MATCH: every ACL that applies to topic "orders-eu"
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "orders-eu",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert sorted(key(b) for b in client.describe_acls(match).result(timeout=30)) == sorted(
        key(b) for b in (CREATED[1], CREATED[2])
    )

    # the second filter also matches the first's ACL: it is listed under both
    deny_filter = AclBindingFilter(
        ResourceType.TOPIC,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.DENY,
    )
    star_filter = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:*",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    results = client.delete_acls([deny_filter, star_filter])
    assert [key(b) for b in results[deny_filter].result(timeout=30)] == [key(CREATED[1])]
    assert [key(b) for b in results[star_filter].result(timeout=30)] == [key(CREATED[1])]
    remaining = client.describe_acls(every).result(timeout=30)
    assert sorted(map(key, remaining)) == sorted(key(b) for b in CREATED if b is not CREATED[1])


def test_confluent_invalid_creations(broker):
    install_authorizer(broker, super_users=ANON)
    client = admin(broker)
    bad_cluster = AclBinding(
        ResourceType.BROKER,
        "my-cluster",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.ALTER,
        AclPermissionType.ALLOW,
    )
    no_colon = AclBinding(
        ResourceType.TOPIC,
        "t",
        ResourcePatternType.LITERAL,
        "alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    results = client.create_acls([bad_cluster, no_colon, CREATED[0]])
    err = error_of(results[bad_cluster])
    assert err.code() == KafkaError.INVALID_REQUEST
    assert err.str() == "The only valid name for the CLUSTER resource is kafka-cluster"
    err = error_of(results[no_colon])
    assert err.code() == KafkaError.INVALID_REQUEST and "Could not parse principal" in err.str()
    assert results[CREATED[0]].result(timeout=30) is None


def test_cluster_permissions_and_changes_apply_to_the_next_request(broker):
    authorizer = install_authorizer(broker)  # no super user: ANONYMOUS may do nothing
    client = admin(broker)
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    (future,) = client.create_acls([CREATED[0]]).values()
    assert error_of(future).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert describe_error(broker.bootstrap) == Error.CLUSTER_AUTHORIZATION_FAILED
    (future,) = client.delete_acls([every]).values()
    assert error_of(future).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED

    alter = Acl(
        RType.CLUSTER, "kafka-cluster", PatternType.LITERAL, ANON, "*", Op.ALTER, Perm.ALLOW
    )
    assert broker.call(authorizer.create_acls([alter])) == [None]
    (future,) = client.create_acls([CREATED[0]]).values()
    assert future.result(timeout=30) is None
    assert len(client.describe_acls(every).result(timeout=30)) == 2  # ALTER implies DESCRIBE

    # ANONYMOUS denies itself ALTER over the wire: its very next CreateAcls is refused,
    # DescribeAcls still works (a DENY of ALTER does not deny DESCRIBE)
    deny_alter = AclBinding(
        ResourceType.BROKER,
        "kafka-cluster",
        ResourcePatternType.LITERAL,
        ANON,
        "*",
        AclOperation.ALTER,
        AclPermissionType.DENY,
    )
    (future,) = client.create_acls([deny_alter]).values()
    assert future.result(timeout=30) is None
    (future,) = client.create_acls([CREATED[3]]).values()
    assert error_of(future).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert len(client.describe_acls(every).result(timeout=30)) == 3


def test_raw_frames_invalid_values_and_filters(broker):
    install_authorizer(broker, super_users=ANON)

    def creation(**kw):
        fields = {
            "resource_type": RType.TOPIC,
            "resource_name": "t",
            "resource_pattern_type": PatternType.LITERAL,
            "principal": "User:a",
            "host": "*",
            "operation": Op.READ,
            "permission_type": Perm.ALLOW,
        }
        return message(CREATE_ACLS, "request", "AclCreation", **{**fields, **kw})

    with KafkaWire.connect(broker.bootstrap) as wire:
        for version in (1, 2, 3):
            response = wire.request(
                CREATE_ACLS,
                version,
                message(
                    CREATE_ACLS,
                    "request",
                    creations=[
                        creation(operation=Op.ANY),
                        creation(resource_pattern_type=PatternType.MATCH),
                        creation(resource_type=99),
                        creation(permission_type=Perm.ANY),
                        creation(resource_name=""),
                        creation(host="10.1.1.1"),
                    ],
                ),
            )
            assert [(r.error_code, r.error_message) for r in response.results] == [
                (Error.INVALID_REQUEST, "Invalid operation ANY"),
                (Error.INVALID_REQUEST, "Invalid patternType MATCH"),
                (Error.INVALID_REQUEST, "Invalid resourceType UNKNOWN"),
                (Error.INVALID_REQUEST, "Invalid permissionType ANY"),
                (Error.INVALID_REQUEST, "Invalid empty resource name"),
                (Error.NONE, None),
            ]
            described = wire.request(
                DESCRIBE_ACLS,
                version,
                message(
                    DESCRIBE_ACLS,
                    "request",
                    resource_type_filter=RType.ANY,
                    resource_name_filter=None,
                    pattern_type_filter=PatternType.ANY,
                    principal_filter=None,
                    host_filter=None,
                    operation=Op.ANY,
                    permission_type=Perm.ANY,
                ),
            )
            assert described.error_code == Error.NONE
            [(resource,)] = [(r,) for r in described.resources]
            assert (resource.resource_type, resource.resource_name, resource.pattern_type) == (
                RType.TOPIC,
                "t",
                PatternType.LITERAL,
            )
            assert [
                (a.principal, a.host, a.operation, a.permission_type) for a in resource.acls
            ] == [("User:a", "10.1.1.1", Op.READ, Perm.ALLOW)]

        described = wire.request(
            DESCRIBE_ACLS,
            3,
            message(
                DESCRIBE_ACLS,
                "request",
                resource_type_filter=RType.ANY,
                resource_name_filter=None,
                pattern_type_filter=PatternType.ANY,
                principal_filter=None,
                host_filter=None,
                operation=Op.UNKNOWN,
                permission_type=Perm.ANY,
            ),
        )
        assert described.error_code == Error.INVALID_REQUEST

        # DescribeAcls groups the ACLs by resource pattern
        created = wire.request(
            CREATE_ACLS,
            3,
            message(
                CREATE_ACLS,
                "request",
                creations=[
                    creation(principal="User:b"),
                    creation(resource_pattern_type=PatternType.PREFIXED),
                    creation(resource_type=RType.GROUP, operation=Op.DELETE),
                ],
            ),
        )
        assert [r.error_code for r in created.results] == [Error.NONE] * 3
        described = wire.request(
            DESCRIBE_ACLS,
            3,
            message(
                DESCRIBE_ACLS,
                "request",
                resource_type_filter=RType.ANY,
                resource_name_filter="t",
                pattern_type_filter=PatternType.ANY,
                principal_filter=None,
                host_filter=None,
                operation=Op.ANY,
                permission_type=Perm.ANY,
            ),
        )
        grouped = [
            (r.resource_type, r.pattern_type, sorted((a.principal, a.host) for a in r.acls))
            for r in described.resources
        ]
        assert grouped == [
            (RType.TOPIC, PatternType.LITERAL, [("User:a", "10.1.1.1"), ("User:b", "*")]),
            (RType.TOPIC, PatternType.PREFIXED, [("User:a", "*")]),
            (RType.GROUP, PatternType.LITERAL, [("User:a", "*")]),
        ]
        deleted = wire.request(
            DELETE_ACLS,
            3,
            message(
                DELETE_ACLS,
                "request",
                filters=[
                    message(
                        DELETE_ACLS,
                        "request",
                        "DeleteAclsFilter",
                        resource_type_filter=RType.ANY,
                        resource_name_filter=None,
                        pattern_type_filter=PatternType.ANY,
                        principal_filter=None,
                        host_filter=None,
                        operation=Op.ANY,
                        permission_type=7,
                    ),
                    message(
                        DELETE_ACLS,
                        "request",
                        "DeleteAclsFilter",
                        resource_type_filter=RType.TOPIC,
                        resource_name_filter="t",
                        pattern_type_filter=PatternType.MATCH,
                        principal_filter=None,
                        host_filter="10.1.1.1",
                        operation=Op.ANY,
                        permission_type=Perm.ANY,
                    ),
                ],
            ),
        )
        first, second = deleted.filter_results
        assert (first.error_code, first.error_message) == (
            Error.INVALID_REQUEST,
            "Unknown entryFilter.",
        )
        assert second.error_code == Error.NONE
        # MATCH on "t" with host 10.1.1.1: the other two topic ACLs have host "*"
        matched = [(m.pattern_type, m.principal, m.host) for m in second.matching_acls]
        assert matched == [(PatternType.LITERAL, "User:a", "10.1.1.1")]


def test_java_admin_client_acls(tmp_path):
    acl = ["TOPIC", "orders", "PREFIXED", "User:alice", "*", "READ", "ALLOW"]
    every = ["ANY", "-", "ANY", "-", "-", "ANY", "ANY"]
    with BrokerThread(tmp_path / "off") as off:
        with pytest.raises(JavaClientError) as e:
            run_java("admin", "--bootstrap", off.bootstrap, "create-acls", *acl)
        assert e.value.root_class.endswith("SecurityDisabledException")
    with BrokerThread(tmp_path / "on") as on:
        authorizer = install_authorizer(on)
        with pytest.raises(JavaClientError) as e:
            run_java("admin", "--bootstrap", on.bootstrap, "describe-acls", *every)
        assert e.value.root_class.endswith("ClusterAuthorizationException")
        on.call(
            authorizer.create_acls(
                [
                    Acl(
                        RType.CLUSTER,
                        "kafka-cluster",
                        PatternType.LITERAL,
                        ANON,
                        "*",
                        Op.ALL,
                        Perm.ALLOW,
                    )
                ]
            )
        )
        run_java(
            "admin",
            "--bootstrap",
            on.bootstrap,
            "create-acls",
            *acl,
            "GROUP",
            "g",
            "LITERAL",
            "User:alice",
            "*",
            "READ",
            "DENY",
        )
        (listed,) = run_java(
            "admin",
            "--bootstrap",
            on.bootstrap,
            "describe-acls",
            "TOPIC",
            "orders-1",
            "MATCH",
            "-",
            "-",
            "ANY",
            "ANY",
        )
        assert listed["acls"] == [
            {
                "resource_type": "TOPIC",
                "name": "orders",
                "pattern_type": "PREFIXED",
                "principal": "User:alice",
                "host": "*",
                "operation": "READ",
                "permission": "ALLOW",
            }
        ]
        (deleted,) = run_java(
            "admin",
            "--bootstrap",
            on.bootstrap,
            "delete-acls",
            "GROUP",
            "-",
            "ANY",
            "-",
            "-",
            "ANY",
            "DENY",
        )
        assert [a["name"] for a in deleted["acls"]] == ["g"]
        (listed,) = run_java("admin", "--bootstrap", on.bootstrap, "describe-acls", *every)
        assert sorted(a["resource_type"] for a in listed["acls"]) == ["CLUSTER", "TOPIC"]


class AuthzBrokerProcess:
    """tests/security/authz_broker.py as a child process, stopped by its own pid."""

    def __init__(self, data_dir: Path, overrides: dict[str, str]) -> None:
        self.args = [
            sys.executable,
            str(ROOT / "tests" / "security" / "authz_broker.py"),
            "--data-dir",
            str(data_dir),
        ]
        for k, v in overrides.items():
            self.args += ["--set", f"{k}={v}"]
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.bootstrap = ""

    def start(self, timeout: float = 30) -> AuthzBrokerProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            self.args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(r"ready on (\S+):(\d+)", line)
                if m and not ready.is_set():
                    self.bootstrap = f"127.0.0.1:{m.group(2)}"
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or not self.bootstrap:
            self.kill()
            raise RuntimeError("broker did not become ready:\n" + "".join(self.lines[-30:]))
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)


def test_acls_survive_kill_9(tmp_path):
    data = tmp_path / "data"
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    first = AuthzBrokerProcess(data, {"super.users": ANON}).start()
    try:
        client = admin(first)
        for future in client.create_acls(CREATED).values():
            assert future.result(timeout=30) is None
        (future,) = client.delete_acls(
            [
                AclBindingFilter(
                    ResourceType.GROUP,
                    None,
                    ResourcePatternType.ANY,
                    None,
                    None,
                    AclOperation.ANY,
                    AclPermissionType.ANY,
                )
            ]
        ).values()
        assert [key(b) for b in future.result(timeout=30)] == [key(CREATED[3])]
    finally:
        first.kill()  # SIGKILL right after the answers: nothing flushed at shutdown
    second = AuthzBrokerProcess(data, {}).start()  # no super user now: ACLs decide
    try:
        assert describe_error(second.bootstrap) == Error.CLUSTER_AUTHORIZATION_FAILED
        client = admin(second)
        (future,) = client.create_acls([CREATED[3]]).values()
        assert error_of(future).code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    finally:
        second.kill()
    third = AuthzBrokerProcess(data, {"super.users": ANON}).start()
    try:
        client = admin(third)
        described = client.describe_acls(every).result(timeout=30)
        assert sorted(map(key, described)) == sorted(key(b) for b in CREATED if b is not CREATED[3])
    finally:
        third.kill()


def test_damaged_acl_file_stops_the_start(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "__semel_acls.json").write_text('{"version": 1, "acls": [{"resource_type": "TOP')
    proc = AuthzBrokerProcess(data, {"allow.everyone.if.no.acl.found": "true"})
    with pytest.raises(RuntimeError) as e:
        proc.start()
    assert "unreadable ACLs" in str(e.value) and "refusing to start" in str(e.value)
    assert proc.proc.poll() is not None
