"""Client quota configuration: entities, their values, Kafka's validation, and the file.

An entity is a set of (type, name) pairs over the types ``user``, ``client-id`` and ``ip``;
a name of None is that type's default (``<default>`` in Kafka's tools). Values are keyed by
Kafka's quota names. Validation follows Kafka's ClientQuotaControlManager (alter) and
ClientQuotasImage (describe), with its error messages; every failure is INVALID_REQUEST
except an unknown entity type in a describe filter (UNSUPPORTED_VERSION, as Kafka).

On disk: ``<data_dir>/__semel_client_quotas.json``, msgspec JSON written like the SCRAM
credentials (temp file, fsync, rename, fsync the directory), so a crash leaves the old or
the new file::

    {"version": 1, "quotas": [{"entity": {"user": "alice", "client-id": null},
                               "values": {"producer_byte_rate": 1048576.0}}]}

A file that cannot be read raises ``MetadataFileError`` naming it (the broker does not start
with quotas silently gone). Threading: the event loop only. msgspec loads when the file is
first read or written: a data directory without one starts without it (issue 18).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path

from semel.protocol.errors import Error
from semel.storage.fs import MetadataFileError, RealFileSystem

QUOTAS_FILE = "__semel_client_quotas.json"
VERSION = 1

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
# the order of a Java HashMap of these keys (client-id, user, ip): Kafka's responses and
# messages list an entity's parts in it
TYPE_ORDER = {CLIENT_ID: 0, USER: 1, IP: 2}

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# Kafka's ConfigDef types of the keys: integral ones refuse fractions and their type's overflow
USER_CLIENT_KEYS = {PRODUCER_BYTE_RATE: ("LONG", INT64_MAX),
                    CONSUMER_BYTE_RATE: ("LONG", INT64_MAX),
                    REQUEST_PERCENTAGE: ("DOUBLE", None),
                    CONTROLLER_MUTATION_RATE: ("DOUBLE", None)}
IP_KEYS = {CONNECTION_CREATION_RATE: ("INT", INT32_MAX)}

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Entity = tuple[tuple[str, str | None], ...]  # (type, name) pairs in TYPE_ORDER


class QuotaError(Exception):
    """A request the quota rules refuse: its error code and Kafka's message."""

    def __init__(self, code: Error, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def make_entity(parts: dict[str, str | None]) -> Entity:
    return tuple(sorted(parts.items(), key=lambda kv: TYPE_ORDER.get(kv[0], 3)))


def entity_text(entity: Entity) -> str:
    """Like Java's ``ClientQuotaEntity.toString()``."""
    inner = ", ".join(f"{t}={'null' if n is None else n}" for t, n in entity)
    return f"ClientQuotaEntity(entries={{{inner}}})"


def is_ip_literal(name: str) -> bool:
    import ipaddress  # only when an ip entity is altered (start-up time)

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def validate_alteration(entity: Entity, ops: dict[str, float | None],
                        valid_ip: Callable[[str], bool] = is_ip_literal) -> None:
    """Raise QuotaError if Kafka's controller refuses to alter ``entity`` with ``ops``
    (key -> new value, None to remove); the checks and messages of ClientQuotaControlManager,
    in its order."""
    if not entity:
        raise QuotaError(Error.INVALID_REQUEST, "Invalid empty client quota entity")
    parts = dict(entity)
    for kind, name in entity:
        if kind not in TYPE_ORDER:
            raise QuotaError(Error.INVALID_REQUEST,
                             f"Unhandled client quota entity type: {kind}")
        if name is not None and not name:
            raise QuotaError(Error.INVALID_REQUEST, f"Empty {kind} not supported")
    if IP in parts:
        if USER in parts or CLIENT_ID in parts:
            # (Kafka's message lacks the space: "should" + "not")
            raise QuotaError(Error.INVALID_REQUEST,
                             "Invalid quota entity combination, IP entity shouldnot be "
                             "combined with User or ClientId")
        ip = parts[IP]
        if ip is not None and not valid_ip(ip):
            raise QuotaError(Error.INVALID_REQUEST, f"{ip} is not a valid IP or resolvable host.")
        keys = IP_KEYS
    else:
        keys = USER_CLIENT_KEYS
    for key, value in ops.items():
        if value is None:
            continue  # a removal: of a key set or not, never an error
        spec = keys.get(key)
        if spec is None:
            raise QuotaError(Error.INVALID_REQUEST, f"Invalid configuration key {key}")
        if value <= 0.0:
            raise QuotaError(Error.INVALID_REQUEST, f"Quota {key} must be greater than 0")
        kind, limit = spec
        if limit is not None:
            if value > limit:
                article = "an" if kind == "INT" else "a"
                raise QuotaError(Error.INVALID_REQUEST,
                                 f"Proposed value for {key} is too large for {article} {kind}.")
            if abs(value % 1.0) > 1e-6:
                raise QuotaError(Error.INVALID_REQUEST, f"{key} cannot be a fractional value.")


def describe_filter(components: Iterable[tuple[str, int, str | None]]
                    ) -> tuple[dict[str, str | None], set[str]]:
    """(exact matches: type -> name or None for the default, types that must be present)
    of a DescribeClientQuotas filter; QuotaError as Kafka's ClientQuotasImage.describe."""
    exact: dict[str, str | None] = {}
    present: set[str] = set()
    for kind, match_type, match in components:
        if not kind:
            raise QuotaError(Error.INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in present:
            raise QuotaError(Error.INVALID_REQUEST,
                             f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in TYPE_ORDER:
            raise QuotaError(Error.UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaError(Error.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, "
                                 "but set match string to null.")
            exact[kind] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaError(Error.INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, "
                                 "but also specified a match string.")
            exact[kind] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaError(Error.INVALID_REQUEST, "Request specified "
                                 "MATCH_TYPE_SPECIFIED, but also specified a match string.")
            present.add(kind)
        else:
            raise QuotaError(Error.INVALID_REQUEST, f"Unknown match type {match_type}")
    if (IP in exact or IP in present) and (
            USER in exact or USER in present or CLIENT_ID in exact or CLIENT_ID in present):
        raise QuotaError(Error.INVALID_REQUEST,
                         "Invalid entity filter component combination. IP filter component "
                         "should not be used with user or clientId filter component.")
    return exact, present


def matches(entity: Entity, exact: dict[str, str | None], present: set[str],
            strict: bool) -> bool:
    """Whether a describe filter selects ``entity`` (strict: it has no other types)."""
    parts = dict(entity)
    if strict and len(parts) != len(exact) + len(present):
        return False
    for kind, name in exact.items():
        if kind not in parts or parts[kind] != name:
            return False
    return all(kind in parts for kind in present)


@functools.cache
def _schema():
    """(msgspec, the file's struct, an entity's struct): made on first read or write."""
    import msgspec

    stored = msgspec.defstruct("_Stored", [("entity", dict[str, str | None]),
                                           ("values", dict[str, float])])
    return msgspec, msgspec.defstruct("_File", [("version", int), ("quotas", list[stored])]), \
        stored


class QuotaStore:
    """Entity -> {key: value}, read from the data directory on ``load()`` and rewritten
    durably by every ``apply``."""

    def __init__(self, data_dir: str | Path, fs: RealFileSystem | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / QUOTAS_FILE
        self.fs = fs or RealFileSystem()
        self.entities: dict[Entity, dict[str, float]] = {}

    def load(self) -> None:
        if not self.fs.exists(self.path):
            self.entities = {}
            return
        msgspec, file_type, _ = _schema()
        try:
            stored = msgspec.json.decode(self.fs.read_file(self.path), type=file_type)
            entities = {}
            for item in stored.quotas:
                entity = make_entity(item.entity)
                validate_alteration(entity, dict(item.values), valid_ip=lambda _: True)
                if item.values:
                    entities[entity] = dict(item.values)
        except (msgspec.DecodeError, QuotaError) as exc:
            raise MetadataFileError(
                f"{self.path}: unreadable client quotas ({exc}); refusing to start without "
                "them. Restore it from a backup of the data directory, or remove it and set "
                "the quotas again.") from None
        self.entities = entities

    def apply(self, changes: dict[Entity, dict[str, float | None]]) -> None:
        """Set (value) and remove (None) keys of entities with one durable write; memory
        changes only once the file is written."""
        updated = {entity: dict(values) for entity, values in self.entities.items()}
        for entity, ops in changes.items():
            values = updated.setdefault(entity, {})
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = float(value)
            if not values:
                del updated[entity]
        msgspec, file_type, stored_type = _schema()
        data = msgspec.json.format(msgspec.json.encode(file_type(VERSION, [
            stored_type(dict(entity), dict(sorted(values.items())))
            for entity, values in sorted(updated.items(), key=lambda kv: _sort_key(kv[0]))])))
        self.fs.mkdir(self.data_dir)
        self.fs.write_file_atomic(self.path, data)
        self.entities = updated


def _sort_key(entity: Entity) -> tuple:
    return tuple((t, n is None, n or "") for t, n in entity)
