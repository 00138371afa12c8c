"""Group configs (Kafka 4.x's GroupConfig, the GROUP config resource): per-group overrides of
the broker's consumer and share group timeouts.

Keys, their broker-level defaults and Kafka's bounds::

    consumer.session.timeout.ms     group.consumer.session.timeout.ms (45000), within
                                    group.consumer.{min,max}.session.timeout.ms (45000..60000)
    consumer.heartbeat.interval.ms  group.consumer.heartbeat.interval.ms (5000), within
                                    group.consumer.{min,max}.heartbeat.interval.ms (5000..15000)
    share.session.timeout.ms        group.share.session.timeout.ms (45000), 45000..60000
    share.heartbeat.interval.ms     group.share.heartbeat.interval.ms (5000), 5000..15000
    share.record.lock.duration.ms   group.share.record.lock.duration.ms (30000), 15000..60000
    share.auto.offset.reset         latest, earliest or by_duration:<ISO-8601 duration>
    share.isolation.level           read_uncommitted (default) or read_committed

A session timeout must exceed the heartbeat interval. As in Kafka, a change is validated
against the group's whole new override set, unset keys taking GroupConfig's own defaults (not
the broker's); DescribeConfigs shows unset keys with the broker's values. The broker values
come from BrokerConfig attributes of those names when semel has them, else Kafka's defaults.
Share groups read their keys through coordinator/share/config.py (ShareGroupSettings).
"""

from __future__ import annotations

import re

from semel.protocol.errors import Error, KafkaError
from semel.storage.config import config_class

INT32_MAX = 2**31 - 1


@config_class
class GroupConfigDef:
    """One group config key: its name, the broker property giving its default, the default
    validation uses, the least value allowed (None for a string key) and a one-line doc."""

    name: str
    broker_name: str  # the broker property that gives its default
    default: int | str  # GroupConfig's own default (used by validation)
    at_least: int | None  # ConfigDef's range, None for the string key
    doc: str


GROUP_CONFIG_DEFS: dict[str, GroupConfigDef] = {d.name: d for d in (
    GroupConfigDef(name="consumer.heartbeat.interval.ms",
                   broker_name="group.consumer.heartbeat.interval.ms", default=5000, at_least=1,
                   doc="The heartbeat interval given to the members of this consumer group."),
    GroupConfigDef(name="consumer.session.timeout.ms",
                   broker_name="group.consumer.session.timeout.ms", default=45000, at_least=1,
                   doc="The timeout to detect client failures when using the consumer group "
                   "protocol."),
    GroupConfigDef(name="share.auto.offset.reset", broker_name="share.auto.offset.reset",
                   default="latest", at_least=None,
                   doc="The strategy to initialize the share-partition start offset: earliest, "
                   "latest or by_duration:<duration>."),
    GroupConfigDef(name="share.isolation.level", broker_name="share.isolation.level",
                   default="read_uncommitted", at_least=None,
                   doc="Controls how to read records written transactionally: read_committed "
                   "delivers only committed transactional records, read_uncommitted all."),
    GroupConfigDef(name="share.heartbeat.interval.ms",
                   broker_name="group.share.heartbeat.interval.ms", default=5000, at_least=1,
                   doc="The heartbeat interval given to the members of this share group."),
    GroupConfigDef(name="share.record.lock.duration.ms",
                   broker_name="group.share.record.lock.duration.ms", default=30000,
                   at_least=1000,
                   doc="The record acquisition lock duration of this share group."),
    GroupConfigDef(name="share.session.timeout.ms",
                   broker_name="group.share.session.timeout.ms", default=45000, at_least=1,
                   doc="The timeout to detect client failures when using the share group "
                   "protocol."),
)}

# broker bounds: (group config, broker property, Kafka's default, "min" or "max")
_BOUNDS = (
    ("consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms", 5000, "min"),
    ("consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", 15000, "max"),
    ("consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms", 45000, "min"),
    ("consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms", 60000, "max"),
    ("share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms", 5000, "min"),
    ("share.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms", 15000, "max"),
    ("share.session.timeout.ms", "group.share.min.session.timeout.ms", 45000, "min"),
    ("share.session.timeout.ms", "group.share.max.session.timeout.ms", 60000, "max"),
    ("share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms", 15000, "min"),
    ("share.record.lock.duration.ms", "group.share.max.record.lock.duration.ms", 60000, "max"),
)
_BROKER_DEFAULTS = {
    "group.consumer.heartbeat.interval.ms": 5000, "group.consumer.session.timeout.ms": 45000,
    "group.share.heartbeat.interval.ms": 5000, "group.share.session.timeout.ms": 45000,
    "group.share.record.lock.duration.ms": 30000, "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
}
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_DURATION = re.compile(r"P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?", re.IGNORECASE)


def broker_setting(broker_config, name: str, kafka_default: int | str) -> int | str:
    """A group.* broker property's value: BrokerConfig's when semel has it, else Kafka's."""
    return getattr(broker_config, name.replace(".", "_"), kafka_default)


def broker_defaults(broker_config) -> dict[str, int | str]:
    """Each group config's value for a group without an override."""
    return {d.name: broker_setting(broker_config, d.broker_name, _BROKER_DEFAULTS[d.broker_name])
            for d in GROUP_CONFIG_DEFS.values()}


def _parse(definition: GroupConfigDef, value: str) -> int | str:
    name = definition.name
    if name == "share.isolation.level":
        if value not in _ISOLATION_LEVELS:
            raise KafkaError(Error.INVALID_CONFIG,
                             f"Invalid value {value} for configuration {name}: String must "
                             f"be one of: {', '.join(_ISOLATION_LEVELS)}")
        return value
    if definition.at_least is None:
        v = value.strip()
        if v.lower() in ("latest", "earliest"):
            return v
        duration = v[len("by_duration:"):] if v.lower().startswith("by_duration:") else None
        if duration is not None and duration and _DURATION.fullmatch(duration) \
                and duration.upper() not in ("P", "PT"):
            return v
        raise KafkaError(Error.INVALID_CONFIG,
                         f"Invalid value {value} for configuration {name}: Invalid value "
                         f"`{value}` for configuration {name}. The value must be either "
                         "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS.>'.")
    try:
        number = int(value.strip())
    except ValueError:
        raise KafkaError(Error.INVALID_CONFIG, f"Invalid value {value} for configuration "
                         f"{name}: Not a number of type INT") from None
    if not -2**31 <= number <= INT32_MAX:
        raise KafkaError(Error.INVALID_CONFIG, f"Invalid value {value} for configuration "
                         f"{name}: Not a number of type INT")
    if number < definition.at_least:
        raise KafkaError(Error.INVALID_CONFIG, f"Invalid value {number} for configuration "
                         f"{name}: Value must be at least {definition.at_least}")
    return number


def validate_group_configs(overrides: dict[str, str], broker_config) -> None:
    """Kafka's GroupConfig.validate over a group's whole override set: unknown names, values,
    then the broker's bounds; raises KafkaError(INVALID_CONFIG, Kafka's message)."""
    for name in overrides:
        if name not in GROUP_CONFIG_DEFS:
            raise KafkaError(Error.INVALID_CONFIG, f"Unknown group config name: {name}")
    values = {d.name: d.default for d in GROUP_CONFIG_DEFS.values()}
    for name, value in overrides.items():
        values[name] = _parse(GROUP_CONFIG_DEFS[name], value)
    for name, broker_name, default, kind in _BOUNDS:
        bound = broker_setting(broker_config, broker_name, default)
        if kind == "min" and values[name] < bound:
            raise KafkaError(Error.INVALID_CONFIG,
                             f"{name} must be greater than or equal to {broker_name}")
        if kind == "max" and values[name] > bound:
            raise KafkaError(Error.INVALID_CONFIG,
                             f"{name} must be less than or equal to {broker_name}")
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise KafkaError(Error.INVALID_CONFIG, f"{kind}.session.timeout.ms must be "
                             f"greater than {kind}.heartbeat.interval.ms")


def effective_group_config(overrides: dict[str, str], broker_config) -> dict[str, int | str]:
    """The group's config: its overrides (already validated) over the broker's values."""
    result = broker_defaults(broker_config)
    for name, value in overrides.items():
        definition = GROUP_CONFIG_DEFS.get(name)
        if definition is not None:
            result[name] = _parse(definition, value)
    return result
