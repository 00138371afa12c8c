"""The exactly-once sink in KIP-939 two-phase commit mode.

First without Spark, the sink's task and driver steps driven directly (tasks faked with a
TaskContext), to reach the states a crash leaves: tasks prepared and the driver gone before
its decision (the re-executed batch aborts and rewrites), and the driver gone after its
decision part way through the completions (the re-executed batch rolls forward). Then
streaming queries: a read_committed reader that polls during the query never sees part of a
micro-batch (the records carry their batch id), where per-task mode does show partial
batches; tasks failing on their first attempt, a replayed batch and a broker SIGKILL during
batches leave the output exactly once.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from types import SimpleNamespace

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from semel.broker.testing import BrokerProcess, BrokerThread
from semel.pipelines.spark import sink
from semel.pipelines.spark.options import sink_options, stream_prefix
from semel.pipelines.twophase import Outcome, PreparedTxn, TwoPhaseCommitClient
from tests.pipelines.test_spark_source import consume_all
from tests.pipelines.test_spark_streaming import (
    Input,
    check_output,
    create,
    kill_during_batches,
    start_query,
)

TWO_PC = {"transaction.two.phase.commit.enable": "true",
          "group.initial.rebalance.delay.ms": "0"}


# -- the task and driver steps, without Spark ----------------------------------------------------

@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("twopc") / "data", TWO_PC) as b:
        yield b.bootstrap


def rows(values: list[bytes]):
    return [pa.RecordBatch.from_pydict({"key": [None] * len(values), "value": values},
                                       schema=pa.schema([("key", pa.binary()),
                                                         ("value", pa.binary())]))]


@pytest.fixture
def fake_tasks(monkeypatch):
    """TaskContext.get() answers the partition set in ``current``; the input check passes."""
    import pyspark

    current = SimpleNamespace(partition=0)
    context = SimpleNamespace(partitionId=lambda: current.partition, attemptNumber=lambda: 0)
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: context))
    monkeypatch.setattr(sink, "input_ended_normally", lambda: True)
    return current


def run_tasks(fake_tasks, writer, data: dict[int, list[bytes]], prefix, batch_id, owner):
    results = []
    for partition, values in data.items():
        fake_tasks.partition = partition
        results.append(writer.write(iter(rows(values)), prefix, batch_id, owner,
                                    two_phase=True))
    return results


def data_for(topic_batch: str) -> dict[int, list[bytes]]:
    return {p: [f"{topic_batch}-{p}-{i}".encode() for i in range(20)] for p in range(3)}


def committed(bootstrap: str, topic: str) -> Counter:
    return Counter(r["value"] for r in consume_all(bootstrap, topic))


def test_mode_follows_the_broker_and_the_option(kafka, tmp_path):
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "x"})
    assert sink.choose_two_phase_commit(options) is True
    off = sink_options({"kafka.bootstrap.servers": kafka, "topic": "x",
                        "twoPhaseCommit": "false"})
    assert sink.choose_two_phase_commit(off) is False
    with BrokerThread(tmp_path / "plain") as plain:
        auto = sink_options({"kafka.bootstrap.servers": plain.bootstrap, "topic": "x"})
        assert sink.choose_two_phase_commit(auto) is False
        required = sink_options({"kafka.bootstrap.servers": plain.bootstrap, "topic": "x",
                                 "twoPhaseCommit": "true"})
        with pytest.raises(sink.OptionError, match="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
            sink.choose_two_phase_commit(required)
    with pytest.raises(sink.OptionError, match="twoPhaseCommit"):
        sink_options({"kafka.bootstrap.servers": kafka, "twoPhaseCommit": "maybe"})


def test_prepared_tasks_then_driver_commit(kafka, fake_tasks):
    create_topics(kafka, "tp-commit")
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "tp-commit"})
    writer = sink.TaskWriter(options)
    results = run_tasks(fake_tasks, writer, data_for("b0"), "q-commit", 0, "query-a")
    assert all(r.prepared is not None for r in results)
    assert committed(kafka, "tp-commit") == Counter()  # prepared: nothing visible
    with TwoPhaseCommitClient(kafka) as client:
        for r in results:
            d = client.describe(r.name)
            assert (d.state, d.transaction_timeout_ms) == ("Ongoing", 2**31 - 1)
    sink.complete_batch(options, 0, results)
    assert committed(kafka, "tp-commit") == Counter(
        v for values in data_for("b0").values() for v in values)
    # the batch replayed after the commit: every task finds its offset and writes nothing
    again = run_tasks(fake_tasks, writer, data_for("b0"), "q-commit", 0, "query-a")
    assert all(r.skipped and r.prepared is None for r in again)


def test_driver_gone_before_the_decision_aborts_and_rewrites(kafka, fake_tasks):
    create_topics(kafka, "tp-undecided")
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "tp-undecided"})
    writer = sink.TaskWriter(options)
    run_tasks(fake_tasks, writer, data_for("b3"), "q-undecided", 3, "query-b")
    # the driver died: no decision, no completion. Spark re-executes batch 3
    results = run_tasks(fake_tasks, writer, data_for("b3"), "q-undecided", 3, "query-b")
    assert all(r.prepared is not None and not r.skipped for r in results)
    assert committed(kafka, "tp-undecided") == Counter()
    sink.complete_batch(options, 3, results)
    counts = committed(kafka, "tp-undecided")
    assert set(counts.values()) == {1} and len(counts) == 60


def test_driver_gone_mid_completion_rolls_forward(kafka, fake_tasks):
    create_topics(kafka, "tp-decided")
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "tp-decided"})
    writer = sink.TaskWriter(options)
    results = run_tasks(fake_tasks, writer, data_for("b5"), "q-decided", 5, "query-c")
    # the driver recorded its decision and completed one transaction, then died
    decided = Consumer({"bootstrap.servers": kafka, "group.id": sink.decision_group("q-decided"),
                        "enable.auto.commit": False})
    decided.commit(offsets=[TopicPartition("tp-decided", 0, 6, metadata="query-c")],
                   asynchronous=False)
    decided.close()
    with TwoPhaseCommitClient(kafka) as client:
        assert client.complete(PreparedTxn(results[0].name, *results[0].prepared)) == \
            Outcome.COMMITTED
    assert len(committed(kafka, "tp-decided")) == 20  # the crash shows part of the batch
    # the re-executed batch commits what is still prepared and writes nothing new
    again = run_tasks(fake_tasks, writer, data_for("b5"), "q-decided", 5, "query-c")
    assert all(r.skipped for r in again)
    counts = committed(kafka, "tp-decided")
    assert set(counts.values()) == {1} and len(counts) == 60
    with TwoPhaseCommitClient(kafka) as client:  # nothing left open
        assert client.open_transaction_starts([("tp-decided", 0)]) == {("tp-decided", 0): {}}


def test_failed_batch_aborts_its_prepared_transactions(kafka, fake_tasks):
    create_topics(kafka, "tp-failed")
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "tp-failed"})
    results = run_tasks(fake_tasks, sink.TaskWriter(options), data_for("b1"), "q-failed", 1,
                        "query-d")
    sink.abort_batch(options, 1, results[:2])  # the third task failed: no message from it
    with TwoPhaseCommitClient(kafka) as client:
        states = [client.describe(r.name).state for r in results]
    assert states[:2] == ["CompleteAbort", "CompleteAbort"]
    assert committed(kafka, "tp-failed") == Counter()


def test_completion_order_hides_the_batch_until_whole():
    r = [sink.TaskResult(f"t-{i}", i, 0, 1, False, prepared=(100 + i, 0)) for i in range(3)]
    # one partition: the transaction that starts first there is committed last
    order, atomic = sink.completion_order(r, {("t", 0): {101: 5, 100: 9, 102: 7, 555: 1}})
    assert atomic and [x.name for x in order][-1] == "t-1"
    # two partitions held by different transactions that each write to the other's: a cycle
    order, atomic = sink.completion_order(r[:2], {("t", 0): {100: 1, 101: 2},
                                                  ("t", 1): {101: 1, 100: 2}})
    assert not atomic and len(order) == 2


def create_topics(bootstrap: str, *topics: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result()


# -- streaming queries -------------------------------------------------------------------------

@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", TWO_PC)
    b.start()
    yield b
    b.stop()


def tag_with_batch_id(slow_partition: int = 0, delay_s: float = 2.0):
    """A mapInArrow function appending "@<batch id>" to each value; the task of
    ``slow_partition`` waits ``delay_s`` after its rows (its transaction ends last)."""

    def tag(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        ctx = TaskContext.get()
        suffix = "@" + ctx.getLocalProperty("streaming.sql.batchId")
        for batch in batches:
            values = pc.binary_join_element_wise(
                batch.column(1), pa.scalar(suffix.encode(), pa.binary()), b"")
            yield pa.RecordBatch.from_arrays([batch.column(0), values],
                                             names=batch.schema.names)
        if ctx.partitionId() == slow_partition:
            time.sleep(delay_s)

    return tag


class PollingReader(threading.Thread):
    """Reads the output at read_committed while the query runs: each round takes the
    partition's last stable offset, reads everything below it and records how many records
    of each batch were visible at that instant."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()
        self.snapshots: list[Counter] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _run(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "poller",
                             "isolation.level": "read_committed", "enable.auto.commit": False})
        tp = TopicPartition(self.topic, 0)
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        seen: Counter = Counter()
        while not self.stop.is_set():
            [lso] = [f.result().offset for f in admin.list_offsets(
                {tp: OffsetSpec.latest()},
                isolation_level=IsolationLevel.READ_COMMITTED).values()]
            while consumer.position([tp])[0].offset < lso:
                for m in consumer.consume(500, 1.0):
                    if m.error() is None and m.offset() < lso:
                        seen[m.value().rsplit(b"@", 1)[1]] += 1
                    elif m.error() is None:
                        consumer.seek(TopicPartition(self.topic, 0, m.offset()))
                        break
                else:
                    continue
                break
            self.snapshots.append(Counter(seen))
            time.sleep(0.02)
        consumer.close()


def run_observed(spark, bootstrap: str, source: str, sink_topic: str, checkpoint,
                 **writer_options) -> PollingReader:
    reader = PollingReader(bootstrap, sink_topic)
    reader.start()
    df = (spark.readStream.format("semel").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "300").load()
          .selectExpr("key", "value"))
    df = df.mapInArrow(tag_with_batch_id(), df.schema)
    writer = (df.writeStream.format("semel").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", sink_topic).option("checkpointLocation", str(checkpoint))
              .trigger(availableNow=True))
    for k, v in writer_options.items():
        writer = writer.option(k, v)
    q = writer.start()
    q.awaitTermination(300)
    time.sleep(0.5)
    reader.stop.set()
    reader.join(30)
    assert q.exception() is None, q.exception()
    assert reader.error is None, reader.error
    return reader


def partial_batches(reader: PollingReader, final: Counter) -> set[bytes]:
    return {batch for snap in reader.snapshots for batch, n in snap.items()
            if n != final[batch]}


def test_reader_never_sees_part_of_a_micro_batch(spark, broker, tmp_path):
    create(broker.bootstrap, "events")
    create_topics(broker.bootstrap, "atomic", "per-task")
    source = Input(broker.bootstrap, "events")
    source.produce(1200)
    reader = run_observed(spark, broker.bootstrap, "events", "atomic", tmp_path / "c1")
    final = Counter(r["value"].rsplit(b"@", 1)[1] for r in consume_all(broker.bootstrap,
                                                                         "atomic"))
    assert len(final) >= 4 and sum(final.values()) == len(source.committed)
    assert len(reader.snapshots) > 20
    assert not partial_batches(reader, final)
    # the same query in per-task mode: the slow task's records come after the others'
    reader = run_observed(spark, broker.bootstrap, "events", "per-task", tmp_path / "c2",
                          twoPhaseCommit="false")
    final = Counter(r["value"].rsplit(b"@", 1)[1] for r in consume_all(broker.bootstrap,
                                                                         "per-task"))
    assert partial_batches(reader, final)


def test_failing_tasks_replay_and_restart_in_two_phase_mode(spark, broker, tmp_path):
    bootstrap = broker.bootstrap
    create(bootstrap, "orders", "copied")
    source = Input(bootstrap, "orders")
    checkpoint = tmp_path / "checkpoint"
    source.produce(800)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        q = start_query(spark, bootstrap, "orders", "copied", checkpoint,
                        fail_first_attempts=True, maxOffsetsPerTrigger="300")
        q.awaitTermination(300)
        assert q.exception() is None, q.exception()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    commits = checkpoint / "commits"
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    source.produce(400)
    q = start_query(spark, bootstrap, "orders", "copied", checkpoint)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    check_output(bootstrap, "copied", source)
    # the query ran in two-phase commit mode: its driver recorded each batch's decision
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    decided = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False,
                        "group.id": sink.decision_group(stream_prefix(str(checkpoint),
                                                                      query_id))})
    [marker] = decided.committed([TopicPartition("copied", 0)], timeout=30)
    decided.close()
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    assert (marker.offset, marker.metadata) == (last + 1, query_id)


def test_broker_sigkill_during_two_phase_batches(spark, broker, tmp_path):
    create(broker.bootstrap, "orders", "copied")
    source = Input(broker.bootstrap, "orders")
    source.produce(4000)
    # prepared transactions survive the kills
    kill_during_batches(spark, broker, tmp_path / "checkpoint", first=3, every=6)
    check_output(broker.bootstrap, "copied", source)
    # nothing left prepared: every decided batch was completed or rolled forward
    with TwoPhaseCommitClient(broker.bootstrap) as client:
        assert client.open_transaction_starts([("copied", p) for p in range(3)]) == {
            ("copied", p): {} for p in range(3)}
