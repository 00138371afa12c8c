"""``semel acls``: list, add and remove ACLs (kafka-acls.sh's jobs, its option names).

Resources: ``--topic T``, ``--group G``, ``--transactional-id X``, ``--cluster``,
``--user-principal U`` (each repeatable), with ``--resource-pattern-type`` literal (the
default, as in Kafka), prefixed, or for list/remove also any and match. Entries:
``--allow-principal P`` / ``--deny-principal P`` (``User:name``), ``--allow-host`` /
``--deny-host`` (default ``*`` for a principal given), ``--operation OP`` (repeatable; Kafka's
names, ``Read``, ``IdempotentWrite``, ... in any case; default All). ``--producer`` (WRITE,
DESCRIBE, CREATE on topics; WRITE, DESCRIBE on transactional ids; ``--idempotent`` adds
IDEMPOTENT_WRITE on the cluster) and ``--consumer`` (READ, DESCRIBE on topics; READ on groups)
stand for their operations, as in Kafka.

- ``list [resources] [--principal P]...``: DescribeAcls per resource filter (every ACL
  without one); ``--principal`` keeps that principal's entries.
- ``add resources entries``: CreateAcls; operations a resource type does not have are refused
  before anything is sent.
- ``remove resources [entries] [--force]``: DeleteAcls; without entries every ACL of the
  resource filter goes. Asks for confirmation on a terminal unless ``--force``; without a
  terminal ``--force`` is required.
"""

from __future__ import annotations

import argparse
import sys

from semel.broker.security import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from semel.broker.tools.client import KafkaCommandError, check, message, to_error
from semel.broker.tools.common import (
    UsageError,
    admin,
    emit,
    run_action,
    subcommands,
    table,
)

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
Op = AclOperation
SUPPORTED = {  # Kafka's AclEntry.supportedOperations (ALL is allowed everywhere)
    ResourceType.TOPIC: {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS},
    ResourceType.GROUP: {Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS},
    ResourceType.CLUSTER: {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE},
    ResourceType.TRANSACTIONAL_ID: {Op.DESCRIBE, Op.WRITE, Op.TWO_PHASE_COMMIT},
    ResourceType.USER: {Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS},
}
HEADERS = ["ResourceType", "Name", "PatternType", "Principal", "Host", "Operation",
           "Permission"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = subcommands(parser, [
        ("list", "list ACLs"),
        ("add", "add ACLs"),
        ("remove", "remove ACLs"),
    ])
    for name, action in p.items():
        r = action.add_argument_group("resources")
        r.add_argument("--topic", action="append", default=[])
        r.add_argument("--group", action="append", default=[])
        r.add_argument("--transactional-id", action="append", default=[])
        r.add_argument("--user-principal", action="append", default=[])
        r.add_argument("--cluster", action="store_true")
        kinds = ["literal", "prefixed"] + ([] if name == "add" else ["any", "match"])
        r.add_argument("--resource-pattern-type", choices=kinds, default="literal",
                       type=str.lower)
        if name == "list":
            action.add_argument("--principal", action="append", default=[],
                                help="only this principal's ACLs (repeatable)")
            continue
        e = action.add_argument_group("entries")
        e.add_argument("--allow-principal", action="append", default=[])
        e.add_argument("--deny-principal", action="append", default=[])
        e.add_argument("--allow-host", action="append", default=[])
        e.add_argument("--deny-host", action="append", default=[])
        e.add_argument("--operation", action="append", default=[],
                       help="(repeatable; default All)")
        e.add_argument("--producer", action="store_true",
                       help="the operations a producer needs")
        e.add_argument("--consumer", action="store_true",
                       help="the operations a consumer needs")
        e.add_argument("--idempotent", action="store_true",
                       help="with --producer: IDEMPOTENT_WRITE on the cluster")
        if name == "remove":
            action.add_argument("--force", action="store_true", help="do not ask")


def run(args: argparse.Namespace) -> int:
    return run_action(f"semel acls {args.action}", ACTIONS[args.action], args)


def _operation(text: str) -> AclOperation:
    key = text.replace("_", "").replace("-", "").strip().lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in (Op.UNKNOWN, Op.ANY):
            return op
    raise UsageError(f"--operation: unknown operation {text!r}")


def _principal(text: str) -> str:
    kind, sep, _ = text.strip().partition(":")
    if not sep or not kind:
        raise UsageError(f"principal {text!r} is not of the form Type:name")
    return text.strip()


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str, PatternType]]:
    pattern = PatternType[args.resource_pattern_type.upper()]
    out = [(ResourceType.TOPIC, n, pattern) for n in args.topic]
    out += [(ResourceType.GROUP, n, pattern) for n in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, n, pattern) for n in args.transactional_id]
    out += [(ResourceType.USER, n, pattern) for n in args.user_principal]
    if (args.cluster or getattr(args, "idempotent", False)) and pattern == PatternType.LITERAL:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return list(dict.fromkeys(out))


def _entries(args, operations) -> list[tuple[str, str, AclOperation, AclPermissionType]]:
    """(principal, host, operation, permission) from the --allow/--deny options."""
    out = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            for host in hosts or ["*"]:
                out.extend((_principal(principal), host.strip(), op, permission)
                           for op in operations)
    return list(dict.fromkeys(out))


def _plan(args: argparse.Namespace) -> dict[tuple, list[tuple]]:
    """{resource pattern: entries} as kafka-acls builds it (--producer/--consumer expand)."""
    resources = _resources(args)
    if not resources:
        raise UsageError("give a resource: --topic, --group, --transactional-id, --cluster or "
                         "--user-principal")
    if (args.producer or args.consumer) and (args.operation or args.deny_principal
                                             or args.deny_host):
        raise UsageError("--producer/--consumer exclude --operation, --deny-principal and "
                         "--deny-host")
    if args.idempotent and not args.producer:
        raise UsageError("--idempotent goes with --producer")
    plan: dict[tuple, list[tuple]] = {}
    if not args.producer and not args.consumer:
        operations = [_operation(o) for o in args.operation] or [Op.ALL]
        entries = _entries(args, list(dict.fromkeys(operations)))
        for r in resources:
            plan[r] = entries
    if args.producer:
        for r in resources:
            if r[0] == ResourceType.TOPIC:
                plan[r] = _entries(args, [Op.WRITE, Op.DESCRIBE, Op.CREATE])
            elif r[0] == ResourceType.TRANSACTIONAL_ID:
                plan[r] = _entries(args, [Op.WRITE, Op.DESCRIBE])
            elif r[0] == ResourceType.CLUSTER and args.idempotent:
                plan[r] = _entries(args, [Op.IDEMPOTENT_WRITE])
    if args.consumer:
        for r in resources:
            if r[0] == ResourceType.TOPIC:
                plan[r] = list(dict.fromkeys(
                    plan.get(r, []) + _entries(args, [Op.READ, Op.DESCRIBE])))
            elif r[0] == ResourceType.GROUP:
                plan[r] = list(dict.fromkeys(plan.get(r, []) + _entries(args, [Op.READ])))
    for (kind, _, _), entries in plan.items():
        bad = sorted({e[2].name for e in entries if e[2] != Op.ALL and e[2] not in SUPPORTED[kind]})
        if bad:
            raise UsageError(f"resource type {kind.name} does not have operation(s) "
                             f"{', '.join(bad)}; it has "
                             f"{', '.join(sorted(o.name for o in SUPPORTED[kind]))}, ALL")
    return plan


def _binding(kind, name, pattern, principal, host, op, permission) -> dict:
    return {"resource_type": ResourceType(kind).name, "resource_name": name,
            "pattern_type": PatternType(pattern).name, "principal": principal, "host": host,
            "operation": AclOperation(op).name, "permission_type":
                AclPermissionType(permission).name}


def _rows(bindings: list[dict]) -> str:
    return table(HEADERS, [[b["resource_type"], b["resource_name"], b["pattern_type"],
                            b["principal"], b["host"], b["operation"], b["permission_type"]]
                           for b in bindings])


def _describe(client, resource: tuple | None) -> list[dict]:
    kind, name, pattern = resource or (ResourceType.ANY, None, PatternType.ANY)
    _, resp = client.send(client.any_broker(), DESCRIBE_ACLS, message(
        DESCRIBE_ACLS, resource_type_filter=kind, resource_name_filter=name,
        pattern_type_filter=pattern, principal_filter=None, host_filter=None,
        operation=Op.ANY, permission_type=AclPermissionType.ANY))
    check(resp.error_code, "DescribeAcls", resp.error_message)
    return [_binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host,
                     a.operation, a.permission_type)
            for r in resp.resources for a in r.acls]


def _list(args: argparse.Namespace) -> None:
    principals = {_principal(p) for p in args.principal}
    with admin(args) as client:
        found = []
        for resource in _resources(args) or [None]:
            found.extend(b for b in _describe(client, resource) if b not in found)
    if principals:
        found = [b for b in found if b["principal"] in principals]
    found.sort(key=lambda b: tuple(b.values()))
    emit(args, {"acls": found}, lambda: _rows(found))


def _add(args: argparse.Namespace) -> None:
    plan = _plan(args)
    if not any(plan.values()):
        raise UsageError("give --allow-principal or --deny-principal")
    bindings = [(*r, *e) for r, entries in plan.items() for e in entries]
    with admin(args) as client:
        _, resp = client.send(client.any_broker(), CREATE_ACLS, message(
            CREATE_ACLS, creations=[message(
                CREATE_ACLS, "request", "AclCreation", resource_type=k, resource_name=n,
                resource_pattern_type=pt, principal=pr, host=h, operation=op,
                permission_type=pe) for k, n, pt, pr, h, op, pe in bindings]))
    for binding, result in zip(bindings, resp.results):
        if result.error_code:
            b = _binding(*binding)
            raise KafkaCommandError(to_error(result.error_code), (
                f"cannot add {b['permission_type']} {b['operation']} for {b['principal']} on "
                f"{b['resource_type']} {b['resource_name']!r}")
                + (f": {result.error_message}" if result.error_message else ""))
    created = [_binding(*b) for b in bindings]
    emit(args, {"created": created}, lambda: _rows(created))


def _remove(args: argparse.Namespace) -> None:
    plan = _plan(args)
    filters = []
    for (kind, name, pattern), entries in plan.items():
        if entries:
            filters.extend((kind, name, pattern, *e) for e in entries)
        else:
            filters.append((kind, name, pattern, None, None, Op.ANY, AclPermissionType.ANY))
    if not args.force:
        if not sys.stdin.isatty():
            raise UsageError("removing ACLs asks for confirmation: give --force when stdin is "
                             "not a terminal")
        what = "; ".join(f"{ResourceType(k).name} {n!r} ({PatternType(p).name})"
                         + ("" if pr is None else f" {pe.name} {pr} {op.name} from {h}")
                         for k, n, p, pr, h, op, pe in filters)
        print(f"Are you sure you want to remove the ACLs matching: {what}? (y/n) ", end="",
              file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() != "y":
            emit(args, {"deleted": []}, lambda: "Nothing removed.")
            return
    with admin(args) as client:
        _, resp = client.send(client.any_broker(), DELETE_ACLS, message(
            DELETE_ACLS, filters=[message(
                DELETE_ACLS, "request", "DeleteAclsFilter", resource_type_filter=k,
                resource_name_filter=n, pattern_type_filter=pt, principal_filter=pr,
                host_filter=h, operation=op, permission_type=pe)
                for k, n, pt, pr, h, op, pe in filters]))
    deleted = []
    for result in resp.filter_results:
        check(result.error_code, "DeleteAcls", result.error_message)
        for m in result.matching_acls:
            check(m.error_code, "DeleteAcls", m.error_message)
            b = _binding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host,
                         m.operation, m.permission_type)
            if b not in deleted:
                deleted.append(b)
    emit(args, {"deleted": deleted}, lambda: _rows(deleted) if deleted
         else "No ACLs matched.")


ACTIONS = {"list": _list, "add": _add, "remove": _remove}
