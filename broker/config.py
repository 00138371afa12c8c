"""Broker configuration under Kafka's property names, typed and validated at start.

Sources, lowest precedence first:
  1. the defaults below (Kafka's, except where a field's spec says how semel differs);
  2. a properties file (`--config FILE`, java.util.Properties syntax, see broker.properties);
  3. environment variables `SEMEL_<NAME>`: the property name upper-cased with '.' -> '_',
     e.g. `SEMEL_LOG_DIRS=/var/lib/semel` sets `log.dirs` (names in RESERVED_ENV are for
     tooling and ignored; any other unknown SEMEL_ variable is an error);
  4. `--set key=value` overrides, in order;
  5. the CLI shortcuts `--host`, `--port` (rewrite the first listener) and `--data-dir`
     (log.dirs).

Some settings have several keys (`log.dirs`/`log.dir`, `log.roll.ms`/`log.roll.hours`,
`log.retention.ms`/`.minutes`/`.hours`). Within one source Kafka's precedence applies (ms over
minutes over hours, log.dirs over log.dir); a later source that sets any key of the group
replaces what earlier sources said about it. Every problem is a one-line ConfigError naming
the key, the bad value and where it came from.

Security settings (see broker.security.listeners): TLS and SASL keys may be overridden for one
listener with Kafka's prefix, `listener.name.<listener lower-cased>.ssl.keystore.location`, and
SASL login modules are set per listener and mechanism,
`listener.name.<listener>.<mechanism lower-cased>.sasl.jaas.config`; these keys are checked
against the final `listeners` (from the environment: SEMEL_LISTENER_NAME_<LISTENER>_<KEY>, e.g.
SEMEL_LISTENER_NAME_SASL_SSL_SCRAM_SHA_256_SASL_JAAS_CONFIG). Secrets (passwords, JAAS
configs, inline keys and certificates) never appear in a message, a repr or as_properties().
TLS material is loaded once at start so that a wrong password, a missing file or a key that
does not match its certificate stops the broker with a one-line ConfigError.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from semel.broker.properties import PropertiesSyntaxError, parse_properties
from semel.broker.security import Principal
from semel.broker.security.listeners import (
    DEFAULT_PROTOCOL_MAP,
    JAAS_SUFFIX,
    LISTENER_PREFIX,
    SASL_MECHANISMS,
    STANDARD_AUTHORIZER,
    WILDCARD_HOSTS,
    Listener,
    ListenerSecurity,
    Password,
    UnknownListenerKey,
    check_listener,
    check_ports,
    format_list,
    format_listeners,
    format_password,
    format_protocol_map,
    format_super_users,
    jaas_key,
    listener_prefix,
    parse_authorizer,
    parse_client_auth,
    parse_list,
    parse_listeners,
    parse_mapping_rules,
    parse_password,
    parse_path,
    parse_port,
    parse_protocol_map,
    parse_sasl_mechanisms,
    parse_store_type,
    parse_super_users,
    parse_tls_protocols,
    resolve_listener_key,
    resolve_listener_security,
)
from semel.broker.security.listeners import InvalidValue as _Invalid
from semel.storage.config import config_class

__all__ = [
    "ALIASES",
    "ENV_PREFIX",
    "PROPERTIES",
    "RESERVED_ENV",
    "BrokerConfig",
    "ConfigError",
    "Endpoint",
    "Listener",
    "ListenerSecurity",
    "Password",
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
_WILDCARD_HOSTS = WILDCARD_HOSTS


class ConfigError(ValueError):
    """An invalid configuration; the message is one line, ready to print."""


class Endpoint(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"{_bracket(self.host)}:{self.port}"


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
    sensitive: bool = False  # a secret: as_properties() shows "[hidden]", messages never show it


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


def _parse_float(text: str, lo: float, hi: float) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise _Invalid(f"expected a number, got {text!r}") from None
    if not lo <= value <= hi:  # NaN fails too
        raise _Invalid(f"{text.strip()} is out of range (expected {lo:g}..{hi:g})")
    return value


def _parse_cleanup_policy(text: str) -> str:
    policies = [p.strip() for p in text.split(",") if p.strip()]
    if not policies or any(p not in ("delete", "compact") for p in policies):
        raise _Invalid(f"expected delete, compact or compact,delete, got {text!r}")
    return ",".join(policies)


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


_ENDPOINT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):([0-9]+)")


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


def _parse_endpoint(text: str) -> Endpoint | None:
    s = text.strip()
    if not s:
        return None
    m = _ENDPOINT_RE.fullmatch(s)
    if m is None:
        raise _Invalid(f"cannot parse {text!r} (expected host:port, or empty for off)")
    return Endpoint(m.group(1).strip("[]"), parse_port(m.group(2)))


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


def _float(default: float, doc: str, *, lo: float, hi: float, semel: str = "") -> Any:
    def parse(text: str) -> float:
        return _parse_float(text, lo, hi)

    return field(default=default, metadata={"spec": (doc, parse, repr, semel)})


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


def _text(default: str, doc: str, parse: Callable[[str], str] = parse_path, semel: str = "") -> Any:
    return field(default=default, metadata={"spec": (doc, parse, str, semel)})


def _list(default: tuple[str, ...], doc: str, parse: Callable[[str], Any], semel: str = "") -> Any:
    return field(default=default, metadata={"spec": (doc, parse, format_list, semel)})


def _secret(doc: str) -> Any:
    """A secret (Kafka's PASSWORD type): held as Password, never shown."""
    return field(default=None, metadata={"spec": (doc, parse_password, format_password, "", True)})


_WEEK_MS = 7 * 24 * 3600 * 1000


def _parse_consumer_assignors(text: str) -> tuple[str, ...]:
    """``group.consumer.assignors``: uniform and range, by name or Kafka's class name."""
    names = []
    for item in parse_list(text):
        name = item.rsplit(".", 1)[-1].lower().removesuffix("assignor")
        if name not in ("uniform", "range"):
            raise _Invalid(f"unknown assignor {item!r} (uniform, range)")
        names.append(name)
    if not names:
        raise _Invalid("at least one assignor is needed")
    return tuple(names)


@config_class
class BrokerConfig:
    """Every property the broker honours; attribute = Kafka name with '.' -> '_'."""

    # --- listeners and identity
    listeners: tuple[Listener, ...] = _custom(
        (Listener("PLAINTEXT", "127.0.0.1", 9092),),
        "Addresses to bind, NAME://host:port,...; host empty = all interfaces, port 0 = "
        "ephemeral. NAME's protocol comes from listener.security.protocol.map.",
        _parse_bind_listeners,
        format_listeners,
        semel="default binds 127.0.0.1 (Kafka: all interfaces); several listeners may use port 0",
    )
    advertised_listeners: tuple[Listener, ...] = _custom(
        (),
        "Addresses given to clients in metadata, NAME://host:port per listener; a listener not "
        "named here advertises its bound address.",
        _parse_advertised,
        format_listeners,
        semel="port 0 means the port actually bound; Kafka leaves unnamed listeners out",
    )
    listener_security_protocol_map: tuple[tuple[str, str], ...] = _custom(
        DEFAULT_PROTOCOL_MAP,
        "Security protocol of each listener name, NAME:PROTOCOL,... with PLAINTEXT, SSL, "
        "SASL_PLAINTEXT or SASL_SSL.",
        parse_protocol_map,
        format_protocol_map,
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
        True,
        "Create a topic when a client asks for its metadata (never on produce, as in Kafka 4).",
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
    log_cleanup_policy: str = _custom(
        "delete",
        "Default cleanup.policy of topics: delete (retention), compact, or compact,delete.",
        _parse_cleanup_policy, str,
    )
    log_cleaner_enable: bool = _bool(
        True,
        "Run the log cleaner: compact the partitions of topics with cleanup.policy=compact.",
    )
    log_cleaner_threads: int = _int(
        1, "Cleaner threads.", lo=1,
        semel="one cleaner process whatever the value (its work runs outside the broker's "
              "process, at a lower CPU priority)",
    )
    log_cleaner_backoff_ms: int = _int(
        15000, "How long the cleaner sleeps when no partition needs cleaning.", lo=1,
        hi=INT64_MAX,
    )
    log_cleaner_dedupe_buffer_size: int = _int(
        134217728,
        "Memory for the cleaner's key map; a partition with more distinct keys in its dirty "
        "range than fit is cleaned in several rounds.",
        lo=1024, hi=INT64_MAX,
    )
    log_cleaner_io_buffer_size: int = _int(
        524288, "The cleaner's read and write buffers together; it reads segments in chunks "
        "of half of it (a batch larger than that is read whole).", lo=0,
    )
    log_cleaner_min_cleanable_ratio: float = _float(
        0.5, "Default min.cleanable.dirty.ratio of topics: the dirty share of a log above "
        "which it is cleaned.", lo=0.0, hi=1.0,
    )
    log_cleaner_delete_retention_ms: int = _int(
        86400000, "Default delete.retention.ms of topics: how long tombstones and "
        "transaction markers outlive the first cleaning that finds them removable.",
        hi=INT64_MAX,
    )
    log_cleaner_min_compaction_lag_ms: int = _int(
        0, "Default min.compaction.lag.ms of topics: the shortest time a record stays "
        "uncompacted.", hi=INT64_MAX,
    )
    log_cleaner_max_compaction_lag_ms: int = _int(
        INT64_MAX, "Default max.compaction.lag.ms of topics: the longest time a record stays "
        "ineligible for compaction.", lo=1, hi=INT64_MAX,
    )
    log_cleaner_io_buffer_load_factor: float = _float(
        0.9, "How full the cleaner's key map may get before a round ends.", lo=0.01, hi=1.0,
    )
    log_cleaner_io_max_bytes_per_second: float = _float(
        1.7976931348623157e308,
        "The cleaner's bytes read and written a second, at most (default: no limit).",
        lo=1.0, hi=1.7976931348623157e308,
    )
    log_cleaner_max_cpu_share: float = _float(
        0.3,
        "The cleaner's CPU time, at most, as a share of one core (measured over 300 ms).",
        lo=0.01, hi=1.0,
        semel="semel's own key: the cleaner shares a small machine with the broker and its "
              "clients (docs/COMPACTION.md: produce throughput with the cleaner busy)",
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
    # --- client quotas (values per user / client-id: AlterClientQuotas, broker/quotas/)
    quota_window_num: int = _int(
        11, "Samples kept for client quota rates (10 whole windows and the current one).", lo=1
    )
    quota_window_size_seconds: int = _int(
        1, "Time span of each client quota sample, in seconds.", lo=1
    )
    socket_sendfile_enable: bool = _bool(
        True,
        "Fetch sends large record data from the segment files with sendfile (zero copy) on "
        "listeners without TLS; false reads it into memory and writes it, as TLS does.",
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
    metrics_internal_topics_enable: bool = _bool(
        False,
        "Export per-partition metrics (offsets, size, consumer group lag) for the internal "
        "topics __consumer_offsets and __transaction_state too.",
        semel="semel's own key",
    )
    metrics_listener: Endpoint | None = _custom(
        None,
        "host:port of the Prometheus /metrics HTTP endpoint; empty = off.",
        _parse_endpoint,
        _format_endpoint,
        semel="semel's own key",
    )
    # --- TLS (each may be overridden per listener: listener.name.<name>.ssl.*)
    ssl_keystore_type: str = _text(
        "JKS",
        "Format of the key store: PKCS12, PEM, or JKS (Kafka's default).",
        parse_store_type,
        semel="JKS reads a PKCS12 file, as Java does; a real JKS file must be converted",
    )
    ssl_keystore_location: str = _text(
        "", "Key store file: the broker's key and certificate chain."
    )
    ssl_keystore_password: Password | None = _secret(
        "Password of the key store file (not PEM)."
    )
    ssl_key_password: Password | None = _secret(
        "Password of the private key (PEM: if encrypted)."
    )
    ssl_keystore_certificate_chain: Password | None = _secret(
        "Certificate chain in PEM, inline (with ssl.keystore.key and ssl.keystore.type=PEM)."
    )
    ssl_keystore_key: Password | None = _secret(
        "Private key in PEM (PKCS#8, encrypted with ssl.key.password or not), inline."
    )
    ssl_truststore_type: str = _text(
        "JKS",
        "Format of the trust store: PKCS12, PEM, or JKS (Kafka's default).",
        parse_store_type,
        semel="JKS reads a PKCS12 file, as Java does; a real JKS file must be converted",
    )
    ssl_truststore_location: str = _text("", "Trust store file: CAs that sign client certificates.")
    ssl_truststore_password: Password | None = _secret(
        "Password of the trust store file (not PEM)."
    )
    ssl_truststore_certificates: Password | None = _secret(
        "Trusted certificates in PEM, inline (with ssl.truststore.type=PEM)."
    )
    ssl_client_auth: str = _text(
        "none",
        "Client certificates: none, requested (verified if sent) or required (mutual TLS).",
        parse_client_auth,
        semel="as in Kafka, applies to SASL_SSL only when set with the listener.name prefix",
    )
    ssl_enabled_protocols: tuple[str, ...] = _list(
        ("TLSv1.2", "TLSv1.3"),
        "TLS versions accepted (Java's names), a contiguous range.",
        parse_tls_protocols,
    )
    ssl_cipher_suites: tuple[str, ...] = _list(
        (),
        "TLS 1.2 cipher suites, IANA/Java names or OpenSSL names; empty = OpenSSL's defaults.",
        parse_list,
        semel="TLS 1.3 suites cannot be chosen one by one (Python's ssl): listing only TLS 1.3 "
        "suites allows TLS 1.3 only, listing none allows TLS 1.2 only",
    )
    ssl_principal_mapping_rules: str = _text(
        "DEFAULT",
        "Rules mapping a client certificate's distinguished name to a principal name.",
        parse_mapping_rules,
    )
    ssl_endpoint_identification_algorithm: str = _text(
        "https",
        "Host name verification of the peer; a broker does not check its clients' names.",
        semel="accepted and unused (semel makes no TLS connections of its own)",
    )
    # --- SASL
    sasl_enabled_mechanisms: tuple[str, ...] = _list(
        ("GSSAPI",),
        "SASL mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
        parse_sasl_mechanisms,
        semel="GSSAPI (Kerberos, Kafka's default) and OAUTHBEARER are not implemented: a SASL "
        "listener must set this to semel's mechanisms",
    )
    connections_max_reauth_ms: int = _int(
        0,
        "Longest session of a SASL connection before it must re-authenticate (KIP-368); 0 = off.",
        hi=INT64_MAX,
    )
    connection_failed_authentication_delay_ms: int = _int(
        100,
        "Delay before a connection whose authentication failed is closed (slows down password "
        "guessing); must be lower than connections.max.idle.ms.",
    )
    # --- authorization
    authorizer_class_name: str = _text(
        "",
        f"{STANDARD_AUTHORIZER} turns ACL checks on; empty = every request is allowed.",
        parse_authorizer,
    )
    super_users: tuple[Principal, ...] = _custom(
        (),
        "Principals allowed everything, separated by ';', e.g. User:admin;User:ops.",
        parse_super_users,
        format_super_users,
    )
    allow_everyone_if_no_acl_found: bool = _bool(
        False, "Allow a request on a resource no ACL matches (false: deny, as in Kafka)."
    )
    # --- group coordinator
    group_initial_rebalance_delay_ms: int = _int(
        3000, "Wait before the first rebalance of an empty group."
    )
    group_min_session_timeout_ms: int = _int(6000, "Smallest session timeout a member may ask.")
    group_max_session_timeout_ms: int = _int(1800000, "Largest session timeout a member may ask.")
    group_max_size: int = _int(
        INT32_MAX,
        "Most members a group may have; a join beyond it gets GROUP_MAX_SIZE_REACHED.",
        lo=1,
    )
    group_consumer_session_timeout_ms: int = _int(
        45000, "Session timeout of consumer group (KIP-848) members.", lo=1
    )
    group_consumer_heartbeat_interval_ms: int = _int(
        5000, "Heartbeat interval the coordinator gives consumer group (KIP-848) members.", lo=1
    )
    group_consumer_max_size: int = _int(
        INT32_MAX, "Most members a consumer group (KIP-848) may have.", lo=1
    )
    group_consumer_assignors: tuple[str, ...] = _list(
        ("uniform", "range"),
        "Server-side assignors of consumer groups (KIP-848): uniform, range; the first is the "
        "default.",
        _parse_consumer_assignors,
    )
    group_consumer_migration_policy: str = _choice(
        "bidirectional",
        ("disabled", "upgrade", "downgrade", "bidirectional"),
        "Online conversion between classic and consumer (KIP-848) groups: upgrade (a "
        "non-empty classic group joined by a consumer-protocol member), downgrade (a consumer "
        "group whose last consumer-protocol member leaves), both, or neither.",
    )
    # share groups (KIP-932): Kafka's GroupCoordinatorConfig / ShareGroupConfig keys
    group_share_session_timeout_ms: int = _int(
        45000, "Session timeout of share group members.", lo=1
    )
    group_share_min_session_timeout_ms: int = _int(
        45000, "Smallest share.session.timeout.ms a share group may be given.", lo=1
    )
    group_share_max_session_timeout_ms: int = _int(
        60000, "Largest share.session.timeout.ms a share group may be given.", lo=1
    )
    group_share_heartbeat_interval_ms: int = _int(
        5000, "Heartbeat interval the coordinator gives share group members.", lo=1
    )
    group_share_min_heartbeat_interval_ms: int = _int(
        5000, "Smallest share.heartbeat.interval.ms a share group may be given.", lo=1
    )
    group_share_max_heartbeat_interval_ms: int = _int(
        15000, "Largest share.heartbeat.interval.ms a share group may be given.", lo=1
    )
    group_share_max_size: int = _int(
        200, "Most members a share group may have (GROUP_MAX_SIZE_REACHED beyond).",
        lo=1, hi=1000,
    )
    group_share_record_lock_duration_ms: int = _int(
        30000, "How long a share group member holds the records it acquired before they are "
        "released to the group again.", lo=1000, hi=3600000,
    )
    group_share_min_record_lock_duration_ms: int = _int(
        15000, "Smallest share.record.lock.duration.ms a share group may be given.",
        lo=1000, hi=30000,
    )
    group_share_max_record_lock_duration_ms: int = _int(
        60000, "Largest share.record.lock.duration.ms a share group may be given.",
        lo=30000, hi=3600000,
    )
    group_share_delivery_count_limit: int = _int(
        5, "Deliveries of a record to share group members before it is archived.",
        lo=2, hi=10,
    )
    group_share_partition_max_record_locks: int = _int(
        2000, "Most records in flight (acquired or awaiting redelivery) per share-partition.",
        lo=100, hi=10000,
    )
    offset_metadata_max_bytes: int = _int(
        4096, "Longest metadata string of a committed offset (else OFFSET_METADATA_TOO_LARGE)."
    )
    offsets_topic_num_partitions: int = _int(
        50, "Partitions of __consumer_offsets (fixed once created).", lo=1
    )
    offsets_topic_segment_bytes: int = _int(
        104857600, "Segment size of __consumer_offsets (set when it is created); smaller "
        "segments let the cleaner compact it sooner.", lo=14,
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
    transaction_state_log_segment_bytes: int = _int(
        104857600, "Segment size of __transaction_state (set when it is created); smaller "
        "segments let the cleaner compact it sooner.", lo=14,
    )
    transaction_two_phase_commit_enable: bool = _bool(
        False, "Allow KIP-939 two-phase commit: InitProducerId with enable2Pc (a transaction "
        "that never times out, for an external transaction manager); off, such a request gets "
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED."
    )
    transaction_two_phase_commit_warn_age_ms: int = _int(
        3600000, "A two-phase-commit transaction open longer than this is logged (once) and "
        "counted in semel_two_phase_commit_transactions_overdue: the timeout reaper never "
        "ends one.", lo=1, hi=INT64_MAX,
        semel="semel's own key",
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
    producer_id_principal_binding_enable: bool = _bool(
        True,
        "With the authorizer on, refuse Produce, AddPartitionsToTxn, AddOffsetsToTxn, "
        "TxnOffsetCommit and EndTxn using a producer id that InitProducerId issued to another "
        "principal.",
        semel="semel's own key; false: Kafka's behaviour (any principal may use any producer "
        "id it learns)",
    )

    # listener.name.<listener>.<key> settings as (LISTENER, key, value), sorted; resolved by
    # listener_security(). Not a property itself (no spec): see LISTENER_KEYS.
    listener_overrides: tuple[tuple[str, str, Any], ...] = field(default=(), metadata={})
    # the keys the configuration sources set, as written (an alias such as log.retention.hours
    # stays itself), with the text given (None for a secret): Kafka's "static broker
    # configs", which DescribeConfigs shows as STATIC_BROKER_CONFIG synonyms. Not compared.
    static_keys: tuple[tuple[str, str | None], ...] = field(
        default=(), compare=False, metadata={})

    @property
    def listener(self) -> Listener:
        """The first listener: the one `--host`/`--port` rewrite and the default of the
        single-listener accessors."""
        return self.listeners[0]

    def find_listener(self, name: str) -> Listener:
        """The listener called `name` (any case); KeyError if there is none."""
        upper = name.upper()
        for listener in self.listeners:
            if listener.name == upper:
                return listener
        raise KeyError(name)

    def advertised_listener(self, bound_port: int, name: str | None = None) -> Listener:
        """What metadata tells clients of listener `name` (default: the first), given the port
        it actually bound.

        Its `advertised.listeners` entry if there is one (port 0 there = `bound_port`);
        otherwise the bound listener, with a wildcard host replaced by this machine's host name.
        """
        listener = self.listener if name is None else self.find_listener(name)
        for adv in self.advertised_listeners:
            if adv.name == listener.name:
                return adv._replace(port=adv.port or bound_port)
        host = listener.host
        if host in _WILDCARD_HOSTS:
            host = socket.gethostname()
        return Listener(listener.name, host, bound_port)

    def security_protocol(self, name: str) -> str:
        """PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL: the protocol of listener `name`."""
        protocol = dict(self.listener_security_protocol_map).get(name.upper())
        if protocol is None:
            raise KeyError(name)
        return protocol

    @property
    def authorizer_enabled(self) -> bool:
        return self.authorizer_class_name == STANDARD_AUTHORIZER

    def listener_security(self, name: str) -> ListenerSecurity:
        """Listener `name`'s protocol and TLS/SASL settings, its `listener.name.<name>.`
        overrides applied over the broker-wide keys. KeyError for an unknown listener.

        As in Kafka, `ssl.client.auth` applies to a SASL_SSL listener only when set with the
        listener prefix (else none), and a JAAS config is per listener and mechanism only.
        """
        listener = self.find_listener(name)
        overrides = {k: v for n, k, v in self.listener_overrides if n == listener.name}
        return resolve_listener_security(
            listener.name,
            self.security_protocol(listener.name),
            overrides,
            lambda key: getattr(self, _attr(key)),
        )

    def as_properties(self) -> dict[str, str]:
        """Kafka name -> value as text (for DescribeConfigs). It parses back to this config,
        except that a secret that is set shows as "[hidden]"; listener overrides are in
        listener_properties()."""
        return {
            name: _HIDDEN
            if spec.sensitive and getattr(self, _attr(name)) is not None
            else spec.format(getattr(self, _attr(name)))
            for name, spec in PROPERTIES.items()
        }

    def listener_properties(self) -> dict[str, str]:
        """The `listener.name.<name>.<key>` settings as text, secrets as "[hidden]"."""
        result = {}
        for name, key, value in self.listener_overrides:
            full = listener_prefix(name) + key
            if isinstance(value, Password):
                result[full] = _HIDDEN
            else:
                result[full] = PROPERTIES[key].format(value)
        return result


def _attr(name: str) -> str:
    return name.replace(".", "_")


def _key(attr: str) -> str:
    return attr.replace("_", ".")


_HIDDEN = "[hidden]"

PROPERTIES: dict[str, PropertySpec] = {
    _key(f.name): PropertySpec(_key(f.name), *f.metadata["spec"])
    for f in dataclasses.fields(BrokerConfig)
    if "spec" in f.metadata
}

# Keys one listener may override with listener.name.<listener>.<key>: TLS and SASL settings,
# and the JAAS config of each mechanism (<mechanism>.sasl.jaas.config).
LISTENER_KEYS: frozenset[str] = frozenset(
    [name for name in PROPERTIES if name.startswith("ssl.")]
    + ["sasl.enabled.mechanisms", "connections.max.reauth.ms"]
    + [jaas_key(mechanism) for mechanism in SASL_MECHANISMS]
)


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
    """The environment variable that sets `key`: log.dirs -> SEMEL_LOG_DIRS ('-' also -> '_')."""
    return ENV_PREFIX + key.replace(".", "_").replace("-", "_").upper()


# ---------------------------------------------------------------------------------------------
# Loading


class _Setting(NamedTuple):
    key: str
    value: str
    origin: str  # where it came from, for messages (never a secret value)
    env: str = ""  # the environment variable it came from, if it did


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

    Raises ConfigError with a one-line message on any problem, including TLS material that
    cannot be loaded (every SSL and SASL_SSL listener's context is built once here).
    """
    sources: list[list[_Setting]] = []
    if path is not None:
        sources.append(_read_file(os.fspath(path)))
    sources.append(_from_env(os.environ if env is None else env))
    sources.append(_from_overrides(overrides))

    chosen: dict[str, _Setting] = {}  # canonical property -> the setting that decides it
    per_listener: list[_Setting] = []  # listener.name.* keys, checked once listeners are known
    for settings in sources:
        static = []
        for setting in settings:
            if setting.key.startswith(LISTENER_PREFIX):
                per_listener.append(setting)
            elif setting.key in KNOWN_KEYS:
                static.append(setting)
            else:
                raise ConfigError(_unknown(setting))
        latest = {s.key: s for s in static}  # within a source the last occurrence wins
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
    values["static_keys"] = tuple(sorted(
        (s.key, None if _is_secret(s.key) else s.value) for s in chosen.values()))
    config = BrokerConfig(**values)
    config = apply_cli_options(config, host=host, port=port, data_dir=data_dir)
    if per_listener:
        config = dataclasses.replace(
            config, listener_overrides=_listener_overrides(config, per_listener)
        )
    _check(config)
    return config


def _listener_overrides(
    config: BrokerConfig, settings: list[_Setting]
) -> tuple[tuple[str, str, Any], ...]:
    names = [listener.name for listener in config.listeners]
    chosen: dict[tuple[str, str], _Setting] = {}  # later settings win
    for s in settings:
        try:
            target = resolve_listener_key(
                s.key, s.env, names, LISTENER_KEYS, KNOWN_KEYS, env_var_name
            )
        except UnknownListenerKey as e:
            raise ConfigError(f"unknown property {s.key!r} ({s.origin}): {e}{e.hint}") from None
        chosen[target] = s
    result = []
    for (name, key), s in chosen.items():
        parse = PROPERTIES[key].parse if key in PROPERTIES else parse_password  # JAAS: a secret
        try:
            result.append((name, key, parse(s.value)))
        except _Invalid as e:
            raise ConfigError(f"{listener_prefix(name)}{key}: {e} ({s.origin})") from None
    return tuple(sorted(result, key=lambda t: (t[0], t[1])))


def apply_cli_options(
    config: BrokerConfig,
    *,
    host: str | None = None,
    port: int | None = None,
    data_dir: str | None = None,
) -> BrokerConfig:
    """--host/--port rewrite the first listener's host/port (the others are left as they
    are); --data-dir replaces log.dirs."""
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
    if not changes:
        return config
    config = dataclasses.replace(config, **changes)
    given = {_key(attr) for attr in changes}
    static_keys = tuple(sorted(
        [(key, value) for key, value in config.static_keys
         if _GROUP_OF.get(key, key) not in given]
        + [(name, PROPERTIES[name].format(getattr(config, _attr(name)))) for name in given]))
    return dataclasses.replace(config, static_keys=static_keys)


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
    _check_share_groups(config)
    _check_listeners(config)


def _check_share_groups(config: BrokerConfig) -> None:
    """Kafka's GroupCoordinatorConfig / ShareGroupConfig requirements on group.share.*."""
    for what, unit in (("session.timeout", "ms"), ("heartbeat.interval", "ms"),
                       ("record.lock.duration", "ms")):
        attr = what.replace(".", "_")
        value = getattr(config, f"group_share_{attr}_{unit}")
        lo = getattr(config, f"group_share_min_{attr}_{unit}")
        hi = getattr(config, f"group_share_max_{attr}_{unit}")
        if not lo <= value <= hi:
            raise ConfigError(
                f"group.share.{what}.{unit} ({value}) must be within "
                f"group.share.min.{what}.{unit} ({lo}) and group.share.max.{what}.{unit} ({hi})"
            )
    if config.group_share_heartbeat_interval_ms >= config.group_share_session_timeout_ms:
        raise ConfigError(
            f"group.share.heartbeat.interval.ms ({config.group_share_heartbeat_interval_ms}) "
            "must be less than group.share.session.timeout.ms "
            f"({config.group_share_session_timeout_ms})"
        )


def _check_listeners(config: BrokerConfig) -> None:
    names = [listener.name for listener in config.listeners]
    protocols = dict(config.listener_security_protocol_map)
    for name in names:
        if name not in protocols:
            raise ConfigError(
                f"listeners: no security protocol defined for listener {name} in "
                f"listener.security.protocol.map ({format_protocol_map(tuple(protocols.items()))})"
            )
    try:
        check_ports(config.listeners)
    except _Invalid as e:
        raise ConfigError(f"listeners: {e}") from None
    for adv in config.advertised_listeners:
        if adv.name not in names:
            raise ConfigError(
                f"advertised.listeners: {adv.name} is not in listeners ({', '.join(names)})"
            )
    for name in names:
        sec = config.listener_security(name)
        try:
            check_listener(sec)
        except _Invalid as e:
            raise ConfigError(str(e)) from None
        if sec.ssl is not None:
            from semel.broker.security.tls import build_server_context

            build_server_context(sec)  # loads the key store and trust store: ConfigError


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
        settings.append(_Setting(key, env[name], f"environment variable {name}", name))
    return settings


def _from_overrides(overrides: Iterable[str]) -> list[_Setting]:
    settings = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            shown = _HIDDEN if _SECRET_LIKE.search(item) else item
            raise ConfigError(f"--set expects key=value, got {shown!r}")
        key = key.strip()
        origin = f"--set '{key}={_HIDDEN}'" if _is_secret(key) else f"--set {item!r}"
        settings.append(_Setting(key, value, origin))
    return settings


# Kafka keys semel refuses with a reason rather than "unknown property"
_NOT_USED = {
    "inter.broker.listener.name": "semel is a single node: there is no inter-broker listener",
    "security.inter.broker.protocol": "semel is a single node: there is no inter-broker traffic",
    "sasl.mechanism.inter.broker.protocol": "semel is a single node: no inter-broker SASL",
    "sasl.jaas.config": "a broker's JAAS config is set per listener and mechanism: "
    "listener.name.<listener>.<mechanism>.sasl.jaas.config",
}
_SECRET_LIKE = re.compile(r"pass|secret|jaas|\.key\b|certificate|credential", re.IGNORECASE)


def _is_secret(key: str) -> bool:
    """Whether a --set value for `key` must not be shown: a secret property (also behind a
    listener prefix), a JAAS config, or an unknown key that looks like or is close to one."""
    base = key.split(".", 3)[-1] if key.startswith(LISTENER_PREFIX) else key
    if base in PROPERTIES:
        return PROPERTIES[base].sensitive
    if key in KNOWN_KEYS or base in LISTENER_KEYS:
        return base.endswith(JAAS_SUFFIX)
    import difflib  # here, not at import: only a mistyped key needs it

    close = difflib.get_close_matches(base, PROPERTIES, n=1, cutoff=0.6)
    return bool(_SECRET_LIKE.search(key)) or bool(close and PROPERTIES[close[0]].sensitive)


def _unknown(setting: _Setting) -> str:
    if setting.key in _NOT_USED:
        return f"unsupported property {setting.key!r} ({setting.origin}): {_NOT_USED[setting.key]}"
    import difflib

    close = difflib.get_close_matches(setting.key, KNOWN_KEYS, n=1, cutoff=0.6)
    hint = ""
    if close:
        from_env = setting.origin.startswith("environment")
        hint = f"; did you mean {env_var_name(close[0]) if from_env else repr(close[0])}?"
    return f"unknown property {setting.key!r} ({setting.origin}){hint}"
