"""Listeners and their security settings: parsing and per-listener resolution.

``listeners`` is a comma-separated list of ``NAME://host:port``; names are upper-cased as in
Kafka, and ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) gives each its protocol:
PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (Kafka's default maps each of these names to
itself). TLS and SASL settings are broker-wide keys (``ssl.keystore.location``,
``sasl.enabled.mechanisms``, ...) that one listener may override with Kafka's prefix
``listener.name.<name lower-cased>.``; SASL login modules are set per listener and mechanism
only: ``listener.name.<name>.<mechanism lower-cased>.sasl.jaas.config``.

This module holds the value types and parsers; ``broker.config`` declares the properties and
resolves a listener's settings into a ListenerSecurity. Values that are secrets are held as
Password, whose text never appears in a repr, a str or an error message.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import field, fields
from typing import Any, NamedTuple

from semel.broker.security import Principal
from semel.broker.security.ssl_principal import SslPrincipalMapper
from semel.storage.config import config_class

__all__ = [
    "JAAS_SUFFIX",
    "LISTENER_PREFIX",
    "SASL_MECHANISMS",
    "SECURITY_PROTOCOLS",
    "STANDARD_AUTHORIZER",
    "InvalidValue",
    "Listener",
    "ListenerSecurity",
    "Password",
    "SslSettings",
    "UnknownListenerKey",
    "check_listener",
    "parse_listeners",
    "parse_protocol_map",
    "resolve_listener_key",
    "resolve_listener_security",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")  # the ones semel implements
KAFKA_ONLY_MECHANISMS = ("GSSAPI", "OAUTHBEARER")  # Kafka's, not semel's
TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")  # Java's names, oldest first
LISTENER_PREFIX = "listener.name."
JAAS_SUFFIX = ".sasl.jaas.config"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
HIDDEN = "[hidden]"  # how Kafka prints a password


class InvalidValue(ValueError):
    """A value problem without the key or origin; the config loader adds those."""


class Password:
    """A secret setting (Kafka's PASSWORD type); ``.value`` is the text, shown nowhere else."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Password({HIDDEN!r})"

    def __str__(self) -> str:
        return HIDDEN

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Password) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


# ---------------------------------------------------------------------------------------------
# listeners, advertised.listeners, listener.security.protocol.map


class Listener(NamedTuple):
    """One entry of `listeners`: NAME://host:port (host "" = every interface, port 0 = any)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{_bracket(self.host)}:{self.port}"


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


_LISTENER_RE = re.compile(r"([A-Za-z][A-Za-z0-9_]*)://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]*):([0-9]+)")
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def parse_port(text: str) -> int:
    port = int(text)
    if port > 65535:
        raise InvalidValue(f"port {port} is out of range (expected 0..65535)")
    return port


def parse_listeners(text: str) -> tuple[Listener, ...]:
    """`NAME://host:port[,...]` -> listeners; "" -> (). Names are upper-cased and unique."""
    result: list[Listener] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        m = _LISTENER_RE.fullmatch(item)
        if m is None:
            raise InvalidValue(f"cannot parse {item!r} (expected NAME://host:port)")
        name, host, port = m.group(1).upper(), m.group(2).strip("[]"), parse_port(m.group(3))
        if any(other.name == name for other in result):
            raise InvalidValue(f"each listener must have a different name, {name} is repeated")
        result.append(Listener(name, host, port))
    return tuple(result)


def format_listeners(listeners: tuple[Listener, ...]) -> str:
    return ",".join(str(listener) for listener in listeners)


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def check_ports(listeners: tuple[Listener, ...]) -> None:
    """Kafka's rule: listeners bind different ports (0 = ephemeral is exempt), except that two
    may share one when one host is an IPv4 and the other an IPv6 address."""
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port:
            by_port.setdefault(listener.port, []).append(listener)
    for port, group in by_port.items():
        versions = sorted(str(_ip_version(listener.host)) for listener in group)
        if len(group) > 1 and versions != ["4", "6"]:
            names = ", ".join(listener.name for listener in group)
            raise InvalidValue(
                f"each listener must have a different port unless one is IPv4 and the other "
                f"IPv6, {names} share port {port}"
            )


def parse_protocol_map(text: str) -> tuple[tuple[str, str], ...]:
    """`NAME:PROTOCOL,...` -> ((NAME, PROTOCOL), ...); names upper-cased, protocols checked."""
    result: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            raise InvalidValue(f"cannot parse {item!r} (expected NAME:PROTOCOL)")
        if protocol not in SECURITY_PROTOCOLS:
            raise InvalidValue(
                f"invalid security protocol {protocol!r} for {name} "
                f"(expected one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in result:
            raise InvalidValue(f"listener {name} appears twice")
        result[name] = protocol
    return tuple(result.items())


def format_protocol_map(value: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{name}:{protocol}" for name, protocol in value)


DEFAULT_PROTOCOL_MAP = tuple((p, p) for p in SECURITY_PROTOCOLS)


# ---------------------------------------------------------------------------------------------
# value parsers of the security properties


def parse_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def format_list(value: tuple[str, ...]) -> str:
    return ",".join(value)


def parse_password(text: str) -> Password | None:
    """Any text is a valid secret; empty = not set. Never echoes the value."""
    return Password(text) if text else None


def format_password(value: Password | None) -> str:
    return "" if value is None else value.value


def parse_path(text: str) -> str:
    return text.strip()


def parse_store_type(text: str) -> str:
    """JKS (Kafka's default: read as PKCS12, see broker.security.tls), PKCS12 or PEM."""
    s = text.strip().upper()
    if s in ("JKS", "PKCS12", "PEM"):
        return s
    raise InvalidValue(f"expected one of JKS, PKCS12, PEM, got {text.strip()!r}")


def parse_client_auth(text: str) -> str:
    s = text.strip().lower()
    if s in ("none", "requested", "required"):
        return s
    raise InvalidValue(f"expected one of none, requested, required, got {text.strip()!r}")


def parse_tls_protocols(text: str) -> tuple[str, ...]:
    """Java's protocol names; a contiguous range (Python's ssl sets a minimum and maximum)."""
    names = parse_list(text)
    if not names:
        raise InvalidValue("expected at least one of " + ", ".join(TLS_PROTOCOLS))
    for name in names:
        if name not in TLS_PROTOCOLS:
            raise InvalidValue(
                f"unsupported protocol {name!r} (expected {', '.join(TLS_PROTOCOLS)})"
            )
    indexes = sorted({TLS_PROTOCOLS.index(name) for name in names})
    if indexes != list(range(indexes[0], indexes[-1] + 1)):
        raise InvalidValue(
            f"{format_list(names)} leaves a gap; list a contiguous range such as TLSv1.2,TLSv1.3"
        )
    return names


def parse_mapping_rules(text: str) -> str:
    try:
        SslPrincipalMapper(text)
    except ValueError as e:
        raise InvalidValue(str(e)) from None
    return text.strip()


def parse_sasl_mechanisms(text: str) -> tuple[str, ...]:
    """Mechanism names as Kafka spells them; GSSAPI and OAUTHBEARER parse (Kafka's default is
    GSSAPI) but a SASL listener that enables them is refused at start."""
    names = parse_list(text)
    for name in names:
        if name not in SASL_MECHANISMS + KAFKA_ONLY_MECHANISMS:
            raise InvalidValue(
                f"unknown SASL mechanism {name!r} (semel supports {', '.join(SASL_MECHANISMS)})"
            )
    return names


def parse_authorizer(text: str) -> str:
    s = text.strip()
    if s in ("", STANDARD_AUTHORIZER):
        return s
    if s == _ACL_AUTHORIZER:
        raise InvalidValue(
            f"{s} was removed in Kafka 4 (it needs ZooKeeper); use {STANDARD_AUTHORIZER}"
        )
    raise InvalidValue(f"semel provides only {STANDARD_AUTHORIZER}, got {s!r}")


def parse_super_users(text: str) -> tuple[Principal, ...]:
    """`User:admin;User:ops` (Kafka separates with ';', since a DN contains ',')."""
    result = []
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        try:
            result.append(Principal.parse(item))
        except ValueError:
            raise InvalidValue(f"{item!r} is not a principal of the form Type:name") from None
    return tuple(result)


def format_super_users(value: tuple[Principal, ...]) -> str:
    return ";".join(str(p) for p in value)


# ---------------------------------------------------------------------------------------------
# resolved per-listener settings


@config_class
class SslSettings:
    """A listener's TLS settings after its ``listener.name.<name>.`` overrides, Kafka's names
    without the ``ssl.`` prefix. Empty text / None = not set."""

    keystore_type: str = "JKS"
    keystore_location: str = ""
    keystore_password: Password | None = None
    key_password: Password | None = None
    keystore_certificate_chain: Password | None = None
    keystore_key: Password | None = None
    truststore_type: str = "JKS"
    truststore_location: str = ""
    truststore_password: Password | None = None
    truststore_certificates: Password | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    principal_mapping_rules: str = "DEFAULT"
    endpoint_identification_algorithm: str = "https"


@config_class
class ListenerSecurity:
    """Everything the connection layer needs to secure one listener."""

    name: str
    security_protocol: str
    ssl: SslSettings | None  # SSL and SASL_SSL
    sasl_enabled_mechanisms: tuple[str, ...]  # SASL_PLAINTEXT and SASL_SSL; () otherwise
    sasl_jaas_config: Mapping[str, Password] = field(default_factory=dict)  # by mechanism
    connections_max_reauth_ms: int = 0
    principal_mapper: SslPrincipalMapper | None = None  # SSL: certificate DN -> principal

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def config_prefix(self) -> str:
        return listener_prefix(self.name)


def resolve_listener_security(
    name: str, protocol: str, overrides: Mapping[str, Any], broker_wide: Callable[[str], Any]
) -> ListenerSecurity:
    """A listener's settings: its ``listener.name.<name>.`` overrides (key without the prefix
    -> parsed value) over the broker-wide value of each key.

    As in Kafka, ``ssl.client.auth`` applies to a SASL_SSL listener only when set with the
    listener prefix (else none), and a JAAS config is per listener and mechanism only.
    """

    def get(key: str) -> Any:
        return overrides[key] if key in overrides else broker_wide(key)

    ssl_settings = None
    if protocol in ("SSL", "SASL_SSL"):
        values = {f.name: get("ssl." + f.name.replace("_", ".")) for f in fields(SslSettings)}
        if protocol == "SASL_SSL" and "ssl.client.auth" not in overrides:
            values["client_auth"] = "none"
        ssl_settings = SslSettings(**values)
    sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
    jaas = {
        key[: -len(JAAS_SUFFIX)].upper(): value
        for key, value in overrides.items()
        if key.endswith(JAAS_SUFFIX) and sasl
    }
    mapper = None
    if ssl_settings is not None and protocol == "SSL":
        mapper = SslPrincipalMapper(ssl_settings.principal_mapping_rules)
    return ListenerSecurity(
        name=name,
        security_protocol=protocol,
        ssl=ssl_settings,
        sasl_enabled_mechanisms=get("sasl.enabled.mechanisms") if sasl else (),
        sasl_jaas_config=jaas,
        connections_max_reauth_ms=get("connections.max.reauth.ms"),
        principal_mapper=mapper,
    )


def listener_prefix(name: str) -> str:
    """Kafka's ListenerName.configPrefix(): ``listener.name.<name lower-cased>.``."""
    return f"{LISTENER_PREFIX}{name.lower()}."


def jaas_key(mechanism: str) -> str:
    """``<mechanism lower-cased>.sasl.jaas.config``, the per-listener JAAS key."""
    return mechanism.lower() + JAAS_SUFFIX


# ---------------------------------------------------------------------------------------------
# listener.name.<listener>.<key> keys, and start-time rules of one listener


class UnknownListenerKey(InvalidValue):
    """A listener.name.* key that names no listener or no per-listener property."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.hint = hint  # "; did you mean ...?" or ""


def resolve_listener_key(
    key: str,
    env_name: str,
    listener_names: Sequence[str],
    listener_keys: Collection[str],
    static_keys: Collection[str],
    env_var: Callable[[str], str],
) -> tuple[str, str]:
    """(LISTENER, key) set by ``listener.name.<listener>.<key>``. A key from the environment
    (``env_name`` set) is found by its variable name, since '_' -> '.' loses the listener
    name's underscores and the mechanism's dashes. Raises UnknownListenerKey."""
    import difflib  # here, not at import: only a mistyped key needs it

    candidates = {listener_prefix(n) + k: (n, k) for n in listener_names for k in listener_keys}
    if env_name:
        by_env = {env_var(full): full for full in candidates}
        if env_name in by_env:
            return candidates[by_env[env_name]]
        close = difflib.get_close_matches(env_name, by_env, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise UnknownListenerKey("no such listener, or no such per-listener property", hint)
    if key in candidates:
        return candidates[key]
    listener, _, sub = key[len(LISTENER_PREFIX) :].partition(".")
    names = {n.lower(): n for n in listener_names}
    if listener.lower() in names and listener != listener.lower():
        raise UnknownListenerKey(
            f"the listener name is lower-cased in this prefix: {listener_prefix(listener)}{sub}"
        )
    if listener not in names:
        raise UnknownListenerKey(
            f"no listener {listener.upper()} in listeners (have {', '.join(listener_names)})"
        )
    if sub.endswith("sasl.jaas.config"):
        mechanisms = ", ".join(m.lower() for m in SASL_MECHANISMS)
        raise UnknownListenerKey(
            f"a JAAS config is set per listener and mechanism: {listener_prefix(listener)}"
            f"<mechanism>.sasl.jaas.config, mechanism one of {mechanisms}"
        )
    if sub in static_keys:
        raise UnknownListenerKey(f"{sub} cannot be set per listener")
    close = difflib.get_close_matches(sub, listener_keys, n=1, cutoff=0.6)
    hint = f"; did you mean {listener_prefix(listener) + close[0]!r}?" if close else ""
    raise UnknownListenerKey(f"{sub!r} is not a per-listener property", hint)


SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_SCRAM_JAAS = re.compile(
    rf"\s*{re.escape(SCRAM_LOGIN_MODULE)}\s+(required|requisite|sufficient|optional)\b.*;\s*",
    re.DOTALL | re.IGNORECASE,
)


def check_listener(sec: ListenerSecurity) -> None:
    """Start-time rules of one listener's settings; InvalidValue with a one-line message that
    names the keys (never a secret). The TLS material itself is checked by
    broker.security.tls.build_server_context."""
    prefix = sec.config_prefix
    if sec.uses_sasl:
        supported = ", ".join(SASL_MECHANISMS)
        mechanisms = sec.sasl_enabled_mechanisms
        unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unsupported or not mechanisms:
            what = f"enables {', '.join(unsupported)}" if unsupported else "enables no mechanism"
            raise InvalidValue(
                f"sasl.enabled.mechanisms: {sec.security_protocol} listener {sec.name} {what} "
                f"(semel implements {supported}; Kafka's default GSSAPI is not): set "
                f"sasl.enabled.mechanisms or {prefix}sasl.enabled.mechanisms"
            )
        if "PLAIN" in mechanisms:
            jaas = sec.sasl_jaas_config.get("PLAIN")
            if jaas is None:
                raise InvalidValue(
                    f"{prefix}plain.sasl.jaas.config is required: listener {sec.name} enables "
                    'PLAIN (PlainLoginModule required user_NAME="password" ...;)'
                )
            from semel.broker.security.plain import parse_plain_jaas

            try:
                parse_plain_jaas(jaas.value)
            except ValueError as e:
                raise InvalidValue(f"{prefix}plain.sasl.jaas.config: {e}") from None
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            jaas = sec.sasl_jaas_config.get(mechanism)
            if (
                mechanism in mechanisms
                and jaas is not None
                and not _SCRAM_JAAS.fullmatch(jaas.value)
            ):
                raise InvalidValue(
                    f"{prefix}{jaas_key(mechanism)}: expected {SCRAM_LOGIN_MODULE} required ...; "
                    "(SCRAM credentials are kept in the data directory)"
                )
    if sec.ssl is not None:
        ssl = sec.ssl
        if not (ssl.keystore_location or ssl.keystore_key or ssl.keystore_certificate_chain):
            raise InvalidValue(
                f"{sec.security_protocol} listener {sec.name} needs a key store: set "
                "ssl.keystore.location (or ssl.keystore.certificate.chain and ssl.keystore.key), "
                f"or the same keys with the prefix {prefix}"
            )
