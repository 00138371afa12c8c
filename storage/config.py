"""Topic-level log configuration with Kafka's names, types, defaults and validation.

`TOPIC_CONFIG_DEFS` lists every topic config Kafka 4.0 accepts (name, type, default,
server-level synonym, one-line doc) so DescribeConfigs can enumerate them. `LogConfig` holds
the resolved values as attributes named after the key (`segment.bytes` -> `segment_bytes`);
`LogConfig.from_overrides(base, {"segment.bytes": "1048576"})` parses and validates the
override strings, raising `KafkaError(INVALID_CONFIG)` on an unknown key or a bad value.

Used by the log: segment.bytes, segment.ms, segment.jitter.ms, segment.index.bytes,
index.interval.bytes, retention.ms, retention.bytes, max.message.bytes,
message.timestamp.type, message.timestamp.before.max.ms, message.timestamp.after.max.ms.
The cleaner (storage/cleaner) uses cleanup.policy, min.cleanable.dirty.ratio,
min.compaction.lag.ms, max.compaction.lag.ms and delete.retention.ms. Everything else is
accepted and reported but informational (no broker-side recompression, no tiered storage,
one replica). Deviation: segment.bytes keeps Kafka 3.x's
minimum of 14 bytes (Kafka 4.0 requires 1 MiB) so tests can roll small segments.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, dataclass_transform

from semel.protocol.errors import Error, KafkaError

_T = TypeVar("_T")

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"


@dataclass_transform(kw_only_default=True, frozen_default=True,
                     field_specifiers=(dataclasses.field,))
def config_class(cls: type[_T]) -> type[_T]:
    """``@dataclass(frozen=True, slots=True)`` for a settings class of many fields (LogConfig,
    the broker's BrokerConfig, the group coordinator's GroupConfig), constructed by keyword
    only, with ``__init__``, ``__eq__``, ``__hash__`` and ``__repr__`` as functions over the
    field list. A dataclass compiles each of those from generated source when the class is
    defined: for these classes some 80 KB of text, about a tenth of the instructions of a
    broker's start (issue 18; bench/bench_startup.py --callgrind). Same behaviour as the generated methods:
    defaults and default factories, the fields' ``compare``/``hash``/``repr`` flags, equality
    only with the same class, FrozenInstanceError on assignment."""
    # frozen=False: dataclass would compile __setattr__/__delattr__ from source too (~1 M
    # instructions a class); the frozen behaviour and the pickling state a frozen slots class
    # needs are the functions below instead
    cls = dataclass(slots=True, init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)
    missing = dataclasses.MISSING
    qualname = cls.__qualname__
    set_field = object.__setattr__
    given = [(f.name, f.default, f.default_factory) for f in fields if f.init]
    not_given = [(f.name, f.default, f.default_factory) for f in fields
                 if not f.init and (f.default is not missing or f.default_factory is not missing)]
    names = frozenset(f.name for f in fields if f.init)
    post_init = hasattr(cls, "__post_init__")

    def __init__(self, **values: Any) -> None:
        if not values.keys() <= names:
            unknown = next(name for name in values if name not in names)
            raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {unknown!r}")
        for name, default, factory in given:
            if name in values:
                value = values[name]
            elif default is not missing:
                value = default
            elif factory is not missing:
                value = factory()
            else:
                raise TypeError(f"{qualname}.__init__() missing required keyword-only argument: "
                                f"{name!r}")
            set_field(self, name, value)
        for name, default, factory in not_given:
            set_field(self, name, factory() if default is missing else default)
        if post_init:
            self.__post_init__()

    compared = tuple(f.name for f in fields if f.compare)
    hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
    shown = tuple(f.name for f in fields if f.repr)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (tuple(getattr(self, name) for name in compared)
                == tuple(getattr(other, name) for name in compared))

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in hashed))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    field_names = frozenset(f.name for f in fields)
    frozen_error = dataclasses.FrozenInstanceError

    def __setattr__(self, name: str, value: Any) -> None:
        if type(self) is cls or name in field_names:
            raise frozen_error(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if type(self) is cls or name in field_names:
            raise frozen_error(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    all_names = tuple(f.name for f in fields)

    def __getstate__(self) -> list[Any]:
        return [getattr(self, name) for name in all_names]

    def __setstate__(self, state: list[Any]) -> None:
        for name, value in zip(all_names, state, strict=False):
            set_field(self, name, value)

    for method in (__init__, __eq__, __hash__, __repr__, __setattr__, __delattr__, __getstate__,
                   __setstate__):
        method.__qualname__ = f"{qualname}.{method.__name__}"
        setattr(cls, method.__name__, method)
    return cls


# Kafka's ConfigType ids as DescribeConfigs reports them (v3+ config_type field)
CONFIG_TYPE_IDS = {
    "boolean": 1,
    "string": 2,
    "int": 3,
    "short": 4,
    "long": 5,
    "double": 6,
    "list": 7,
    "class": 8,
    "password": 9,
}


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: str  # boolean | string | int | long | double | list
    default: Any
    server_name: str | None  # broker-level synonym (log.segment.bytes), None if none
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error message or None

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")


def _at_least(low: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"must be at least {low}"


def _between(low: float, high: float) -> Callable[[Any], str | None]:
    return lambda v: None if low <= v <= high else f"must be between {low} and {high}"


def _one_of(*allowed: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        values = v if isinstance(v, list) else [v]
        bad = [x for x in values if x not in allowed]
        return f"must be one of {', '.join(allowed)}" if bad else None

    return check


def _gzip_level(v: int) -> str | None:
    return None if v == -1 or 1 <= v <= 9 else "must be -1 or between 1 and 9"


TOPIC_CONFIG_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "cleanup.policy",
        "list",
        ["delete"],
        "log.cleanup.policy",
        "Retention policy for old segments: delete and/or compact.",
        _one_of("delete", "compact"),
    ),
    ConfigDef(
        "compression.type",
        "string",
        "producer",
        "compression.type",
        "Final compression of the topic's batches; producer keeps the producer's codec.",
        _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    ConfigDef(
        "compression.gzip.level",
        "int",
        -1,
        "compression.gzip.level",
        "Compression level when compression.type is gzip.",
        _gzip_level,
    ),
    ConfigDef(
        "compression.lz4.level",
        "int",
        9,
        "compression.lz4.level",
        "Compression level when compression.type is lz4.",
        _between(1, 17),
    ),
    ConfigDef(
        "compression.zstd.level",
        "int",
        3,
        "compression.zstd.level",
        "Compression level when compression.type is zstd.",
        _between(-131072, 22),
    ),
    ConfigDef(
        "delete.retention.ms",
        "long",
        86400000,
        "log.cleaner.delete.retention.ms",
        "How long tombstones are kept on compacted topics.",
        _at_least(0),
    ),
    ConfigDef(
        "file.delete.delay.ms",
        "long",
        60000,
        "log.segment.delete.delay.ms",
        "Delay before a deleted segment's files are removed.",
        _at_least(0),
    ),
    ConfigDef(
        "flush.messages",
        "long",
        LONG_MAX,
        "log.flush.interval.messages",
        "Messages between forced flushes (durability here comes from flush mode).",
        _at_least(1),
    ),
    ConfigDef(
        "flush.ms",
        "long",
        LONG_MAX,
        "log.flush.interval.ms",
        "Milliseconds between forced flushes (durability here comes from flush mode).",
        _at_least(0),
    ),
    ConfigDef(
        "follower.replication.throttled.replicas",
        "list",
        [],
        None,
        "Replicas whose follower replication is throttled (informational).",
    ),
    ConfigDef(
        "index.interval.bytes",
        "int",
        4096,
        "log.index.interval.bytes",
        "Bytes of log between two offset index entries.",
        _at_least(0),
    ),
    ConfigDef(
        "leader.replication.throttled.replicas",
        "list",
        [],
        None,
        "Replicas whose leader replication is throttled (informational).",
    ),
    ConfigDef(
        "local.retention.bytes",
        "long",
        -2,
        "log.local.retention.bytes",
        "Local retention size with tiered storage (-2: use retention.bytes).",
        _at_least(-2),
    ),
    ConfigDef(
        "local.retention.ms",
        "long",
        -2,
        "log.local.retention.ms",
        "Local retention time with tiered storage (-2: use retention.ms).",
        _at_least(-2),
    ),
    ConfigDef(
        "max.compaction.lag.ms",
        "long",
        LONG_MAX,
        "log.cleaner.max.compaction.lag.ms",
        "Longest time a record stays ineligible for compaction.",
        _at_least(1),
    ),
    ConfigDef(
        "max.message.bytes",
        "int",
        1048588,
        "message.max.bytes",
        "Largest record batch size the topic accepts.",
        _at_least(0),
    ),
    ConfigDef(
        "message.downconversion.enable",
        "boolean",
        True,
        "log.message.downconversion.enable",
        "No-op since Kafka 4.0 (down-conversion was removed).",
    ),
    ConfigDef(
        "message.timestamp.after.max.ms",
        "long",
        3600000,
        "log.message.timestamp.after.max.ms",
        "How far a CreateTime timestamp may lie in the future of the broker clock.",
        _at_least(0),
    ),
    ConfigDef(
        "message.timestamp.before.max.ms",
        "long",
        LONG_MAX,
        "log.message.timestamp.before.max.ms",
        "How far a CreateTime timestamp may lie in the past of the broker clock.",
        _at_least(0),
    ),
    ConfigDef(
        "message.timestamp.type",
        "string",
        CREATE_TIME,
        "log.message.timestamp.type",
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's.",
        _one_of(CREATE_TIME, LOG_APPEND_TIME),
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        "double",
        0.5,
        "log.cleaner.min.cleanable.ratio",
        "Dirty ratio above which the cleaner compacts a log.",
        _between(0, 1),
    ),
    ConfigDef(
        "min.compaction.lag.ms",
        "long",
        0,
        "log.cleaner.min.compaction.lag.ms",
        "Shortest time a record stays uncompacted.",
        _at_least(0),
    ),
    ConfigDef(
        "min.insync.replicas",
        "int",
        1,
        "min.insync.replicas",
        "Replicas that must acknowledge acks=all writes (a single node has one).",
        _at_least(1),
    ),
    ConfigDef(
        "preallocate",
        "boolean",
        False,
        "log.preallocate",
        "Preallocate segment files on creation (informational).",
    ),
    ConfigDef(
        "remote.log.copy.disable",
        "boolean",
        False,
        None,
        "Stop copying segments to tiered storage (informational).",
    ),
    ConfigDef(
        "remote.log.delete.on.disable",
        "boolean",
        False,
        None,
        "Delete tiered data when tiered storage is disabled (informational).",
    ),
    ConfigDef(
        "remote.storage.enable",
        "boolean",
        False,
        None,
        "Tiered storage for the topic (not supported; informational).",
    ),
    ConfigDef(
        "retention.bytes",
        "long",
        -1,
        "log.retention.bytes",
        "Largest size a partition may grow to before old segments go (-1: no limit).",
    ),
    ConfigDef(
        "retention.ms",
        "long",
        604800000,
        "log.retention.ms",
        "Age after which old segments are deleted (-1: no limit).",
        _at_least(-1),
    ),
    ConfigDef(
        "segment.bytes",
        "int",
        1073741824,
        "log.segment.bytes",
        "Size at which the active segment is rolled.",
        _at_least(14),
    ),
    ConfigDef(
        "segment.index.bytes",
        "int",
        10485760,
        "log.index.size.max.bytes",
        "Largest size of a segment's offset or time index.",
        _at_least(4),
    ),
    ConfigDef(
        "segment.jitter.ms",
        "long",
        0,
        "log.roll.jitter.ms",
        "Random jitter subtracted from segment.ms per segment.",
        _at_least(0),
    ),
    ConfigDef(
        "segment.ms",
        "long",
        604800000,
        "log.roll.ms",
        "Age at which the active segment is rolled even if not full.",
        _at_least(1),
    ),
    ConfigDef(
        "unclean.leader.election.enable",
        "boolean",
        False,
        "unclean.leader.election.enable",
        "Allow out-of-sync replicas to become leader (informational).",
    ),
)

CONFIG_DEFS_BY_NAME: dict[str, ConfigDef] = {d.name: d for d in TOPIC_CONFIG_DEFS}


@config_class
class LogConfig:
    """A topic's resolved configuration: each topic config as an attribute named after its key
    (``segment.bytes`` -> ``segment_bytes``), Kafka's defaults."""

    cleanup_policy: list[str] = dataclasses.field(default_factory=lambda: ["delete"])
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86400000
    file_delete_delay_ms: int = 60000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    follower_replication_throttled_replicas: list[str] = dataclasses.field(default_factory=list)
    index_interval_bytes: int = 4096
    leader_replication_throttled_replicas: list[str] = dataclasses.field(default_factory=list)
    local_retention_bytes: int = -2
    local_retention_ms: int = -2
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1048588
    message_downconversion_enable: bool = True
    message_timestamp_after_max_ms: int = 3600000
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = CREATE_TIME
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    preallocate: bool = False
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    remote_storage_enable: bool = False
    retention_bytes: int = -1
    retention_ms: int = 604800000
    segment_bytes: int = 1073741824
    segment_index_bytes: int = 10485760
    segment_jitter_ms: int = 0
    segment_ms: int = 604800000
    unclean_leader_election_enable: bool = False

    @classmethod
    def from_overrides(cls, base: LogConfig, overrides: dict[str, str]) -> LogConfig:
        """`base` with each `name -> string value` override parsed and validated."""
        changes = {}
        for name, raw in overrides.items():
            definition = CONFIG_DEFS_BY_NAME.get(name)
            if definition is None:
                raise KafkaError(Error.INVALID_CONFIG, f"Unknown topic config name: {name}")
            changes[definition.attr] = parse_value(definition, raw)
        return dataclasses.replace(base, **changes)

    def get(self, name: str) -> Any:
        return getattr(self, CONFIG_DEFS_BY_NAME[name].attr)

    def value_string(self, name: str) -> str:
        """The value of `name` as Kafka prints it in DescribeConfigs."""
        return format_value(CONFIG_DEFS_BY_NAME[name], self.get(name))

    def to_strings(self) -> dict[str, str]:
        return {d.name: format_value(d, getattr(self, d.attr)) for d in TOPIC_CONFIG_DEFS}


def parse_value(definition: ConfigDef, raw: str | None) -> Any:
    """Parse one string value for `definition`, raising KafkaError(INVALID_CONFIG)."""

    def invalid(reason: str) -> KafkaError:
        return KafkaError(
            Error.INVALID_CONFIG,
            f"Invalid value {raw} for configuration {definition.name}: {reason}",
        )

    if raw is None:
        raise invalid("value must not be null")
    text = raw.strip()
    kind = definition.type
    value: Any
    if kind in ("int", "long"):
        try:
            value = int(text)
        except ValueError:
            raise invalid(f"Not a number of type {kind.upper()}") from None
        bound = INT_MAX if kind == "int" else LONG_MAX
        if not -bound - 1 <= value <= bound:
            raise invalid(f"Not a number of type {kind.upper()}")
    elif kind == "double":
        try:
            value = float(text)
        except ValueError:
            raise invalid("Not a number of type DOUBLE") from None
    elif kind == "boolean":
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise invalid("Expected value to be either true or false")
        value = lowered == "true"
    elif kind == "list":
        value = [item.strip() for item in text.split(",") if item.strip()]
    else:
        value = text
    if definition.check is not None:
        reason = definition.check(value)
        if reason is not None:
            raise invalid(f"Value {reason}")
    return value


def format_value(definition: ConfigDef, value: Any) -> str:
    if definition.type == "list":
        return ",".join(value)
    if definition.type == "boolean":
        return "true" if value else "false"
    return str(value)
