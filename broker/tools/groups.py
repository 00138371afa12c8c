"""``semel groups``: consumer groups (kafka-consumer-groups.sh's jobs).

- ``list [--state S]... [--type T]...``: ListGroups on every broker (v4+ filters by state,
  v5+ by type).
- ``describe (--group G... | --all-groups) [--members [--verbose] | --state]``: by default,
  per partition the committed offset (OffsetFetch), the log end offset (ListOffsets latest,
  read_uncommitted as Kafka's tool), the lag and the member it is assigned to (consumer id,
  host, client id: DescribeGroups, the assignment decoded from the consumer protocol; or
  ConsumerGroupDescribe for a KIP-848 group when the broker speaks it). ``--members``: one row
  per member; ``--state``: the coordinator, assignor, state and member count. A group that
  does not exist is GROUP_ID_NOT_FOUND.
- ``reset-offsets (--group G... | --all-groups) (--topic T[:P,P-P]... | --all-topics)
  SCENARIO [--dry-run | --execute]`` with SCENARIO one of ``--to-earliest``,
  ``--to-latest``, ``--to-current``, ``--to-offset N``, ``--shift-by N``, ``--to-datetime
  YYYY-MM-DDTHH:MM:SS[.sss][zone]``, ``--by-duration PnDTnHnMnS``: as kafka-consumer-groups,
  only for inactive groups (Empty, or unknown); ``--to-offset``/``--shift-by`` are clamped to
  the log's start and end with a warning; a time with no offset after it falls back to the
  log end. Without ``--execute`` nothing is changed (a dry run); with it the offsets are
  committed by OffsetCommit (generation -1, as the admin client does).
- ``delete --group G...``: DeleteGroups. ``delete-offsets --group G --topic T[:P]...``:
  OffsetDelete.
"""

from __future__ import annotations

import argparse
import re
import struct
import sys
import time
from datetime import datetime

from semel.broker.tools.client import (
    GROUP_KEY,
    CommandFailed,
    KafkaCommandError,
    check,
    error_name,
    message,
    to_error,
)
from semel.broker.tools.common import (
    UsageError,
    admin,
    emit,
    partition_list,
    run_action,
    subcommands,
    table,
)
from semel.protocol.errors import Error

OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
DELETE_GROUPS, OFFSET_DELETE, CONSUMER_GROUP_DESCRIBE = 42, 47, 69
INACTIVE = ("Empty", "Dead")
SCENARIOS = ("to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime",
             "by_duration")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = subcommands(parser, [
        ("list", "list groups"),
        ("describe", "describe groups: offsets and lag per partition, members, state"),
        ("reset-offsets", "reset the committed offsets of inactive groups"),
        ("delete", "delete groups"),
        ("delete-offsets", "delete committed offsets of a group"),
    ])
    p["list"].add_argument("--state", action="append", default=[],
                           help="only groups in this state (repeatable): Stable, Empty, ...")
    p["list"].add_argument("--type", action="append", default=[],
                           help="only groups of this type (repeatable): classic, consumer, ...")
    for name in ("describe", "reset-offsets"):
        p[name].add_argument("--group", action="append", default=[], help="(repeatable)")
        p[name].add_argument("--all-groups", action="store_true", help="every group")
    d = p["describe"]
    view = d.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="the group's state and coordinator")
    view.add_argument("--offsets", action="store_true", help="per partition (the default)")
    d.add_argument("--verbose", action="store_true", help="with --members: the assignments")
    r = p["reset-offsets"]
    r.add_argument("--topic", action="append", default=[], metavar="TOPIC[:PARTITIONS]",
                   help="topic, optionally with partitions 0,2,4-6 (repeatable)")
    r.add_argument("--all-topics", action="store_true",
                   help="every partition the group has an offset for")
    scenario = r.add_mutually_exclusive_group(required=True)
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-current", action="store_true")
    scenario.add_argument("--to-offset", type=int, metavar="N")
    scenario.add_argument("--shift-by", type=int, metavar="N")
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:MM:SS.sss")
    scenario.add_argument("--by-duration", metavar="PnDTnHnMnS")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p["delete"].add_argument("--group", action="append", required=True, help="(repeatable)")
    o = p["delete-offsets"]
    o.add_argument("--group", required=True)
    o.add_argument("--topic", action="append", required=True, metavar="TOPIC[:PARTITIONS]",
                   help="(repeatable)")


def run(args: argparse.Namespace) -> int:
    return run_action(f"semel groups {args.action}", ACTIONS[args.action], args)


# -- requests ------------------------------------------------------------------------------

def _list_groups(client, states=(), types=()) -> list[dict]:
    client.metadata([])
    groups: dict[str, dict] = {}
    for node in sorted(client.brokers):
        conn = client.broker(node)
        version, resp = client.send(conn, LIST_GROUPS, message(
            LIST_GROUPS, states_filter=list(states), types_filter=list(types)),
            minimum=5 if types else 4 if states else None)
        check(resp.error_code, f"ListGroups on broker {node}")
        for g in resp.groups:
            groups[g.group_id] = {
                "group": g.group_id, "coordinator": node,
                "state": g.group_state if version >= 4 else None,
                "type": g.group_type if version >= 5 else None,
                "protocol_type": g.protocol_type}
    return [groups[k] for k in sorted(groups)]


def _describe_group(client, group: str) -> dict:
    """State and members of a group at its coordinator."""
    node, conn = client.retry(lambda: client.coordinator(GROUP_KEY, group))
    if CONSUMER_GROUP_DESCRIBE in conn.versions:
        _, resp = client.send(conn, CONSUMER_GROUP_DESCRIBE, message(
            CONSUMER_GROUP_DESCRIBE, group_ids=[group]))
        g = resp.groups[0]
        if g.error_code == Error.NONE:
            return {"group": group, "coordinator": _node(client, node), "state": g.group_state,
                    "type": "consumer", "protocol_type": "consumer",
                    "assignor": g.assignor_name, "members": [{
                        "consumer_id": m.member_id, "group_instance_id": m.instance_id,
                        "host": m.client_host, "client_id": m.client_id,
                        "assignment": sorted((t.topic_name, p)
                                             for t in m.assignment.topic_partitions
                                             for p in t.partitions)}
                        for m in g.members]}
        if g.error_code != Error.GROUP_ID_NOT_FOUND:  # a classic group: DescribeGroups
            check(g.error_code, f"ConsumerGroupDescribe of {group!r}", g.error_message)

    def call():
        _, resp = client.send(conn, DESCRIBE_GROUPS, message(DESCRIBE_GROUPS, groups=[group]))
        g = resp.groups[0]
        check(g.error_code, f"DescribeGroups of {group!r}",
              getattr(g, "error_message", None))
        return g

    g = client.retry(call)
    consumer = g.protocol_type == "consumer"
    return {"group": group, "coordinator": _node(client, node), "state": g.group_state,
            "type": "classic", "protocol_type": g.protocol_type, "assignor": g.protocol_data,
            "members": [{
                "consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
                "host": m.client_host, "client_id": m.client_id,
                "assignment": _assignment(m.member_assignment) if consumer else []}
                for m in g.members]}


def _committed(client, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets (OffsetFetch of every partition)."""
    _, conn = client.retry(lambda: client.coordinator(GROUP_KEY, group))

    def body(version: int):
        if version >= 8:
            return message(OFFSET_FETCH, groups=[message(
                OFFSET_FETCH, "request", "OffsetFetchRequestGroup", group_id=group,
                topics=None)])
        return message(OFFSET_FETCH, group_id=group, topics=None)

    def call():
        version, resp = client.send(conn, OFFSET_FETCH, body, minimum=2)
        if version >= 8:
            g = resp.groups[0]
            check(g.error_code, f"OffsetFetch of group {group!r}")
            topics = g.topics
        else:
            check(resp.error_code, f"OffsetFetch of group {group!r}")
            topics = resp.topics
        out = {}
        for t in topics:
            for p in t.partitions:
                check(p.error_code, f"OffsetFetch of {t.name}-{p.partition_index}")
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p.committed_offset
        return out

    return client.retry(call)


def _commit(client, group: str, offsets: dict[tuple[str, int], int]) -> None:
    _, conn = client.retry(lambda: client.coordinator(GROUP_KEY, group))
    by_topic: dict[str, list] = {}
    for (t, p), offset in sorted(offsets.items()):
        by_topic.setdefault(t, []).append(message(
            OFFSET_COMMIT, "request", "OffsetCommitRequestPartition", partition_index=p,
            committed_offset=offset, committed_metadata=""))

    def call():
        _, resp = client.send(conn, OFFSET_COMMIT, message(
            OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[message(OFFSET_COMMIT, "request", "OffsetCommitRequestTopic", name=t,
                            partitions=ps) for t, ps in by_topic.items()]))
        for t in resp.topics:
            for p in t.partitions:
                check(p.error_code, f"OffsetCommit of group {group!r} for "
                                    f"{t.name}-{p.partition_index}")

    client.retry(call)


def _node(client, node: int) -> dict:
    host, port = client.brokers.get(node, ("", -1))
    return {"id": node, "host": host, "port": port}


def _assignment(data: bytes) -> list[tuple[str, int]]:
    """The partitions in a consumer protocol assignment (ConsumerProtocolAssignment: version
    int16, [topic string, [partition int32]], user data); [] when it cannot be read."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos:pos + length]).decode()
            pos += length
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out.extend((topic, p) for p in struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
        return sorted(out)
    except (struct.error, UnicodeDecodeError):
        return []


# -- actions -------------------------------------------------------------------------------

def _list(args: argparse.Namespace) -> None:
    with admin(args) as client:
        groups = _list_groups(client, args.state, args.type)
    emit(args, {"groups": groups}, lambda: table(
        ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"],
        [[g["group"], g["state"], g["type"], g["protocol_type"] or None] for g in groups]))


def _group_ids(client, args: argparse.Namespace) -> list[str]:
    if args.all_groups:
        if args.group:
            raise UsageError("--group and --all-groups exclude each other")
        return [g["group"] for g in _list_groups(client)]
    if not args.group:
        raise UsageError("give --group or --all-groups")
    return list(dict.fromkeys(args.group))


def _describe(args: argparse.Namespace) -> None:
    if args.verbose and not args.members:
        raise UsageError("--verbose goes with --members")
    described = []
    with admin(args) as client:
        for group in _group_ids(client, args):
            d = _describe_group(client, group)
            committed = _committed(client, group)
            if d["state"] == "Dead" and not committed:
                raise KafkaCommandError(Error.GROUP_ID_NOT_FOUND,
                                        f"consumer group {group!r} does not exist")
            owner = {tp: m for m in d["members"] for tp in m["assignment"]}
            partitions = sorted(set(committed) | set(owner))
            ends = client.list_offsets(partitions, -1) if partitions else {}
            d["offsets"] = []
            for tp in partitions:
                m = owner.get(tp)
                current, end = committed.get(tp), ends.get(tp)
                d["offsets"].append({
                    "topic": tp[0], "partition": tp[1], "current_offset": current,
                    "log_end_offset": end,
                    "lag": end - current if current is not None and end is not None
                    and end >= 0 else None,
                    "consumer_id": m["consumer_id"] if m else None,
                    "host": m["host"] if m else None,
                    "client_id": m["client_id"] if m else None})
            for m in d["members"]:
                m["assignment"] = [list(tp) for tp in m["assignment"]]
            described.append(d)

    def text() -> str:
        blocks = []
        for d in described:
            if args.state:
                c = d["coordinator"]
                blocks.append(table(
                    ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
                    [[d["group"], f"{c['host']}:{c['port']} ({c['id']})", d["assignor"] or None,
                      d["state"], len(d["members"])]]))
            elif args.members:
                headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
                if args.verbose:
                    headers.append("ASSIGNMENT")
                rows = []
                for m in d["members"]:
                    row = [d["group"], m["consumer_id"], m["host"], m["client_id"],
                           len(m["assignment"])]
                    if args.verbose:
                        row.append(_assignment_text(m["assignment"]) or None)
                    rows.append(row)
                blocks.append(table(headers, rows))
            else:
                blocks.append(table(
                    ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                     "CONSUMER-ID", "HOST", "CLIENT-ID"],
                    [[d["group"], o["topic"], o["partition"], o["current_offset"],
                      o["log_end_offset"], o["lag"], o["consumer_id"], o["host"],
                      o["client_id"]] for o in d["offsets"]]))
            if d["state"] == "Empty" and not args.state:
                print(f"Consumer group '{d['group']}' has no active members.", file=sys.stderr)
        return "\n\n".join(blocks)

    emit(args, {"groups": described}, text)


def _assignment_text(assignment: list) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in assignment:
        by_topic.setdefault(t, []).append(p)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items())


def _topic_partitions(client, specs: list[str]) -> list[tuple[str, int]]:
    """``T`` (every partition, from Metadata) or ``T:0,2,4-6`` -> (topic, partition)s."""
    named: list[tuple[str, int]] = []
    whole: list[str] = []
    for spec in specs:
        topic, sep, parts = spec.partition(":")
        if not topic:
            raise UsageError(f"--topic: {spec!r} names no topic")
        if sep:
            named.extend((topic, p) for p in partition_list(parts, "--topic"))
        else:
            whole.append(topic)
    if whole:
        resp = client.metadata(whole)
        for t in resp.topics:
            check(t.error_code, f"topic {t.name!r}", "does not exist"
                  if t.error_code == Error.UNKNOWN_TOPIC_OR_PARTITION else None)
            named.extend((t.name, p.partition_index) for p in t.partitions)
    return sorted(set(named))


def _reset_offsets(args: argparse.Namespace) -> None:
    if bool(args.topic) == args.all_topics:
        raise UsageError("give --topic or --all-topics")
    if not args.execute and not args.dry_run:
        print("semel groups reset-offsets: a dry run (nothing is changed without --execute)",
              file=sys.stderr)
    timestamp = None
    if args.to_datetime is not None:
        timestamp = _parse_datetime(args.to_datetime)
    elif args.by_duration is not None:
        timestamp = int(time.time() * 1000) - _parse_duration(args.by_duration)
    results = []
    with admin(args) as client:
        for group in _group_ids(client, args):
            state = _describe_group(client, group)["state"]
            if state not in INACTIVE:
                raise KafkaCommandError(Error.NON_EMPTY_GROUP, "assignments can only be reset "
                                        f"if the group {group!r} is inactive, but the current "
                                        f"state is {state}")
            committed = _committed(client, group)
            partitions = (sorted(committed) if args.all_topics
                          else _topic_partitions(client, args.topic))
            new = _new_offsets(client, args, partitions, committed, timestamp)
            if args.execute and new:
                _commit(client, group, new)
            results.extend({"group": group, "topic": t, "partition": p, "new_offset": o}
                           for (t, p), o in sorted(new.items()))
    emit(args, {"executed": bool(args.execute), "offsets": results}, lambda: table(
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [[r["group"], r["topic"], r["partition"], r["new_offset"]] for r in results]))


def _new_offsets(client, args, partitions, committed, timestamp) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    if args.to_earliest:
        return client.list_offsets(partitions, -2)
    if args.to_latest:
        return client.list_offsets(partitions, -1)
    if args.to_current:
        out = {tp: committed[tp] for tp in partitions if tp in committed}
        missing = [tp for tp in partitions if tp not in committed]
        out.update(client.list_offsets(missing, -1) if missing else {})
        return out
    if timestamp is not None:
        found = client.list_offsets(partitions, timestamp)
        empty = [tp for tp, o in found.items() if o < 0]
        found.update(client.list_offsets(empty, -1) if empty else {})
        return found
    if args.to_offset is not None:
        wanted = dict.fromkeys(partitions, args.to_offset)
    else:
        without = [tp for tp in partitions if tp not in committed]
        if without:
            raise CommandFailed(f"cannot shift the offset of {without[0][0]}-{without[0][1]}: "
                                "the group has no committed offset there")
        wanted = {tp: committed[tp] + args.shift_by for tp in partitions}
    starts = client.list_offsets(partitions, -2)
    ends = client.list_offsets(partitions, -1)
    out = {}
    for tp, offset in wanted.items():
        if offset > ends[tp]:
            print(f"New offset ({offset}) is higher than the latest offset of {tp[0]}-{tp[1]}: "
                  f"set to {ends[tp]}", file=sys.stderr)
            offset = ends[tp]
        elif offset < starts[tp]:
            print(f"New offset ({offset}) is lower than the earliest offset of {tp[0]}-{tp[1]}:"
                  f" set to {starts[tp]}", file=sys.stderr)
            offset = starts[tp]
        out[tp] = offset
    return out


def _parse_datetime(text: str) -> int:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--to-datetime: {text!r} is not YYYY-MM-DDTHH:MM:SS[.sss][zone]"
                         ) from None
    return int(value.timestamp() * 1000)  # a time without zone is local time


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def _parse_duration(text: str) -> int:
    match = _DURATION.fullmatch(text.upper())
    if match is None or text.upper() in ("P", "PT"):
        raise UsageError(f"--by-duration: {text!r} is not an ISO-8601 duration PnDTnHnMnS")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _delete(args: argparse.Namespace) -> None:
    groups = list(dict.fromkeys(args.group))
    deleted, failed = [], []
    with admin(args) as client:
        for group in groups:
            _, conn = client.retry(lambda group=group: client.coordinator(GROUP_KEY, group))
            _, resp = client.send(conn, DELETE_GROUPS, message(DELETE_GROUPS,
                                                               groups_names=[group]))
            code = resp.results[0].error_code
            (failed if code else deleted).append((group, code))
    if failed:
        group, code = failed[0]
        done = f" ({', '.join(g for g, _ in deleted)} deleted)" if deleted else ""
        raise KafkaCommandError(to_error(code), f"cannot delete group {group!r}{done}")
    names = [g for g, _ in deleted]
    emit(args, {"deleted": names}, lambda: "Deletion of requested consumer groups ("
         + ", ".join(f"'{g}'" for g in names) + ") was successful.")


def _delete_offsets(args: argparse.Namespace) -> None:
    with admin(args) as client:
        partitions = _topic_partitions(client, args.topic)
        _, conn = client.retry(lambda: client.coordinator(GROUP_KEY, args.group))
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        _, resp = client.send(conn, OFFSET_DELETE, message(OFFSET_DELETE, group_id=args.group,
            topics=[message(OFFSET_DELETE, "request", "OffsetDeleteRequestTopic", name=t,
                            partitions=[message(OFFSET_DELETE, "request",
                                                "OffsetDeleteRequestPartition",
                                                partition_index=p) for p in ps])
                    for t, ps in by_topic.items()]))
    check(resp.error_code, f"cannot delete offsets of group {args.group!r}")
    rows = sorted((t.name, p.partition_index, p.error_code) for t in resp.topics
                   for p in t.partitions)
    document = {"group": args.group, "partitions": [
        {"topic": t, "partition": p, "error": error_name(to_error(c)) if c else None}
        for t, p, c in rows]}
    emit(args, document, lambda: table(["TOPIC", "PARTITION", "STATUS"], [
        [t, p, f"Error: {error_name(to_error(c))}" if c else "Successful"] for t, p, c in rows]))
    failed = [(t, p, c) for t, p, c in rows if c]
    if failed:
        t, p, c = failed[0]
        raise KafkaCommandError(to_error(c), f"cannot delete the offset of {t}-{p} in group "
                                f"{args.group!r}")


ACTIONS = {"list": _list, "describe": _describe, "reset-offsets": _reset_offsets,
           "delete": _delete, "delete-offsets": _delete_offsets}
