"""Kafka's StandardAuthorizer: decisions as pure functions over an immutable ACL index.

``AclIndex`` is a snapshot of every ACL, per resource type: LITERAL ACLs by name, PREFIXED
ACLs by name plus their names sorted, so the prefixes of a resource name are found by
bisecting backwards from the name (Kafka's range scan over its reverse-sorted set), and
within one pattern the rules by principal. ``decide`` is Kafka's
``StandardAuthorizerData.authorize``: a super user is allowed everything; otherwise the ACLs
of the resource's name, of the LITERAL wildcard ``*`` and of every matching prefix apply
when they name the principal or ``User:*`` and the host or ``*``; any matching DENY denies;
else any matching ALLOW allows; else, when no ACL at all names the resource, the answer is
``allow.everyone.if.no.acl.found``, and DENY when some do. ALL matches every operation (for
ALLOW and DENY alike); an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, an
ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS, while a DENY denies only its own
operation. ``decide_by_resource_type`` is Kafka's ``Authorizer.authorizeByResourceType``
(KIP-679: is some resource of the type allowed, e.g. WRITE on any topic, which InitProducerId
accepts instead of IDEMPOTENT_WRITE on the cluster).

``Authorizer`` holds the current index and its ``generation``, which every CreateAcls /
DeleteAcls that changes the set bumps after the change is durable (``acl_store``), so the
next request sees it. ``Authorizer.cache_for(principal, host)`` gives a connection its own
memo of decisions, dropped whenever the generation moves. Everything runs on the event loop;
only the file write leaves it. Denials are logged at DEBUG (Kafka's audit line), ACL
changes at INFO.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from pathlib import Path

from semel.broker.security import (
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    Principal,
    ResourceType,
)
from semel.broker.security.acl import (
    RESOURCE_TYPE_NAMES,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    validate_new_acl,
)
from semel.broker.security.acl_store import AclStore
from semel.protocol.errors import Error, KafkaError

log = logging.getLogger("broker.security.authorizer")

ALL = AclOperation.ALL
DESCRIBE = AclOperation.DESCRIBE
DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
ALLOW = AclPermissionType.ALLOW
DENY = AclPermissionType.DENY
# operations whose ALLOW also allows DESCRIBE / DESCRIBE_CONFIGS (not so for DENY)
IMPLIES_DESCRIBE = frozenset({DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                              AclOperation.DELETE, AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# Kafka's AclEntry.supportedOperations: the bits of an "authorized operations" field
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         DESCRIBE, AclOperation.DELETE, AclOperation.ALTER, DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, DESCRIBE, AclOperation.DELETE, DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE,
                           AclOperation.ALTER, DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (DESCRIBE, AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT),
    ResourceType.DELEGATION_TOKEN: (DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

SUPER_USER = "SuperUser"
DEFAULT_ALLOW = "DefaultAllow"
DEFAULT_DENY = "DefaultDeny"
MAX_CACHED_DECISIONS = 1024  # per connection; the memo starts over when it is full
EVERY_ACL = AclBindingFilter()

# one rule of one pattern: (host, operation, permission, the binding it came from)
Rule = tuple[str, AclOperation, AclPermissionType, AclBinding]
ByPrincipal = dict[str, tuple[Rule, ...]]


class _Section:
    """The ACLs of one resource type."""

    __slots__ = ("bindings", "literal", "prefixed", "prefixes")

    def __init__(self, bindings: list[AclBinding]) -> None:
        self.bindings = tuple(bindings)
        literal: dict[str, dict[str, list[Rule]]] = {}
        prefixed: dict[str, dict[str, list[Rule]]] = {}
        for b in bindings:
            table = literal if b.pattern_type == PatternType.LITERAL else prefixed
            rules = table.setdefault(b.resource_name, {}).setdefault(b.principal, [])
            rules.append((b.host, b.operation, b.permission_type, b))
        self.literal: dict[str, ByPrincipal] = _freeze(literal)
        self.prefixed: dict[str, ByPrincipal] = _freeze(prefixed)
        self.prefixes = sorted(prefixed)

    def matching(self, name: str) -> Iterator[ByPrincipal]:
        """The rules of every pattern that applies to the resource ``name``."""
        found = self.literal.get(name)
        if found is not None:
            yield found
        if name != WILDCARD:
            found = self.literal.get(WILDCARD)
            if found is not None:
                yield found
        prefixes = self.prefixes
        hi = bisect_right(prefixes, name)
        while hi:
            candidate = prefixes[hi - 1]
            if name.startswith(candidate):
                yield self.prefixed[candidate]
                bound = candidate[:-1]  # shorter prefixes of name sort before it
            else:
                # no longer prefix of name sorts at or below candidate: continue below
                # the part they share
                bound = name[:_common_prefix_length(name, candidate)]
            hi = bisect_right(prefixes, bound, 0, hi - 1)


def _common_prefix_length(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share (a binary search over C-speed
    ``startswith``: bounded work for long names, unlike a character loop)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if a.startswith(b[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _freeze(table: dict[str, dict[str, list[Rule]]]) -> dict[str, ByPrincipal]:
    return {name: {p: tuple(rules) for p, rules in by.items()} for name, by in table.items()}


class AclIndex:
    """An immutable snapshot of a set of ACLs, arranged for ``decide``."""

    __slots__ = ("bindings", "sections")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self.bindings: frozenset[AclBinding] = frozenset(bindings)
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for b in sorted(self.bindings):
            by_type.setdefault(b.resource_type, []).append(b)
        self.sections = {rtype: _Section(bs) for rtype, bs in by_type.items()}


def decide(index: AclIndex, super_users: frozenset[str], allow_if_no_acl: bool,
           principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
           name: str) -> tuple[bool, AclBinding | str]:
    """(allowed, the rule that decided: an ACL, SUPER_USER, DEFAULT_ALLOW or DEFAULT_DENY)
    for ``principal`` (``Type:name``) from ``host`` doing ``operation`` on the resource."""
    if principal in super_users:
        return True, SUPER_USER
    section = index.sections.get(resource_type)
    if section is None:
        return (True, DEFAULT_ALLOW) if allow_if_no_acl else (False, DEFAULT_DENY)
    allowed_by = None
    has_acls = False
    for by_principal in section.matching(name):
        has_acls = True
        for rules in (by_principal.get(principal), by_principal.get(WILDCARD_PRINCIPAL)):
            if rules is None:
                continue
            for rule_host, rule_op, permission, binding in rules:
                if rule_host != WILDCARD and rule_host != host:
                    continue
                if rule_op != ALL and rule_op != operation:
                    if permission != ALLOW:
                        continue
                    if operation == DESCRIBE:
                        if rule_op not in IMPLIES_DESCRIBE:
                            continue
                    elif operation == DESCRIBE_CONFIGS:
                        if rule_op not in IMPLIES_DESCRIBE_CONFIGS:
                            continue
                    else:
                        continue
                if permission == DENY:
                    return False, binding
                allowed_by = binding
    if allowed_by is not None:
        return True, allowed_by
    if has_acls:
        return False, DEFAULT_DENY
    return (True, DEFAULT_ALLOW) if allow_if_no_acl else (False, DEFAULT_DENY)


def decide_by_resource_type(index: AclIndex, super_users: frozenset[str],
                            allow_if_no_acl: bool, principal: str, host: str,
                            operation: AclOperation, resource_type: ResourceType) -> bool:
    """Whether ``operation`` is allowed on some resource of ``resource_type``: allowed on a
    resource no ACL names (the super-user and no-ACL rules), or some ALLOW for the operation
    (or ALL) on a name or prefix that no DENY covers (a LITERAL DENY of the same name, a
    PREFIXED DENY of a prefix of it, the wildcard DENY). Implied operations do not count."""
    if resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise ValueError(f"authorize_by_resource_type needs a concrete resource type, "
                         f"not {resource_type.name}")
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"authorize_by_resource_type needs a concrete operation, "
                         f"not {operation.name}")
    if decide(index, super_users, allow_if_no_acl, principal, host, operation, resource_type,
              "hardcode")[0]:
        return True
    section = index.sections.get(resource_type)
    if section is None:
        return False
    deny_literal: set[str] = set()
    deny_prefixed: set[str] = set()
    allow_literal: set[str] = set()
    allow_prefixed: set[str] = set()
    wildcard_allow = False
    for b in section.bindings:
        if b.host != host and b.host != WILDCARD:
            continue
        if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
            continue
        if b.operation != operation and b.operation != ALL:
            continue
        literal = b.pattern_type == PatternType.LITERAL
        if b.permission_type == DENY:
            if literal and b.resource_name == WILDCARD:
                return False
            (deny_literal if literal else deny_prefixed).add(b.resource_name)
        elif literal and b.resource_name == WILDCARD:
            wildcard_allow = True
        else:
            (allow_literal if literal else allow_prefixed).add(b.resource_name)
    if wildcard_allow:
        return True
    for name in allow_literal:
        if name not in deny_literal and not _denied_prefix(name, deny_prefixed):
            return True
    return any(not _denied_prefix(name, deny_prefixed) for name in allow_prefixed)


def _denied_prefix(name: str, deny_prefixed: set[str]) -> bool:
    return any(name[:n] in deny_prefixed for n in range(1, len(name) + 1))


def parse_super_users(text: str) -> frozenset[str]:
    """``super.users``: principals separated by ';' (blanks ignored); ValueError names a
    malformed one."""
    users = set()
    for part in text.split(";"):
        user = part.strip()
        if not user:
            continue
        try:
            Principal.parse(user)
        except ValueError:
            raise ValueError(f"super.users: {user!r} is not a principal of the form "
                             "Type:name (e.g. User:admin)") from None
        users.add(user)
    return frozenset(users)


class Authorizer:
    """The ACLs in force, the super users and the no-ACL rule; creates and deletes ACLs."""

    def __init__(self, acls: Iterable[AclBinding] = (), *,
                 super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 store: AclStore | None = None) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.store = store
        self.index = AclIndex(acls)
        self.generation = 0  # bumped by every change of the ACL set
        self._lock = asyncio.Lock()  # one change at a time: compute, persist, install

    @classmethod
    def open(cls, data_dir: str | Path, super_users: str | Iterable[Principal | str] = "",
             allow_everyone_if_no_acl_found: bool = False, fs=None) -> Authorizer:
        """The authorizer of a data directory, with its stored ACLs (MetadataFileError when
        the ACL file is damaged). ``super_users``: the ``super.users`` text (ValueError
        names a malformed entry) or the principals already parsed."""
        if isinstance(super_users, str):
            users = parse_super_users(super_users)
        else:
            users = frozenset(str(p) for p in super_users)
        store = AclStore(data_dir, fs)
        acls = store.load()
        authorizer = cls(acls, super_users=users,
                         allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found,
                         store=store)
        log.info("authorizer on: %d ACL(s), super.users=%s, allow.everyone.if.no.acl.found=%s",
                 len(acls), ";".join(sorted(users)) or "(none)",
                 str(allow_everyone_if_no_acl_found).lower())
        return authorizer

    # -- decisions ------------------------------------------------------------------------

    def authorize(self, principal: Principal | str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the LITERAL resource
        ``resource_type``/``name``."""
        return self._decide(str(principal), host, operation, resource_type, name)[0]

    def authorize_by_resource_type(self, principal: Principal | str, host: str,
                                   operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of ``resource_type`` allows ``operation`` (Kafka's
        ``authorizeByResourceType``)."""
        return self._decide_by_type(str(principal), host, operation, resource_type)

    def authorized_operations(self, principal: Principal | str, host: str,
                              resource_type: ResourceType, name: str) -> int:
        """Kafka's "authorized operations" bit field (bit = operation code) of the resource:
        its type's supported operations this principal is allowed (nothing logged)."""
        who = str(principal)
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(resource_type, ()):
            if decide(self.index, self.super_users, self.allow_everyone_if_no_acl_found, who,
                      host, op, resource_type, name)[0]:
                bits |= 1 << op
        return bits

    def cache_for(self, principal: Principal | str, host: str) -> AuthorizerCache:
        """A decision memo for one connection's principal and client host."""
        return AuthorizerCache(self, str(principal), host)

    def _decide(self, principal: str, host: str, operation: AclOperation,
                resource_type: ResourceType, name: str) -> tuple[bool, AclBinding | str]:
        result = decide(self.index, self.super_users, self.allow_everyone_if_no_acl_found,
                        principal, host, operation, resource_type, name)
        if not result[0]:
            log_denied(principal, host, operation, resource_type, name, result[1])
        return result

    def _decide_by_type(self, principal: str, host: str, operation: AclOperation,
                        resource_type: ResourceType) -> bool:
        allowed = decide_by_resource_type(self.index, self.super_users,
                                          self.allow_everyone_if_no_acl_found, principal, host,
                                          operation, resource_type)
        if not allowed and log.isEnabledFor(logging.DEBUG):
            log.debug("Principal = %s is Denied operation = %s from host = %s on any resource "
                      "of type %s", principal, operation.name, host,
                      RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name))
        return allowed

    # -- ACLs -----------------------------------------------------------------------------

    def acls(self, acl_filter: AclBindingFilter = EVERY_ACL) -> list[AclBinding]:
        """The ACLs ``acl_filter`` matches, sorted."""
        return sorted(b for b in self.index.bindings if acl_filter.matches(b))

    async def create_acls(self, bindings: list[AclBinding]) -> list[KafkaError | None]:
        """Create ACLs; per binding None or the error (INVALID_REQUEST for one CreateAcls
        refuses, KAFKA_STORAGE_ERROR when the change could not be made durable). Returns
        once the new set is on disk and in force; an ACL that exists is not added twice."""
        results: list[KafkaError | None] = [None] * len(bindings)
        valid: dict[AclBinding, list[int]] = {}
        for i, binding in enumerate(bindings):
            try:
                validate_new_acl(binding)
            except KafkaError as e:
                results[i] = e
                continue
            valid.setdefault(binding, []).append(i)
        async with self._lock:
            current = self.index.bindings
            added = [b for b in valid if b not in current]
            if added:
                try:
                    await self._persist(current.union(added))
                except OSError as e:
                    error = KafkaError(Error.KAFKA_STORAGE_ERROR, f"could not store ACLs: {e}")
                    for indexes in valid.values():
                        for i in indexes:
                            results[i] = error
                    return results
                self._install(current.union(added))
                for b in added:
                    log.info("ACL created: %s", b)
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]
                          ) -> list[list[AclBinding] | KafkaError]:
        """Delete every ACL some filter matches; per filter the ACLs it matched (each filter
        sees the set as it was before this call) or its error (INVALID_REQUEST for a filter
        with UNKNOWN fields; KAFKA_STORAGE_ERROR for all when the change could not be made
        durable, in which case nothing is deleted)."""
        async with self._lock:
            current = self.index.bindings
            results: list[list[AclBinding] | KafkaError] = []
            doomed: set[AclBinding] = set()
            for f in filters:
                reason = f.unknown_reason()
                if reason is not None:
                    results.append(KafkaError(Error.INVALID_REQUEST, reason))
                    continue
                matched = sorted(b for b in current if f.matches(b))
                doomed.update(matched)
                results.append(matched)
            if doomed:
                remaining = current.difference(doomed)
                try:
                    await self._persist(remaining)
                except OSError as e:
                    error = KafkaError(Error.KAFKA_STORAGE_ERROR, f"could not store ACLs: {e}")
                    return [error] * len(filters)
                self._install(remaining)
                for b in sorted(doomed):
                    log.info("ACL deleted: %s", b)
        return results

    async def _persist(self, bindings: frozenset[AclBinding]) -> None:
        if self.store is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.store.save, bindings)

    def _install(self, bindings: frozenset[AclBinding]) -> None:
        self.index = AclIndex(bindings)
        self.generation += 1


class AuthorizerCache:
    """One connection's decisions, by (operation, resource type, name); forgotten when the
    ACLs change (the authorizer's generation moves) or after MAX_CACHED_DECISIONS."""

    __slots__ = ("_authorizer", "_decisions", "_generation", "host", "principal")

    def __init__(self, authorizer: Authorizer, principal: str, host: str) -> None:
        self._authorizer = authorizer
        self.principal = principal
        self.host = host
        self._generation = authorizer.generation
        self._decisions: dict[tuple, tuple[bool, AclBinding | str]] = {}

    def authorize(self, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """As ``Authorizer.authorize`` for this connection's principal and host."""
        authorizer = self._authorizer
        decisions = self._decisions
        if self._generation != authorizer.generation:
            decisions.clear()
            self._generation = authorizer.generation
        key = (operation, resource_type, name)
        result = decisions.get(key)
        if result is None:
            result = authorizer._decide(self.principal, self.host, operation, resource_type,
                                        name)
            if len(decisions) >= MAX_CACHED_DECISIONS:
                decisions.clear()
            decisions[key] = result
        elif not result[0]:
            log_denied(self.principal, self.host, operation, resource_type, name, result[1])
        return result[0]

    def authorize_by_resource_type(self, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        """As ``Authorizer.authorize_by_resource_type`` for this connection."""
        authorizer = self._authorizer
        if self._generation != authorizer.generation:
            self._decisions.clear()
            self._generation = authorizer.generation
        key = (operation, resource_type, None)
        result = self._decisions.get(key)
        if result is None:
            allowed = authorizer._decide_by_type(self.principal, self.host, operation,
                                                 resource_type)
            result = (allowed, "")
            if len(self._decisions) >= MAX_CACHED_DECISIONS:
                self._decisions.clear()
            self._decisions[key] = result
        return result[0]


def log_denied(principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
               name: str, rule: AclBinding | str) -> None:
    """Kafka's audit line for a denial, at DEBUG."""
    if log.isEnabledFor(logging.DEBUG):
        rule_text = rule if isinstance(rule, str) else f"MatchingAcl(acl={rule})"
        log.debug("Principal = %s is Denied operation = %s from host = %s on resource = "
                  "%s:LITERAL:%s based on rule %s", principal, operation.name, host,
                  RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name), name, rule_text)


__all__ = [
    "SUPPORTED_OPERATIONS",
    "AclIndex",
    "Authorizer",
    "AuthorizerCache",
    "decide",
    "decide_by_resource_type",
    "parse_super_users",
]
