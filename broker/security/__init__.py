"""Security: listeners and TLS, SASL authentication, principals and Kafka's authorizer.

This module holds the shared vocabulary, with Kafka's names and wire codes: ACL resource
types, operations, pattern types and permissions (the codes CreateAcls / DescribeAcls /
DeleteAcls carry), and the principal a connection acts as. The rooms beside it:
``tls`` and ``listeners`` (SSLContext and listener configuration), ``sasl`` / ``plain`` /
``scram`` (authentication state machines, no sockets), ``credentials`` (durable SCRAM
credentials), ``acl`` / ``authorizer`` / ``acl_store`` (ACL model, decisions, persistence).
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name, as in Kafka
WILDCARD = "*"  # a LITERAL resource name or principal/host matching everything


class Principal(NamedTuple):
    """A Kafka principal, ``User:alice`` (type ``User``, name ``alice``)."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """``Type:name``; raises ValueError without a colon or with an empty type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        return cls(kind, name)


ANONYMOUS = Principal("User", "ANONYMOUS")
