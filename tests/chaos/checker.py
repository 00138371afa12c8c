"""The checker: anomalies in a chaos run's history (history.py) and its final read.

Input: the events of one run, and a `FinalRead` taken after every fault was healed: the raw
log of every checked partition (each record with its batch's producer id and transactional
flag, control records as COMMIT/ABORT entries) and the same partitions read by a real
read_committed client. From the raw log the checker derives its own committed view (a
transactional record is visible iff the next control record of its producer in that
partition is a COMMIT) and compares the client's with it.

Anomalies (each reported with a count and examples):
  lost_write           an acknowledged write, or a write of a committed transaction, is not
                       in the final committed view; a write absent while a later write of the
                       same producer session in the same partition is present and nothing
                       failed in that session before it (a sequence gap); the client's
                       read_committed view hides a record the log committed; a power loss
                       in durable mode cut a partition below its durable high watermark
  duplicate            one value at two offsets of a topic's committed view, or one write
                       (value and transaction) twice in the raw log
  aborted_read         a read_committed read returned a record whose transaction did not
                       commit (aborted, or never committed by the end)
  undecided_read       a read_committed read returned transactional data before its commit
                       was even requested, or a raw read_committed fetch returned data at or
                       above the last stable offset it reported, or transactional data below
                       it before the producer had asked to commit or abort
  hanging_transaction  at the final read, transactional data has no deciding marker
  torn_transaction     some but not all writes of a committed transaction are visible
  inconsistent_offset  one offset of a partition observed with two different records
  non_monotonic        a producer session's records in one partition out of send order, a
                       write acknowledged before another was sent (any producer or session)
                       at a higher offset than it, a consumer going back in a partition
                       without seeking, or a final read not in strictly increasing offsets
  copier_mismatch      a copier's committed output is not exactly its input
  invented_record      a record of a compacted topic that no producer wrote (with its key,
                       tombstone or not, partition, transactional flag)
  resurrected_key      a compacted key whose latest write, a tombstone, is gone while an
                       older record of the key is left

Compacted topics (named by `topic` events): a missing record is not a lost write by itself;
what must be there is each key's latest write known committed, or a later record of the key,
or else nothing of the key at all, and only if a tombstone of it (that write, or a later one
of unknown outcome) is older than delete.retention.ms at the end of the final read (see
_check_compaction; tests/chaos/README.md).

Power loss (`power_loss` events): with log.flush.mode=fsync nothing acknowledged may go;
with log.flush.mode=none what was not yet fsynced may: per partition the window is
[log end offset after the restart, log end offset before the loss), plus every transaction
whose commit was requested since the broker process started (even if the commit was
acknowledged after the restart). Writes acknowledged inside the window may be lost
(counted as allowed losses, not anomalies), also a transaction's whose commit was asked
only after the restart (its state survived, its data did not), observations of those offsets made before the
loss (or within STALE_READ_GRACE_S after the restart: a client's prefetch) do not conflict
with what the offsets hold afterwards, a consumer may go back once per partition in that
grace (its position was past the cut log's end: reset to the earliest offset), and the
copier check is skipped. An aborted
transaction whose ABORT was lost may even come back committed (transaction version 1: the
producer's next transaction shares its producer id and epoch, the coordinator still has the
old one open, and the next COMMIT covers both); that is reported on its own line, not as an
anomaly, and reads of it after the loss are not aborted reads.
The report states each window.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.history import Event

ANOMALY_TYPES = (
    "lost_write",
    "duplicate",
    "aborted_read",
    "undecided_read",
    "hanging_transaction",
    "torn_transaction",
    "inconsistent_offset",
    "non_monotonic",
    "copier_mismatch",
    "invented_record",
    "resurrected_key",
)
# a read completing this close before its transaction's commit was invoked is not counted
# as undecided, nor an acknowledgement this close before another send as preceding it
# (Java's clock has millisecond resolution)
CLOCK_SLACK_S = 0.005
MAX_EXAMPLES = 5
# flush none: a consumer may hand out records it prefetched from the broker that lost power
# for a while after the restart, and an acknowledgement may be recorded late; observations of
# the lost window this soon after the restart count as made before the loss
STALE_READ_GRACE_S = 10.0
DEFAULT_DELETE_RETENTION_MS = 86_400_000  # Kafka's

TP = tuple[str, int]
WriteKey = tuple[str, str, str | None]  # topic, value, txn


def tp_name(tp: TP) -> str:
    return f"{tp[0]}/{tp[1]}"


def parse_tp(name: str) -> TP:
    topic, _, partition = name.rpartition("/")
    return topic, int(partition)


# ---------------------------------------------------------------------------- final read


@dataclass(frozen=True)
class LogRecord:
    """One record of the raw log: data (value, txn header, key) or a control record. A
    tombstone's value is its tombstone header (workloads/compacted.py)."""

    offset: int
    value: str | None
    txn: str | None = None
    producer_id: int = -1
    transactional: bool = False
    control: str | None = None  # "COMMIT" | "ABORT" for control records
    key: str | None = None
    tombstone: bool = False  # a null value

    def to_json(self) -> list:
        return [self.offset, self.value, self.txn, self.producer_id, self.transactional,
                self.control, self.key, self.tombstone]

    @classmethod
    def from_json(cls, row: list) -> LogRecord:
        return cls(*row)


@dataclass
class FinalRead:
    """The raw log and the read_committed client view of every checked partition."""

    log: dict[TP, list[LogRecord]] = field(default_factory=dict)
    committed: dict[TP, list[tuple[int, str, str | None]]] | None = None

    def to_json(self) -> dict:
        return {
            "log": {tp_name(tp): [r.to_json() for r in rs] for tp, rs in self.log.items()},
            "committed": None if self.committed is None else {
                tp_name(tp): [list(r) for r in rs] for tp, rs in self.committed.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> FinalRead:
        committed = data.get("committed")
        return cls(
            log={parse_tp(k): [LogRecord.from_json(r) for r in v]
                 for k, v in data["log"].items()},
            committed=None if committed is None else {
                parse_tp(k): [tuple(r) for r in v] for k, v in committed.items()},
        )


# ---------------------------------------------------------------------------- the model


@dataclass
class Write:
    p: str
    producer: str
    topic: str
    value: str
    txn: str | None
    idx: int  # invocation order within the producer session
    invoke_t: float
    partition: int | None = None  # known at invoke when the workload picks it
    record_key: str | None = None  # the record's key (compaction keeps each key's latest)
    tombstone: bool = False  # a null value (its identity, `value`, is in a header)
    status: str = "pending"  # pending | ok | fail | info
    offset: int | None = None
    complete_t: float | None = None
    error: str | None = None

    @property
    def key(self) -> WriteKey:
        return (self.topic, self.value, self.txn)

    def brief(self) -> dict:
        out = {"p": self.p, "producer": self.producer, "topic": self.topic,
               "partition": self.partition, "value": self.value, "txn": self.txn,
               "status": self.status, "offset": self.offset, "t": round(self.invoke_t, 3)}
        if self.record_key is not None:
            out["key"] = self.record_key
        if self.tombstone:
            out["tombstone"] = True
        return out


@dataclass
class Txn:
    txn: str
    producer: str
    p: str
    begin_t: float
    commit_invoke_t: float | None = None
    abort_invoke_t: float | None = None
    commit_done_t: float | None = None
    abort_done_t: float | None = None
    outcome: str = "unknown"  # committed | aborted | unknown
    declared_writes: list[tuple[str, str]] | None = None  # [(topic, value)] at commit invoke
    sends: list[Write] = field(default_factory=list)

    @property
    def end_invoke_t(self) -> float | None:
        """When the producer first asked to end the transaction (commit or abort)."""
        times = [t for t in (self.commit_invoke_t, self.abort_invoke_t) if t is not None]
        return min(times) if times else None

    @property
    def end_done_t(self) -> float | None:
        """When the producer was told the transaction ended (commit or abort)."""
        return self.commit_done_t if self.commit_done_t is not None else self.abort_done_t


@dataclass
class PowerLoss:
    t: float
    flush_mode: str
    before: dict[TP, tuple[int, int]]  # log end offset, high watermark
    after: dict[TP, int]
    broker_start_t: float  # when the broker process that lost power had started


@dataclass
class Anomaly:
    kind: str
    message: str
    example: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    anomalies: dict[str, list[Anomaly]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    operations: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    windows: list[str] = field(default_factory=list)
    allowed_losses: int = 0
    resurrected: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, kind: str, message: str, **example: Any) -> None:
        assert kind in ANOMALY_TYPES, kind
        self.counts[kind] += 1
        if len(self.anomalies[kind]) < MAX_EXAMPLES:
            self.anomalies[kind].append(Anomaly(kind, message, example))

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def kinds(self) -> set[str]:
        return {k for k, n in self.counts.items() if n}


# ---------------------------------------------------------------------------- the checker


class Checker:
    def __init__(self, events: list[Event], final: FinalRead, *,
                 copier_pairs: list[tuple[str, str]] = ()) -> None:
        self.events = events
        self.final = final
        self.copier_pairs = list(copier_pairs)
        self.report = Report()
        self.writes: dict[WriteKey, list[Write]] = defaultdict(list)
        self.sessions: dict[str, list[Write]] = defaultdict(list)
        self.txns: dict[str, Txn] = {}
        self.polls: list[Event] = []
        self.seeks: list[Event] = []
        self.lso_reads: list[Event] = []
        self.power_losses: list[PowerLoss] = []
        self.broker_starts: list[float] = []
        self.compacted: dict[str, int] = {}  # compacted topic -> its delete.retention.ms
        self.final_read_done_t: float | None = None

    # -- folding the history ---------------------------------------------------------------

    def _fold(self) -> None:
        pending: dict[tuple[str, Any], Write] = {}
        ops = self.report.operations
        for e in self.events:
            f, type_ = e["f"], e["type"]
            if f == "send":
                if type_ == "invoke":
                    session = self.sessions[e["producer"]]
                    w = Write(p=e["p"], producer=e["producer"], topic=e["topic"],
                              value=e["value"], txn=e.get("txn"), idx=len(session),
                              invoke_t=e["t"], partition=e.get("partition"),
                              record_key=e.get("key"), tombstone=bool(e.get("tombstone")))
                    session.append(w)
                    self.writes[w.key].append(w)
                    pending[(e["p"], e["id"])] = w
                    if w.txn is not None:
                        self._txn(w.txn, e).sends.append(w)
                else:
                    w = pending.pop((e["p"], e["id"]), None)
                    if w is None:
                        continue
                    w.status, w.complete_t = type_, e["t"]
                    w.error = e.get("error")
                    if type_ == "ok":
                        w.partition, w.offset = e["partition"], e["offset"]
                    ops[f"send {type_}"] += 1
            elif f == "begin":
                self._txn(e["txn"], e)
            elif f == "commit":
                txn = self._txn(e["txn"], e)
                if type_ == "invoke":
                    txn.commit_invoke_t = e["t"]
                    txn.declared_writes = [tuple(w) for w in e.get("writes", [])]
                elif type_ == "ok":
                    txn.outcome, txn.commit_done_t = "committed", e["t"]
                elif type_ == "fail" and txn.outcome == "unknown":
                    txn.outcome = "aborted"
            elif f == "abort":
                txn = self._txn(e["txn"], e)
                if type_ == "invoke" and txn.abort_invoke_t is None:
                    txn.abort_invoke_t = e["t"]
                if type_ == "ok" and txn.outcome != "committed":
                    txn.outcome, txn.abort_done_t = "aborted", e["t"]
            elif f == "poll" and type_ == "ok":
                self.polls.append(e)
                ops["poll"] += 1
                ops["records polled"] += len(e["records"])
            elif f == "seek":
                self.seeks.append(e)
            elif f == "lso" and type_ == "ok":
                self.lso_reads.append(e)
                ops["lso fetch"] += 1
            elif f == "topic":
                configs = e.get("configs", {})
                if "compact" in configs.get("cleanup.policy", ""):
                    self.compacted[e["topic"]] = int(configs.get("delete.retention.ms",
                                                                 DEFAULT_DELETE_RETENTION_MS))
            elif f == "phase" and e.get("name") == "final read done":
                self.final_read_done_t = e["t"]
            elif f == "client_hang":
                ops["client hang (librdkafka #5456), copier restarted"] += 1
            elif f == "fault":
                self.report.faults[e["fault"]] += 1
                if e["fault"] in ("start", "restart"):
                    self.broker_starts.append(e["t"])
            elif f == "power_loss":
                start = max((t for t in self.broker_starts if t < e["t"]), default=0.0)
                self.power_losses.append(PowerLoss(
                    t=e["t"], flush_mode=e["flush_mode"],
                    before={parse_tp(k): tuple(v) for k, v in e["before"].items()},
                    after={parse_tp(k): v for k, v in e["after"].items()},
                    broker_start_t=start))
                self.report.faults["power_loss"] += 1
        for txn in self.txns.values():
            ops[f"txn {txn.outcome}"] += 1

    def _txn(self, txn_id: str, e: Event) -> Txn:
        txn = self.txns.get(txn_id)
        if txn is None:
            txn = self.txns[txn_id] = Txn(txn_id, e.get("producer", e["p"]), e["p"], e["t"])
        return txn

    # -- views of the final read -------------------------------------------------------------

    def _views(self) -> None:
        """raw: write key -> [(tp, offset)] of every data record; committed: the derived
        read_committed view per partition; hanging transactional data is reported."""
        self.raw_at: dict[WriteKey, list[tuple[TP, int]]] = defaultdict(list)
        self.committed: dict[TP, list[LogRecord]] = {}
        self.decided_at: dict[tuple[TP, int], int] = {}  # (tp, data offset) -> marker offset
        for tp, records in self.final.log.items():
            visible: list[LogRecord] = []
            open_txn: dict[int, list[LogRecord]] = defaultdict(list)
            for r in records:
                if r.control is not None:
                    for d in open_txn.pop(r.producer_id, []):
                        self.decided_at[(tp, d.offset)] = r.offset
                        if r.control == "COMMIT":
                            visible.append(d)
                    continue
                self.raw_at[(tp[0], r.value, r.txn)].append((tp, r.offset))
                if r.transactional:
                    open_txn[r.producer_id].append(r)
                else:
                    visible.append(r)
            for pid, rest in open_txn.items():
                self.report.add("hanging_transaction",
                                f"{tp_name(tp)}: {len(rest)} transactional records of producer "
                                f"{pid} have no COMMIT/ABORT marker at the final read",
                                partition=tp_name(tp), producer_id=pid,
                                first_offset=rest[0].offset, txn=rest[0].txn)
            visible.sort(key=lambda r: r.offset)
            self.committed[tp] = visible
        self.visible: set[WriteKey] = {
            (tp[0], r.value, r.txn) for tp, rs in self.committed.items() for r in rs}
        self.client_visible: set[WriteKey] | None = None
        if self.final.committed is not None:
            self.client_visible = {(tp[0], v, txn) for tp, rs in self.final.committed.items()
                                   for _, v, txn in rs}
        self.checked_topics = {tp[0] for tp in self.final.log}

    def _present(self, key: WriteKey) -> bool:
        return key in self.visible

    def _finally_committed(self, txn_id: str) -> bool:
        txn = self.txns.get(txn_id)
        if txn is not None and txn.outcome == "committed":
            return True
        if txn is not None and txn.outcome == "aborted":
            return False
        # unknown: the log decides
        return any((w.topic, w.value, txn_id) in self.visible
                   for w in self._txn_writes(txn_id))

    def _txn_writes(self, txn_id: str) -> list[Write]:
        txn = self.txns.get(txn_id)
        if txn is None:
            return []
        return list(txn.sends)

    # -- power loss ----------------------------------------------------------------------------

    def _windows(self) -> None:
        for i, pl in enumerate(self.power_losses, 1):
            parts = []
            for tp in sorted(pl.before):
                leo, hw = pl.before[tp]
                after = pl.after.get(tp, 0)
                if pl.flush_mode == "fsync" and after < hw:
                    self.report.add(
                        "lost_write",
                        f"power loss #{i} (durable mode) cut {tp_name(tp)} to {after}, below "
                        f"its durable high watermark {hw}",
                        partition=tp_name(tp), high_watermark=hw, after=after, leo=leo)
                if after < leo:
                    parts.append(f"{tp_name(tp)} [{after},{leo})")
            what = ", ".join(parts[:6]) + (f" +{len(parts) - 6} more" if len(parts) > 6 else "")
            if pl.flush_mode == "none":
                self.report.windows.append(
                    f"power loss #{i} (flush none): may lose offsets {what or 'none'} and "
                    f"transactions committed through the broker that lost power (up "
                    f"{pl.t - pl.broker_start_t:.1f}s)")
            else:
                self.report.windows.append(
                    f"power loss #{i} (durable): unfsynced tails cut: {what or 'none'}; "
                    f"nothing acknowledged may be lost")

    def _none_losses(self) -> list[PowerLoss]:
        return [pl for pl in self.power_losses if pl.flush_mode == "none"]

    def _write_excused(self, w: Write) -> bool:
        """A write a flush-mode-none power loss may have taken back."""
        for pl in self._none_losses():
            if w.txn is not None and self._txn_excused(w.txn):
                return True
            if (w.status == "ok" and w.complete_t is not None and w.offset is not None
                    and w.complete_t <= pl.t + STALE_READ_GRACE_S
                    and w.offset >= pl.after.get((w.topic, w.partition), 0)):
                return True
        return False

    def _writes_excused(self, writes: list[Write], keys: list[WriteKey]) -> bool:
        """Every one of ``keys`` is a write acknowledged into a flush-none power loss's
        window: a transaction's data the broker that lost power took back, while the
        transaction's state survived and its commit, asked after the restart, went through."""
        acked = {w.key: w for w in writes if w.status == "ok"}
        return all(k in acked and self._write_excused(acked[k]) for k in keys)

    def _txn_excused(self, txn_id: str, t: float | None = None) -> bool:
        """A transaction whose outcome the broker that lost power (flush none) may have
        decided: its end (commit or abort) requested before the loss and not already
        answered before that broker started (an end answered by an earlier broker was made
        durable by the restart's recovery). Covers a retried EndTxn that the restarted
        coordinator, back at the previous transaction's CompleteCommit, answers OK. With
        `t`: an observation made before the loss (or a prefetch handed out just after)."""
        return self._decision_lost_in(txn_id, t) is not None

    def _decision_lost_in(self, txn_id: str, t: float | None = None) -> PowerLoss | None:
        txn = self.txns.get(txn_id)
        if txn is None:
            return None
        for pl in self._none_losses():
            asked, done = txn.end_invoke_t, txn.end_done_t
            if (asked is not None and asked <= pl.t
                    and (done is None or done >= pl.broker_start_t)
                    and (t is None or t <= pl.t + STALE_READ_GRACE_S)):
                return pl
        return None

    def _resurrected(self, txn_id: str) -> PowerLoss | None:
        """An aborted transaction the log holds as committed because its ABORT (marker and
        PREPARE_ABORT, never fsynced) was lost: with transaction version 1 the producer's next
        transaction has the same producer id and epoch, so the restarted coordinator, which
        still has the old one ONGOING, adds to it and its COMMIT covers the old data too."""
        txn = self.txns.get(txn_id)
        if txn is None or txn.outcome != "aborted":
            return None
        if not any((w.topic, w.value, txn_id) in self.visible for w in txn.sends):
            return None
        return self._decision_lost_in(txn_id)

    def _observation_void(self, tp: TP, offset: int, t: float) -> bool:
        """An observation of an offset a flush-none power loss cut away, made before the
        loss (or so soon after that it may be a client's prefetch from before it)."""
        for pl in self._none_losses():
            if t <= pl.t + STALE_READ_GRACE_S and offset >= pl.after.get(tp, 0):
                return True
        return False

    # -- compacted topics ----------------------------------------------------------------------

    def _retention_passed(self, topic: str, t: float) -> bool:
        """Whether the cleaner may have removed a tombstone written at ``t`` by the end of
        the final read: a cleaning after its append stamps its delete horizon (that
        cleaning's now + delete.retention.ms) and only a cleaning past the horizon removes
        it, so not before t + delete.retention.ms. Unknown end of the final read: it may."""
        end = self.final_read_done_t
        return end is None or t + self.compacted[topic] / 1000 <= end + CLOCK_SLACK_S

    def _committed_at_offset(self, w: Write) -> bool:
        """Known to be in the committed log at its acknowledged offset."""
        if w.status != "ok" or w.offset is None or w.offset < 0:
            return False
        return w.txn is None or self._finally_committed(w.txn)

    def _maybe_committed(self, w: Write) -> bool:
        """Not known to be absent: not failed, and not of an aborted transaction."""
        if w.status == "fail":
            return False
        txn = None if w.txn is None else self.txns.get(w.txn)
        return txn is None or txn.outcome != "aborted"

    def _outcome_compacted_away(self, txn_id: str) -> bool:
        """A transaction neither the history nor the final log decides: its end is unknown
        and the cleaner removed every record of it from a compacted topic (and then its
        markers), so a read of it cannot be judged."""
        txn = self.txns.get(txn_id)
        if txn is None or txn.outcome != "unknown":
            return False
        return (any(w.topic in self.compacted for w in txn.sends)
                and not any(w.key in self.raw_at for w in txn.sends))

    def _cleaned_since(self, tp: TP, r: LogRecord) -> bool:
        """A record of the final raw read the cleaner may have removed before the
        read_committed client came by: a later record of its key is committed, or it is a
        tombstone past delete.retention.ms."""
        if tp[0] not in self.compacted:
            return False
        if any(x.key == r.key and x.offset > r.offset for x in self.committed.get(tp, ())):
            return True
        writes = self.writes.get((tp[0], r.value, r.txn), [])
        return r.tombstone and all(self._retention_passed(tp[0], w.invoke_t) for w in writes)

    # -- the checks ----------------------------------------------------------------------------

    def run(self) -> Report:
        self._fold()
        self._views()
        self._windows()
        self._check_lost()
        self._check_duplicates()
        self._check_transactions()
        self._check_reads()
        self._check_lso()
        self._check_offsets()
        self._check_order()
        self._check_copiers()
        self._check_final_offsets()
        self._check_compaction()
        self.report.operations["final records"] = sum(
            1 for rs in self.final.log.values() for r in rs if r.control is None)
        return self.report

    def _check_lost(self) -> None:
        for writes in self.writes.values():
            for w in writes:
                if (w.topic not in self.checked_topics or w.txn is not None
                        or w.topic in self.compacted):  # compacted: _check_compaction
                    continue
                if w.status == "ok" and not self._present(w.key):
                    if self._write_excused(w):
                        self.report.allowed_losses += 1
                        continue
                    self.report.add("lost_write",
                                    "acknowledged write missing from the final committed view",
                                    **w.brief())
        # sequence gaps: absent, no completion, a later write of the session present, and no
        # send of the session failed before that later write was sent
        for session in self.sessions.values():
            by_partition: dict[int, list[Write]] = defaultdict(list)
            for w in session:
                if (w.txn is None and w.partition is not None and w.topic in self.checked_topics
                        and w.topic not in self.compacted):
                    by_partition[w.partition].append(w)
            for ws in by_partition.values():
                later_present = None
                for w in reversed(ws):
                    if self._present(w.key):
                        later_present = w
                        continue
                    if later_present is None or w.status != "pending":
                        continue
                    failed_before = any(
                        x.status in ("fail", "info") and x.complete_t is not None
                        and x.complete_t <= later_present.invoke_t for x in session)
                    if not failed_before and not self._write_excused(w):
                        self.report.add(
                            "lost_write",
                            "write missing while a later write of the same producer session "
                            "in the same partition is present (sequence gap)",
                            missing=w.brief(), later=later_present.brief())
        if self.client_visible is not None:
            for tp, rs in self.committed.items():
                for r in rs:
                    key = (tp[0], r.value, r.txn)
                    if key not in self.client_visible and not self._cleaned_since(tp, r):
                        self.report.add("lost_write",
                                        "the read_committed client did not return a record "
                                        "the log committed",
                                        partition=tp_name(tp), offset=r.offset, value=r.value,
                                        txn=r.txn)

    def _check_duplicates(self) -> None:
        for key, places in self.raw_at.items():
            if len(places) > 1:
                self.report.add("duplicate", "one write stored twice in the raw log",
                                topic=key[0], value=key[1], txn=key[2],
                                at=[f"{tp_name(tp)}@{o}" for tp, o in places[:4]])
        views = [("derived", {tp: [(r.offset, r.value) for r in rs]
                              for tp, rs in self.committed.items()})]
        if self.final.committed is not None:
            views.append(("client", {tp: [(o, v) for o, v, _ in rs]
                                     for tp, rs in self.final.committed.items()}))
        for name, view in views:
            seen: dict[tuple[str, str], list[str]] = defaultdict(list)
            for tp, rs in view.items():
                for offset, value in rs:
                    seen[(tp[0], value)].append(f"{tp_name(tp)}@{offset}")
            for (topic, value), at in seen.items():
                if len(at) > 1:
                    self.report.add("duplicate",
                                    f"value at two offsets of the {name} committed view",
                                    topic=topic, value=value, at=at[:4])

    def _check_transactions(self) -> None:
        for txn_id, txn in self.txns.items():
            writes = [w for w in self._txn_writes(txn_id) if w.topic in self.checked_topics]
            if not writes:
                continue
            keys = {w.key: None for w in writes if w.status != "fail"}
            for topic, value in txn.declared_writes or ():
                if topic in self.checked_topics:
                    keys[(topic, value, txn_id)] = None
            writes_keys = list(keys)
            visible = [k for k in writes_keys if k in self.visible]
            committed = self._finally_committed(txn_id)
            # in a compacted topic a later record of the key may have replaced a write
            missing = [k for k in writes_keys
                       if k not in self.visible and k[0] not in self.compacted]
            if committed and missing:
                if self._txn_excused(txn_id) or self._writes_excused(writes, missing):
                    self.report.allowed_losses += len(missing)
                    continue
                if visible:
                    self.report.add(
                        "torn_transaction",
                        f"committed transaction partly visible: {len(visible)} of "
                        f"{len(writes_keys)} writes",
                        txn=txn_id, outcome=txn.outcome, missing=[list(k[:2]) for k in missing[:3]],
                        visible=[list(k[:2]) for k in visible[:3]])
                else:
                    self.report.add("lost_write",
                                    "every write of a committed transaction is missing",
                                    txn=txn_id, writes=len(writes_keys),
                                    example=list(writes_keys[0][:2]))
            elif not committed and visible:
                if self._resurrected(txn_id) is not None:
                    self.report.allowed_losses += len(visible)
                    self.report.resurrected.append(txn_id)
                    continue
                self.report.add("aborted_read",
                                "the final committed view holds writes of a transaction that "
                                f"did not commit ({txn.outcome})",
                                txn=txn_id, visible=[list(k[:2]) for k in visible[:3]])

    def _check_reads(self) -> None:
        # the client's read_committed view against the log's
        if self.final.committed is not None:
            for tp, rs in self.final.committed.items():
                for offset, value, txn_id in rs:
                    if (tp[0], value, txn_id) not in self.visible:
                        self.report.add("aborted_read",
                                        "the read_committed client returned a record the log "
                                        "did not commit", partition=tp_name(tp), offset=offset,
                                        value=value, txn=txn_id)
        for e in self.polls:
            if e.get("iso") != "read_committed":
                continue
            for topic, partition, offset, value, txn_id in e["records"]:
                if txn_id is None:
                    continue
                txn = self.txns.get(txn_id)
                example = {"p": e["p"], "c": e.get("c"), "t": round(e["t"], 3),
                           "partition": f"{topic}/{partition}", "offset": offset,
                           "value": value, "txn": txn_id}
                if not self._finally_committed(txn_id):
                    if self._outcome_compacted_away(txn_id):
                        continue
                    # a commit the lost broker made (and a reader saw) may be gone now
                    aborted = txn is not None and txn.outcome == "aborted"
                    if not aborted and self._txn_excused(txn_id, e["t"]):
                        continue
                    pl = self._resurrected(txn_id)
                    if pl is not None and e["t"] >= pl.t:
                        continue
                    self.report.add("aborted_read",
                                    "read_committed poll returned a record of a transaction "
                                    f"that did not commit ({txn.outcome if txn else 'unknown'})",
                                    **example)
                elif txn is not None and (txn.commit_invoke_t is None
                                          or e["t"] + CLOCK_SLACK_S < txn.commit_invoke_t):
                    self.report.add("undecided_read",
                                    "read_committed poll returned a record before its "
                                    "transaction's commit was requested",
                                    commit_invoked_t=txn.commit_invoke_t and
                                    round(txn.commit_invoke_t, 3), **example)

    def _check_lso(self) -> None:
        at: dict[tuple[TP, int], LogRecord] = {
            (tp, r.offset): r for tp, rs in self.final.log.items() for r in rs}
        for e in self.lso_reads:
            tp = (e["topic"], e["partition"])
            lso = e["lso"]
            for base, last, pid, transactional, control in e["batches"]:
                if self._observation_void(tp, base, e["t"]):
                    continue
                example = {"partition": tp_name(tp), "t": round(e["t"], 3), "lso": lso,
                           "hw": e["hw"], "batch": [base, last], "producer_id": pid}
                if last >= lso:
                    self.report.add("undecided_read",
                                    "read_committed fetch returned a batch at or above the "
                                    "last stable offset it reported", **example)
                    continue
                if not transactional or control:
                    continue
                # the transaction this batch belongs to (the final log's record there, if it
                # is still the same producer's) must have been ended by its producer already
                r = at.get((tp, base))
                if r is None or r.producer_id != pid or r.txn is None:
                    continue
                txn = self.txns.get(r.txn)
                ended = None if txn is None else txn.end_invoke_t
                if ended is not None and e["t"] + CLOCK_SLACK_S < ended:
                    # the broker ended it first: its ABORT was in the log at the read (below
                    # the high watermark; the coordinator's abort of a transaction past
                    # transaction.timeout.ms, or of a fenced producer's); read_committed
                    # readers drop its data by the aborted list
                    marker = at.get((tp, self.decided_at.get((tp, base), -1)))
                    if (marker is not None and marker.control == "ABORT"
                            and marker.offset < e["hw"]):
                        continue
                    self.report.add("undecided_read",
                                    "read_committed fetch returned transactional data below "
                                    "its last stable offset before the producer ended the "
                                    "transaction", txn=r.txn, ended_t=round(ended, 3),
                                    **example)

    def _check_offsets(self) -> None:
        seen: dict[tuple[TP, int], dict[tuple[str, str | None], str]] = defaultdict(dict)

        def observe(tp: TP, offset: int, value: str, txn_id: str | None, source: str,
                    t: float | None) -> None:
            if t is not None and self._observation_void(tp, offset, t):
                return
            seen[(tp, offset)].setdefault((value, txn_id), source)

        for tp, rs in self.final.log.items():
            for r in rs:
                if r.control is None:
                    observe(tp, r.offset, r.value, r.txn, "final raw read", None)
        if self.final.committed is not None:
            for tp, rs in self.final.committed.items():
                for offset, value, txn_id in rs:
                    observe(tp, offset, value, txn_id, "final read_committed read", None)
        for writes in self.writes.values():
            for w in writes:
                if w.status == "ok" and w.offset is not None and w.offset >= 0:
                    observe((w.topic, w.partition), w.offset, w.value, w.txn,
                            f"ack to {w.p}", w.complete_t)
        for e in self.polls:
            for topic, partition, offset, value, txn_id in e["records"]:
                observe((topic, partition), offset, value, txn_id, f"poll by {e['p']}", e["t"])
        for (tp, offset), values in seen.items():
            if tp[0] in self.checked_topics and len(values) > 1:
                self.report.add("inconsistent_offset",
                                f"{tp_name(tp)}@{offset} observed with {len(values)} records",
                                partition=tp_name(tp), offset=offset,
                                records={f"{v} (txn {t})": s for (v, t), s in values.items()})

    def _check_order(self) -> None:
        # producer sessions: present records of a session in one partition in send order
        first_at: dict[WriteKey, tuple[TP, int]] = {k: min(v, key=lambda x: x[1])
                                                    for k, v in self.raw_at.items()}
        for producer, session in self.sessions.items():
            last: dict[TP, tuple[int, Write]] = {}
            for w in session:
                place = first_at.get(w.key)
                if place is None:
                    continue
                tp, offset = place
                prev = last.get(tp)
                if prev is not None and offset <= prev[0]:
                    self.report.add("non_monotonic",
                                    "a producer session's records are out of send order in a "
                                    "partition", producer=producer, partition=tp_name(tp),
                                    earlier=prev[1].value, earlier_offset=prev[0],
                                    later=w.value, later_offset=offset)
                last[tp] = (offset, w)
        # real time, across sessions and producers: a write acknowledged before another
        # was even sent sits at a lower offset of their partition (appended before it)
        placed: dict[TP, list[tuple[int, Write]]] = defaultdict(list)
        for writes in self.writes.values():
            for w in writes:
                place = first_at.get(w.key)
                if place is not None and w.status == "ok" and w.complete_t is not None:
                    placed[place[0]].append((place[1], w))
        for tp, ordered in placed.items():
            ordered.sort(key=lambda x: x[0])
            sent_last: tuple[int, Write] | None = None  # at a lower offset, sent the latest
            for offset, w in ordered:
                if (sent_last is not None
                        and w.complete_t + CLOCK_SLACK_S < sent_last[1].invoke_t):
                    self.report.add(
                        "non_monotonic", "a write acknowledged before another was sent is at "
                        "a higher offset than it", partition=tp_name(tp),
                        acknowledged=w.value, acknowledged_by=w.producer, offset=offset,
                        ack_t=round(w.complete_t, 3), sent_later=sent_last[1].value,
                        sent_later_by=sent_last[1].producer, its_offset=sent_last[0],
                        sent_t=round(sent_last[1].invoke_t, 3))
                if sent_last is None or w.invoke_t > sent_last[1].invoke_t:
                    sent_last = (offset, w)
        # consumers: strictly increasing offsets per partition between seeks
        resets: dict[str, list[tuple[float, set[TP] | None]]] = defaultdict(list)
        for e in self.seeks:
            parts = e.get("partitions")
            resets[e["c"]].append(
                (e["t"], None if parts is None else {(t, p) for t, p, *_ in parts}))
        for pl in self._none_losses():
            for c in {e.get("c") for e in self.polls}:
                resets[c].append((pl.t, None))
        # after a flush-none loss a consumer's position may lie past the cut log's end: its
        # first fetch from the restarted broker is out of range and it resets to the earliest
        # offset (auto.offset.reset), after handing out what it had prefetched; so within the
        # grace window its first step back in each partition is that reset
        reset_windows = [(pl.t, pl.t + STALE_READ_GRACE_S) for pl in self._none_losses()]
        out_of_range_reset: set[tuple[str, TP, float]] = set()
        position: dict[tuple[str, TP], tuple[int, float]] = {}
        by_consumer: dict[str, list[Event]] = defaultdict(list)
        for e in self.polls:
            by_consumer[e.get("c")].append(e)
        for c, polls in by_consumer.items():
            marks = sorted(resets.get(c, []), key=lambda x: x[0])
            mi = 0
            for e in polls:
                while mi < len(marks) and marks[mi][0] <= e["t"]:
                    parts = marks[mi][1]
                    for key in [k for k in position if k[0] == c
                                and (parts is None or k[1] in parts)]:
                        del position[key]
                    mi += 1
                for topic, partition, offset, value, _txn in e["records"]:
                    if self._observation_void((topic, partition), offset, e["t"]):
                        continue
                    key = (c, (topic, partition))
                    prev = position.get(key)
                    window = next((w for w in reset_windows if w[0] < e["t"] <= w[1]), None)
                    if (prev is not None and offset <= prev[0] and window is not None
                            and (c, (topic, partition), window[0]) not in out_of_range_reset):
                        out_of_range_reset.add((c, (topic, partition), window[0]))
                    elif prev is not None and offset <= prev[0]:
                        self.report.add("non_monotonic",
                                        "a consumer went back in a partition without seeking",
                                        p=e["p"], c=c, partition=f"{topic}/{partition}",
                                        previous_offset=prev[0], offset=offset, value=value,
                                        t=round(e["t"], 3))
                    position[key] = (offset, e["t"])

    def _check_copiers(self) -> None:
        for input_topic, output_topic in self.copier_pairs:
            if self._none_losses():
                self.report.notes.append(
                    f"copier check {input_topic}->{output_topic} skipped: power loss with "
                    "log.flush.mode=none")
                continue
            inputs = Counter(r.value for tp, rs in self.final.log.items()
                             if tp[0] == input_topic for r in rs if r.control is None)
            outputs = Counter(r.value for tp, rs in self.committed.items()
                              if tp[0] == output_topic for r in rs)
            missing = inputs - outputs
            extra = outputs - inputs
            self.report.operations[f"copier input {input_topic}"] = sum(inputs.values())
            self.report.operations[f"copier output {output_topic}"] = sum(outputs.values())
            if missing or extra:
                self.report.add("copier_mismatch",
                                f"{output_topic} is not exactly {input_topic}: "
                                f"{sum(missing.values())} missing, {sum(extra.values())} extra",
                                missing=sorted(missing)[:5], extra=sorted(extra)[:5])

    def _check_final_offsets(self) -> None:
        """Both final reads of every partition in strictly increasing offset order."""
        views = [("raw", {tp: [r.offset for r in rs] for tp, rs in self.final.log.items()})]
        if self.final.committed is not None:
            views.append(("read_committed client", {tp: [o for o, *_ in rs]
                                                    for tp, rs in self.final.committed.items()}))
        for name, view in views:
            for tp, offsets in view.items():
                i = next((i for i in range(1, len(offsets)) if offsets[i] <= offsets[i - 1]),
                         None)
                if i is not None:
                    self.report.add("non_monotonic",
                                    f"the final {name} read of a partition is not in strictly "
                                    "increasing offset order", partition=tp_name(tp),
                                    previous_offset=offsets[i - 1], offset=offsets[i])

    def _check_compaction(self) -> None:
        """Compacted topics: what the cleaner may remove (a record with a later committed
        record of its key; a tombstone past delete.retention.ms; aborted data; markers) and
        what it must keep: each key's latest committed record, or, if that was a tombstone
        the cleaner removed, nothing of the key at all."""
        if not self.compacted:
            return
        self._check_invented()
        self._compaction_stats()
        if self._none_losses():
            self.report.notes.append(
                "compaction check of each key's latest record skipped: power loss with "
                "log.flush.mode=none")
            return
        at = {(tp, r.offset): r for tp, rs in self.final.log.items() for r in rs
              if tp[0] in self.compacted and r.control is None}
        views = {"final committed view": {tp: [(r.offset, r.key) for r in rs]
                                          for tp, rs in self.committed.items()
                                          if tp[0] in self.compacted}}
        if self.final.committed is not None:
            # the client's records by their keys in the raw read (_check_offsets: the same)
            views["read_committed client"] = {
                tp: [(o, at[(tp, o)].key) for o, *_ in rs if (tp, o) in at]
                for tp, rs in self.final.committed.items() if tp[0] in self.compacted}
        partitions: dict[str, list[int]] = defaultdict(list)
        for tp in self.final.log:
            partitions[tp[0]].append(tp[1])
        by_key: dict[tuple[TP, str], list[Write]] = defaultdict(list)
        for (topic, _, _), writes in self.writes.items():
            if topic not in self.compacted:
                continue
            for w in writes:
                if w.record_key is not None:
                    for p in partitions[topic] if w.partition is None else [w.partition]:
                        by_key[((topic, p), w.record_key)].append(w)
        for name, view in views.items():
            present: dict[tuple[TP, str], list[int]] = defaultdict(list)
            for tp, rs in view.items():
                for offset, key in rs:
                    present[(tp, key)].append(offset)
            for (tp, key), writes in by_key.items():
                if tp in view:
                    self._check_latest(name, tp, key, writes, present.get((tp, key), []))

    def _check_latest(self, view: str, tp: TP, key: str, writes: list[Write],
                      present: list[int]) -> None:
        """The key's latest write known committed (acknowledged, its transaction committed)
        or a record after it is in ``view``; if neither is, a tombstone (that one, or a later
        write of unknown outcome) past delete.retention.ms was removed, and then no older
        record of the key may be left (a reader from the start would take it for the key's
        final value)."""
        known = [w for w in writes if self._committed_at_offset(w)]
        if not known:
            return
        latest = max(known, key=lambda w: w.offset)
        if any(o >= latest.offset for o in present):
            return
        later = [w for w in writes if w is not latest and self._maybe_committed(w)
                 and not self._committed_at_offset(w)
                 and (w.status != "ok" or w.offset is None or w.offset > latest.offset)]
        deleted = any(w.tombstone and self._retention_passed(tp[0], w.invoke_t)
                      for w in [latest, *later])
        example = {"view": view, "partition": tp_name(tp), "key": key,
                   "latest": latest.brief(), "later_unknown_writes": len(later)}
        if present and deleted:
            self.report.add("resurrected_key",
                            "a compacted key's latest write is gone (a tombstone past "
                            "delete.retention.ms) but an older record of the key is left",
                            older_offsets=present[-3:], **example)
        elif present:
            self.report.add("lost_write",
                            "a compacted key's latest committed write is gone while older "
                            "records of the key are left", older_offsets=present[-3:],
                            **example)
        elif not deleted:
            self.report.add("lost_write",
                            "a compacted key's latest write, a tombstone, was removed before "
                            "delete.retention.ms had passed" if latest.tombstone else
                            "a compacted key's latest committed write is gone, with nothing "
                            "of the key after it", **example)

    def _check_invented(self) -> None:
        """Every record of a compacted topic read at the end or by a poll was written, and
        as it was written: its key, tombstone or not, partition, transactional or not."""
        for tp, rs in self.final.log.items():
            if tp[0] not in self.compacted:
                continue
            for r in rs:
                if r.control is not None:
                    continue
                writes = self.writes.get((tp[0], r.value, r.txn), [])
                if not any(w.record_key == r.key and w.tombstone == r.tombstone
                           and w.partition in (None, tp[1])
                           and (w.txn is not None) == r.transactional for w in writes):
                    self.report.add("invented_record",
                                    "a record of a compacted topic that no producer wrote (with "
                                    "this key, value, partition and transactional flag)",
                                    partition=tp_name(tp), offset=r.offset, key=r.key,
                                    value=r.value, txn=r.txn, tombstone=r.tombstone,
                                    written=[w.brief() for w in writes[:2]])
        for e in self.polls:
            for topic, partition, offset, value, txn_id in e["records"]:
                if topic in self.compacted and (topic, value, txn_id) not in self.writes:
                    self.report.add("invented_record",
                                    "a poll returned a record of a compacted topic that no "
                                    "producer wrote", p=e["p"], c=e.get("c"),
                                    partition=f"{topic}/{partition}", offset=offset,
                                    value=value, txn=txn_id, t=round(e["t"], 3))

    def _compaction_stats(self) -> None:
        ops = self.report.operations
        for writes in self.writes.values():
            for w in writes:
                if w.topic not in self.compacted or w.key in self.raw_at:
                    continue
                if self._committed_at_offset(w):
                    ops["compaction: committed records removed"] += 1
                    if w.tombstone:
                        ops["compaction: tombstones removed"] += 1
                elif w.status == "ok" and w.txn is not None and not self._maybe_committed(w):
                    ops["compaction: aborted records removed"] += 1


def check(events: list[Event], final: FinalRead, *,
          copier_pairs: list[tuple[str, str]] = ()) -> Report:
    return Checker(events, final, copier_pairs=copier_pairs).run()


# ---------------------------------------------------------------------------- summary


def summarize(report: Report, *, title: str, history_path: str | None = None,
              duration_s: float | None = None) -> str:
    """The one-screen summary of a run."""
    lines = [f"== {title}" + (f"  ({duration_s:.1f}s)" if duration_s is not None else "")]
    if history_path:
        lines.append(f"history: {history_path}")
    ops = ", ".join(f"{k} {v}" for k, v in sorted(report.operations.items()) if v)
    lines.append(f"operations: {ops or 'none'}")
    faults = ", ".join(f"{k} {v}" for k, v in sorted(report.faults.items()) if v)
    lines.append(f"faults: {faults or 'none'}")
    for w in report.windows:
        lines.append(f"window: {w}")
    if report.allowed_losses:
        lines.append(f"allowed losses (flush none, inside a power-loss window): "
                     f"{report.allowed_losses}")
    if report.resurrected:
        lines.append(f"flush none: {len(report.resurrected)} aborted transaction(s) committed "
                     f"after their unfsynced ABORT was lost, e.g. {report.resurrected[0]}")
    for note in report.notes:
        lines.append(f"note: {note}")
    if report.ok:
        lines.append("anomalies: none")
    else:
        lines.append("anomalies:")
        for kind in ANOMALY_TYPES:
            n = report.counts.get(kind, 0)
            if not n:
                continue
            a = report.anomalies[kind][0]
            example = ", ".join(f"{k}={v}" for k, v in a.example.items())
            if len(example) > 300:
                example = example[:300] + "..."
            lines.append(f"  {kind}: {n}  e.g. {a.message}")
            lines.append(f"      {example}")
    return "\n".join(lines)
