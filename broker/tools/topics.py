"""``semel topics``: create, list, describe, alter and delete topics (kafka-topics.sh's jobs).

- ``create --topic T [--partitions N] [--replication-factor R] [--config k=v]...
  [--if-not-exists]``: CreateTopics (v4+ lets the broker pick what is not given).
- ``list [--topic REGEX] [--exclude-internal]``: the names from Metadata, sorted; internal
  topics are listed unless excluded, as kafka-topics does.
- ``describe [--topic REGEX] [--exclude-internal] [--if-exists]``: per topic its id, partition
  count, replication factor and every config whose source is not the default
  (DescribeConfigs), then per partition its leader, replicas and in-sync replicas.
- ``alter --topic REGEX [--partitions N] [--config k=v]... [--delete-config k]...``:
  CreatePartitions and IncrementalAlterConfigs.
- ``delete --topic REGEX [--if-exists]``: DeleteTopics (internal topics are refused).

``--topic`` is a regular expression matched against whole names except for ``create``, as
in kafka-topics; a ``--topic`` that matches nothing is UNKNOWN_TOPIC_OR_PARTITION unless
``--if-exists``.
"""

from __future__ import annotations

import argparse
import re

from semel.broker.tools.client import (
    KafkaCommandError,
    check,
    kafka_uuid,
    message,
    to_error,
)
from semel.broker.tools.common import (
    UsageError,
    admin,
    emit,
    key_values,
    run_action,
    subcommands,
    table,
)
from semel.broker.tools.configs import alter_configs, describe_configs
from semel.protocol.errors import Error

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
TOPIC_RESOURCE = 2
DEFAULT_CONFIG = 5  # DescribeConfigs config_source of a value nobody set


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = subcommands(parser, [
        ("create", "create a topic"),
        ("list", "list topic names"),
        ("describe", "describe topics: partitions, leaders, replicas, overridden configs"),
        ("alter", "add partitions to topics or change their configs"),
        ("delete", "delete topics"),
    ])
    c = p["create"]
    c.add_argument("--topic", required=True, help="the topic's name")
    c.add_argument("--partitions", type=int, metavar="N",
                   help="partition count (default: the broker's num.partitions)")
    c.add_argument("--replication-factor", type=int, metavar="N",
                   help="replication factor (default: the broker's)")
    c.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config (repeatable, or comma-separated)")
    c.add_argument("--if-not-exists", action="store_true",
                   help="succeed when the topic already exists")
    for name in ("list", "describe"):
        p[name].add_argument("--topic", metavar="REGEX", help="only topics matching this")
        p[name].add_argument("--exclude-internal", action="store_true",
                             help="leave out internal topics (__consumer_offsets, ...)")
    p["describe"].add_argument("--if-exists", action="store_true",
                               help="succeed when --topic matches nothing")
    a = p["alter"]
    a.add_argument("--topic", metavar="REGEX", required=True, help="the topic(s) to alter")
    a.add_argument("--partitions", type=int, metavar="N",
                   help="the new partition count (more only)")
    a.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="set a topic config (repeatable, or comma-separated)")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                   help="remove a config override (repeatable)")
    a.add_argument("--if-exists", action="store_true", help="succeed when --topic matches "
                                                              "nothing")
    d = p["delete"]
    d.add_argument("--topic", metavar="REGEX", required=True, help="the topic(s) to delete")
    d.add_argument("--if-exists", action="store_true", help="succeed when --topic matches "
                                                              "nothing")


def run(args: argparse.Namespace) -> int:
    return run_action(f"semel topics {args.action}", ACTIONS[args.action], args)


def _matching(client, pattern: str | None, exclude_internal: bool, *, required: bool,
              if_exists: bool = False):
    """Metadata of every topic (sorted by name) that ``pattern`` matches wholly."""
    resp = client.metadata(None)
    regex = None
    if pattern is not None:
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise UsageError(f"--topic: {pattern!r} is not a regular expression: {e}") from None
    topics = sorted((t for t in resp.topics if t.error_code == Error.NONE
                     and not (exclude_internal and t.is_internal)
                     and (regex is None or regex.fullmatch(t.name))), key=lambda t: t.name)
    if required and pattern is not None and not topics and not if_exists:
        raise KafkaCommandError(Error.UNKNOWN_TOPIC_OR_PARTITION,
                                f"topic {pattern!r} does not exist")
    return topics


def _create(args: argparse.Namespace) -> None:
    configs = key_values(args.config, "--config")
    for option in ("partitions", "replication_factor"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise UsageError(f"--{option.replace('_', '-')} must be at least 1")
    defaults = args.partitions is None or args.replication_factor is None
    with admin(args) as client:
        version, resp = client.send(client.any_broker(), CREATE_TOPICS, message(
            CREATE_TOPICS, timeout_ms=args.timeout, topics=[message(
                CREATE_TOPICS, "request", "CreatableTopic", name=args.topic,
                num_partitions=args.partitions or -1,
                replication_factor=args.replication_factor or -1,
                configs=[message(CREATE_TOPICS, "request", "CreatableTopicConfig", name=k,
                                 value=v) for k, v in configs.items()])]),
            minimum=4 if defaults else None)
        result = resp.topics[0]
        created = True
        if result.error_code == Error.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            created = False
        else:
            check(result.error_code, f"cannot create topic {args.topic!r}", result.error_message)
    document = {"topic": args.topic, "created": created}
    if created and version >= 5:
        document.update(partitions=result.num_partitions,
                        replication_factor=result.replication_factor)
    if created and version >= 7:
        document["topic_id"] = kafka_uuid(result.topic_id)
    emit(args, document, lambda: f"Created topic {args.topic}." if created
         else f"Topic {args.topic} already exists.")


def _list(args: argparse.Namespace) -> None:
    with admin(args) as client:
        names = [t.name for t in _matching(client, args.topic, args.exclude_internal,
                                           required=False)]
    emit(args, {"topics": names}, lambda: "\n".join(names))


def _describe(args: argparse.Namespace) -> None:
    with admin(args) as client:
        topics = _matching(client, args.topic, args.exclude_internal, required=True,
                           if_exists=args.if_exists)
        configs = _topic_configs(client, [t.name for t in topics]) if topics else {}
    described = []
    for t in topics:
        partitions = sorted(t.partitions, key=lambda p: p.partition_index)
        described.append({
            "topic": t.name,
            "topic_id": kafka_uuid(t.topic_id) if t.topic_id.int else None,
            "internal": t.is_internal,
            "partition_count": len(partitions),
            "replication_factor": len(partitions[0].replica_nodes) if partitions else 0,
            "configs": configs.get(t.name, {}),
            "partitions": [{
                "partition": p.partition_index,
                "leader": p.leader_id if p.leader_id >= 0 else None,
                "replicas": list(p.replica_nodes),
                "isr": list(p.isr_nodes),
                "offline_replicas": list(p.offline_replicas),
            } for p in partitions],
        })

    def text() -> str:
        blocks = []
        for d in described:
            head = table(["Topic", "TopicId", "PartitionCount", "ReplicationFactor", "Configs"],
                         [[d["topic"], d["topic_id"], d["partition_count"],
                           d["replication_factor"],
                           ",".join(f"{k}={v}" for k, v in d["configs"].items())]])
            parts = table(["Topic", "Partition", "Leader", "Replicas", "Isr"], [
                [d["topic"], p["partition"], "none" if p["leader"] is None else p["leader"],
                 _ids(p["replicas"]), _ids(p["isr"])] for p in d["partitions"]])
            blocks.append(head + "\n" + parts)
        return "\n\n".join(blocks)

    emit(args, {"topics": described}, text)


def _topic_configs(client, names: list[str]) -> dict[str, dict[str, str | None]]:
    """Configs of ``names`` whose source is not DEFAULT_CONFIG, by topic (kafka-topics)."""
    return {name: {c.name: c.value for c in entries if c.config_source != DEFAULT_CONFIG}
            for name, entries in describe_configs(client, TOPIC_RESOURCE, names,
                                                  synonyms=False).items()}


def _alter(args: argparse.Namespace) -> None:
    updates = key_values(args.config, "--config")
    deletes = [k.strip() for item in args.delete_config for k in item.split(",") if k.strip()]
    if args.partitions is None and not updates and not deletes:
        raise UsageError("give --partitions, --config or --delete-config")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError("--partitions must be at least 1")
    results = []
    with admin(args) as client:
        topics = _matching(client, args.topic, False, required=True, if_exists=args.if_exists)
        names = [t.name for t in topics]
        if args.partitions is not None and names:
            _, resp = client.send(client.any_broker(), CREATE_PARTITIONS, message(
                CREATE_PARTITIONS, timeout_ms=args.timeout, topics=[message(
                    CREATE_PARTITIONS, "request", "CreatePartitionsTopic", name=name,
                    count=args.partitions, assignments=None) for name in names]))
            for r in resp.results:
                check(r.error_code, f"cannot add partitions to topic {r.name!r}",
                      r.error_message)
        if (updates or deletes) and names:
            alter_configs(client, TOPIC_RESOURCE, names, updates, deletes)
        for name in names:
            entry = {"topic": name}
            if args.partitions is not None:
                entry["partitions"] = args.partitions
            if updates or deletes:
                entry.update(set=updates, deleted=deletes)
            results.append(entry)

    def text() -> str:
        lines = []
        for r in results:
            if "partitions" in r:
                lines.append(f"Topic {r['topic']} now has {r['partitions']} partitions.")
            if "set" in r:
                lines.append(f"Updated the configs of topic {r['topic']}.")
        return "\n".join(lines)

    emit(args, {"topics": results}, text)


def _delete(args: argparse.Namespace) -> None:
    with admin(args) as client:
        topics = _matching(client, args.topic, False, required=True, if_exists=args.if_exists)
        internal = [t.name for t in topics if t.is_internal]
        if internal:
            raise KafkaCommandError(Error.INVALID_TOPIC_EXCEPTION, f"topic {internal[0]} is an "
                                    "internal topic and may not be deleted")
        names = [t.name for t in topics]
        failures = []
        if names:
            _, resp = client.send(client.any_broker(), DELETE_TOPICS, lambda v: message(
                DELETE_TOPICS, timeout_ms=args.timeout, topic_names=names,
                topics=[message(DELETE_TOPICS, "request", "DeleteTopicState", name=n)
                        for n in names]))
            failures = [r for r in resp.responses if r.error_code]
    if failures:
        r = failures[0]
        raise KafkaCommandError(to_error(r.error_code), f"cannot delete topic {r.name!r}"
                                + (f": {r.error_message}" if r.error_message else "")
                                + (f" (and {len(failures) - 1} more failed)"
                                   if len(failures) > 1 else ""))
    emit(args, {"deleted": names}, lambda: "\n".join(f"Deleted topic {n}." for n in names))


def _ids(ids) -> str:
    return ",".join(str(i) for i in ids)


ACTIONS = {"create": _create, "list": _list, "describe": _describe, "alter": _alter,
           "delete": _delete}
