"""``semel transactions``: the jobs of kafka-transactions.sh (KIP-664), same sub-commands.

- ``list [--duration-filter MS] [--transactional-id-pattern REGEX] [--state S]...``:
  ListTransactions on every broker (v1+ for the duration, v2+ for the pattern).
- ``describe --transactional-id X``: DescribeTransactions at the id's coordinator
  (FindCoordinator); the duration is now minus the start time.
- ``describe-producers --topic T --partition P [--broker-id N]``: DescribeProducers at the
  partition's leader (or the given broker).
- ``find-hanging (--topic T [--partition P] | --broker-id N) [--max-transaction-timeout MIN]``:
  as Kafka's tool: every producer with an open transaction on the partitions whose last
  write is older than the timeout (15 minutes by default) is a candidate; its transactional id
  is looked up (ListTransactions filtered by producer id) and described: a candidate is
  hanging when no transactional id owns the producer id, the id is not found, or the
  coordinator's transaction does not include the partition.
- ``abort --topic T --partition P (--start-offset O | --producer-id I --producer-epoch E
  --coordinator-epoch C)``: WriteTxnMarkers with an ABORT marker to the partition's leader.
  With ``--start-offset`` the producer whose open transaction starts there is found with
  DescribeProducers; a coordinator epoch of -1 becomes 0, as in Kafka.
"""

from __future__ import annotations

import argparse
import time

from semel.broker.tools.client import (
    TRANSACTION_KEY,
    CommandFailed,
    KafkaCommandError,
    check,
    message,
)
from semel.broker.tools.common import (
    UsageError,
    admin,
    emit,
    run_action,
    subcommands,
    table,
)
from semel.protocol.errors import Error

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 61, 65, 66
BATCH = 500  # partitions per DescribeProducers request, as Kafka's tool


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = subcommands(parser, [
        ("list", "list transactions"),
        ("describe", "describe the state of a transactional id"),
        ("describe-producers", "describe the active producers of a topic partition"),
        ("find-hanging", "find hanging transactions"),
        ("abort", "abort a hanging transaction (writes an ABORT marker)"),
    ])
    ls = p["list"]
    ls.add_argument("--duration-filter", type=int, metavar="MS",
                    help="only transactions running longer than this")
    ls.add_argument("--transactional-id-pattern", metavar="REGEX",
                    help="only transactional ids matching this")
    ls.add_argument("--state", action="append", default=[],
                    help="only transactions in this state (repeatable): Ongoing, Empty, ...")
    p["describe"].add_argument("--transactional-id", required=True)
    dp = p["describe-producers"]
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", type=int, required=True)
    dp.add_argument("--broker-id", type=int, help="ask this broker instead of the leader")
    fh = p["find-hanging"]
    fh.add_argument("--topic", help="limit the search to this topic")
    fh.add_argument("--partition", type=int, help="and this partition (needs --topic)")
    fh.add_argument("--broker-id", type=int, help="search the partitions this broker holds")
    fh.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                    help="only transactions whose last write is older (default 15)")
    ab = p["abort"]
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", type=int, required=True)
    ab.add_argument("--start-offset", type=int, help="the open transaction's first offset")
    ab.add_argument("--producer-id", type=int)
    ab.add_argument("--producer-epoch", type=int)
    ab.add_argument("--coordinator-epoch", type=int)


def run(args: argparse.Namespace) -> int:
    return run_action(f"semel transactions {args.action}", ACTIONS[args.action], args)


# -- requests ------------------------------------------------------------------------------

def _list_transactions(client, *, states=(), producer_ids=(), duration=None, pattern=None
                       ) -> list[dict]:
    client.metadata([])
    out = []
    for node in sorted(client.brokers):
        minimum = 2 if pattern is not None else 1 if duration is not None else None

        def call(node=node, minimum=minimum):
            _, resp = client.send(client.broker(node), LIST_TRANSACTIONS, message(
                LIST_TRANSACTIONS, state_filters=list(states),
                producer_id_filters=list(producer_ids),
                duration_filter=-1 if duration is None else duration,
                transactional_id_pattern=pattern), minimum=minimum)
            check(resp.error_code, f"ListTransactions on broker {node}")
            if resp.unknown_state_filters:
                unknown = ", ".join(resp.unknown_state_filters)
                raise UsageError(f"--state: unknown state(s) {unknown}")
            return resp

        resp = client.retry(call)
        out.extend({"transactional_id": t.transactional_id, "coordinator": node,
                    "producer_id": t.producer_id, "state": t.transaction_state}
                   for t in resp.transaction_states)
    return sorted(out, key=lambda t: t["transactional_id"])


def _describe_transactions(client, ids: list[str]) -> dict[str, dict | None]:
    """{transactional id: description, None when the coordinator does not know it}."""
    out: dict[str, dict | None] = {}
    for txn_id in ids:
        def call(txn_id=txn_id):
            node, conn = client.coordinator(TRANSACTION_KEY, txn_id)
            _, resp = client.send(conn, DESCRIBE_TRANSACTIONS, message(
                DESCRIBE_TRANSACTIONS, transactional_ids=[txn_id]))
            s = resp.transaction_states[0]
            if s.error_code == Error.TRANSACTIONAL_ID_NOT_FOUND:
                return None
            check(s.error_code, f"DescribeTransactions of {txn_id!r}")
            return {
                "coordinator_id": node, "transactional_id": txn_id,
                "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                "state": s.transaction_state,
                "transaction_timeout_ms": s.transaction_timeout_ms,
                "transaction_start_time_ms": s.transaction_start_time_ms
                if s.transaction_start_time_ms >= 0 else None,
                "partitions": sorted([t.topic, p] for t in s.topics for p in t.partitions)}

        out[txn_id] = client.retry(call)
    return out


def _describe_producers(client, partitions: list[tuple[str, int]], broker_id: int | None
                        ) -> dict[tuple[str, int], list[dict]]:
    """Active producers per partition (DescribeProducers at the leaders, or ``broker_id``)."""
    routes = ({broker_id: partitions} if broker_id is not None
              else client.leaders(partitions))
    out: dict[tuple[str, int], list[dict]] = {}
    for node, tps in routes.items():
        for i in range(0, len(tps), BATCH):
            by_topic: dict[str, list[int]] = {}
            for t, p in tps[i:i + BATCH]:
                by_topic.setdefault(t, []).append(p)
            request = message(DESCRIBE_PRODUCERS, topics=[message(
                DESCRIBE_PRODUCERS, "request", "TopicRequest", name=t, partition_indexes=ps)
                for t, ps in by_topic.items()])

            def call(node=node, request=request):
                _, resp = client.send(client.broker(node), DESCRIBE_PRODUCERS, request)
                got = {}
                for t in resp.topics:
                    for p in t.partitions:
                        check(p.error_code, f"DescribeProducers of {t.name}-{p.partition_index}"
                              f" on broker {node}", p.error_message)
                        got[(t.name, p.partition_index)] = [{
                            "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                            "coordinator_epoch": s.coordinator_epoch,
                            "last_sequence": s.last_sequence,
                            "last_timestamp": s.last_timestamp,
                            "current_transaction_start_offset": s.current_txn_start_offset
                            if s.current_txn_start_offset >= 0 else None}
                            for s in p.active_producers]
                return got

            out.update(client.retry(call))
    return out


# -- actions -------------------------------------------------------------------------------

def _list(args: argparse.Namespace) -> None:
    with admin(args) as client:
        listed = _list_transactions(client, states=args.state, duration=args.duration_filter,
                                    pattern=args.transactional_id_pattern)
    emit(args, {"transactions": listed}, lambda: table(
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        [[t["transactional_id"], t["coordinator"], t["producer_id"], t["state"]]
         for t in listed]))


def _describe(args: argparse.Namespace) -> None:
    with admin(args) as client:
        d = _describe_transactions(client, [args.transactional_id])[args.transactional_id]
    if d is None:
        raise KafkaCommandError(Error.TRANSACTIONAL_ID_NOT_FOUND, "transactional id "
                                f"{args.transactional_id!r} is not known to its coordinator")
    start = d["transaction_start_time_ms"]
    d["transaction_duration_ms"] = None if start is None else int(time.time() * 1000) - start
    emit(args, d, lambda: table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
         "TopicPartitions"],
        [[d["coordinator_id"], d["transactional_id"], d["producer_id"], d["producer_epoch"],
          d["state"], d["transaction_timeout_ms"], _none(start),
          _none(d["transaction_duration_ms"]),
          ",".join(f"{t}-{p}" for t, p in d["partitions"])]]))


def _describe_producers_action(args: argparse.Namespace) -> None:
    tp = (args.topic, args.partition)
    with admin(args) as client:
        producers = _describe_producers(client, [tp], args.broker_id)[tp]
    emit(args, {"topic": args.topic, "partition": args.partition, "producers": producers},
         lambda: table(
             ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
              "LastTimestamp", "CurrentTransactionStartOffset"],
             [[s["producer_id"], s["producer_epoch"], s["coordinator_epoch"],
               s["last_sequence"], s["last_timestamp"],
               _none(s["current_transaction_start_offset"])] for s in producers]))


def _find_hanging(args: argparse.Namespace) -> None:
    if args.topic is None and args.broker_id is None:
        raise UsageError("give --topic or --broker-id to limit the search")
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    max_timeout_ms = args.max_transaction_timeout * 60_000
    with admin(args) as client:
        if args.partition is not None:
            partitions = [(args.topic, args.partition)]
        else:
            resp = client.metadata([args.topic] if args.topic else None)
            partitions = []
            for t in resp.topics:
                check(t.error_code, f"topic {t.name!r}", "does not exist"
                      if t.error_code == Error.UNKNOWN_TOPIC_OR_PARTITION else None)
                partitions.extend((t.name, p.partition_index) for p in t.partitions
                                  if args.broker_id is None or args.broker_id in p.replica_nodes)
        now = int(time.time() * 1000)
        candidates = [(tp, s) for tp, producers in sorted(
                          _describe_producers(client, sorted(partitions), args.broker_id).items())
                      for s in producers
                      if s["current_transaction_start_offset"] is not None
                      and now - s["last_timestamp"] > max_timeout_ms]
        hanging = []
        if candidates:
            owners = {t["producer_id"]: t["transactional_id"] for t in _list_transactions(
                client, producer_ids=sorted({s["producer_id"] for _, s in candidates}))}
            described = _describe_transactions(client, sorted(set(owners.values())))
            for tp, s in candidates:
                txn_id = owners.get(s["producer_id"])
                d = described.get(txn_id) if txn_id is not None else None
                if d is None or list(tp) not in d["partitions"]:
                    hanging.append((tp, s))
    rows = [{"topic": tp[0], "partition": tp[1], "producer_id": s["producer_id"],
             "producer_epoch": s["producer_epoch"], "coordinator_epoch": s["coordinator_epoch"],
             "start_offset": s["current_transaction_start_offset"],
             "last_timestamp": s["last_timestamp"],
             "duration_minutes": (now - s["last_timestamp"]) // 60_000} for tp, s in hanging]
    emit(args, {"hanging": rows}, lambda: table(
        ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
         "LastTimestamp", "Duration(min)"],
        [[r["topic"], r["partition"], r["producer_id"], r["producer_epoch"],
          r["coordinator_epoch"], r["start_offset"], r["last_timestamp"],
          r["duration_minutes"]] for r in rows]))


def _abort(args: argparse.Namespace) -> None:
    tp = (args.topic, args.partition)
    explicit = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is None and args.producer_id is None:
        raise UsageError("identify the transaction with --start-offset, or with --producer-id, "
                         "--producer-epoch and --coordinator-epoch")
    if args.start_offset is not None and any(v is not None for v in explicit):
        raise UsageError("--start-offset excludes --producer-id/--producer-epoch/"
                         "--coordinator-epoch")
    with admin(args) as client:
        if args.start_offset is None:
            for name, value in zip(("producer-epoch", "coordinator-epoch"), explicit[1:]):
                if value is None:
                    raise UsageError(f"--producer-id needs --{name}")
            producer_id, producer_epoch, coordinator_epoch = explicit
        else:
            producers = _describe_producers(client, [tp], None)[tp]
            found = [s for s in producers
                     if s["current_transaction_start_offset"] == args.start_offset]
            if not found:
                raise CommandFailed(f"no open transaction starts at offset {args.start_offset} "
                                    f"on {args.topic}-{args.partition}")
            s = found[0]
            producer_id, producer_epoch = s["producer_id"], s["producer_epoch"]
            coordinator_epoch = s["coordinator_epoch"]
        coordinator_epoch = max(coordinator_epoch, 0)
        [(leader, _)] = client.leaders([tp]).items()
        request = message(WRITE_TXN_MARKERS, markers=[message(
            WRITE_TXN_MARKERS, "request", "WritableTxnMarker", producer_id=producer_id,
            producer_epoch=producer_epoch, transaction_result=False,
            coordinator_epoch=coordinator_epoch, topics=[message(
                WRITE_TXN_MARKERS, "request", "WritableTxnMarkerTopic", name=args.topic,
                partition_indexes=[args.partition])])])

        def call():
            _, resp = client.send(client.broker(leader), WRITE_TXN_MARKERS, request)
            for marker in resp.markers:
                for t in marker.topics:
                    for p in t.partitions:
                        check(p.error_code, f"cannot abort the transaction of producer "
                                            f"{producer_id} (epoch {producer_epoch}) on "
                                            f"{t.name}-{p.partition_index}")

        client.retry(call)
    document = {"topic": args.topic, "partition": args.partition, "producer_id": producer_id,
                "producer_epoch": producer_epoch, "coordinator_epoch": coordinator_epoch}
    emit(args, {"aborted": document}, lambda: (
        f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
        f"{args.topic}-{args.partition}."))


def _none(value) -> object:
    return "None" if value is None else value


ACTIONS = {"list": _list, "describe": _describe, "describe-producers": _describe_producers_action,
           "find-hanging": _find_hanging, "abort": _abort}
