"""Kafka's ACL model: bindings, binding filters and the validation CreateAcls applies.

An ``AclBinding`` is one ACL: a resource pattern (resource type, name, pattern type LITERAL
or PREFIXED) and an entry (principal string ``Type:name`` with ``User:*`` for everyone, host
``*`` or one IP address, operation, ALLOW/DENY), flat, with the fields the CreateAcls /
DescribeAcls / DeleteAcls messages carry. An ``AclBindingFilter`` selects bindings as
Kafka's ``AclBindingFilter.matches`` does: ANY / None match every value; pattern type MATCH
matches the LITERAL binding of that name, the LITERAL wildcard ``*`` and every PREFIXED
binding whose name is a prefix of it; pattern type ANY matches any pattern type but only
the exact name. ``validate_new_acl`` raises INVALID_REQUEST with Kafka's messages (AclApis
checks the Cluster name and the empty name, AclControlManager.validateNewAcl the rest).
Codes from the wire that Kafka does not know map to UNKNOWN, as its ``fromCode`` does.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple, TypeVar

from semel.broker.security import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from semel.protocol.errors import Error, KafkaError

WILDCARD_PRINCIPAL = "User:*"  # the principal an ACL names to apply to everyone

# SecurityUtils.resourceTypeName: how Kafka writes a resource type in logs and tools
RESOURCE_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}

_E = TypeVar("_E", bound=IntEnum)


def from_code(enum: type[_E], code: int) -> _E:
    """The member with wire code ``code``; UNKNOWN (0) for a code Kafka does not define."""
    try:
        return enum(code)
    except ValueError:
        return enum(0)


class AclBinding(NamedTuple):
    """One ACL. Field order is the sort order ACL listings use."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"{RESOURCE_TYPE_NAMES.get(self.resource_type, self.resource_type.name)}:"
                f"{self.pattern_type.name}:{self.resource_name} {self.permission_type.name} "
                f"{self.principal} {self.operation.name} from host {self.host}")


class AclBindingFilter(NamedTuple):
    """Selects bindings; None for a name, principal or host matches any value."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding) and self.matches_entry(binding)

    def matches_pattern(self, binding: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != binding.resource_type:
            return False
        kind = self.pattern_type
        if kind not in (PatternType.ANY, PatternType.MATCH) and kind != binding.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if kind == PatternType.ANY or kind == binding.pattern_type:
            return name == binding.resource_name
        # MATCH: every binding that would apply to a resource called `name`
        if binding.pattern_type == PatternType.LITERAL:
            return name == binding.resource_name or binding.resource_name == WILDCARD
        return name.startswith(binding.resource_name)  # PREFIXED

    def matches_entry(self, binding: AclBinding) -> bool:
        """Kafka's AccessControlEntryFilter.matches (exact principal and host strings)."""
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != binding.operation:
            return False
        return (self.permission_type == AclPermissionType.ANY
                or self.permission_type == binding.permission_type)

    def unknown_reason(self) -> str | None:
        """AclControlManager.validateFilter's message when a field is UNKNOWN, else None."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if (self.operation == AclOperation.UNKNOWN
                or self.permission_type == AclPermissionType.UNKNOWN):
            return "Unknown entryFilter."
        return None


def validate_new_acl(binding: AclBinding) -> None:
    """Raise KafkaError(INVALID_REQUEST) with Kafka's message when ``binding`` cannot be
    created; checks in Kafka's order."""
    name = binding.resource_name
    if binding.resource_type == ResourceType.CLUSTER and name != CLUSTER_NAME:
        _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not name:
        _invalid("Invalid empty resource name")
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        _invalid(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        _invalid(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        _invalid(f"Invalid operation {binding.operation.name}")
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        _invalid(f"Invalid permissionType {binding.permission_type.name}")
    if ":" not in binding.principal:
        _invalid(f"Could not parse principal from `{binding.principal}` (no colon is present "
                 "separating the principal type from the principal name)")


def _invalid(message: str) -> None:
    raise KafkaError(Error.INVALID_REQUEST, message)


__all__ = [
    "RESOURCE_TYPE_NAMES",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "from_code",
    "validate_new_acl",
]
