"""``semel acls`` against a broker with the authorizer on (User:ANONYMOUS, every PLAINTEXT
connection, is a super user): the ACLs the CLI adds are the ones confluent-kafka's
AdminClient describes, the CLI lists what the AdminClient created, and remove deletes them."""

from __future__ import annotations

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.tools_cli.semel_cli import semel

TIMEOUT = 30


def wire_acls(admin: AdminClient, resource_type: ResourceType, name: str) -> set[tuple]:
    found = admin.describe_acls(AclBindingFilter(
        resource_type, name, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY)).result(TIMEOUT)
    return {(a.restype.name, a.name, a.resource_pattern_type.name, a.principal, a.host,
             a.operation.name, a.permission_type.name) for a in found}


def cli_acls(bindings: list[dict]) -> set[tuple]:
    return {(b["resource_type"], b["resource_name"], b["pattern_type"], b["principal"],
             b["host"], b["operation"], b["permission_type"]) for b in bindings}


def test_add_list_remove(cli_broker):
    b = cli_broker.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    added = semel("acls", "add", "--allow-principal", "User:alice", "--operation", "Read",
                  "--operation", "describe", "--topic", "cli-acl-orders", bootstrap=b,
                  json_output=True).json["created"]
    result = semel("acls", "--add", "--deny-principal", "User:eve", "--deny-host", "10.1.2.3",
                   "--operation", "WRITE", "--topic", "cli-acl-orders", bootstrap=b)
    assert result.returncode == 0, result.stderr
    expected = {("TOPIC", "cli-acl-orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"),
                ("TOPIC", "cli-acl-orders", "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW"),
                ("TOPIC", "cli-acl-orders", "LITERAL", "User:eve", "10.1.2.3", "WRITE", "DENY")}
    assert cli_acls(added) == {a for a in expected if a[3] == "User:alice"}
    assert wire_acls(admin, ResourceType.TOPIC, "cli-acl-orders") == expected

    # --producer on a prefixed topic and a transactional id; --consumer on a group
    result = semel("acls", "add", "--allow-principal", "User:bob", "--producer", "--topic",
                   "cli-acl-", "--transactional-id", "cli-acl-tx", "--resource-pattern-type",
                   "prefixed", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert {(r[3], r[5]) for r in wire_acls(admin, ResourceType.TOPIC, "cli-acl-")} == {
        ("User:bob", "WRITE"), ("User:bob", "DESCRIBE"), ("User:bob", "CREATE")}
    assert {r[5] for r in wire_acls(admin, ResourceType.TRANSACTIONAL_ID, "cli-acl-tx")} == {
        "WRITE", "DESCRIBE"}
    result = semel("acls", "add", "--allow-principal", "User:carol", "--consumer", "--group",
                   "cli-acl-group", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert wire_acls(admin, ResourceType.GROUP, "cli-acl-group") == {
        ("GROUP", "cli-acl-group", "LITERAL", "User:carol", "*", "READ", "ALLOW")}

    # what the AdminClient creates, the CLI lists
    futures = admin.create_acls([AclBinding(
        ResourceType.TOPIC, "cli-acl-other", ResourcePatternType.LITERAL, "User:dave", "*",
        AclOperation.ALTER, AclPermissionType.ALLOW)])
    for future in futures.values():
        future.result(TIMEOUT)
    everything = cli_acls(semel("acls", "list", bootstrap=b, json_output=True).json["acls"])
    wire = set()
    for kind, name in ((ResourceType.TOPIC, "cli-acl-orders"), (ResourceType.TOPIC, "cli-acl-"),
                       (ResourceType.TOPIC, "cli-acl-other"),
                       (ResourceType.TRANSACTIONAL_ID, "cli-acl-tx"),
                       (ResourceType.GROUP, "cli-acl-group")):
        wire |= wire_acls(admin, kind, name)
    assert {a for a in everything if a[1].startswith("cli-acl-")} == wire
    assert cli_acls(semel("acls", "list", "--topic", "cli-acl-orders", "--principal",
                          "User:alice", bootstrap=b, json_output=True).json["acls"]) == {
        a for a in expected if a[3] == "User:alice"}
    # match: every ACL that applies to a topic of that name, prefixed ones included
    matching = cli_acls(semel("acls", "list", "--topic", "cli-acl-orders",
                              "--resource-pattern-type", "match", bootstrap=b,
                              json_output=True).json["acls"])
    assert matching == expected | wire_acls(admin, ResourceType.TOPIC, "cli-acl-")

    # remove one entry, then everything left on the topic
    refused = semel("acls", "remove", "--topic", "cli-acl-orders", bootstrap=b)
    assert refused.returncode == 2 and "--force" in refused.error_line  # stdin is no terminal
    removed = semel("acls", "remove", "--topic", "cli-acl-orders", "--allow-principal",
                    "User:alice", "--operation", "READ", "--force", bootstrap=b,
                    json_output=True).json["deleted"]
    assert cli_acls(removed) == {
        ("TOPIC", "cli-acl-orders", "LITERAL", "User:alice", "*", "READ", "ALLOW")}
    assert len(wire_acls(admin, ResourceType.TOPIC, "cli-acl-orders")) == 2
    result = semel("acls", "remove", "--topic", "cli-acl-orders", "--force", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert wire_acls(admin, ResourceType.TOPIC, "cli-acl-orders") == set()

    # an operation the resource type does not have: refused before anything is sent
    bad = semel("acls", "add", "--allow-principal", "User:x", "--operation", "IdempotentWrite",
                "--topic", "cli-acl-bad", bootstrap=b)
    assert bad.returncode == 2 and "IDEMPOTENT_WRITE" in bad.error_line
    assert wire_acls(admin, ResourceType.TOPIC, "cli-acl-bad") == set()
