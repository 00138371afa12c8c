"""Durable ACLs: ``<data dir>/__semel_acls.json``, written like the topic metadata.

Format (msgspec JSON, sorted, names rather than wire codes so a person can read it)::

    {"version": 1, "acls": [{"resource_type": "TOPIC", "resource_name": "orders",
      "pattern_type": "LITERAL", "principal": "User:alice", "host": "*",
      "operation": "READ", "permission_type": "ALLOW"}, ...]}

Every change rewrites the whole file through ``storage.fs``'s ``write_file_atomic`` (temp
file, fsync, rename, fsync the directory), so after a crash the file holds either the old
or the new set, never a torn one; a leftover ``.tmp`` is ignored. A missing file means no
ACLs. A file that cannot be read, or that holds an ACL CreateAcls would refuse, stops the
broker with a one-line ``MetadataFileError``: starting with no ACLs instead would lock
everyone out, or open everything when ``allow.everyone.if.no.acl.found`` is set.
``save`` blocks (fsync); callers run it off the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

from semel.broker.security import AclOperation, AclPermissionType, PatternType, ResourceType
from semel.broker.security.acl import AclBinding, validate_new_acl
from semel.protocol.errors import KafkaError
from semel.storage.fs import MetadataFileError, RealFileSystem

ACLS_FILE = "__semel_acls.json"
VERSION = 1


class _StoredAcl(msgspec.Struct, forbid_unknown_fields=True):
    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission_type: str


class _AclsFile(msgspec.Struct, forbid_unknown_fields=True):
    version: int
    acls: list[_StoredAcl]


class AclStore:
    """The ACL file of one data directory."""

    def __init__(self, data_dir: str | Path, fs: RealFileSystem | None = None) -> None:
        self.path = Path(data_dir) / ACLS_FILE
        self.fs = fs or RealFileSystem()

    def load(self) -> frozenset[AclBinding]:
        """The stored ACLs (empty without a file); MetadataFileError if it is damaged."""
        if not self.fs.exists(self.path):
            return frozenset()
        try:
            stored = msgspec.json.decode(self.fs.read_file(self.path), type=_AclsFile)
            if stored.version != VERSION:
                raise ValueError(f"unsupported version {stored.version}")
            return frozenset(_binding(a) for a in stored.acls)
        except (msgspec.DecodeError, ValueError, OSError) as exc:
            raise MetadataFileError(
                f"{self.path}: unreadable ACLs ({exc}); refusing to start (without them "
                "access would change). Restore it from a backup, or delete it to start with "
                "no ACLs.") from None

    def save(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the stored set with ``bindings``, durably (fsync, rename, fsync dir)."""
        acls = [_StoredAcl(b.resource_type.name, b.resource_name, b.pattern_type.name,
                           b.principal, b.host, b.operation.name, b.permission_type.name)
                for b in sorted(bindings)]
        data = msgspec.json.format(msgspec.json.encode(_AclsFile(VERSION, acls)), indent=1)
        self.fs.write_file_atomic(self.path, data)


def _binding(a: _StoredAcl) -> AclBinding:
    try:
        binding = AclBinding(ResourceType[a.resource_type], a.resource_name,
                             PatternType[a.pattern_type], a.principal, a.host,
                             AclOperation[a.operation], AclPermissionType[a.permission_type])
    except KeyError as exc:
        raise ValueError(f"unknown name {exc.args[0]!r} in ACL {a}") from None
    try:
        validate_new_acl(binding)
    except KafkaError as exc:
        raise ValueError(f"{exc.message}: ACL {binding}") from None
    return binding


__all__ = ["ACLS_FILE", "AclStore"]
