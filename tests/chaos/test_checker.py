"""The checker against synthetic histories: a clean history passes, and each anomaly type,
injected on its own, is reported (with nothing else reported beside it)."""

from __future__ import annotations

import itertools

import pytest

from tests.chaos.checker import (
    ANOMALY_TYPES,
    STALE_READ_GRACE_S,
    FinalRead,
    LogRecord,
    check,
    summarize,
)


class H:
    """A synthetic history: events at increasing times, and the final read."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.t = 1000.0
        self.ids = itertools.count(1)
        self.log: dict[tuple[str, int], list[LogRecord]] = {}
        self.client: dict[tuple[str, int], list[tuple]] | None = None

    def ev(self, p: str, type_: str, f: str, **kw) -> dict:
        self.t += 0.1
        e = {"t": self.t, "p": p, "type": type_, "f": f, **kw}
        self.events.append(e)
        return e

    def send(self, value: str, *, topic: str = "t", partition: int = 0, offset: int | None = None,
             status: str = "ok", producer: str = "s1", p: str = "w1", txn: str | None = None,
             key: str | None = None, tombstone: bool = False):
        i = next(self.ids)
        self.ev(p, "invoke", "send", id=i, topic=topic, value=value, key=key, producer=producer,
                txn=txn, partition=partition, **({"tombstone": True} if tombstone else {}))
        if status == "ok":
            self.ev(p, "ok", "send", id=i, partition=partition, offset=offset)
        elif status in ("fail", "info"):
            self.ev(p, status, "send", id=i, error="boom")

    def txn(self, txn: str, writes: list[tuple[str, int, int]], *, outcome: str = "commit",
            producer: str = "tx1", p: str = "w2", topic: str = "t") -> None:
        """writes: (value, partition, offset[, key]); outcome commit | abort | commit-unknown |
        open."""
        self.ev(p, "info", "begin", txn=txn, producer=producer)
        for value, partition, offset, *key in writes:
            self.send(value, topic=topic, partition=partition, offset=offset, producer=producer,
                      p=p, txn=txn, key=key[0] if key else None)
        if outcome != "open":
            self.end(txn, writes, outcome=outcome, producer=producer, p=p, topic=topic)

    def end(self, txn: str, writes: list[tuple], *, outcome: str = "commit",
            producer: str = "tx1", p: str = "w2", topic: str = "t") -> None:
        """The producer's end of ``txn`` (begun by ``txn(..., outcome="open")``): outcome
        commit | abort | commit-unknown."""
        if outcome == "abort":
            self.ev(p, "invoke", "abort", txn=txn, producer=producer)
            self.ev(p, "ok", "abort", txn=txn, producer=producer)
            return
        self.ev(p, "invoke", "commit", txn=txn, producer=producer,
                writes=[[topic, v] for v, *_ in writes])
        if outcome == "commit":
            self.ev(p, "ok", "commit", txn=txn, producer=producer)
        else:
            self.ev(p, "info", "commit", txn=txn, producer=producer, error="timed out")

    def poll(self, records: list[tuple], *, c: str = "c1", p: str = "r1",
             iso: str = "read_committed") -> None:
        self.ev(p, "ok", "poll", c=c, iso=iso, records=[list(r) for r in records])

    def put(self, tp: tuple[str, int], *records: LogRecord) -> None:
        self.log.setdefault(tp, []).extend(records)

    def data(self, tp, offset, value, txn=None, pid=1, *, key=None, tombstone=False):
        self.put(tp, LogRecord(offset, value, txn, pid, txn is not None, None, key, tombstone))

    def marker(self, tp, offset, pid, control="COMMIT"):
        self.put(tp, LogRecord(offset, None, None, pid, True, control))

    def committed_from_log(self) -> None:
        """The client view the log implies (what a correct read_committed client returns)."""
        from tests.chaos.checker import Checker

        c = Checker([], FinalRead(log=self.log))
        c._views()
        self.client = {tp: [(r.offset, r.value, r.txn) for r in rs]
                       for tp, rs in c.committed.items()}

    def check(self, **kw):
        return check(self.events, FinalRead(log=self.log, committed=self.client), **kw)


T0 = ("t", 0)
T1 = ("t", 1)


def clean() -> H:
    """Sends, one committed and one aborted transaction across two partitions, a consumer."""
    h = H()
    h.send("a", offset=0)
    h.send("b", offset=1)
    h.send("c", partition=1, offset=0)
    h.txn("x1", [("d", 0, 2), ("e", 1, 1)])
    h.txn("x2", [("f", 0, 4), ("g", 1, 3)], outcome="abort")
    h.send("h", offset=6)
    for o, v in ((0, "a"), (1, "b")):
        h.data(T0, o, v)
    h.data(T0, 2, "d", "x1", pid=7)
    h.marker(T0, 3, 7)
    h.data(T0, 4, "f", "x2", pid=7)
    h.marker(T0, 5, 7, "ABORT")
    h.data(T0, 6, "h")
    h.data(T1, 0, "c")
    h.data(T1, 1, "e", "x1", pid=7)
    h.marker(T1, 2, 7)
    h.data(T1, 3, "g", "x2", pid=7)
    h.marker(T1, 4, 7, "ABORT")
    h.poll([("t", 0, 0, "a", None), ("t", 0, 1, "b", None), ("t", 0, 2, "d", "x1")])
    h.poll([("t", 0, 6, "h", None)])
    h.committed_from_log()
    return h


def x9_begun(h: H) -> None:
    """Transaction x9 of producer tx1 begun, "u" written to t-0 at offset 7."""
    h.txn("x9", [("u", 0, 7)], outcome="open")


def x9_ended(h: H, outcome: str = "commit") -> None:
    """x9's producer ends it (commit or abort); its data and marker (pid 9) are in the log and
    the client's final read is what the log implies."""
    h.end("x9", [("u", 0, 7)], outcome=outcome)
    h.data(T0, 7, "u", "x9", pid=9)
    h.marker(T0, 8, 9, control="ABORT" if outcome == "abort" else "COMMIT")
    h.committed_from_log()


def only(report, kind: str) -> None:
    assert report.kinds() == {kind}, summarize(report, title="unexpected")
    assert report.anomalies[kind][0].example


def test_clean_history_has_no_anomaly():
    report = clean().check()
    assert report.ok, summarize(report, title="clean")
    assert report.operations["send ok"] == 8
    assert report.operations["txn committed"] == 1
    assert report.operations["txn aborted"] == 1
    assert "anomalies: none" in summarize(report, title="clean")


def test_lost_acknowledged_write():
    h = clean()
    h.send("z", offset=7)  # acknowledged, never stored
    only(h.check(), "lost_write")


def test_failed_or_unknown_writes_may_be_missing():
    h = clean()
    h.send("y", status="fail")
    h.send("z", status="info")
    assert h.check().ok


def test_sequence_gap_is_a_lost_write():
    h = clean()
    h.send("gap", status="pending")  # no completion (the producer process died)
    h.send("later", status="pending")
    h.data(T0, 7, "later")
    h.committed_from_log()
    report = h.check()
    only(report, "lost_write")
    assert "sequence gap" in report.anomalies["lost_write"][0].message


def test_gap_after_a_failed_send_is_allowed():
    h = clean()
    h.send("failed", status="info")  # librdkafka may bump the epoch after this
    h.send("gap", status="pending")
    h.send("later", status="pending")
    h.data(T0, 7, "later")
    h.committed_from_log()
    assert h.check().ok


def test_client_hiding_a_committed_record_is_a_lost_write():
    h = clean()
    h.client[T0] = [r for r in h.client[T0] if r[1] != "b"]
    only(h.check(), "lost_write")


def test_duplicate_in_the_log():
    h = clean()
    h.data(T0, 7, "b")  # an idempotent retry stored again
    h.committed_from_log()
    report = h.check()
    only(report, "duplicate")
    assert report.counts["duplicate"] >= 1


def test_duplicate_value_across_partitions_of_the_committed_view():
    h = clean()
    h.txn("x3", [("a", 1, 5)])  # the copier's kind of value reuse, but committed twice
    h.data(T1, 5, "a", "x3", pid=8)
    h.marker(T1, 6, 8)
    h.committed_from_log()
    only(h.check(), "duplicate")


def test_aborted_read_by_a_poll():
    h = clean()
    h.poll([("t", 0, 4, "f", "x2")], c="c2")
    only(h.check(), "aborted_read")


def test_aborted_read_by_the_final_client_read():
    h = clean()
    h.client[T1].append((3, "g", "x2"))
    only(h.check(), "aborted_read")


def test_aborted_transaction_committed_in_the_log():
    h = clean()
    h.log[T1][-1] = LogRecord(4, None, None, 7, True, "COMMIT")  # marker says COMMIT
    h.committed_from_log()
    only(h.check(), "aborted_read")


def test_undecided_read_before_commit_was_requested():
    h = clean()
    x9_begun(h)
    h.poll([("t", 0, 7, "u", "x9")], c="c3")  # before the commit invoke
    x9_ended(h)
    only(h.check(), "undecided_read")


def test_undecided_read_from_an_lso_fetch():
    h = clean()
    # batch [2,2] of the committed transaction returned while the LSO was 2
    h.ev("lso", "ok", "lso", topic="t", partition=0, lso=2, hw=3,
         batches=[[0, 1, -1, False, False], [2, 2, 7, True, False]])
    only(h.check(), "undecided_read")


def test_undecided_read_below_lso_before_the_transaction_ended():
    h = clean()
    x9_begun(h)
    # the LSO passed the open transaction's data
    h.ev("lso", "ok", "lso", topic="t", partition=0, lso=8, hw=8,
         batches=[[6, 6, -1, False, False], [7, 7, 9, True, False]])
    x9_ended(h)
    only(h.check(), "undecided_read")


def test_data_the_broker_aborted_below_lso_before_the_producer_ended_it_is_fine():
    """The coordinator aborted the transaction (past transaction.timeout.ms, say: a client
    hung across a restart) before the producer's own abort: the LSO passed its ABORT marker,
    the read is right (long-mixed seed 81178, session 13)."""
    h = clean()
    x9_begun(h)
    h.ev("lso", "ok", "lso", topic="t", partition=0, lso=9, hw=9,
         batches=[[7, 7, 9, True, False], [8, 8, 9, True, True]])
    x9_ended(h, "abort")
    assert h.check().ok


def test_data_the_broker_committed_below_lso_before_the_producer_ended_it():
    """The same read with a COMMIT marker: committed before the producer asked."""
    h = clean()
    x9_begun(h)
    h.ev("lso", "ok", "lso", topic="t", partition=0, lso=9, hw=9,
         batches=[[7, 7, 9, True, False], [8, 8, 9, True, True]])
    x9_ended(h)
    only(h.check(), "undecided_read")


def test_decided_data_below_lso_with_its_marker_above_is_fine():
    """Another transaction still open keeps the LSO below a decided one's marker."""
    h = clean()
    h.txn("x9", [("u", 0, 7)], producer="tx9")
    h.data(T0, 7, "u", "x9", pid=9)
    h.marker(T0, 8, 9)
    h.ev("lso", "ok", "lso", topic="t", partition=0, lso=8, hw=9,
         batches=[[7, 7, 9, True, False]])
    h.committed_from_log()
    assert h.check().ok


def test_lso_fetch_below_markers_is_fine():
    h = clean()
    h.ev("lso", "ok", "lso", topic="t", partition=0, lso=7, hw=7,
         batches=[[0, 1, -1, False, False], [2, 2, 7, True, False], [3, 3, 7, True, True]])
    assert h.check().ok


def test_hanging_transaction():
    h = clean()
    h.txn("x4", [("k", 1, 5)], outcome="open")
    h.data(T1, 5, "k", "x4", pid=11)
    h.committed_from_log()
    only(h.check(), "hanging_transaction")


def test_torn_transaction():
    h = clean()
    h.txn("x5", [("m", 0, 7), ("n", 1, 5)])
    h.data(T0, 7, "m", "x5", pid=12)
    h.marker(T0, 8, 12)
    h.data(T1, 5, "n", "x5", pid=12)
    h.marker(T1, 6, 12, "ABORT")  # one partition aborted
    h.committed_from_log()
    only(h.check(), "torn_transaction")


def test_committed_transaction_with_unknown_outcome_must_be_whole():
    h = clean()
    h.txn("x6", [("m", 0, 7), ("n", 1, 5)], outcome="commit-unknown")
    h.data(T0, 7, "m", "x6", pid=12)
    h.marker(T0, 8, 12)  # the other partition never got its write
    h.committed_from_log()
    only(h.check(), "torn_transaction")


def test_unknown_transaction_wholly_invisible_is_fine():
    h = clean()
    h.txn("x7", [("m", 0, 7)], outcome="commit-unknown")
    h.data(T0, 7, "m", "x7", pid=12)
    h.marker(T0, 8, 12, "ABORT")
    h.committed_from_log()
    assert h.check().ok


def test_inconsistent_offset_between_ack_and_log():
    h = clean()
    h.send("q", offset=6)  # acknowledged at an offset holding "h"
    h.data(T0, 7, "q")
    h.committed_from_log()
    only(h.check(), "inconsistent_offset")


def test_inconsistent_offset_between_two_polls():
    h = clean()
    h.poll([("t", 0, 1, "zz", None)], c="c4")
    report = h.check()
    assert "inconsistent_offset" in report.kinds()


def test_non_monotonic_producer_order():
    h = H()
    h.send("a", offset=1)
    h.send("b", offset=0)
    h.data(T0, 0, "b")
    h.data(T0, 1, "a")
    h.committed_from_log()
    only(h.check(), "non_monotonic")


def test_non_monotonic_consumer():
    h = clean()
    h.poll([("t", 0, 1, "b", None)])  # c1 already read offset 6
    only(h.check(), "non_monotonic")


def test_consumer_may_go_back_after_a_seek():
    h = clean()
    h.ev("r1", "info", "seek", c="c1", partitions=[["t", 0, 1]])
    h.poll([("t", 0, 1, "b", None)])
    assert h.check().ok


def test_copier_output_must_equal_input():
    h = H()
    for i in range(4):
        h.send(str(i), topic="in", offset=i)
        h.data(("in", 0), i, str(i))
    h.txn("c-1", [("0", 0, 0), ("1", 0, 1)], topic="out")
    h.txn("c-2", [("2", 0, 3), ("3", 0, 4)], topic="out", outcome="abort")
    for o, v, txn, pid in ((0, "0", "c-1", 5), (1, "1", "c-1", 5)):
        h.data(("out", 0), o, v, txn, pid)
    h.marker(("out", 0), 2, 5)
    h.data(("out", 0), 3, "2", "c-2", 5)
    h.data(("out", 0), 4, "3", "c-2", 5)
    h.marker(("out", 0), 5, 5, "ABORT")
    h.committed_from_log()
    report = h.check(copier_pairs=[("in", "out")])
    only(report, "copier_mismatch")
    assert "2 missing" in report.anomalies["copier_mismatch"][0].message
    # the re-copy after the abort completes it
    h.txn("c-3", [("2", 0, 6), ("3", 0, 7)], topic="out")
    h.data(("out", 0), 6, "2", "c-3", 5)
    h.data(("out", 0), 7, "3", "c-3", 5)
    h.marker(("out", 0), 8, 5)
    h.committed_from_log()
    assert h.check(copier_pairs=[("in", "out")]).ok


def power_loss(h: H, mode: str, before: dict, after: dict) -> None:
    h.ev("nemesis", "info", "power_loss", flush_mode=mode,
         before={f"{t}/{p}": v for (t, p), v in before.items()},
         after={f"{t}/{p}": v for (t, p), v in after.items()})


def test_durable_power_loss_below_high_watermark_is_a_lost_write():
    h = clean()
    h.ev("nemesis", "info", "fault", fault="restart")
    power_loss(h, "fsync", {T0: (7, 7), T1: (5, 5)}, {T0: 5, T1: 5})
    report = h.check()
    only(report, "lost_write")
    assert any("durable" in w for w in report.windows)


def test_durable_power_loss_may_cut_the_unfsynced_tail():
    h = clean()
    power_loss(h, "fsync", {T0: (9, 7), T1: (5, 5)}, {T0: 7, T1: 5})
    assert h.check().ok


def test_flush_none_power_loss_may_lose_the_window_only():
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    h.send("a", offset=0)
    h.data(T0, 0, "a")
    h.send("b", offset=1)
    h.send("c", offset=2)
    power_loss(h, "none", {T0: (3, 3)}, {T0: 1})
    h.send("d", offset=1)  # offset 1 is reused after the loss
    h.data(T0, 1, "d")
    h.committed_from_log()
    report = h.check()
    assert report.ok, summarize(report, title="none")
    assert report.allowed_losses == 2
    assert "[1,3)" in report.windows[0]
    # losing a write below the window is still a lost write
    h2 = H()
    h2.send("a", offset=0)
    h2.send("b", offset=1)
    h2.data(T0, 1, "b")
    power_loss(h2, "none", {T0: (2, 2)}, {T0: 2})
    h2.committed_from_log()
    assert "lost_write" in h2.check().kinds()


def test_flush_none_power_loss_may_lose_a_transaction_committed_across_it():
    """Commit requested before the loss, acknowledged by the restarted broker, data gone."""
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    h.send("a", offset=0)
    h.data(T0, 0, "a")
    h.ev("w2", "info", "begin", txn="x1", producer="tx1")
    h.send("b", offset=1, producer="tx1", p="w2", txn="x1")
    h.ev("w2", "invoke", "commit", txn="x1", producer="tx1", writes=[["t", "b"]])
    power_loss(h, "none", {T0: (3, 3)}, {T0: 1})
    h.ev("w2", "ok", "commit", txn="x1", producer="tx1")
    h.committed_from_log()
    report = h.check()
    assert report.ok, summarize(report, title="none")
    assert report.allowed_losses == 1
    # the same in durable mode is a lost write
    h.events = [e for e in h.events if e["f"] != "power_loss"]
    power_loss(h, "fsync", {T0: (3, 3)}, {T0: 3})
    assert "lost_write" in h.check().kinds()


def test_flush_none_commit_retried_into_the_broker_that_lost_power():
    """Commit requested of a broker that was SIGKILLed, retried and acknowledged by its
    successor, which then lost power: the decision was that broker's, so it may be lost."""
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    h.ev("w2", "info", "begin", txn="x1", producer="tx1")
    h.send("b", offset=0, producer="tx1", p="w2", txn="x1")
    h.ev("w2", "invoke", "commit", txn="x1", producer="tx1", writes=[["t", "b"]])
    h.ev("nemesis", "info", "fault", fault="restart")  # after a kill
    h.ev("w2", "ok", "commit", txn="x1", producer="tx1")
    h.data(T0, 0, "b", "x1", pid=3)
    h.marker(T0, 1, 3, "ABORT")  # the restarted coordinator later aborted it
    power_loss(h, "none", {T0: (2, 2)}, {T0: 1})
    h.committed_from_log()
    assert h.check().ok
    # a commit already answered before that broker started was durable: not excused
    h2 = H()
    h2.ev("nemesis", "info", "fault", fault="start")
    h2.ev("w2", "info", "begin", txn="x1", producer="tx1")
    h2.send("b", offset=0, producer="tx1", p="w2", txn="x1")
    h2.ev("w2", "invoke", "commit", txn="x1", producer="tx1", writes=[["t", "b"]])
    h2.ev("w2", "ok", "commit", txn="x1", producer="tx1")
    h2.ev("nemesis", "info", "fault", fault="restart")
    h2.data(T0, 0, "b", "x1", pid=3)
    h2.marker(T0, 1, 3, "ABORT")
    power_loss(h2, "none", {T0: (2, 2)}, {T0: 2})
    h2.committed_from_log()
    assert "lost_write" in h2.check().kinds()


def test_flush_none_aborted_transaction_resurrected_by_the_next_commit():
    """The abort was answered by the broker that then lost power; the producer's next
    transaction (same producer id and epoch) commits the old data too."""
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    h.txn("x1", [("a", 0, 0)], outcome="abort", producer="tx1")
    power_loss(h, "none", {T0: (2, 2)}, {T0: 1})
    h.poll([("t", 0, 0, "a", "x1")])  # after the loss: consistent with the log
    h.txn("x2", [("b", 0, 1)], producer="tx1")
    h.data(T0, 0, "a", "x1", pid=4)
    h.data(T0, 1, "b", "x2", pid=4)
    h.marker(T0, 2, 4)
    h.committed_from_log()
    report = h.check()
    assert report.ok, summarize(report, title="resurrected")
    assert report.resurrected == ["x1"]
    assert "committed after their unfsynced ABORT was lost" in summarize(report, title="r")
    # a read of the aborted data before the loss is still an aborted read
    h2 = H()
    h2.ev("nemesis", "info", "fault", fault="start")
    h2.txn("x1", [("a", 0, 0)], outcome="abort", producer="tx1")
    h2.t += STALE_READ_GRACE_S * 2
    h2.poll([("t", 0, 0, "a", "x1")])
    power_loss(h2, "none", {T0: (2, 2)}, {T0: 1})
    h2.txn("x2", [("b", 0, 1)], producer="tx1")
    h2.data(T0, 0, "a", "x1", pid=4)
    h2.data(T0, 1, "b", "x2", pid=4)
    h2.marker(T0, 2, 4)
    h2.committed_from_log()
    assert h2.check().kinds() == {"aborted_read"}


def test_flush_none_stale_prefetched_read_after_the_restart():
    """A consumer hands out a record it fetched before the loss, then reads the reused
    offsets: neither an inconsistent offset nor a consumer going back."""
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    h.send("a", offset=0)
    h.data(T0, 0, "a")
    h.send("b", offset=1)
    power_loss(h, "none", {T0: (2, 2)}, {T0: 1})
    h.poll([("t", 0, 1, "b", None)])  # prefetched before the loss
    h.send("c", offset=1)
    h.data(T0, 1, "c")
    h.poll([("t", 0, 1, "c", None)])
    h.committed_from_log()
    report = h.check()
    assert report.ok, summarize(report, title="stale")
    # long after the restart the same read is an anomaly
    h.t += STALE_READ_GRACE_S * 2
    h.poll([("t", 0, 1, "b", None)], c="c9")
    assert "inconsistent_offset" in h.check().kinds()


def test_summary_names_every_anomaly_with_an_example():
    h = clean()
    h.send("z", offset=7)
    h.poll([("t", 0, 4, "f", "x2")], c="c2")
    report = h.check()
    text = summarize(report, title="run", history_path="/tmp/h.jsonl", duration_s=1.0)
    assert "lost_write: 1" in text and "aborted_read: 1" in text
    assert "value=z" in text
    assert len(text.splitlines()) < 40


@pytest.mark.parametrize("kind", ANOMALY_TYPES)
def test_every_anomaly_type_has_a_detecting_test(kind):
    """Guards this file: each type is injected by one of the tests above."""
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    assert f'"{kind}"' in source


def test_write_acknowledged_before_another_was_sent_must_precede_it():
    """Across producers (and sessions): "a" was acknowledged before "b" was sent, so "b"
    cannot have been appended first."""
    h = H()
    h.send("a", offset=1, producer="s1", p="w1")
    h.send("b", offset=0, producer="s2", p="w2")
    h.data(T0, 0, "b")
    h.data(T0, 1, "a")
    h.committed_from_log()
    report = h.check()
    only(report, "non_monotonic")
    assert report.anomalies["non_monotonic"][0].example["acknowledged"] == "a"


def test_concurrent_writes_of_two_producers_may_land_in_either_order():
    h = H()
    h.ev("w1", "invoke", "send", id=101, topic="t", value="a", key=None, producer="s1",
         txn=None, partition=0)
    h.ev("w2", "invoke", "send", id=102, topic="t", value="b", key=None, producer="s2",
         txn=None, partition=0)
    h.ev("w1", "ok", "send", id=101, partition=0, offset=1)
    h.ev("w2", "ok", "send", id=102, partition=0, offset=0)
    h.data(T0, 0, "b")
    h.data(T0, 1, "a")
    h.committed_from_log()
    assert h.check().ok


def test_flush_none_consumer_resets_once_when_its_position_was_cut_away():
    """Its position was past the cut log's end: it hands out a prefetched record below the
    cut, then its first fetch from the restarted broker is out of range and it starts again
    from the earliest offset. Once per partition in the grace window; a second step back, or
    one after the grace, is still an anomaly."""
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    for o, v in enumerate("abcd"):
        h.send(v, offset=o)
    h.poll([("t", 0, 0, "a", None), ("t", 0, 1, "b", None)])
    power_loss(h, "none", {T0: (4, 4)}, {T0: 2})
    for o, v in enumerate("ab"):
        h.data(T0, o, v)
    h.poll([("t", 0, 1, "b", None)])  # prefetched before the loss, below the cut
    h.poll([("t", 0, 0, "a", None)])  # the reset to the earliest offset
    h.poll([("t", 0, 1, "b", None)])
    h.committed_from_log()
    report = h.check()
    assert report.ok, summarize(report, title="reset")
    h.poll([("t", 0, 0, "a", None)])  # a second step back
    assert h.check().kinds() == {"non_monotonic"}


def test_flush_none_committed_transaction_whose_acknowledged_data_was_cut():
    """The data was acknowledged by the broker that lost power and cut; the transaction's
    state survived, and its commit, asked after the restart, went through."""
    h = H()
    h.ev("nemesis", "info", "fault", fault="start")
    h.send("a", offset=0)
    h.data(T0, 0, "a")
    h.ev("w2", "info", "begin", txn="x1", producer="tx1")
    h.send("b", offset=1, producer="tx1", p="w2", txn="x1")
    power_loss(h, "none", {T0: (2, 2)}, {T0: 1})
    h.ev("w2", "invoke", "commit", txn="x1", producer="tx1", writes=[["t", "b"]])
    h.ev("w2", "ok", "commit", txn="x1", producer="tx1")
    h.marker(T0, 1, 3)
    h.committed_from_log()
    report = h.check()
    assert report.ok, summarize(report, title="cut")
    assert report.allowed_losses == 1
    # data acknowledged below the cut is still a lost write
    h2 = H()
    h2.ev("nemesis", "info", "fault", fault="start")
    h2.ev("w2", "info", "begin", txn="x1", producer="tx1")
    h2.send("b", offset=0, producer="tx1", p="w2", txn="x1")
    h2.send("a", offset=1)
    h2.data(T0, 1, "a")
    power_loss(h2, "none", {T0: (2, 2)}, {T0: 2})
    h2.ev("w2", "invoke", "commit", txn="x1", producer="tx1", writes=[["t", "b"]])
    h2.ev("w2", "ok", "commit", txn="x1", producer="tx1")
    h2.marker(T0, 2, 3)
    h2.committed_from_log()
    assert h2.check().kinds() == {"lost_write"}


# ---------------------------------------------------------------------------- compacted topics

C0 = ("c", 0)
RETENTION_S = 1.0  # the compacted topic's delete.retention.ms, 1000


def compacted() -> H:
    """A compacted topic "c" after some cleanings: each key's latest committed record is
    there (b's older b2 too: compaction is lazy), a1 and b1 replaced, the aborted a3 and its
    ABORT marker removed, the deleted key d gone with its tombstone (past its retention), the
    recent tombstone of e still there."""
    h = H()
    h.ev("w0", "info", "topic", topic="c",
         configs={"cleanup.policy": "compact", "delete.retention.ms": "1000"})
    h.send("a1", topic="c", key="a", offset=0)
    h.send("b1", topic="c", key="b", offset=1)
    h.send("d1", topic="c", key="d", offset=2)
    h.send("d2", topic="c", key="d", offset=3, tombstone=True)
    h.t += RETENTION_S
    h.txn("x1", [("a2", 0, 4, "a"), ("b2", 0, 5, "b")], topic="c")
    h.txn("x2", [("a3", 0, 7, "a")], outcome="abort", topic="c")
    h.send("b3", topic="c", key="b", offset=9)
    h.send("e1", topic="c", key="e", offset=10, tombstone=True)
    h.data(C0, 4, "a2", "x1", pid=7, key="a")
    h.data(C0, 5, "b2", "x1", pid=7, key="b")
    h.marker(C0, 6, 7)
    h.data(C0, 9, "b3", key="b")
    h.data(C0, 10, "e1", key="e", tombstone=True)
    h.poll([("c", 0, 4, "a2", "x1"), ("c", 0, 9, "b3", None)], c="cc")
    h.committed_from_log()
    h.ev("runner", "info", "phase", name="final read done")
    return h


def drop(h: H, offset: int) -> None:
    """The record at ``offset`` was removed from the final reads (raw and client)."""
    h.log[C0] = [r for r in h.log[C0] if r.offset != offset]
    h.client[C0] = [r for r in h.client[C0] if r[0] != offset]


def test_compacted_history_has_no_anomaly():
    report = compacted().check()
    assert report.ok, summarize(report, title="compacted")
    ops = report.operations
    assert ops["compaction: committed records removed"] == 4  # a1, b1, d1, d2
    assert ops["compaction: tombstones removed"] == 1
    assert ops["compaction: aborted records removed"] == 1


def test_compacted_latest_committed_record_missing():
    h = compacted()
    drop(h, 9)  # b3: b's latest, while the older b2 is left
    only(h.check(), "lost_write")
    h = compacted()
    drop(h, 4)  # a2 (of a committed transaction): nothing of a is left
    drop(h, 5)
    drop(h, 6)
    only(h.check(), "lost_write")


def test_compacted_latest_removed_for_an_aborted_write():
    """The cleaner took the aborted a3 for a's latest, removed a2, then removed a3 as
    aborted: a is gone."""
    h = compacted()
    drop(h, 4)
    only(h.check(), "lost_write")


def test_compacted_aborted_record_present():
    h = compacted()
    h.poll([("c", 0, 7, "a3", "x2")], c="cc2")
    only(h.check(), "aborted_read")
    # the ABORT marker removed while the aborted data is left: a read_committed client
    # returns it
    h = compacted()
    h.data(C0, 7, "a3", "x2", pid=7, key="a")
    h.log[C0].sort(key=lambda r: r.offset)
    h.client[C0] = sorted([*h.client[C0], (7, "a3", "x2")])
    assert {"aborted_read", "hanging_transaction"} == h.check().kinds()


def test_compacted_invented_record():
    h = compacted()
    h.data(C0, 11, "zz", key="a")  # never written
    h.committed_from_log()
    only(h.check(), "invented_record")
    h = compacted()
    h.log[C0] = [LogRecord(9, "b3", None, 1, False, None, "b", True) if r.offset == 9 else r
                 for r in h.log[C0]]  # b3 turned into a tombstone
    h.committed_from_log()
    only(h.check(), "invented_record")
    h = compacted()
    h.log[C0] = [LogRecord(9, "b3", None, 1, False, None, "a") if r.offset == 9 else r
                 for r in h.log[C0]]  # b3 under another key (and b's latest is gone)
    h.committed_from_log()
    assert h.check().kinds() == {"invented_record", "lost_write"}
    h = compacted()
    h.poll([("c", 0, 9, "b9", None)], c="cc2")
    assert "invented_record" in h.check().kinds()


def test_final_read_offsets_strictly_increase():
    h = compacted()
    h.log[C0] = [*h.log[C0][:-2], h.log[C0][-1], h.log[C0][-2]]  # 10 before 9
    only(h.check(), "non_monotonic")
    h = compacted()
    h.client[C0] = [*h.client[C0], h.client[C0][-1]]  # the client returned 10 twice
    assert "non_monotonic" in h.check().kinds()


def test_compacted_tombstone_removed_within_retention():
    h = compacted()
    drop(h, 10)  # e1, written less than delete.retention.ms before the final read
    only(h.check(), "lost_write")


def test_compacted_deleted_key_with_older_record_left():
    h = compacted()
    h.data(C0, 2, "d1", key="d")  # d2 (its tombstone) is gone, d1 is not
    h.log[C0].sort(key=lambda r: r.offset)
    h.committed_from_log()
    only(h.check(), "resurrected_key")


def test_compacted_deleted_key_may_keep_its_tombstone_and_older_records():
    h = compacted()
    h.data(C0, 2, "d1", key="d")
    h.data(C0, 3, "d2", key="d", tombstone=True)
    h.data(C0, 0, "a1", key="a")
    h.log[C0].sort(key=lambda r: r.offset)
    h.committed_from_log()
    assert h.check().ok


def test_compacted_later_tombstone_of_unknown_outcome_may_have_deleted_the_key():
    """b4, a tombstone of unknown outcome sent after b3, may have replaced b3 and gone
    itself once delete.retention.ms passed; then nothing of b may be left."""
    def deleted_b(*, wait_s: float) -> H:
        h = compacted()
        h.send("b4", topic="c", key="b", status="info", tombstone=True)
        h.t += wait_s
        h.ev("runner", "info", "phase", name="final read done")
        drop(h, 5)
        drop(h, 9)
        return h

    assert deleted_b(wait_s=RETENTION_S).check().ok
    only(deleted_b(wait_s=0).check(), "lost_write")  # b4 too recent to be gone
    h = deleted_b(wait_s=RETENTION_S)
    h.data(C0, 5, "b2", "x1", pid=7, key="b")
    h.log[C0].sort(key=lambda r: r.offset)
    h.committed_from_log()
    only(h.check(), "resurrected_key")


def test_compacted_client_may_miss_what_the_cleaner_removed_after_the_raw_read():
    h = compacted()
    h.client[C0] = [r for r in h.client[C0] if r[0] != 5]  # b2: b3 replaced it
    assert h.check().ok
    h.client[C0] = [r for r in h.client[C0] if r[0] != 9]  # b3: b's latest
    assert h.check().kinds() == {"lost_write"}


def test_removal_in_a_topic_not_compacted_is_a_lost_write():
    h = compacted()
    h.events = [e for e in h.events if e["f"] != "topic"]
    assert "lost_write" in h.check().kinds()
