"""Broker configuration under Kafka's property names, typed and validated at start.

Sources, lowest precedence first:
  1. the defaults below (Kafka's, except where a field's spec says how semel differs);
  2. a properties file (`--config FILE`, java.util.Properties syntax, see broker.properties);
  3. environment variables `SEMEL_<NAME>`: the property name upper-cased with '.' -> '_',
     e.g. `SEMEL_LOG_DIRS=/var/lib/semel` sets `log.dirs` (names in RESERVED_ENV are for
     tooling and ignored; any other unknown SEMEL_ variable is an error);
  4. `--set key=value` overrides, in order;
  5. the CLI shortcuts `--host`, `--port` (rewrite the listener) and `--data-dir` (log.dirs).

Some settings have several keys (`log.dirs`/`log.dir`, `log.roll.ms`/`log.roll.hours`,
`log.retention.ms`/`.minutes`/`.hours`). Within one source Kafka's precedence applies (ms over
minutes over hours, log.dirs over log.dir); a later source that sets any key of the group
replaces what earlier sources said about it. Every problem is a one-line ConfigError naming
the key, the bad value and where it came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from broker.properties import PropertiesSyntaxError, parse_properties

__all__ = [
    "ALIASES",
    "ENV_PREFIX",
    "PROPERTIES",
    "RESERVED_ENV",
    "BrokerConfig",
    "ConfigError",
    "Endpoint",
    "Listener",
    "PropertySpec",
    "apply_cli_options",
    "env_var_name",
    "load_config",
    "parse_listeners",
]

ENV_PREFIX = "SEMEL_"
# SEMEL_ variables that are not properties: the CLI's log level and the test harness's switch.
RESERVED_ENV = frozenset({"SEMEL_LOG_LEVEL", "SEMEL_REQUIRE_JAVA"})

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_INT_RE = re.compile(r"[+-]?[0-9]+")
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
SECURITY_PROTOCOLS = ("PLAINTEXT",)


class ConfigError(ValueError):
    """An invalid configuration; the message is one line, ready to print."""


class _Invalid(ValueError):
    """A value problem without the key or origin; the loader adds those."""


class Endpoint(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"{_bracket(self.host)}:{self.port}"


class Listener(NamedTuple):
    """One entry of `listeners`: NAME://host:port (host "" = every interface, port 0 = any)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{_bracket(self.host)}:{self.port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """How one property is read, checked and shown. `semel` says how semel differs, if it does."""

    name: str
    doc: str
    parse: Callable[[str], Any]  # text -> value; raises _Invalid
    format: Callable[[Any], str]  # value -> text that parses back to it
    semel: str = ""


# ---------------------------------------------------------------------------------------------
# Value parsers


def _parse_int(text: str, lo: int, hi: int, sentinel: int | None) -> int:
    s = text.strip()
    if not _INT_RE.fullmatch(s):
        raise _Invalid(f"expected an integer, got {text!r}")
    value = int(s)
    if value == sentinel:
        return value
    if not lo <= value <= hi:
        allowed = f"at least {lo}" if hi == INT64_MAX else f"{lo}..{hi}"
        if sentinel is not None:
            allowed = f"{sentinel} or {allowed}"
        raise _Invalid(f"{value} is out of range (expected {allowed})")
    return value


def _parse_bool(text: str) -> bool:
    s = text.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise _Invalid(f"expected true or false, got {text!r}")


def _format_bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_choice(text: str, choices: tuple[str, ...]) -> str:
    s = text.strip()
    if s in choices:
        return s
    raise _Invalid(f"expected one of {', '.join(choices)}, got {text!r}")


_LISTENER_RE = re.compile(r"([A-Za-z][A-Za-z0-9_]*)://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):([0-9]+)")
_ENDPOINT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):([0-9]+)")


def _parse_port(text: str) -> int:
    port = int(text)
    if port > 65535:
        raise _Invalid(f"port {port} is out of range (expected 0..65535)")
    return port


def parse_listeners(text: str) -> tuple[Listener, ...]:
    """`PLAINTEXT://host:port[,...]` -> listeners; "" -> (). Raises ValueError with the reason."""
    result = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        m = _LISTENER_RE.fullmatch(item)
        if m is None:
            raise _Invalid(f"cannot parse {item!r} (expected PLAINTEXT://host:port)")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), _parse_port(m.group(3))
        if name not in SECURITY_PROTOCOLS:
            raise _Invalid(
                f"unsupported listener {name!r} in {item!r} "
                f"(supported: {', '.join(SECURITY_PROTOCOLS)})"
            )
        result.append(Listener(name, host, port))
    if len(result) > 1:
        raise _Invalid(f"only one listener is supported, got {len(result)} in {text!r}")
    return tuple(result)


def _parse_bind_listeners(text: str) -> tuple[Listener, ...]:
    listeners = parse_listeners(text)
    if not listeners:
        raise _Invalid("at least one listener is required, e.g. PLAINTEXT://127.0.0.1:9092")
    return listeners


def _parse_advertised(text: str) -> tuple[Listener, ...]:
    listeners = parse_listeners(text)
    for listener in listeners:
        if listener.host in _WILDCARD_HOSTS:
            raise _Invalid(
                f"{str(listener)!r} cannot be advertised: clients need a host name or address"
            )
    return listeners


def _format_listeners(listeners: tuple[Listener, ...]) -> str:
    return ",".join(str(listener) for listener in listeners)


def _parse_endpoint(text: str) -> Endpoint | None:
    s = text.strip()
    if not s:
        return None
    m = _ENDPOINT_RE.fullmatch(s)
    if m is None:
        raise _Invalid(f"cannot parse {text!r} (expected host:port, or empty for off)")
    return Endpoint(m.group(1).strip("[]"), _parse_port(m.group(2)))


def _format_endpoint(value: Endpoint | None) -> str:
    return "" if value is None else str(value)


def _parse_log_dirs(text: str) -> str:
    dirs = [d.strip() for d in text.split(",") if d.strip()]
    if not dirs:
        raise _Invalid("expected a directory, got an empty value")
    if len(dirs) > 1:
        raise _Invalid(f"only one directory is supported, got {len(dirs)} in {text!r}")
    return dirs[0]


# ---------------------------------------------------------------------------------------------
# Field declarations: each field carries its PropertySpec (minus the name) in its metadata.


def _int(
    default: int,
    doc: str,
    *,
    lo: int = 0,
    hi: int = INT32_MAX,
    sentinel: int | None = None,
    semel: str = "",
) -> Any:
    def parse(text: str) -> int:
        return _parse_int(text, lo, hi, sentinel)

    return field(default=default, metadata={"spec": (doc, parse, str, semel)})


def _bool(default: bool, doc: str, *, semel: str = "") -> Any:
    return field(default=default, metadata={"spec": (doc, _parse_bool, _format_bool, semel)})


def _choice(default: str, choices: tuple[str, ...], doc: str, *, semel: str = "") -> Any:
    def parse(text: str) -> str:
        return _parse_choice(text, choices)

    return field(default=default, metadata={"spec": (doc, parse, str, semel)})


def _custom(
    default: Any, doc: str, parse: Callable[[str], Any], fmt: Callable[[Any], str], semel: str = ""
) -> Any:
    return field(default=default, metadata={"spec": (doc, parse, fmt, semel)})


_WEEK_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Every property the broker honours; attribute = Kafka name with '.' -> '_'."""

    # --- listeners and identity
    listeners: tuple[Listener, ...] = _custom(
        (Listener("PLAINTEXT", "127.0.0.1", 9092),),
        "Address to bind, NAME://host:port; host empty = all interfaces, port 0 = ephemeral.",
        _parse_bind_listeners,
        _format_listeners,
        semel="default binds 127.0.0.1 (Kafka: all interfaces); one PLAINTEXT listener only",
    )
    advertised_listeners: tuple[Listener, ...] = _custom(
        (),
        "Address given to clients in metadata; empty = the bound listener address.",
        _parse_advertised,
        _format_listeners,
        semel="port 0 means the port actually bound",
    )
    node_id: int = _int(0, "The broker's node id, returned in metadata.", semel="default 0")
    # --- storage
    log_dirs: str = _custom(
        "./data",
        "Directory holding the partition logs (also settable as log.dir).",
        _parse_log_dirs,
        str,
        semel="default ./data; exactly one directory",
    )
    num_partitions: int = _int(1, "Partitions of a topic created without a count.", lo=1)
    default_replication_factor: int = _int(1, "Replication factor of auto-created topics.", lo=1)
    allow_replication_factor_overcommit: bool = _bool(
        False,
        "Accept replication factors above 1 by creating the topic with 1.",
        semel="semel's own key; off: INVALID_REPLICATION_FACTOR as in Kafka",
    )
    auto_create_topics_enable: bool = _bool(
        True, "Create a topic when a client asks for its metadata (never on produce, as in Kafka 4)."
    )
    delete_topic_enable: bool = _bool(True, "Allow DeleteTopics.")
    log_segment_bytes: int = _int(1073741824, "Size at which a segment is rolled.", lo=14)
    log_roll_ms: int = _int(
        _WEEK_MS,
        "Age at which a segment is rolled (log.roll.hours is the same in hours).",
        lo=1,
        hi=INT64_MAX,
    )
    log_retention_ms: int = _int(
        _WEEK_MS,
        "Age after which closed segments are deleted; -1 = forever.",
        lo=1,
        hi=INT64_MAX,
        sentinel=-1,
    )
    log_retention_bytes: int = _int(
        -1,
        "Size above which the oldest segments of a partition are deleted; -1 = no limit.",
        lo=-1,
        hi=INT64_MAX,
    )
    log_retention_check_interval_ms: int = _int(
        300000, "How often retention is enforced.", lo=1, hi=INT64_MAX
    )
    log_index_interval_bytes: int = _int(4096, "Bytes of log between two offset index entries.")
    log_index_size_max_bytes: int = _int(
        10485760, "Maximum size of an offset or time index file.", lo=4
    )
    log_flush_mode: str = _choice(
        "fsync",
        ("fsync", "none"),
        "fsync: an acknowledged write is on disk (group commit); none: left to the OS.",
        semel="semel's own key, replacing log.flush.interval.*",
    )
    log_message_timestamp_type: str = _choice(
        "CreateTime",
        ("CreateTime", "LogAppendTime"),
        "Timestamp stored for new records: the producer's or the broker's.",
    )
    message_max_bytes: int = _int(1048588, "Largest record batch accepted, in bytes.")
    # --- network
    socket_request_max_bytes: int = _int(
        104857600, "Largest request frame accepted; larger ones close the connection.", lo=1
    )
    connections_max_idle_ms: int = _int(
        600000, "Close connections idle for this long.", lo=1, hi=INT64_MAX
    )
    queued_max_request_bytes: int = _int(
        268435456,
        "Bytes of requests buffered or in progress over all connections before reading "
        "pauses; -1 = no limit.",
        lo=1,
        hi=INT64_MAX,
        sentinel=-1,
        semel="default 256 MiB (Kafka: -1, no limit); must be at least socket.request.max.bytes",
    )
    connection_max_pending_bytes: int = _int(
        16777216,
        "Bytes of requests and responses in flight on one connection before reading pauses.",
        lo=1,
        hi=INT64_MAX,
        semel="semel's own key",
    )
    connection_max_inflight_requests: int = _int(
        16,
        "Requests started and not yet answered on one connection: one runs at a time, "
        "acks=all produce requests waiting for the disk let the next one start.",
        lo=1,
        hi=INT32_MAX,
        semel="semel's own key",
    )
    socket_request_read_timeout_ms: int = _int(
        30000,
        "A request whose first byte has arrived must arrive whole within this time, else "
        "the connection is closed.",
        lo=1,
        hi=INT64_MAX,
        semel="semel's own key (Kafka has none: trickled bytes keep a connection open)",
    )
    max_connections: int = _int(
        1000,
        "Most client connections open at once; further ones are closed on arrival.",
        lo=1,
        hi=INT32_MAX,
        semel="default 1000 (Kafka: 2147483647); Kafka delays accepting, semel closes",
    )
    max_connections_per_ip: int = _int(
        500,
        "Most connections open at once from one client address; further ones are closed.",
        lo=1,
        hi=INT32_MAX,
        semel="default 500 (Kafka: 2147483647)",
    )
    message_max_uncompressed_bytes: int = _int(
        67108864,
        "Largest size a compressed record batch may expand to; a larger one is refused "
        "(INVALID_RECORD) without being decompressed further.",
        lo=1,
        hi=INT32_MAX,
        semel="semel's own key (Kafka has no limit)",
    )
    metrics_listener: Endpoint | None = _custom(  # noqa: RUF009 (returns a field())
        None,
        "host:port of the Prometheus /metrics HTTP endpoint; empty = off.",
        _parse_endpoint,
        _format_endpoint,
        semel="semel's own key",
    )
    # --- group coordinator
    group_initial_rebalance_delay_ms: int = _int(
        3000, "Wait before the first rebalance of an empty group."
    )
    group_min_session_timeout_ms: int = _int(6000, "Smallest session timeout a member may ask.")
    group_max_session_timeout_ms: int = _int(1800000, "Largest session timeout a member may ask.")
    group_max_size: int = _int(
        INT32_MAX, "Most members a group may have; a join beyond it gets GROUP_MAX_SIZE_REACHED.",
        lo=1,
    )
    offset_metadata_max_bytes: int = _int(
        4096, "Longest metadata string of a committed offset (else OFFSET_METADATA_TOO_LARGE)."
    )
    offsets_topic_num_partitions: int = _int(
        50, "Partitions of __consumer_offsets (fixed once created).", lo=1
    )
    offsets_retention_minutes: int = _int(
        10080, "Committed offsets of an empty group are kept this long.", lo=1
    )
    offsets_retention_check_interval_ms: int = _int(
        600000, "How often expired offsets are removed.", lo=1, hi=INT64_MAX
    )
    # --- transactions and idempotence
    transaction_max_timeout_ms: int = _int(
        900000, "Largest transaction.timeout.ms a producer may ask.", lo=1
    )
    transactional_id_expiration_ms: int = _int(
        604800000, "A transactional id unused for this long is forgotten.", lo=1
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = _int(
        10000, "How often timed-out transactions are aborted.", lo=1
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = _int(
        3600000, "How often expired transactional ids are removed.", lo=1
    )
    transaction_state_log_num_partitions: int = _int(
        50, "Partitions of __transaction_state (fixed once created).", lo=1
    )
    transaction_partition_verification_enable: bool = _bool(
        True, "Verify a partition was added to the transaction before a transactional write."
    )
    producer_id_expiration_ms: int = _int(
        86400000, "Producer state idle for this long is dropped from a partition.", lo=1
    )
    producer_id_expiration_check_interval_ms: int = _int(
        600000, "How often expired producer ids are removed.", lo=1
    )

    @property
    def listener(self) -> Listener:
        """The (single) listener to bind."""
        return self.listeners[0]

    def advertised_listener(self, bound_port: int) -> Listener:
        """What metadata tells clients, given the port actually bound.

        `advertised.listeners` if set (port 0 there = `bound_port`); otherwise the bound
        listener, with a wildcard host replaced by this machine's host name.
        """
        if self.advertised_listeners:
            adv = self.advertised_listeners[0]
            return adv._replace(port=adv.port or bound_port)
        host = self.listener.host
        if host in _WILDCARD_HOSTS:
            host = socket.gethostname()
        return Listener(self.listener.name, host, bound_port)

    def as_properties(self) -> dict[str, str]:
        """Kafka name -> value as text (parses back to this config; for DescribeConfigs)."""
        return {name: spec.format(getattr(self, _attr(name))) for name, spec in PROPERTIES.items()}


def _attr(name: str) -> str:
    return name.replace(".", "_")


PROPERTIES: dict[str, PropertySpec] = {
    f.name.replace("_", "."): PropertySpec(f.name.replace("_", "."), *f.metadata["spec"])
    for f in dataclasses.fields(BrokerConfig)
}


# ---------------------------------------------------------------------------------------------
# Alternative keys for one setting. A group lists its keys, highest precedence first; the
# first is the canonical property, the others are converted to its unit.


class Alias(NamedTuple):
    name: str
    target: str
    doc: str
    parse: Callable[[str], Any]  # text -> value in the target's unit; raises _Invalid


def _retention_in(unit_ms: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _parse_int(text, 1, INT32_MAX, -1)
        return -1 if value == -1 else value * unit_ms

    return parse


def _roll_hours(text: str) -> int:
    return _parse_int(text, 1, INT32_MAX, None) * 3_600_000


ALIASES: dict[str, Alias] = {
    a.name: a
    for a in (
        Alias("log.dir", "log.dirs", "Used when log.dirs is not set.", _parse_log_dirs),
        Alias("log.roll.hours", "log.roll.ms", "log.roll.ms in hours.", _roll_hours),
        Alias(
            "log.retention.minutes",
            "log.retention.ms",
            "log.retention.ms in minutes.",
            _retention_in(60_000),
        ),
        Alias(
            "log.retention.hours",
            "log.retention.ms",
            "log.retention.ms in hours.",
            _retention_in(3_600_000),
        ),
    )
}
_GROUPS: dict[str, tuple[str, ...]] = {}
for _alias in ALIASES.values():
    _GROUPS.setdefault(_alias.target, (_alias.target,))
    _GROUPS[_alias.target] += (_alias.name,)
del _alias
_GROUP_OF: dict[str, str] = {key: target for target, keys in _GROUPS.items() for key in keys}

KNOWN_KEYS: frozenset[str] = frozenset(PROPERTIES) | frozenset(ALIASES)


def env_var_name(key: str) -> str:
    """The environment variable that sets `key`: log.dirs -> SEMEL_LOG_DIRS."""
    return ENV_PREFIX + key.replace(".", "_").upper()


# ---------------------------------------------------------------------------------------------
# Loading


class _Setting(NamedTuple):
    key: str
    value: str
    origin: str  # where it came from, for messages


def load_config(
    path: str | os.PathLike[str] | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    data_dir: str | None = None,
) -> BrokerConfig:
    """Defaults < file at `path` < `env` (os.environ if None) < `overrides` < host/port/data_dir.

    Raises ConfigError with a one-line message on any problem.
    """
    sources: list[list[_Setting]] = []
    if path is not None:
        sources.append(_read_file(os.fspath(path)))
    sources.append(_from_env(os.environ if env is None else env))
    sources.append(_from_overrides(overrides))

    chosen: dict[str, _Setting] = {}  # canonical property -> the setting that decides it
    for settings in sources:
        for setting in settings:
            if setting.key not in KNOWN_KEYS:
                raise ConfigError(_unknown(setting))
        latest = {s.key: s for s in settings}  # within a source the last occurrence wins
        for target, keys in _GROUPS.items():
            winner = next((latest[k] for k in keys if k in latest), None)
            if winner is not None:
                chosen[target] = winner
        for key, setting in latest.items():
            if key not in _GROUP_OF:
                chosen[key] = setting

    values: dict[str, Any] = {}
    for target, setting in chosen.items():
        parse = ALIASES[setting.key].parse if setting.key in ALIASES else PROPERTIES[target].parse
        try:
            values[_attr(target)] = parse(setting.value)
        except _Invalid as e:
            raise ConfigError(f"{setting.key}: {e} ({setting.origin})") from None
    config = BrokerConfig(**values)
    config = apply_cli_options(config, host=host, port=port, data_dir=data_dir)
    _check(config)
    return config


def apply_cli_options(
    config: BrokerConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    data_dir: str | None = None,
) -> BrokerConfig:
    """--host/--port rewrite the listener's host/port; --data-dir replaces log.dirs."""
    changes: dict[str, Any] = {}
    if host is not None or port is not None:
        if port is not None and not 0 <= port <= 65535:
            raise ConfigError(f"--port: {port} is out of range (expected 0..65535)")
        if host is not None and not re.fullmatch(r"[^\s/\[\]]*", host):
            raise ConfigError(f"--host: cannot use {host!r} as a host name or address")
        listener = config.listener
        if host is not None:
            listener = listener._replace(host=host)
        if port is not None:
            listener = listener._replace(port=port)
        changes["listeners"] = (listener,) + config.listeners[1:]
    if data_dir is not None:
        if not data_dir.strip():
            raise ConfigError("--data-dir: expected a directory, got an empty value")
        changes["log_dirs"] = data_dir
    return dataclasses.replace(config, **changes) if changes else config


def _check(config: BrokerConfig) -> None:
    """Rules that involve more than one property."""
    queued = config.queued_max_request_bytes
    if queued != -1 and queued < config.socket_request_max_bytes:
        raise ConfigError(
            f"queued.max.request.bytes ({queued}) must be at least socket.request.max.bytes "
            f"({config.socket_request_max_bytes}), or -1 for no limit"
        )
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(
            f"group.min.session.timeout.ms ({config.group_min_session_timeout_ms}) must not "
            f"exceed group.max.session.timeout.ms ({config.group_max_session_timeout_ms})"
        )


def _read_file(path: str) -> list[_Setting]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path!r} cannot be read: {e}") from None
    try:
        lines = parse_properties(text)
    except PropertiesSyntaxError as e:
        raise ConfigError(f"{path} line {e.line}: {e}") from None
    return [_Setting(p.key, p.value, f"in {path} line {p.line}") for p in lines]


def _from_env(env: Mapping[str, str]) -> list[_Setting]:
    settings = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in RESERVED_ENV:
            continue
        key = name[len(ENV_PREFIX) :].lower().replace("_", ".")
        settings.append(_Setting(key, env[name], f"environment variable {name}"))
    return settings


def _from_overrides(overrides: Iterable[str]) -> list[_Setting]:
    settings = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {item!r}")
        settings.append(_Setting(key.strip(), value, f"--set {item!r}"))
    return settings


def _unknown(setting: _Setting) -> str:
    close = difflib.get_close_matches(setting.key, KNOWN_KEYS, n=1, cutoff=0.6)
    hint = ""
    if close:
        from_env = setting.origin.startswith("environment")
        hint = f"; did you mean {env_var_name(close[0]) if from_env else repr(close[0])}?"
    return f"unknown property {setting.key!r} ({setting.origin}){hint}"
