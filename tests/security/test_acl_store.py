"""Durable ACLs: written temp+fsync+rename+fsync-dir, reloaded on open, never guessed.

A change is on disk before create_acls/delete_acls return (it survives a power loss cut at
that moment, FaultyFileSystem.simulate_power_loss); a torn temp file leaves the previous
set; a damaged file stops the start with a one-line error instead of an empty ACL set.
"""

from __future__ import annotations

import errno
import json

import pytest

from semel.broker.security import AclOperation, AclPermissionType, PatternType, ResourceType
from semel.broker.security.acl import AclBinding, AclBindingFilter
from semel.broker.security.acl_store import ACLS_FILE, AclStore
from semel.broker.security.authorizer import Authorizer
from semel.protocol.errors import Error
from semel.storage.fs import FaultyFileSystem, MetadataFileError

READ_ORDERS = AclBinding(
    ResourceType.TOPIC,
    "orders",
    PatternType.LITERAL,
    "User:alice",
    "*",
    AclOperation.READ,
    AclPermissionType.ALLOW,
)
DENY_TX = AclBinding(
    ResourceType.TRANSACTIONAL_ID,
    "app-",
    PatternType.PREFIXED,
    "User:*",
    "10.0.0.9",
    AclOperation.WRITE,
    AclPermissionType.DENY,
)


def test_round_trip_and_readable_format(tmp_path):
    store = AclStore(tmp_path)
    assert store.load() == frozenset()
    store.save([DENY_TX, READ_ORDERS])
    assert store.load() == {READ_ORDERS, DENY_TX}
    stored = json.loads((tmp_path / ACLS_FILE).read_text())
    assert stored["version"] == 1
    assert stored["acls"][0] == {
        "resource_type": "TOPIC",
        "resource_name": "orders",
        "pattern_type": "LITERAL",
        "principal": "User:alice",
        "host": "*",
        "operation": "READ",
        "permission_type": "ALLOW",
    }


async def test_changes_are_durable_before_the_call_returns(tmp_path):
    fs = FaultyFileSystem()
    authorizer = Authorizer.open(tmp_path, "User:admin", fs=fs)
    assert await authorizer.create_acls([READ_ORDERS, DENY_TX]) == [None, None]
    fs.simulate_power_loss()
    reopened = Authorizer.open(tmp_path, "User:admin")
    assert reopened.acls() == sorted([READ_ORDERS, DENY_TX])
    assert reopened.super_users == {"User:admin"}
    assert reopened.authorize(
        "User:alice", "1.1.1.1", AclOperation.READ, ResourceType.TOPIC, "orders"
    )

    deleted = await authorizer.delete_acls([AclBindingFilter(principal="User:*")])
    assert deleted == [[DENY_TX]]
    fs.simulate_power_loss()
    assert Authorizer.open(tmp_path).acls() == [READ_ORDERS]


async def test_failed_write_changes_nothing(tmp_path):
    fs = FaultyFileSystem()
    authorizer = Authorizer.open(tmp_path, fs=fs)
    await authorizer.create_acls([READ_ORDERS])
    generation = authorizer.generation
    fs.fsync_error = errno.EIO
    created = await authorizer.create_acls([DENY_TX])
    assert created[0].code == Error.KAFKA_STORAGE_ERROR
    deleted = await authorizer.delete_acls([AclBindingFilter(), AclBindingFilter()])
    assert [r.code for r in deleted] == [Error.KAFKA_STORAGE_ERROR] * 2
    assert authorizer.acls() == [READ_ORDERS] and authorizer.generation == generation
    fs.clear_faults()
    fs.simulate_power_loss()
    assert Authorizer.open(tmp_path).acls() == [READ_ORDERS]


def test_torn_temp_file_leaves_the_previous_set(tmp_path):
    AclStore(tmp_path).save([READ_ORDERS])
    (tmp_path / (ACLS_FILE + ".tmp")).write_bytes(b'{"version": 1, "acls": [{"resou')
    assert AclStore(tmp_path).load() == {READ_ORDERS}
    AclStore(tmp_path).save([READ_ORDERS, DENY_TX])  # the next write reuses the temp name
    assert AclStore(tmp_path).load() == {READ_ORDERS, DENY_TX}


GOOD = {
    "resource_type": "TOPIC",
    "resource_name": "t",
    "pattern_type": "LITERAL",
    "principal": "User:a",
    "host": "*",
    "operation": "READ",
    "permission_type": "ALLOW",
}


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "truncated"),
        (b'{"version": 1, "acls": [', "truncated"),
        (b"\x00\x00\x00\x00", "malformed"),
        (b"[]", "Expected `object`"),
        (json.dumps({"version": 2, "acls": []}).encode(), "unsupported version 2"),
        (
            json.dumps({"version": 1, "acls": [{**GOOD, "operation": "READS"}]}).encode(),
            "unknown name 'READS'",
        ),
        (
            json.dumps({"version": 1, "acls": [{**GOOD, "operation": "ANY"}]}).encode(),
            "Invalid operation ANY",
        ),
        (
            json.dumps({"version": 1, "acls": [{**GOOD, "principal": "alice"}]}).encode(),
            "Could not parse principal",
        ),
        (json.dumps({"version": 1, "acls": [{**GOOD, "extra": 1}]}).encode(), "unknown field"),
    ],
)
def test_damaged_file_is_a_clear_error_not_an_empty_set(tmp_path, content, reason):
    (tmp_path / ACLS_FILE).write_bytes(content)
    with pytest.raises(MetadataFileError) as e:
        Authorizer.open(tmp_path, allow_everyone_if_no_acl_found=True)
    message = str(e.value)
    assert "\n" not in message
    assert str(tmp_path / ACLS_FILE) in message and "refusing to start" in message
    assert reason.lower() in message.lower()


def test_open_refuses_bad_super_users(tmp_path):
    with pytest.raises(ValueError, match="super.users"):
        Authorizer.open(tmp_path, "User:admin;root")
