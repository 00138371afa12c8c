"""SIGKILL around a transaction's completion, seen by read_committed consumers
(log.flush.mode=fsync).

- Killed between PREPARE_COMMIT and COMPLETE_COMMIT: the broker (tests/integration/
  paused_broker.py) parks the completion after PREPARE_COMMIT is durable and the client got
  its answer, before any marker; while parked read_committed consumers see none of the
  transaction (its records sit above the LSO); after the kill and a restart the transaction
  completes (CompleteCommit) and they see all of it, in every partition.
- The same with PREPARE_ABORT: none of it, ever, and read_uncommitted sees the records.
- Killed with the COMMIT marker written to one partition of the two: until the restart
  read_committed consumers see that partition's part (as with Kafka, a transaction becomes
  visible partition by partition while its markers are written); after it, all of it.
- Killed after COMPLETE_COMMIT: after the restart the transaction is still complete and
  read_committed consumers see all of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from semel.broker.testing import READY, BrokerProcess
from tests.kafka_wire import KafkaWire, create_topic, message
from tests.waiting import until

TIMEOUT_S = 30
DESCRIBE_TRANSACTIONS = 65
PARTITIONS = 2
OVERRIDES = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2"}
ROOT = Path(__file__).resolve().parents[2]


class PausedBrokerProcess(BrokerProcess):
    """BrokerProcess running tests/integration/paused_broker.py in `mode`."""

    def __init__(self, data_dir: Path, pause_file: Path, mode: str = "prepare") -> None:
        super().__init__(data_dir, OVERRIDES)
        self.pause_file = pause_file
        self.mode = mode

    def start(self, timeout: float = 30) -> PausedBrokerProcess:
        args = [sys.executable, "-m", "tests.integration.paused_broker", self.mode,
                str(self.pause_file),
                "serve", "--host", "127.0.0.1", "--port", str(self.port),
                "--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            args += ["--set", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, cwd=ROOT)
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = READY.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("broker did not become ready:\n" + "".join(self.lines[-30:]))
        return self



def txn_state(bootstrap: str, transactional_id: str) -> str:
    with KafkaWire.connect(bootstrap) as wire:
        return wire.request(DESCRIBE_TRANSACTIONS, 0, message(
            DESCRIBE_TRANSACTIONS, "request", transactional_ids=[transactional_id])
        ).transaction_states[0].transaction_state


def consume(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    """Every record of `topic` a consumer of `isolation` reads from the start to its end
    (read_committed: the LSO) of every partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got, at_eof = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_eof) < PARTITIONS:
            assert time.monotonic() < deadline, "consumer did not reach the end"
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                at_eof.add(m.partition())
                continue
            at_eof.discard(m.partition())
            got.append(m.value())
    finally:
        consumer.close()
    return sorted(got)


def produce_transaction(bootstrap: str, topic: str, transactional_id: str,
                        commit: bool) -> list[bytes]:
    """A 20-record transaction over both partitions; returns its values."""
    from confluent_kafka import Producer

    with KafkaWire.connect(bootstrap) as wire:
        create_topic(wire, topic, PARTITIONS)
    values = sorted(b"%s-%d" % (topic.encode(), i) for i in range(20))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 1})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=i % PARTITIONS)
    producer.flush(TIMEOUT_S)
    if commit:
        producer.commit_transaction(TIMEOUT_S)
    else:
        producer.abort_transaction(TIMEOUT_S)
    return values


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_sigkill_between_prepare_and_complete(tmp_path, commit):
    data, pause_file = tmp_path / "data", tmp_path / "paused"
    broker = PausedBrokerProcess(data, pause_file).start()
    try:
        values = produce_transaction(broker.bootstrap, "crash-mid", "crash-mid", commit)
        until(pause_file.exists)
        prepare = "PREPARE_COMMIT" if commit else "PREPARE_ABORT"
        assert pause_file.read_text().split() == ["crash-mid", prepare]
        # parked at the commit point: no marker yet, so the records sit above the LSO
        assert txn_state(broker.bootstrap, "crash-mid") == prepare.title().replace("_", "")
        assert consume(broker.bootstrap, "crash-mid", "read_committed") == []
    finally:
        broker.kill()
    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        complete = "CompleteCommit" if commit else "CompleteAbort"
        until(lambda: txn_state(broker.bootstrap, "crash-mid") == complete)
        assert consume(broker.bootstrap, "crash-mid", "read_committed") == (
            values if commit else [])
        assert consume(broker.bootstrap, "crash-mid", "read_uncommitted") == values
    finally:
        broker.stop()


def test_sigkill_with_markers_half_written(tmp_path):
    data, pause_file = tmp_path / "data", tmp_path / "paused"
    broker = PausedBrokerProcess(data, pause_file, "first-marker").start()
    try:
        values = produce_transaction(broker.bootstrap, "crash-half", "crash-half", True)
        until(pause_file.exists)
        assert txn_state(broker.bootstrap, "crash-half") == "PrepareCommit"
        # partition 0 has its marker, partition 1 not yet (values[i] went to i % 2)
        partition_0 = sorted(v for i, v in enumerate(values) if i % PARTITIONS == 0)
        assert consume(broker.bootstrap, "crash-half", "read_committed") == partition_0
    finally:
        broker.kill()
    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        until(lambda: txn_state(broker.bootstrap, "crash-half") == "CompleteCommit")
        assert consume(broker.bootstrap, "crash-half", "read_committed") == values
    finally:
        broker.stop()


def test_sigkill_after_complete_commit(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        values = produce_transaction(broker.bootstrap, "crash-after", "crash-after", True)
        until(lambda: txn_state(broker.bootstrap, "crash-after") == "CompleteCommit")
        assert consume(broker.bootstrap, "crash-after", "read_committed") == values
    finally:
        broker.kill()
    broker = BrokerProcess(data, OVERRIDES).start()
    try:
        assert txn_state(broker.bootstrap, "crash-after") == "CompleteCommit"
        assert consume(broker.bootstrap, "crash-after", "read_committed") == values
    finally:
        broker.stop()
