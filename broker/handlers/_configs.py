"""Config resources as the config APIs show them: entries with value, source and synonyms.

Shared by DescribeConfigs, CreateTopics (v5+ returns the new topic's configs) and the two
AlterConfigs APIs. A topic config's value is the topic's override if it has one, else the
broker-derived default (``Broker.default_log_config``, which dynamic broker configs change).
Synonyms follow Kafka's ConfigHelper: the override (DYNAMIC_TOPIC_CONFIG), then the broker
property behind it and its aliases from every source in precedence order
(``DynamicConfigs.synonyms``: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
STATIC_BROKER_CONFIG, DEFAULT_CONFIG), leading synonyms of another name dropped: so
``retention.ms`` has no DEFAULT synonym (Kafka's ``log.retention.ms`` has no built-in default;
``log.retention.hours`` has). The entry's source is its first synonym's, else DEFAULT_CONFIG.
BROKER resources show the broker's properties (dynamic ones writable, broker/dynamic_config.py);
GROUP resources the group configs (broker/group_configs.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from semel.broker.config import PROPERTIES, BrokerConfig
from semel.broker.dynamic_config import DYNAMIC_KEYS, DynamicConfigs, apply_to_broker
from semel.broker.group_configs import GROUP_CONFIG_DEFS
from semel.protocol.errors import Error, KafkaError
from semel.storage.config import CONFIG_DEFS_BY_NAME, CONFIG_TYPE_IDS, TOPIC_CONFIG_DEFS, LogConfig
from semel.storage.log_manager import validate_topic_name


class ResourceType(IntEnum):
    """Kafka's ConfigResource.Type ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class ConfigSource(IntEnum):
    """Kafka's DescribeConfigsResponse.ConfigSource ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterOp(IntEnum):
    """IncrementalAlterConfigs operations (AlterConfigOp.OpType ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(slots=True)
class Synonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    config_type: int
    documentation: str
    is_sensitive: bool = False
    synonyms: list[Synonym] = field(default_factory=list)


def resource_type_name(resource_type: int) -> str:
    try:
        return ResourceType(resource_type).name
    except ValueError:
        return str(resource_type)


# ---------------------------------------------------------------------------------- topics


_TOPIC_DEFS_BY_NAME = sorted(TOPIC_CONFIG_DEFS, key=lambda d: d.name)


def effective_topic_config(default_config: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """The topic's resolved config; raises KafkaError(INVALID_CONFIG) on a bad override."""
    return LogConfig.from_overrides(default_config, dict(overrides))


def _synonyms(found) -> list[Synonym]:
    return [Synonym(name, value, ConfigSource(source)) for name, value, source in found]


def topic_config_entries(dynamic: DynamicConfigs, default_config: LogConfig,
                         overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config of a topic with these overrides, in Kafka's name order."""
    effective = effective_topic_config(default_config, overrides)
    entries = []
    for definition in _TOPIC_DEFS_BY_NAME:
        synonyms: list[Synonym] = []
        value = effective.value_string(definition.name)
        if definition.name in overrides:
            synonyms.append(Synonym(definition.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        if definition.server_name is not None:
            synonyms += _synonyms(dynamic.synonyms(definition.server_name))
        entries.append(ConfigEntry(
            name=definition.name, value=value,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            read_only=False, config_type=CONFIG_TYPE_IDS[definition.type],
            documentation=definition.doc, synonyms=synonyms))
    return entries


def is_list_config(name: str) -> bool:
    definition = CONFIG_DEFS_BY_NAME.get(name)
    return definition is not None and definition.type == "list"


def apply_incremental(current: Mapping[str, str], default_config: LogConfig,
                      ops: Iterable[tuple[str, int, str | None]]) -> dict[str, str]:
    """The topic's new overrides after IncrementalAlterConfigs operations (name, op, value).

    APPEND/SUBTRACT work on list configs only and start from the current effective value
    (the override, or the default); raises KafkaError with Kafka's code and message.
    """
    result = dict(current)
    for name, op, value in ops:
        if op == AlterOp.SET:
            result[name] = value
        elif op == AlterOp.DELETE:
            result.pop(name, None)
        elif op in (AlterOp.APPEND, AlterOp.SUBTRACT):
            if not is_list_config(name):
                verb = AlterOp(op).name
                raise KafkaError(Error.INVALID_CONFIG,
                                 f"Can't {verb} to key {name} because its type is not LIST.")
            if name in result:
                items = [p for p in result[name].split(",") if p]
            else:
                items = list(default_config.get(name))
            for part in (value or "").split(","):
                if op == AlterOp.APPEND and part not in items:
                    items.append(part)
                elif op == AlterOp.SUBTRACT and part in items:
                    items.remove(part)
            result[name] = ",".join(items)
        else:
            raise KafkaError(Error.INVALID_REQUEST, f"Unknown operations type {op}")
    return result


# ---------------------------------------------------------------------------------- broker


def _config_type(name: str, annotation: object) -> int:
    kind = str(annotation)
    if kind == "bool":
        return CONFIG_TYPE_IDS["boolean"]
    if kind == "int":
        try:  # a property that accepts values past int32 is a LONG in Kafka's terms
            PROPERTIES[name].parse(str(2**31))
        except ValueError:
            return CONFIG_TYPE_IDS["int"]
        return CONFIG_TYPE_IDS["long"]
    return CONFIG_TYPE_IDS["string"]


_BROKER_TYPES = {f.name.replace("_", "."): _config_type(f.name.replace("_", "."), f.type)
                 for f in dataclasses.fields(BrokerConfig)}


def broker_config_entries(dynamic: DynamicConfigs, broker_config: BrokerConfig,
                          per_broker: bool) -> list[ConfigEntry]:
    """The BROKER resource as Kafka's ConfigHelper shows it. Per broker (named by the node
    id): every property with its current value and synonyms (dynamic, dynamic default,
    static, default, in that order) plus custom dynamic keys; read-only unless it is a
    dynamic config. Cluster default (""): only the keys set there, with that source."""
    if per_broker:
        values = broker_config.as_properties()
        for name, value in {**dynamic.cluster_default, **dynamic.broker}.items():
            values.setdefault(name, value)
    else:
        values = dict(dynamic.cluster_default)
    entries = []
    for name, value in sorted(values.items()):
        spec = PROPERTIES.get(name)
        sensitive = spec is not None and spec.sensitive
        synonyms = _synonyms(dynamic.synonyms(name, default_only=not per_broker))
        if sensitive:  # as Kafka: a password's value is null and the entry says so
            value = None
            synonyms = [Synonym(s.name, None, s.source) for s in synonyms]
        entries.append(ConfigEntry(
            name=name, value=value,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            read_only=name not in DYNAMIC_KEYS,
            config_type=_BROKER_TYPES.get(name, CONFIG_TYPE_IDS["string"]),
            documentation=spec.doc if spec is not None else "",
            synonyms=synonyms, is_sensitive=sensitive))
    return entries


def check_broker_resource_name(name: str, node_id: int) -> None:
    """A BROKER resource names this node, or is empty (cluster-wide defaults)."""
    if not name:
        return
    try:
        broker_id = int(name)
    except ValueError:
        raise KafkaError(Error.INVALID_REQUEST,
                         f"Node id must be an integer, but it is: {name}") from None
    if broker_id != node_id:
        raise KafkaError(Error.INVALID_REQUEST,
                         f"Unexpected broker id, expected {node_id}, but received {name}")


async def replace_broker_configs(ctx, name: str, props: dict[str, str],
                                 validate_only: bool) -> None:
    """Make ``props`` the BROKER resource's whole dynamic key set and put it in force."""
    config = await ctx.broker.dynamic_configs.alter_broker(bool(name), props, validate_only)
    if config is not None:
        apply_to_broker(ctx.broker, config)


# ---------------------------------------------------------------------------------- groups


def group_config_entries(dynamic: DynamicConfigs, broker_config: BrokerConfig,
                         group_id: str) -> list[ConfigEntry]:
    """A GROUP resource: every group config, GROUP_CONFIG for an override, else the
    broker's value as DEFAULT_CONFIG (one synonym each, as Kafka)."""
    if not group_id:
        raise KafkaError(Error.INVALID_REQUEST, "Group name must not be empty")
    overrides = dynamic.group_overrides(group_id)
    values = dynamic.group_config(group_id, broker_config)
    entries = []
    for name, definition in sorted(GROUP_CONFIG_DEFS.items()):
        source = ConfigSource.GROUP_CONFIG if name in overrides else ConfigSource.DEFAULT_CONFIG
        value = str(values[name])
        kind = "string" if definition.at_least is None else "int"
        entries.append(ConfigEntry(name=name, value=value, source=source, read_only=False,
                                   config_type=CONFIG_TYPE_IDS[kind],
                                   documentation=definition.doc,
                                   synonyms=[Synonym(name, value, source)]))
    return entries


async def replace_group_configs(ctx, group_id: str, props: dict[str, str],
                                validate_only: bool) -> None:
    if not group_id:
        raise KafkaError(Error.INVALID_REQUEST, "Default group resources are not allowed.")
    await ctx.broker.dynamic_configs.alter_group(group_id, props, ctx.config, validate_only)


# ---------------------------------------------------------------------------------- altering


def check_alter_entries(names: list[str], null_names: list[str]) -> None:
    """Kafka's request-level checks on one resource's config list (INVALID_REQUEST)."""
    if len(set(names)) != len(names):
        raise KafkaError(Error.INVALID_REQUEST, "Error due to duplicate config keys")
    if null_names:
        raise KafkaError(Error.INVALID_REQUEST,
                         f"Null value not supported for : {', '.join(null_names)}")


def replace_topic_overrides(log_manager, name: str, overrides: dict[str, str],
                            validate_only: bool) -> None:
    """Make `overrides` the topic's whole override set, after Kafka's checks in Kafka's
    order: resource name, config validity (INVALID_CONFIG), existence."""
    if not name:
        raise KafkaError(Error.INVALID_REQUEST, "Default topic resources are not allowed.")
    validate_topic_name(name)
    effective_topic_config(log_manager.default_config, overrides)
    info = log_manager.topics.get(name)
    if info is None:
        raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
    removed = [key for key in info.configs if key not in overrides]
    changed = {k: v for k, v in overrides.items() if info.configs.get(k) != v}
    if changed or removed:
        log_manager.alter_topic_configs(name, changed, removed, validate_only=validate_only)


def check_resource_type(resource_type: int) -> ResourceType:
    """The resource types semel alters: TOPIC, BROKER and GROUP; others are INVALID_REQUEST."""
    if resource_type in (ResourceType.TOPIC, ResourceType.BROKER, ResourceType.GROUP):
        return ResourceType(resource_type)
    if resource_type in (ResourceType.BROKER_LOGGER, ResourceType.CLIENT_METRICS):
        raise KafkaError(Error.INVALID_REQUEST,
                         f"Unsupported resource type: {resource_type_name(resource_type)}")
    raise KafkaError(Error.INVALID_REQUEST, f"Unknown resource type {resource_type}")


def duplicate_resources(resources) -> set[tuple[int, str]]:
    seen: set[tuple[int, str]] = set()
    duplicates: set[tuple[int, str]] = set()
    for r in resources:
        key = (r.resource_type, r.resource_name)
        (duplicates if key in seen else seen).add(key)
    return duplicates


async def alter_each(resources, alter) -> list[tuple[object, int, str | None]]:
    """Run ``await alter(resource)`` for every resource named once; ``(resource, code,
    message)`` per resource (a resource named twice fails with INVALID_REQUEST, as in Kafka)."""
    duplicates = duplicate_resources(resources)
    outcomes = []
    for resource in resources:
        code, message = Error.NONE, None
        if (resource.resource_type, resource.resource_name) in duplicates:
            code, message = Error.INVALID_REQUEST, "Each resource must appear at most once."
        else:
            try:
                await alter(resource)
            except KafkaError as e:
                code, message = e.code, e.message
        outcomes.append((resource, code, message))
    return outcomes
