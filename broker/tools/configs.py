"""``semel configs``: describe and alter topic and broker configs (kafka-configs.sh's jobs).

- ``describe --entity-type topics|brokers [--entity-name X | --entity-default] [--all]``
  (``--topic T`` / ``--broker N`` are short for the type and name): DescribeConfigs with
  synonyms. As kafka-configs, only the dynamic configs are shown (the topic's overrides; a
  broker's dynamic configs) unless ``--all``, which shows every config with its source.
  Without a name: every topic (internal ones too) or every broker in the metadata.
- ``alter --entity-type ... --entity-name X [--add-config k=v,k2=[a,b]]...
  [--delete-config k]...``: IncrementalAlterConfigs (SET and DELETE). As kafka-configs, a
  ``--delete-config`` of a key that is not set dynamically is refused (INVALID_CONFIG) before
  anything changes.
"""

from __future__ import annotations

import argparse

from semel.broker.tools.client import KafkaCommandError, check, message
from semel.broker.tools.common import (
    UsageError,
    admin,
    emit,
    key_values,
    run_action,
    subcommands,
    table,
)
from semel.protocol.errors import Error

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
TOPIC, BROKER = 2, 4  # config resource types
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
ENTITY_TYPES = {"topics": TOPIC, "brokers": BROKER}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = subcommands(parser, [
        ("describe", "show the dynamic configs (--all: every config) of topics or brokers"),
        ("alter", "set or remove configs of a topic or broker"),
    ])
    for action in p.values():
        action.add_argument("--entity-type", choices=sorted(ENTITY_TYPES),
                            help="what to describe or alter")
        action.add_argument("--entity-name", help="the topic's name or the broker's id")
        action.add_argument("--entity-default", action="store_true",
                            help="the cluster-wide broker defaults (brokers only)")
        action.add_argument("--topic", help="short for --entity-type topics --entity-name T")
        action.add_argument("--broker", help="short for --entity-type brokers --entity-name N")
    p["describe"].add_argument("--all", action="store_true",
                               help="every config with its source, not only dynamic ones")
    p["alter"].add_argument("--add-config", action="append", default=[],
                            metavar="K=V[,K2=[A,B]]", help="set configs (repeatable)")
    p["alter"].add_argument("--delete-config", action="append", default=[], metavar="K[,K2]",
                            help="remove dynamic configs (repeatable)")


def run(args: argparse.Namespace) -> int:
    return run_action(f"semel configs {args.action}", ACTIONS[args.action], args)


def _entity(args: argparse.Namespace, *, name_required: bool) -> tuple[str, str | None]:
    kind, name = args.entity_type, args.entity_name
    for option, implied in (("topic", "topics"), ("broker", "brokers")):
        value = getattr(args, option)
        if value is not None:
            if kind not in (None, implied) or name is not None:
                raise UsageError(f"--{option} cannot be combined with --entity-type/--entity-name")
            kind, name = implied, value
    if kind is None:
        raise UsageError("give --entity-type (or --topic / --broker)")
    if args.entity_default:
        if kind != "brokers":
            raise UsageError("--entity-default is only for --entity-type brokers")
        if name is not None:
            raise UsageError("--entity-default and --entity-name exclude each other")
        name = ""
    if kind == "brokers" and name and not name.isdigit():
        raise UsageError(f"--entity-name: a broker id is a number, not {name!r}")
    if name_required and name is None:
        raise UsageError("give --entity-name (or --entity-default for brokers)")
    return kind, name


def describe_configs(client, resource_type: int, names: list[str], *, synonyms: bool = True):
    """DescribeConfigs of every config of ``names``: {name: [entries]}."""
    _, resp = client.send(client.any_broker(), DESCRIBE_CONFIGS, message(
        DESCRIBE_CONFIGS, include_synonyms=synonyms, resources=[message(
            DESCRIBE_CONFIGS, "request", "DescribeConfigsResource",
            resource_type=resource_type, resource_name=name, configuration_keys=None)
            for name in names]))
    out = {}
    what = "topic" if resource_type == TOPIC else "broker"
    for result in resp.results:
        check(result.error_code, f"DescribeConfigs of {what} {result.resource_name!r}",
              result.error_message)
        out[result.resource_name] = sorted(result.configs, key=lambda c: c.name)
    return out


def alter_configs(client, resource_type: int, names: list[str], updates: dict[str, str],
                  deletes: list[str]) -> None:
    """IncrementalAlterConfigs: SET ``updates`` and DELETE ``deletes`` on each resource."""
    entries = [message(INCREMENTAL_ALTER_CONFIGS, "request", "AlterableConfig", name=k,
                       config_operation=SET, value=v) for k, v in updates.items()]
    entries += [message(INCREMENTAL_ALTER_CONFIGS, "request", "AlterableConfig", name=k,
                        config_operation=DELETE, value=None) for k in deletes]
    _, resp = client.send(client.any_broker(), INCREMENTAL_ALTER_CONFIGS, message(
        INCREMENTAL_ALTER_CONFIGS, resources=[message(
            INCREMENTAL_ALTER_CONFIGS, "request", "AlterConfigsResource",
            resource_type=resource_type, resource_name=name, configs=entries)
            for name in names]))
    what = "topic" if resource_type == TOPIC else "broker"
    for r in resp.responses:
        check(r.error_code, f"cannot alter the configs of {what} {r.resource_name!r}",
              r.error_message)


def _dynamic_source(resource_type: int, name: str) -> int:
    if resource_type == TOPIC:
        return 1
    return 3 if name == "" else 2


def _describe(args: argparse.Namespace) -> None:
    kind, name = _entity(args, name_required=False)
    resource_type = ENTITY_TYPES[kind]
    with admin(args) as client:
        if name is not None:
            names = [name]
        elif resource_type == TOPIC:
            names = sorted(t.name for t in client.metadata(None).topics
                           if t.error_code == Error.NONE)
        else:
            client.metadata([])
            names = [str(b) for b in sorted(client.brokers)]
        configs = describe_configs(client, resource_type, names) if names else {}
    resources = []
    for resource_name in names:
        entries = configs.get(resource_name, [])
        if not args.all:
            source = _dynamic_source(resource_type, resource_name)
            entries = [c for c in entries if c.config_source == source]
        resources.append({
            "entity_type": kind, "entity_name": resource_name,
            "configs": [{
                "name": c.name, "value": c.value, "source": SOURCES.get(c.config_source,
                                                                        str(c.config_source)),
                "sensitive": c.is_sensitive, "read_only": c.read_only,
                "synonyms": [{"name": s.name, "value": s.value,
                              "source": SOURCES.get(s.source, str(s.source))}
                             for s in c.synonyms],
            } for c in entries]})

    def text() -> str:
        label = "Topic" if resource_type == TOPIC else "Broker"
        return table([label, "Name", "Value", "Source", "Sensitive"], [
            [r["entity_name"] or "<default>", c["name"],
             "(sensitive)" if c["sensitive"] else c["value"], c["source"],
             str(c["sensitive"]).lower()]
            for r in resources for c in r["configs"]])

    emit(args, {"resources": resources}, text)


def _alter(args: argparse.Namespace) -> None:
    kind, name = _entity(args, name_required=True)
    resource_type = ENTITY_TYPES[kind]
    updates = key_values(args.add_config, "--add-config")
    deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if not updates and not deletes:
        raise UsageError("give --add-config or --delete-config")
    both = sorted(set(updates) & set(deletes))
    if both:
        raise UsageError(f"{both[0]} is both added and deleted")
    what = "topic" if resource_type == TOPIC else "broker"
    with admin(args) as client:
        if deletes:
            current = describe_configs(client, resource_type, [name], synonyms=False)[name]
            source = _dynamic_source(resource_type, name)
            dynamic = {c.name for c in current if c.config_source == source}
            missing = [k for k in deletes if k not in dynamic]
            if missing:
                raise KafkaCommandError(Error.INVALID_CONFIG, f"{', '.join(missing)} "
                                        f"{'is' if len(missing) == 1 else 'are'} not set on "
                                        f"{what} {name!r}: nothing to delete")
        alter_configs(client, resource_type, [name], updates, deletes)
    label = f"{what} {name}" if name else "the cluster-wide broker defaults"
    emit(args, {"entity_type": kind, "entity_name": name, "set": updates, "deleted": deletes},
         lambda: f"Completed updating the configs of {label}.")


ACTIONS = {"describe": _describe, "alter": _alter}
