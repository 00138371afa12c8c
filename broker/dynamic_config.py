"""Dynamic configs: broker configs changed at run time (Kafka's DynamicBrokerConfig) and
group configs (the GROUP resource), with their file ``<data dir>/__semel_dynamic_configs.json``.

Kafka's precedence, highest first: DYNAMIC_BROKER_CONFIG (BROKER resource named by the node
id), DYNAMIC_DEFAULT_BROKER_CONFIG (BROKER resource ""), STATIC_BROKER_CONFIG (the keys
server.properties, the environment or ``--set`` gave), DEFAULT_CONFIG. The keys that may
change, from Kafka 4.0's reconfigurable lists, and what a change does in semel, at once:

- topic defaults (DynamicLogConfig): ``log.segment.bytes``, ``log.roll.ms``,
  ``log.retention.ms``, ``log.retention.bytes``, ``log.index.interval.bytes``,
  ``log.index.size.max.bytes``, ``message.max.bytes``, ``log.message.timestamp.type``,
  ``log.cleanup.policy``, ``log.cleaner.min.cleanable.ratio``,
  ``log.cleaner.delete.retention.ms``, ``log.cleaner.min.compaction.lag.ms``,
  ``log.cleaner.max.compaction.lag.ms``: every topic without its own override, and its open
  partitions, take the new value (the next append, roll, retention or cleaning run).
- the cleaner (LogCleaner): ``log.cleaner.backoff.ms``, ``log.cleaner.dedupe.buffer.size``,
  ``log.cleaner.io.buffer.size``, ``log.cleaner.io.buffer.load.factor``,
  ``log.cleaner.io.max.bytes.per.second``: its next round; ``log.cleaner.threads`` is stored
  and shown (semel runs one cleaner process whatever the value).
- connections (SocketServer): ``max.connections``, ``max.connections.per.ip``: the next
  connection accepted.
- producer state: ``producer.id.expiration.ms`` (every partition's next expiration check),
  ``transaction.partition.verification.enable`` (the next produce / TxnOffsetCommit).

Any other key semel knows is refused as Kafka refuses a static one: INVALID_REQUEST "Cannot
update these configs dynamically: Set(num.partitions)" (so are the listener and TLS keys,
which Kafka can change per broker and semel cannot without a restart, and the aliases
``log.retention.hours``/``.minutes`` and ``log.roll.hours``, which Kafka does not list). A bad
value is INVALID_REQUEST "Invalid value x for configuration k: ..." (KAFKA-13609: Kafka wraps
every validation failure of a broker config so). Keys semel does not know are kept and shown,
as Kafka keeps custom configs, and change nothing.

File (JSON, rewritten whole with ``storage.fs``'s ``write_file_atomic``)::

    {"version": 1, "cluster_default": {"log.retention.ms": "3600000"},
     "broker": {"max.connections": "200"},
     "groups": {"orders": {"consumer.session.timeout.ms": "50000"}}}

A missing file means no dynamic configs; a damaged one stops the broker with a
``MetadataFileError``; a stored value semel can no longer parse is ignored with a warning, as
Kafka ignores invalid dynamic configs at start.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from semel.broker.config import ALIASES, KNOWN_KEYS, PROPERTIES, BrokerConfig
from semel.broker.group_configs import effective_group_config, validate_group_configs
from semel.broker.security.listeners import InvalidValue
from semel.protocol.errors import Error, KafkaError
from semel.storage.config import LogConfig
from semel.storage.fs import MetadataFileError, RealFileSystem

if TYPE_CHECKING:
    from semel.broker.server import Broker

log = logging.getLogger("broker.dynamic_config")

DYNAMIC_FILE = "__semel_dynamic_configs.json"
_FILE_VERSION = 1

TOPIC_DEFAULT_KEYS = frozenset({
    "log.segment.bytes", "log.roll.ms", "log.retention.ms", "log.retention.bytes",
    "log.index.interval.bytes", "log.index.size.max.bytes", "message.max.bytes",
    "log.message.timestamp.type", "log.cleanup.policy", "log.cleaner.min.cleanable.ratio",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms",
})
CLEANER_KEYS = frozenset({
    "log.cleaner.threads", "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.max.bytes.per.second",
})
DYNAMIC_KEYS: frozenset[str] = TOPIC_DEFAULT_KEYS | CLEANER_KEYS | frozenset({
    "max.connections", "max.connections.per.ip", "producer.id.expiration.ms",
    "transaction.partition.verification.enable",
})
# broker configs of Kafka's LIST type among the dynamic ones (APPEND / SUBTRACT allowed)
LIST_KEYS = frozenset({"log.cleanup.policy"})
# LogManager attribute each cleaner key sets
_CLEANER_ATTRS = {
    "log.cleaner.backoff.ms": "cleaner_backoff_ms",
    "log.cleaner.dedupe.buffer.size": "cleaner_dedupe_buffer_size",
    "log.cleaner.io.buffer.size": "cleaner_io_buffer_size",
    "log.cleaner.io.buffer.load.factor": "cleaner_io_buffer_load_factor",
    "log.cleaner.io.max.bytes.per.second": "cleaner_io_max_bytes_per_second",
}


@functools.cache
def _schema():
    """(msgspec, the file's struct), made on first read or write of the file: a data
    directory without one starts without msgspec (issue 18)."""
    import msgspec

    return msgspec, msgspec.defstruct(
        "_DynamicFile", [("version", int), ("cluster_default", dict[str, str]),
                         ("broker", dict[str, str]), ("groups", dict[str, dict[str, str]])],
        forbid_unknown_fields=True)


def _scala_set(names) -> str:
    return f"Set({', '.join(sorted(names))})"


def validate_broker_configs(props: dict[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs over a BROKER resource's new key set;
    raises KafkaError(INVALID_REQUEST, Kafka's message)."""
    static = [k for k in props if (k in KNOWN_KEYS or k.startswith("listener.name."))
              and k not in DYNAMIC_KEYS]
    if static:
        raise KafkaError(Error.INVALID_REQUEST,
                         f"Cannot update these configs dynamically: {_scala_set(static)}")
    for name, value in props.items():
        if name in DYNAMIC_KEYS:
            try:
                PROPERTIES[name].parse(value)
            except InvalidValue as e:
                raise KafkaError(Error.INVALID_REQUEST,
                                 f"Invalid value {value} for configuration {name}: {e}") from None


def apply_broker_ops(current: dict[str, str], ops) -> dict[str, str]:
    """A BROKER resource's keys after IncrementalAlterConfigs operations (name, op, value),
    as Kafka's prepareIncrementalConfigs (APPEND/SUBTRACT only on LIST configs)."""
    result = dict(current)
    for name, op, value in ops:
        if op == 0:
            result[name] = value
        elif op == 1:
            result.pop(name, None)
        else:
            verb = "append" if op == 2 else "subtract"
            if name not in KNOWN_KEYS:
                raise KafkaError(Error.INVALID_CONFIG, f"Unknown config name: {name}")
            if name not in LIST_KEYS:
                raise KafkaError(Error.INVALID_CONFIG, f"Config value {verb} is not allowed "
                                 f"for config key: {name}")
            default = PROPERTIES[name].format(getattr(BrokerConfig(), name.replace(".", "_")))
            items = [p for p in result.get(name, default).split(",") if p]
            for part in (value or "").split(","):
                if op == 2 and part not in items:
                    items.append(part)
                elif op == 3 and part in items:
                    items.remove(part)
            result[name] = ",".join(items)
    return result


def static_defaults() -> dict[str, str]:
    """Kafka's "static default configs": each property's built-in default as text. Kafka has
    none for ``log.retention.ms``, ``log.retention.minutes`` and ``log.roll.ms`` (their
    ``.hours`` aliases carry the default), nor for an unset secret."""
    defaults = BrokerConfig()
    result = {}
    for name, spec in PROPERTIES.items():
        value = getattr(defaults, name.replace(".", "_"))
        if spec.sensitive and value is None:
            continue
        result[name] = spec.format(value)
    for name in ("log.retention.ms", "log.roll.ms"):
        result.pop(name)
    result["log.retention.hours"] = "168"
    result["log.roll.hours"] = "168"
    return result


_STATIC_DEFAULTS = static_defaults()
# each key's synonyms in Kafka's order (DynamicBrokerConfig.brokerConfigSynonyms)
SYNONYM_GROUPS: dict[str, tuple[str, ...]] = {}
for _alias in ALIASES.values():
    if _alias.target != "log.dirs":
        SYNONYM_GROUPS.setdefault(_alias.target, (_alias.target,))
        SYNONYM_GROUPS[_alias.target] += (_alias.name,)
for _names in list(SYNONYM_GROUPS.values()):
    for _name in _names:
        SYNONYM_GROUPS[_name] = _names
del _alias, _names, _name


class DynamicConfigs:
    """The dynamic configs of one data directory over the broker's static config."""

    def __init__(self, static: BrokerConfig, data_dir: str | Path,
                 fs: RealFileSystem | None = None) -> None:
        self.static = static
        self.path = Path(data_dir) / DYNAMIC_FILE
        self.fs = fs or RealFileSystem()
        self.cluster_default: dict[str, str] = {}
        self.broker: dict[str, str] = {}
        self.groups: dict[str, dict[str, str]] = {}
        self._lock = asyncio.Lock()

    # -- reading ------------------------------------------------------------------------

    def load(self) -> None:
        if not self.fs.exists(self.path):
            return
        msgspec, file_type = _schema()
        try:
            stored = msgspec.json.decode(self.fs.read_file(self.path), type=file_type)
            if stored.version != _FILE_VERSION:
                raise ValueError(f"unsupported version {stored.version}")
        except (msgspec.DecodeError, ValueError, OSError) as exc:
            raise MetadataFileError(
                f"{self.path}: unreadable dynamic configs ({exc}); refusing to start. Restore "
                "it from a backup, or delete it to start with the static configs only.") from None
        self.cluster_default = dict(stored.cluster_default)
        self.broker = dict(stored.broker)
        self.groups = {g: dict(c) for g, c in stored.groups.items()}

    def effective(self) -> BrokerConfig:
        """The static config with the dynamic values over it (per-broker over default)."""
        changes = {}
        for scope in (self.cluster_default, self.broker):
            for name, value in scope.items():
                if name in DYNAMIC_KEYS:
                    try:
                        changes[name.replace(".", "_")] = PROPERTIES[name].parse(value)
                    except InvalidValue as e:
                        log.warning("ignoring dynamic config %s=%s: %s", name, value, e)
        return dataclasses.replace(self.static, **changes) if changes else self.static

    def static_set(self) -> dict[str, str | None]:
        """Kafka's "static broker configs": the keys the configuration sources set."""
        given = dict(self.static.static_keys)
        if not given:  # a BrokerConfig built in code: what differs from the defaults
            defaults = BrokerConfig()
            for name, spec in PROPERTIES.items():
                value = getattr(self.static, name.replace(".", "_"))
                if value != getattr(defaults, name.replace(".", "_")):
                    given[name] = None if spec.sensitive else spec.format(value)
        return given

    def synonyms(self, name: str, *, default_only: bool = False) -> list[tuple[str, str | None, int]]:
        """(name, value, ConfigSource id) of ``name``'s broker synonyms, highest precedence
        first, as Kafka's ConfigHelper.configSynonyms: every source in order, within it every
        synonym, then leading synonyms of another name dropped (so ``log.retention.ms`` shows
        none when only ``log.retention.hours`` has a value)."""
        names = SYNONYM_GROUPS.get(name, (name,))
        sources = [(3, self.cluster_default)] if default_only else [
            (2, self.broker), (3, self.cluster_default), (4, self.static_set()),
            (5, _STATIC_DEFAULTS)]
        found = [(n, scope[n], source) for source, scope in sources for n in names
                 if n in scope]
        while found and found[0][0] != name:
            found.pop(0)
        return found

    def group_overrides(self, group_id: str) -> dict[str, str]:
        return dict(self.groups.get(group_id, {}))

    def group_config(self, group_id: str,
                     broker_config: BrokerConfig | None = None) -> dict[str, int | str]:
        """The group's configs by GroupConfig name (``consumer.session.timeout.ms`` -> 45000,
        ...): its overrides over the broker's group.* values (the KIP-848 coordinator reads
        its session timeout and heartbeat interval here)."""
        return effective_group_config(self.groups.get(group_id, {}),
                                      broker_config or self.static)

    # -- changing -----------------------------------------------------------------------

    async def alter_broker(self, per_broker: bool, props: dict[str, str],
                           validate_only: bool) -> BrokerConfig | None:
        """Make ``props`` the whole dynamic key set of the BROKER resource (this node's, or
        the cluster default); returns the new effective config (None if validate_only)."""
        async with self._lock:
            validate_broker_configs(props)
            if validate_only:
                return None
            old = (self.cluster_default, self.broker)
            if per_broker:
                self.broker = dict(props)
            else:
                self.cluster_default = dict(props)
            try:
                await self._save()
            except OSError as e:
                self.cluster_default, self.broker = old
                raise KafkaError(Error.KAFKA_STORAGE_ERROR, f"saving configs failed: {e}") from e
            return self.effective()

    async def alter_group(self, group_id: str, props: dict[str, str], broker_config,
                          validate_only: bool) -> None:
        async with self._lock:
            validate_group_configs(props, broker_config)
            if validate_only:
                return
            old = self.groups
            self.groups = dict(self.groups)
            if props:
                self.groups[group_id] = dict(props)
            else:
                self.groups.pop(group_id, None)
            try:
                await self._save()
            except OSError as e:
                self.groups = old
                raise KafkaError(Error.KAFKA_STORAGE_ERROR, f"saving configs failed: {e}") from e

    async def _save(self) -> None:
        msgspec, file_type = _schema()
        data = msgspec.json.encode(file_type(
            _FILE_VERSION, dict(sorted(self.cluster_default.items())),
            dict(sorted(self.broker.items())),
            {g: dict(sorted(c.items())) for g, c in sorted(self.groups.items())}))
        await asyncio.get_running_loop().run_in_executor(
            None, self.fs.write_file_atomic, self.path, data)


def apply_to_broker(broker: Broker, config: BrokerConfig) -> None:
    """Put a new effective config in force: the broker's config (read per connection and
    request), topic defaults, the cleaner's settings and producer-id expiration."""
    from semel.broker.server import TOPIC_DEFAULTS_FROM_BROKER

    old, broker.config = broker.config, config
    logs = broker.log_manager
    if any(getattr(old, attr) != getattr(config, attr)
           for attr in TOPIC_DEFAULTS_FROM_BROKER.values()):
        overrides = {topic_key: str(getattr(config, attr))
                     for topic_key, attr in TOPIC_DEFAULTS_FROM_BROKER.items()}
        broker.default_log_config = LogConfig.from_overrides(LogConfig(), overrides)
        logs.set_default_config(broker.default_log_config)
    for name, attr in _CLEANER_ATTRS.items():
        setattr(logs, attr, getattr(config, name.replace(".", "_")))
    if old.producer_id_expiration_ms != config.producer_id_expiration_ms:
        logs.producer_id_expiration_ms = config.producer_id_expiration_ms
        for plog in logs.logs.values():
            plog.producer_state.producer_id_expiration_ms = config.producer_id_expiration_ms
