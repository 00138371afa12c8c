"""KIP-939 crash safety with kill -9: a confluent-kafka producer process writes a transaction,
flushes it and prepares it (``pipelines.twophase``), prints the prepared state an external
transaction manager would store, and is SIGKILLed; then the broker (durable, fsync) is
SIGKILLed and restarted. After the restart a keepPreparedTxn call finds the same transaction,
read_committed readers have seen nothing of it, and the stored state commits it (all of it
becomes visible, once) or aborts it (none of it ever). Also with the broker SIGKILLed while the
commit itself is in flight, at several delays: completing again after the restart always
ends with every record visible exactly once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from semel.broker.testing import BrokerProcess
from semel.pipelines.twophase import Outcome, PreparedTxn, TwoPhaseCommitClient
from tests.pipelines.test_spark_source import consume_all

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 300

PRODUCER = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Producer
    from semel.pipelines.twophase import TwoPhaseCommitClient

    bootstrap, topic, txn_id, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "linger.ms": 5})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, key=str(i % 7).encode(), value=f"{txn_id}-{i}".encode())
    producer.flush(30)
    with TwoPhaseCommitClient(bootstrap) as client:
        prepared = client.prepare(txn_id)
    print(prepared.to_json(), flush=True)
    time.sleep(3600)  # the test kills this process
""")

COMPLETE = textwrap.dedent("""
    import sys
    from semel.pipelines.twophase import PreparedTxn, TwoPhaseCommitClient

    with TwoPhaseCommitClient(sys.argv[1], timeout_s=5) as client:
        print(client.complete(PreparedTxn.from_json(sys.argv[2])).value, flush=True)
""")


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"transaction.two.phase.commit.enable": "true",
                                          "transaction.state.log.num.partitions": "2"})
    b.start()
    yield b
    b.stop()


def restart(broker: BrokerProcess) -> None:
    port = broker.port
    broker.kill()
    broker.port = port
    broker.start()


def python(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def prepare_in_a_killed_producer(broker: BrokerProcess, topic: str, txn_id: str
                                 ) -> PreparedTxn:
    """The producer process prepares, reports, and is SIGKILLed."""
    proc = python(PRODUCER, broker.bootstrap, topic, txn_id, str(RECORDS))
    try:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"producer failed: {proc.stderr.read()}")
        prepared = PreparedTxn.from_json(line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    return prepared


def values(bootstrap: str, topic: str) -> Counter:
    return Counter(r["value"] for r in consume_all(bootstrap, topic))


def create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, 3, 1)]).values():
        f.result()


@pytest.mark.parametrize("commit", [True, False])
def test_producer_and_broker_killed_between_prepare_and_commit(broker, commit):
    create(broker.bootstrap, "crash")
    prepared = prepare_in_a_killed_producer(broker, "crash", "crash-txn")
    assert values(broker.bootstrap, "crash") == Counter()
    restart(broker)
    assert values(broker.bootstrap, "crash") == Counter()
    with TwoPhaseCommitClient(broker.bootstrap) as client:
        # a restarted producer (keepPreparedTxn) finds the same transaction
        assert client.prepare("crash-txn") == prepared
        d = client.describe("crash-txn")
        assert (d.state, d.transaction_timeout_ms) == ("Ongoing", 2**31 - 1)
        outcome = client.complete(prepared, commit=commit)
    assert outcome == (Outcome.COMMITTED if commit else Outcome.ABORTED)
    expected = Counter(f"crash-txn-{i}".encode() for i in range(RECORDS)) if commit else Counter()
    assert values(broker.bootstrap, "crash") == expected
    restart(broker)  # the outcome is durable
    assert values(broker.bootstrap, "crash") == expected
    with TwoPhaseCommitClient(broker.bootstrap) as client:
        assert client.complete(prepared) == Outcome.NOTHING_ONGOING


def test_broker_killed_while_the_commit_is_in_flight(broker):
    create(broker.bootstrap, "inflight")
    expected: Counter = Counter()
    for round_, delay in enumerate((0.0, 0.005, 0.02, 0.05)):
        txn_id = f"inflight-{round_}"
        prepared = prepare_in_a_killed_producer(broker, "inflight", txn_id)
        expected += Counter(f"{txn_id}-{i}".encode() for i in range(RECORDS))
        proc = python(COMPLETE, broker.bootstrap, prepared.to_json())
        time.sleep(delay)
        restart(broker)
        first, _ = proc.communicate(timeout=60)
        with TwoPhaseCommitClient(broker.bootstrap) as client:
            again = client.complete(prepared)
        # never aborted: the first attempt committed (the second then finds nothing), or
        # it did not get through (the second commits), or its commit was durable but its
        # answer lost (the restart completes it, the second finds nothing)
        assert again in (Outcome.COMMITTED, Outcome.NOTHING_ONGOING), (first, again)
        if first.strip() == "committed":
            assert again == Outcome.NOTHING_ONGOING
        assert values(broker.bootstrap, "inflight") == expected
