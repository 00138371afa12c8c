"""Compaction seen by the Java client (kafka-clients 3.9.1), the twin of
test_compaction_clients.py: one JVM (SemelClient keyed-steps) holds a transactional and an
idempotent producer on the same partition of a compacted topic and writes keyed updates and
tombstones, some transactions committed and some aborted; the broker's cleaner runs on demand
(``LogManager.run_cleaner_once``). Read_committed and read_uncommitted Java consumers from
offset 0 then see exactly what a Python model of the writes says a cleaning leaves: below the
cleaned end the latest record of each key, tombstones until the delete horizon (the broker's
injected clock) has passed, nothing aborted; above it everything committed. The same producer
ids go on after their batches were compacted away and after broker restarts on the same data
dir and listener: no OutOfOrderSequenceException, every record once at its acknowledged offset.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import JavaClientError, java_command, require_java
from tests.kafka_wire import make_topic

TOPIC = "compacted"
DELETE_RETENTION_MS = 60_000
STEP_TIMEOUT_S = 60
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "2000",
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": str(DELETE_RETENTION_MS)}

Record = tuple[int, str, str | None]  # offset, key, value (None: a tombstone)


class Clock:
    """The broker's clock, moved by the test."""

    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


def broker_overrides(java_port: int) -> dict[str, str]:
    """Cleanings on demand only; a second listener (JAVA) for the Java clients, whose port a
    restarted broker binds again so the producers reconnect to it (the first listener, the
    harness's, takes an ephemeral port at every start)."""
    return {"log.cleaner.enable": "false",
            "listeners": f"PLAINTEXT://127.0.0.1:0,JAVA://127.0.0.1:{java_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,JAVA:PLAINTEXT"}


def java_port(bt: BrokerThread) -> int:
    [endpoint] = [e for e in bt.broker.endpoints if e.name == "JAVA"]
    return endpoint.port


def start_broker(data: Path, clock: Clock, port: int = 0) -> BrokerThread:
    bt = BrokerThread(data, broker_overrides(port), clock=clock).start()
    assert port in (0, java_port(bt))
    return bt


class KeyedSteps:
    """SemelClient keyed-steps as a child process: step() writes one line, returns its answer."""

    def __init__(self, bootstrap: str, stderr_path: Path) -> None:
        self.args = ("keyed-steps", "--bootstrap", bootstrap, "--topic", TOPIC,
                     "--partition", "0", "--transactional-id", "tx-compact-java",
                     "--timeout-ms", str(STEP_TIMEOUT_S * 1000 // 2))
        self.stderr_path = stderr_path
        self.stderr = stderr_path.open("w")
        self.proc = subprocess.Popen(java_command(*self.args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def step(self, line: str) -> dict:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        try:
            answer = self.lines.get(timeout=STEP_TIMEOUT_S)
        except queue.Empty:
            answer = None
        if answer is None:
            self.close()
            raise JavaClientError(self.args, self.proc.returncode,
                                  self.stderr_path.read_text(), [])
        return json.loads(answer)

    def send(self, key: str, value: str | None, *, txn: bool = False) -> Record:
        sent = self.step(f"{'txn-send' if txn else 'send'} {key} {'-' if value is None else value}")
        return sent["offset"], key, value

    def transaction(self, writes: list[tuple[str, str | None]], *, commit: bool) -> list[Record]:
        self.step("begin")
        records = [self.send(key, value, txn=True) for key, value in writes]
        self.step("commit" if commit else "abort")
        return records

    def read(self, isolation: str) -> list[Record]:
        return [tuple(r) for r in self.step(f"read {isolation}")["records"]]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.stderr.close()


@pytest.fixture
def keyed_steps(tmp_path):
    """Starts KeyedSteps against a bootstrap address; every one is closed after the test."""
    require_java()
    started: list[KeyedSteps] = []

    def start(bootstrap: str) -> KeyedSteps:
        steps = KeyedSteps(bootstrap, tmp_path / f"keyed-steps-{len(started)}.stderr")
        started.append(steps)
        return steps

    yield start
    for steps in started:
        steps.close()


def compacted(writes: list[Record], clean_end: int, horizon_passed_below: int = 0) -> list[Record]:
    """What a read_committed consumer sees after a cleaning of [0, clean_end): below it only
    each key's latest record; tombstones below `horizon_passed_below` (kept by earlier
    cleanings whose delete horizon has since passed) gone too. `writes`: every committed or
    idempotent record, in offset order."""
    latest = {key: offset for offset, key, _ in writes if offset < clean_end}
    return [(offset, key, value) for offset, key, value in writes
            if offset >= clean_end
            or (latest[key] == offset and not (value is None and offset < horizon_passed_below))]


def partition_log(bt: BrokerThread):
    return next(plog for tp, plog in bt.broker.log_manager.logs.items() if tp.topic == TOPIC)


def producer_sequences(bt: BrokerThread) -> dict[int, tuple[int, int]]:
    """Producer id -> (epoch, last sequence) in the partition's producer state."""
    return {pid: (entry.producer_epoch, entry.last_seq)
            for pid, entry in partition_log(bt).producer_state.producers.items()}


def clean(bt: BrokerThread, writes: list[Record], first_dirty: int) -> int:
    """One cleaning of the topic; checks it covered [first_dirty, end), end just past the
    last committed or idempotent record before the active segment (every transaction is
    complete, so the active segment bounds it), and returns end."""
    active_base = partition_log(bt).segments[-1].base_offset

    async def run():
        return await bt.broker.log_manager.run_cleaner_once()

    result = bt.call(run())
    assert result is not None and result.topic_partition.topic == TOPIC
    assert result.bytes_after < result.bytes_before
    assert result.first_dirty_offset == first_dirty
    assert result.end_offset == 1 + max(offset for offset, _, _ in writes if offset < active_base)
    return result.end_offset


def write_rounds(steps: KeyedSteps) -> tuple[list[Record], list[Record]]:
    """Twelve rounds of idempotent updates of k0-k4, each followed by a transaction that
    updates one of them and writes t<round>; every third aborted (with a tombstone for the
    previous round's committed t key that must not take effect), every third committed with
    a tombstone for the previous round's t key. Then an idempotent tombstone for k0 and 30
    records more, which push it out of the active segment. Returns (written, aborted): the
    committed or idempotent records, and the aborted ones."""
    written: list[Record] = []
    aborted: list[Record] = []
    for round_ in range(12):
        written.extend(steps.send(f"k{k}", f"plain-{round_}-{k}") for k in range(5))
        writes = [(f"k{round_ % 5}", f"txn-{round_}"), (f"t{round_}", f"txn-{round_}")]
        if round_ % 3 != 1 and round_ > 0:
            writes.append((f"t{round_ - 1}", None))
        if round_ % 3 == 0:
            aborted.extend(steps.transaction(writes, commit=False))
        else:
            written.extend(steps.transaction(writes, commit=True))
    written.append(steps.send("k0", None))
    written.extend(steps.send("zz", f"last-{i}") for i in range(30))
    return written, aborted


def tombstones(records: list[Record]) -> set[str]:
    return {key for _, key, value in records if value is None}


def drop_producer_snapshots(data: Path) -> int:
    """Delete the partition's producer snapshots: the next start rebuilds the producer state
    from the (cleaned) log itself."""
    snapshots = list((data / f"{TOPIC}-0").glob("*.snapshot"))
    for path in snapshots:
        path.unlink()
    return len(snapshots)


def test_compacted_topic_through_java_clients(tmp_path, keyed_steps):
    clock = Clock()
    data = tmp_path / "d"
    bt = start_broker(data, clock)
    try:
        make_topic(bt, TOPIC, 1, TOPIC_CONFIG)
        port = java_port(bt)
        steps = keyed_steps(f"127.0.0.1:{port}")
        written, aborted = write_rounds(steps)
        aborted_offsets = {offset for offset, _, _ in aborted}
        assert len(aborted_offsets) == 4 * 3 - 1  # rounds 0, 3, 6, 9; no tombstone in 0

        before_committed = steps.read("read_committed")
        before_uncommitted = steps.read("read_uncommitted")
        assert before_committed == written
        assert set(aborted) <= set(before_uncommitted)  # the aborted records are in the log

        first_end = clean(bt, written, 0)
        after_committed = steps.read("read_committed")
        after_uncommitted = steps.read("read_uncommitted")
        assert after_committed == compacted(written, first_end)
        assert after_uncommitted == after_committed  # no aborted record left, even uncommitted
        assert not aborted_offsets & {offset for offset, _, _ in after_uncommitted}
        assert set(after_committed) < set(before_committed)  # records gone, none moved
        offsets = [offset for offset, _, _ in after_committed]
        assert offsets == sorted(set(offsets)) and offsets[-1] == written[-1][0]
        # tombstones inside their delete horizon survive the cleaning that covered them
        assert all(offset < first_end for offset, _, value in written if value is None)
        assert tombstones(after_committed) == {"k0", "t1", "t4", "t7", "t10"}

        # the idempotent producer goes on after its batches were compacted away, and a
        # cleaning takes most of its new records too
        more = [steps.send("k1", f"after-clean-{i}") for i in range(40)]
        assert [offset for offset, _, _ in more] == list(range(more[0][0], more[0][0] + 40))
        assert more[0][0] > written[-1][0]
        written.extend(more)
        second_end = clean(bt, written, first_end)
        assert steps.read("read_committed") == compacted(written, second_end)
        # a transaction supersedes the idempotent producer's last record and rolls it out of
        # the active segment: the next cleaning (after the tombstones' delete horizon) leaves
        # its batch without records, kept as an empty header for the producer's sequence
        tail = steps.transaction([("k1", "txn-final")]
                                 + [("zz", f"txn-last-{i}") for i in range(30)], commit=True)
        written.extend(tail)
        clock.ms += DELETE_RETENTION_MS + 1
        third_end = clean(bt, written, second_end)
        assert tail[0][0] < third_end
        final = steps.read("read_committed")
        assert final == compacted(written, third_end, second_end)
        assert steps.read("read_uncommitted") == final
        assert not tombstones(final)
        assert more[-1] not in final
        sequences = producer_sequences(bt)
        assert len(sequences) == 2
    finally:
        bt.stop()

    # the same producer ids go on against the restarted broker: first with the producer
    # state rebuilt from the cleaned log (snapshots deleted: the idempotent producer's
    # emptied last batch is all that is left of it), then loaded from a snapshot
    for rebuild in (True, False):
        if rebuild:
            assert drop_producer_snapshots(data) > 0
        again = start_broker(data, clock, port)
        try:
            assert producer_sequences(again) == sequences
            assert steps.read("read_committed") == final  # the cleaned log, reloaded
            restarted = [steps.send("k2", f"after-restart-{rebuild}-{i}") for i in range(5)]
            restarted += steps.transaction([("k3", f"txn-after-restart-{rebuild}")],
                                           commit=True)
            reread = steps.read("read_committed")
            assert reread == final + restarted  # each record once, at its acknowledged offset
            assert steps.read("read_uncommitted") == reread
            final = reread
            sequences = producer_sequences(again)
        finally:
            again.stop()


def test_transactional_update_after_an_aborted_transaction_supersedes(tmp_path, keyed_steps):
    """A transactional producer aborts a transaction, commits a value of key a, and a
    cleaning covers both; then it commits a new value of a, and the next cleaning (from the
    first one's end) must drop the old value, as it would for an idempotent update."""
    bt = start_broker(tmp_path / "d", Clock())
    try:
        make_topic(bt, TOPIC, 1, TOPIC_CONFIG)
        steps = keyed_steps(f"127.0.0.1:{java_port(bt)}")
        steps.transaction([("a", "aborted")], commit=False)
        written = steps.transaction([("a", "v1")], commit=True)
        written += [steps.send("zz", f"pad-{i}") for i in range(30)]
        first_end = clean(bt, written, 0)
        written += steps.transaction([("a", "v2")], commit=True)
        written += [steps.send("zz", f"pad-again-{i}") for i in range(30)]
        second_end = clean(bt, written, first_end)
        assert steps.read("read_committed") == compacted(written, second_end)
    finally:
        bt.stop()
