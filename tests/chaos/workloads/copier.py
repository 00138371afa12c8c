"""Workload 1: the transactional copier (the shape of Kafka's TransactionalMessageCopier).

As a process (confluent-kafka; the Java one is `SemelClient copier`):

    python -m tests.chaos.workloads.copier --bootstrap B --input in --output out
        --group G --transactional-id T --process copier-0 --session 3 --seed 7
        [--txn-size 300] [--abort-ratio 0.33] [--stop-file PATH]

consumes `input` read_committed in group G, and per batch of up to txn-size records: begins
a transaction, produces each value (same key and value, header txn=<id>) to `output`,
sends the consumer's positions with its group metadata (send_offsets_to_transaction), then
aborts about one in three at random (and seeks back to the committed offsets) or commits.
Abortable errors abort and seek back; a fatal error exits with status 3 (the runner starts
a new one with the same transactional id, fencing the old). It exits 0 once the stop file
exists. Every operation is written to stdout as history events (history.py), which the
runner adds to the run's history.

`CopierWorkload` (in the runner's process) seeds the input with N distinct integers through
an idempotent producer, runs the copier processes (restarting those that die or that the
nemesis kills), a read_committed watcher on the output and a raw LSO prober of the output
(lso_prober.py), and ends once the group's committed offsets reach the end of the input.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.chaos.history import History, read_events
from tests.chaos.workloads.common import (
    API_TIMEOUT_S,
    DELIVERY_TIMEOUT_MS,
    REQUEST_TIMEOUT_MS,
    SESSION_TIMEOUT_MS,
    TRANSACTION_TIMEOUT_MS,
    ThreadedWorkload,
    abort_open_transaction,
    consumer_config,
    end_transaction,
    error_text,
    partition_for,
    producer_config,
    record_of,
    transactional_config,
)
from tests.chaos.workloads.lso_prober import probe_lso

ROOT = Path(__file__).resolve().parents[3]
SEND_OFFSETS_TIMEOUT_S = 15.0
WATCHDOG_S = SEND_OFFSETS_TIMEOUT_S + 10


# ------------------------------------------------------------------ the copier process


def copier_main(argv: list[str] | None = None) -> int:
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaException,
        Producer,
        TopicPartition,
    )

    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--process", required=True)
    ap.add_argument("--session", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--txn-size", type=int, default=300)
    ap.add_argument("--abort-ratio", type=float, default=0.33)
    ap.add_argument("--stop-file")
    args = ap.parse_args(argv)

    faulthandler.register(signal.SIGUSR1)  # a stuck copier's stack: kill -USR1 <pid>
    h = History(stream=sys.stdout, keep=False)
    p = args.process
    sid = f"{p}.{args.session}"
    rng = random.Random(args.seed * 7919 + args.session)
    stop_file = Path(args.stop_file) if args.stop_file else None
    consumer = Consumer(consumer_config(args.bootstrap, args.group, **{
        "log_level": 0, "max.partition.fetch.bytes": 65536}))
    producer = Producer(transactional_config(args.bootstrap, args.transactional_id,
                                             log_level=0))

    def seek_committed(partitions) -> None:
        if not partitions:
            return
        committed = consumer.committed(partitions, API_TIMEOUT_S)
        moved = []
        for tp in committed:
            tp.offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            consumer.seek(tp)
            moved.append([tp.topic, tp.partition, tp.offset])
        h.record(p, "info", "seek", c=sid, partitions=moved)

    def on_assign(c, partitions) -> None:
        h.record(p, "info", "seek", c=sid,
                 partitions=[[tp.topic, tp.partition, tp.offset] for tp in partitions])

    def on_revoke(c, partitions) -> None:
        h.record(p, "info", "seek", c=sid,
                 partitions=[[tp.topic, tp.partition, -1] for tp in partitions])

    try:
        producer.init_transactions(API_TIMEOUT_S * 2)
    except KafkaException as e:
        h.record(p, "info", "exit", reason=f"init_transactions: {error_text(e.args[0])}")
        _exit(producer, consumer, 3)
    consumer.subscribe([args.input], on_assign=on_assign, on_revoke=on_revoke)
    n = 0
    while not (stop_file is not None and stop_file.exists()):
        msgs = [m for m in consumer.consume(num_messages=args.txn_size, timeout=0.5)
                if m.error() is None]
        if not msgs:
            continue
        h.record(p, "ok", "poll", c=sid, iso="read_committed",
                 records=[record_of(m) for m in msgs])
        n += 1
        txn = f"{sid}-{n}"
        step = "begin_transaction"
        try:
            producer.begin_transaction()
            h.record(p, "info", "begin", txn=txn, producer=sid)
            writes = []
            step = "produce"
            for m in msgs:
                value = m.value().decode()
                op = h.next_id()
                h.record(p, "invoke", "send", id=op, topic=args.output, value=value,
                         key=value, producer=sid, txn=txn, partition=None)

                def report(err, msg, op=op) -> None:
                    if err is None:
                        h.record(p, "ok", "send", id=op, partition=msg.partition(),
                                 offset=msg.offset())
                    else:
                        h.record(p, "info", "send", id=op, error=error_text(err))

                while True:
                    try:
                        producer.produce(args.output, value=m.value(), key=m.key(),
                                         headers=[("txn", txn.encode())], on_delivery=report)
                        break
                    except BufferError:
                        producer.poll(0.05)
                writes.append([args.output, value])
            # the next offset of every partition this batch came from
            ends: dict[tuple[str, int], int] = {}
            for m in msgs:
                ends[(m.topic(), m.partition())] = m.offset() + 1
            step = "send_offsets_to_transaction"
            with _watchdog(h, p, txn, step, producer, consumer):
                producer.send_offsets_to_transaction(
                    [TopicPartition(t, part, o) for (t, part), o in ends.items()],
                    consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S)
            commit = rng.random() >= args.abort_ratio
            step = "commit" if commit else "abort"
            outcome = end_transaction(producer, h, p, txn, sid, commit=commit, writes=writes)
        except KafkaException as e:
            err = e.args[0]
            h.record(p, "info", "error", txn=txn, step=step, error=error_text(err),
                     fatal=err.fatal(), abortable=err.txn_requires_abort(),
                     retriable=err.retriable())
            outcome = "fatal"
            if not err.fatal() and abort_open_transaction(producer, h, p, txn, sid):
                outcome = "aborted"
        if outcome == "fatal":
            h.record(p, "info", "exit", reason=f"{step} failed: producer unusable")
            _exit(producer, consumer, 3)
        if outcome == "aborted":
            try:
                seek_committed(consumer.assignment())
            except KafkaException as e:  # cannot rewind: a new copier starts over
                h.record(p, "info", "exit", reason=f"seek: {error_text(e.args[0])}")
                _exit(producer, consumer, 3)
    _exit(producer, consumer, 0)
    return 0


@contextlib.contextmanager
def _watchdog(h: History, p: str, txn: str, step: str, producer, consumer):
    """librdkafka's send_offsets_to_transaction can block far past its timeout when the
    connection carrying its group coordinator request dies (seen here when the broker is
    killed or a connection reset while FindCoordinator/TxnOffsetCommit is in flight: the
    request is never sent again; librdkafka issues #5456, #5511: the coordinator request's
    timeout is never checked). A call still blocked WATCHDOG_S later ends the process
    (recorded as a client hang); the runner starts a new copier, which fences this one's
    transaction."""
    def fire() -> None:
        h.record(p, "info", "client_hang", txn=txn, step=step, seconds=WATCHDOG_S)
        _exit(producer, consumer, 4, close=False)

    timer = threading.Timer(WATCHDOG_S, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _exit(producer, consumer, code: int, *, close: bool = True) -> None:
    """Close the clients (bounded: a consumer's close can wait on a dead group) and exit."""

    def close_clients() -> None:
        with contextlib.suppress(Exception):  # a fatal producer raises from flush
            producer.flush(1)
        with contextlib.suppress(Exception):
            consumer.close()

    if close:
        closer = threading.Thread(target=close_clients, daemon=True)
        closer.start()
        closer.join(15)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# ------------------------------------------------------------------ the workload


class CopierWorkload(ThreadedWorkload):
    """Seeder, copier processes (confluent-kafka or Java), watcher; see the module doc."""

    def __init__(self, bootstrap: str, direct: Callable[[], str], history: History, seed: int,
                 *, out_dir: Path,
                 kind: str = "confluent", name: str = "copy", count: int = 6000,
                 input_partitions: int = 2, output_partitions: int = 3, copiers: int = 2,
                 seed_rate: float = 400.0, txn_size: int = 300, logger=None) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.direct = direct  # () -> the broker's own address, for the raw LSO prober
        self.history = history
        self.seed = seed
        self.out_dir = Path(out_dir)
        self.kind = kind
        self.name = name
        self.input = f"{name}-in"
        self.output = f"{name}-out"
        self.group = f"{name}-group"
        self.count = count
        self.input_partitions = input_partitions
        self.output_partitions = output_partitions
        self.copiers = copiers
        self.seed_rate = seed_rate
        self.txn_size = txn_size
        self.logger = logger
        self.rng = random.Random(seed * 31 + 5)
        self.stop_file = self.out_dir / f"{name}.stop"
        self.procs: dict[int, subprocess.Popen] = {}
        self.sessions: dict[int, int] = {}
        self.restarts = 0
        self.exits: list[str] = []
        self.seeded = threading.Event()
        self.acked = 0
        self._lock = threading.Lock()

    def topics(self) -> dict[str, int]:
        return {self.input: self.input_partitions, self.output: self.output_partitions}

    def pairs(self) -> list[tuple[str, str]]:
        return [(self.input, self.output)]

    def start(self) -> None:
        self.stop_file.unlink(missing_ok=True)
        for target in (self._seeder, self._watcher, self._supervisor, self._lso_prober):
            self._start_thread(target, f"{self.name}-{target.__name__}")


    # -- seeding -------------------------------------------------------------------------------

    def _seeder(self) -> None:
        from confluent_kafka import Producer

        p = f"{self.name}-seed"
        producer = Producer(producer_config(self.bootstrap, self.logger))
        interval = 1.0 / self.seed_rate
        next_t = time.monotonic()
        for i in range(self.count):
            value = str(i)
            partition = partition_for(value, self.input_partitions)
            op = self.history.next_id()
            self.history.record(p, "invoke", "send", id=op, topic=self.input, value=value,
                                key=value, producer=f"{p}.1", txn=None, partition=partition)

            def report(err, msg, op=op) -> None:
                if err is None:
                    self.acked += 1
                    self.history.record(p, "ok", "send", id=op, partition=msg.partition(),
                                        offset=msg.offset())
                else:
                    self.history.record(p, "info", "send", id=op, error=error_text(err))

            while True:
                try:
                    producer.produce(self.input, value=value.encode(), key=value.encode(),
                                     partition=partition, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            next_t += interval
            while (wait := next_t - time.monotonic()) > 0:
                producer.poll(min(wait, 0.05))
        producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
        self.seeded.set()

    # -- the copier processes ------------------------------------------------------------------

    def _command(self, index: int, session: int) -> list[str]:
        process = f"{self.name}-{self.kind}-{index}"
        args = ["--bootstrap", self.bootstrap, "--input", self.input, "--output", self.output,
                "--group", self.group, "--process", process, "--session", str(session),
                "--seed", str(self.seed), "--txn-size", str(self.txn_size),
                "--abort-ratio", "0.33", "--stop-file", str(self.stop_file)]
        if self.kind == "java":
            from tests.javaclient import java_command

            return java_command(
                "copier", *args, "--transactional-id", f"{self.name}-java-{index}",
                "--timeout-ms", str(int(API_TIMEOUT_S * 1000)),
                "--prop", f"request.timeout.ms={REQUEST_TIMEOUT_MS}",
                "--prop", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
                "--prop", f"transaction.timeout.ms={TRANSACTION_TIMEOUT_MS}",
                "--prop", "reconnect.backoff.max.ms=500", "--prop", "retry.backoff.ms=50")
        return [sys.executable, "-m", "tests.chaos.workloads.copier", *args,
                "--transactional-id", f"{self.name}-py-{index}"]

    def _spawn(self, index: int) -> None:
        session = self.sessions.get(index, 0) + 1
        self.sessions[index] = session
        err = open(self.out_dir / f"{self.name}-{self.kind}-{index}.stderr", "a")  # noqa: SIM115
        proc = subprocess.Popen(self._command(index, session), stdout=subprocess.PIPE,
                                stderr=err, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        err.close()
        self.procs[index] = proc
        threading.Thread(target=self._read_events, args=(proc,), daemon=True).start()

    def _read_events(self, proc: subprocess.Popen) -> None:
        for event in read_events(proc.stdout):
            self.history.add(event)

    def kill_one(self) -> str | None:
        """SIGKILL a random running copier (the supervisor starts a new one)."""
        with self._lock:
            running = [i for i, pr in sorted(self.procs.items()) if pr.poll() is None]
            if not running or self.stop_event.is_set():
                return None
            index = self.rng.choice(running)
            proc = self.procs[index]
            self.history.record("nemesis", "info", "fault", fault="copier kill",
                                copier=f"{self.name}-{self.kind}-{index}")
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            self.exits.append(f"{index}: killed")
            return f"{self.name}-{self.kind}-{index}"

    def _supervisor(self) -> None:
        with self._lock:
            for i in range(self.copiers):
                self._spawn(i)
        while not self.stop_event.wait(0.5):
            with self._lock:
                for i, proc in list(self.procs.items()):
                    code = proc.poll()
                    if code is not None:
                        if code not in (-signal.SIGKILL,):
                            self.exits.append(f"{i}: exit {code}")
                        self.restarts += 1
                        self._spawn(i)
        self.stop_file.touch()
        for i, proc in self.procs.items():
            try:
                proc.wait(API_TIMEOUT_S * 2)
            except subprocess.TimeoutExpired:
                self.exits.append(f"{i}: did not stop within {API_TIMEOUT_S * 2:.0f}s")
                if self.kind != "java":
                    proc.send_signal(signal.SIGUSR1)  # its stack, into its .stderr file
                    time.sleep(0.5)
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)

    # -- progress ------------------------------------------------------------------------------

    def done(self, direct: str) -> bool:
        """The input is fully seeded and the group's committed offsets reached its end."""
        if not self.seeded.is_set():
            return False
        from tests.chaos.final_read import committed_offsets, end_offsets

        try:
            ends = end_offsets(direct, self.input, self.input_partitions)
            committed = committed_offsets(direct, self.group, self.input,
                                          self.input_partitions)
        except Exception:  # noqa: BLE001 - broker restarting: not done yet
            return False
        return all(committed.get(p, -1) >= end for p, end in ends.items())

    def _lso_prober(self) -> None:
        probe_lso(self.direct, self.history, self.output, self.output_partitions,
                  self.stop_event, interval_s=0.2)

    # -- the watcher ---------------------------------------------------------------------------

    def _watcher(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        p = f"{self.name}-watch"
        consumer = Consumer(consumer_config(self.bootstrap, f"{self.name}-watch", self.logger))
        consumer.assign([TopicPartition(self.output, i, OFFSET_BEGINNING)
                         for i in range(self.output_partitions)])
        try:
            while not self.stop_event.is_set():
                msgs = consumer.consume(num_messages=500, timeout=0.5)
                records = [record_of(m) for m in msgs if m.error() is None]
                if records:
                    self.history.record(p, "ok", "poll", c=f"{p}.1", iso="read_committed",
                                        records=records)
        finally:
            consumer.close()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(copier_main())
