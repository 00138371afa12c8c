"""Streaming copies through the Kafka source and the exactly-once sink, under faults: the query
stopped and restarted from its checkpoint mid-stream, a replayed micro-batch, tasks failing on
their first attempt, and the broker SIGKILLed and restarted during batches. The output topic,
read at read_committed, must hold every committed input record transformed exactly once, in
per-key order, and nothing of aborted transactions."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from semel.broker.testing import BrokerProcess
from semel.pipelines.spark.options import stream_prefix
from tests.pipelines.test_spark_source import consume_all

KEYS = 12
TXN_SIZE = 40


class Input:
    """Transactional input: values "k<key>:<seq>" with a per-key sequence; every fifth
    transaction aborted (its records flushed to the log first)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "transactional.id": f"gen-{topic}"})
        self.producer.init_transactions()
        self.seq = Counter()
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.txns = 0

    def produce(self, records: int) -> None:
        for _ in range(0, records, TXN_SIZE):
            self.txns += 1
            abort = self.txns % 5 == 0
            values = []
            self.producer.begin_transaction()
            for i in range(TXN_SIZE):
                key = f"k{(self.txns * 7 + i) % KEYS}"
                value = f"{key}:{self.seq[key]:06d}".encode()
                if not abort:
                    self.seq[key] += 1
                self.producer.produce(self.topic, key=key.encode(), value=value)
                values.append(value)
            if abort:
                self.producer.flush()
                self.producer.abort_transaction()
                self.aborted += values
            else:
                self.producer.commit_transaction()
                self.committed += values


def transform(df):
    return df.selectExpr("key", "concat(cast(value as string), '!') as value")


def check_output(bootstrap: str, topic: str, source: Input) -> None:
    rows = consume_all(bootstrap, topic)
    values = [r["value"] for r in rows]
    counts = Counter(values)
    duplicates = {v: n for v, n in counts.items() if n > 1}
    expected = {v + b"!" for v in source.committed}
    missing = expected - set(counts)
    unexpected = set(counts) - expected
    assert not duplicates, f"{len(duplicates)} records written more than once"
    assert not missing, f"{len(missing)} records missing, e.g. {sorted(missing)[:3]}"
    assert not unexpected, f"unexpected records (aborted input?): {sorted(unexpected)[:3]}"
    last: dict[bytes, bytes] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        assert r["key"] not in last or last[r["key"]] < r["value"], "per-key order broken"
        last[r["key"]] = r["value"]


@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"})
    b.start()
    yield b
    b.stop()


def create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 3, 1) for t in topics]).values():
        f.result()


def start_query(spark, bootstrap, source, sink, checkpoint: Path, *, trigger=None,
                fail_first_attempts=False, **source_options):
    reader = (spark.readStream.format("semel").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    for k, v in source_options.items():
        reader = reader.option(k, v)
    df = transform(reader.load())
    if fail_first_attempts:
        df = df.mapInArrow(fail_first_attempt(), df.schema)
    writer = (df.writeStream.format("semel").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", sink).option("checkpointLocation", str(checkpoint)))
    writer = writer.trigger(**(trigger or {"availableNow": True}))
    return writer.start()


def fail_first_attempt():
    """A mapInArrow function that fails the first attempt of every task after passing on
    part of its rows (made here so that Spark pickles it by value for its workers)."""

    def fail(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for i, batch in enumerate(batches):
            yield batch
            if ctx.attemptNumber() == 0 and i == 0 and batch.num_rows > 1:
                time.sleep(0.5)
                raise RuntimeError("injected task failure")

    return fail


def run_available_now(spark, *args, **kwargs) -> None:
    q = start_query(spark, *args, **kwargs)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()


def test_restart_replay_and_failing_tasks(spark, broker, tmp_path):
    bootstrap = broker.bootstrap
    create(bootstrap, "orders", "copied")
    source = Input(bootstrap, "orders")
    checkpoint = tmp_path / "checkpoint"
    source.produce(1200)
    # a first run in several micro-batches (maxOffsetsPerTrigger), then more input
    run_available_now(spark, bootstrap, "orders", "copied", checkpoint,
                      maxOffsetsPerTrigger="300")
    source.produce(800)
    # a run whose tasks each fail on their first attempt
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
    try:
        run_available_now(spark, bootstrap, "orders", "copied", checkpoint,
                          fail_first_attempts=True, maxOffsetsPerTrigger="400")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    # the last batch as if the query had died after the sink committed but before Spark
    # recorded the commit: Spark replays it with the same id and offsets
    commits = checkpoint / "commits"
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    run_available_now(spark, bootstrap, "orders", "copied", checkpoint)
    assert (commits / str(last)).exists()
    # stopped mid-stream while input arrives, restarted from the checkpoint
    q = start_query(spark, bootstrap, "orders", "copied", checkpoint,
                    trigger={"processingTime": "200 milliseconds"}, maxOffsetsPerTrigger="100")
    source.produce(600)
    time.sleep(2)
    q.stop()
    source.produce(400)
    run_available_now(spark, bootstrap, "orders", "copied", checkpoint)
    check_output(bootstrap, "copied", source)
    # the tasks' transactional ids and marker groups are named after the checkpoint and the
    # query id Spark keeps in it
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    prefix = stream_prefix(str(checkpoint), query_id)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    groups = admin.list_consumer_groups().result()
    assert {f"{prefix}-{p}" for p in range(3)} <= {g.group_id for g in groups.valid}, (
        groups.valid, groups.errors)
    # aborted transactions existed and were flushed to the log
    assert source.aborted and len(consume_all(bootstrap, "orders", "read_uncommitted")) == (
        len(source.committed) + len(source.aborted))


def test_broker_sigkill_during_batches(spark, broker, tmp_path):
    create(broker.bootstrap, "orders", "copied")
    source = Input(broker.bootstrap, "orders")
    source.produce(6000)
    kill_during_batches(spark, broker, tmp_path / "checkpoint", first=4, every=8)
    check_output(broker.bootstrap, "copied", source)


def kill_during_batches(spark, broker, checkpoint: Path, *, first: int, every: int) -> None:
    """Copy "orders" to "copied" in a query SIGKILLing the broker twice, at batch ``first``
    and ``every`` batches later, restarting it (and the query, as a supervisor would, when
    it gave up) until the query has caught up with the input."""
    port = broker.port

    def start():
        return start_query(spark, broker.bootstrap, "orders", "copied", checkpoint,
                           trigger={"processingTime": "100 milliseconds"},
                           maxOffsetsPerTrigger="200")

    q = start()
    kills = restarts = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        progress = q.lastProgress
        batch = progress["batchId"] if progress else -1
        if kills < 2 and batch >= first + every * kills:
            broker.kill()  # SIGKILL, mid-batch: batches run back to back
            kills += 1
            time.sleep(0.5)
            broker.port = port
            broker.start()
        if not q.isActive:
            # the query gave up (e.g. offsets unreachable while the broker was down): a
            # supervisor restarts it from its checkpoint
            restarts += 1
            assert restarts <= 3, q.exception()
            q = start()
        if kills == 2 and _caught_up(q, broker.bootstrap, "orders"):
            break
        time.sleep(0.2)
    q.stop()
    assert kills == 2


def _caught_up(q, bootstrap: str, topic: str) -> bool:
    """The query's last batch ended at the input's last stable offsets."""
    progress = q.lastProgress
    if not progress:
        return False
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    admin = AdminClient({"bootstrap.servers": bootstrap})
    parts = [TopicPartition(topic, p) for p in range(3)]
    futures = admin.list_offsets({tp: OffsetSpec.latest() for tp in parts},
                                 isolation_level=IsolationLevel.READ_COMMITTED)
    latest = {str(tp.partition): f.result().offset for tp, f in futures.items()}
    return bool(end) and end.get(topic) == latest
