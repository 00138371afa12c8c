"""The exactly-once sink: batch and streaming writes from Spark, each task in its own Kafka
transaction; a retried task, a replayed micro-batch and a zombie never write twice."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import PySparkException
from pyspark.sql.utils import AnalysisException

from semel.broker.testing import BrokerThread
from semel.pipelines.spark.options import sink_options
from semel.pipelines.spark.sink import TaskWriter
from tests.pipelines.test_spark_source import consume_all


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("broker") / "data",
                      {"group.initial.rebalance.delay.ms": "0"}) as b:
        yield b.bootstrap


def create(bootstrap: str, *topics: str, partitions: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        f.result()


def write(df, bootstrap: str, **options):
    writer = df.write.format("semel").mode("append").option("kafka.bootstrap.servers",
                                                              bootstrap)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.save()


def test_batch_write_with_spark_columns(spark, kafka):
    create(kafka, "bw-a", "bw-b")
    rows = [(f"k{i}", f"v{i}".encode(), "bw-a" if i % 3 else "bw-b", [("h", b"x")])
            for i in range(300)]
    df = spark.createDataFrame(
        rows, "key string, value binary, topic string, headers array<struct<key:string,"
              "value:binary>>").repartition(3)
    write(df, kafka)
    got = consume_all(kafka, "bw-a") + consume_all(kafka, "bw-b")
    assert sorted((r["topic"], r["key"].decode(), r["value"]) for r in got) == sorted(
        (t, k, v) for k, v, t, _ in rows)
    assert all(r["headers"] == [("h", b"x")] for r in got)
    # Java's partitioner (murmur2), as Spark's sink: one key, one partition
    by_key = {}
    for r in got:
        by_key.setdefault((r["topic"], r["key"]), set()).add(r["partition"])
    assert all(len(parts) == 1 for parts in by_key.values())


def test_batch_write_topic_option_and_partition_column(spark, kafka):
    create(kafka, "bw-part", partitions=3)
    df = spark.createDataFrame([(None, f"v{i}", 2) for i in range(20)],
                               "key binary, value string, partition int")
    write(df, kafka, topic="bw-part")
    got = consume_all(kafka, "bw-part")
    assert sorted(r["value"] for r in got) == sorted(f"v{i}".encode() for i in range(20))
    assert {r["partition"] for r in got} == {2} and all(r["key"] is None for r in got)


def test_a_task_that_fails_mid_write_leaves_nothing_and_its_retry_writes_once(spark, kafka):
    create(kafka, "bw-retry")

    def fail_first_attempt(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for i, batch in enumerate(batches):
            if ctx.attemptNumber() == 0 and i == 30:
                time.sleep(1)  # the first rows reach the log inside the transaction
                raise RuntimeError("injected failure after the first rows were produced")
            yield batch

    # an upstream failure in the same task: Spark cuts the sink's input off early
    df = spark.range(0, 40_000, 1, 2).selectExpr("cast(id as string) as key",
                                               "cast(id as string) as value")
    df = df.mapInArrow(fail_first_attempt, df.schema)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        write(df, kafka, topic="bw-retry")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    got = consume_all(kafka, "bw-retry")
    assert sorted(int(r["value"]) for r in got) == list(range(40_000))
    # the failed attempts' records are in the log, aborted: read_uncommitted sees them
    assert len(consume_all(kafka, "bw-retry", "read_uncommitted")) > 40_000


def test_sink_errors(spark, kafka):
    df = spark.createDataFrame([("a",)], "v string")
    with pytest.raises((AnalysisException, PySparkException, ValueError),
                       match="required attribute 'value' not found"):
        write(df, kafka, topic="t")
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises((AnalysisException, PySparkException, ValueError),
                       match="topic option required"):
        write(df, kafka)
    with pytest.raises((AnalysisException, PySparkException, ValueError),
                       match="transactionalIdPrefix"):
        write(df, kafka, topic="t", **{"kafka.transactional.id": "x"})
    with pytest.raises((AnalysisException, PySparkException, ValueError),
                       match="Overwrite is not allowed"):
        df.write.format("semel").mode("overwrite").option("kafka.bootstrap.servers", kafka) \
            .option("topic", "t").save()
    # a transaction the broker refuses: the task fails with Kafka's error, nothing is visible
    create(kafka, "bw-big", partitions=1)
    big = spark.createDataFrame([("x" * 2_000_000,)], "value string")
    with pytest.raises(Exception, match="MSG_SIZE_TOO_LARGE|too large"):
        write(big, kafka, topic="bw-big", **{"kafka.message.max.bytes": "3000000"})
    assert consume_all(kafka, "bw-big") == []


def test_task_writer_skips_a_committed_batch_and_fences_a_zombie(kafka):
    """TaskWriter outside Spark (task partition 0): the same batch twice is written once;
    an attempt still running when a new one starts is fenced and commits nothing."""
    create(kafka, "tw", partitions=1)
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "tw"})
    writer = TaskWriter(options)

    def batches(values):
        yield pa.RecordBatch.from_pydict({"value": values})

    first = writer.write(batches([b"a", b"b"]), "tw-test", 0, "query-1")
    again = writer.write(batches([b"a", b"b"]), "tw-test", 0, "query-1")
    assert (first.records, first.skipped, again.skipped) == (2, False, True)
    writer.write(batches([b"c"]), "tw-test", 1, "query-1")

    # a zombie: blocked inside its transaction while a new attempt of the task starts
    release = threading.Event()
    entered = threading.Event()
    errors = []

    def slow():
        yield from batches([b"zombie-1"])
        entered.set()
        release.wait(30)
        yield from batches([b"zombie-2"])

    def zombie():
        try:
            writer.write(slow(), "tw-test", 2, "query-1")
        except KafkaException as e:
            errors.append(e)

    t = threading.Thread(target=zombie)
    t.start()
    assert entered.wait(30)
    writer.write(batches([b"d"]), "tw-test", 2, "query-1")
    release.set()
    t.join(60)
    assert errors and "fenced" in str(errors[0]).lower()
    assert [r["value"] for r in consume_all(kafka, "tw")] == [b"a", b"b", b"c", b"d"]
    # another query (or a batch job) reusing the ids starts its own batch numbers: its
    # batch 0 is not the first query's
    assert not writer.write(batches([b"e"]), "tw-test", 0, "query-2").skipped
    assert not writer.write(batches([b"f"]), "tw-test", 0, "job-token").skipped
    assert [r["value"] for r in consume_all(kafka, "tw")][-2:] == [b"e", b"f"]


def test_a_replay_finds_its_batch_whatever_topic_comes_first(kafka):
    """Rows to several topics (a topic column): a replay whose rows come in another order
    still recognises the committed batch."""
    create(kafka, "multi-a", "multi-b", partitions=1)
    writer = TaskWriter(sink_options({"kafka.bootstrap.servers": kafka}))

    def rows(topics):
        yield pa.RecordBatch.from_pydict({"topic": topics, "value": [b"x"] * len(topics)})

    assert not writer.write(rows(["multi-a", "multi-b"]), "multi", 0, "q").skipped
    assert writer.write(rows(["multi-b", "multi-a"]), "multi", 0, "q").skipped
    assert len(consume_all(kafka, "multi-a")) == len(consume_all(kafka, "multi-b")) == 1
    with pytest.raises(ValueError, match="null topic"):
        writer.write(rows([None, "multi-a"]), "multi", 1, "q")


def test_sink_groups_hold_only_offsets(kafka):
    """The sink's marker groups hold only committed offsets (no members): they show up as
    empty groups, as Kafka shows groups that only commit offsets."""
    create(kafka, "tw-groups")
    options = sink_options({"kafka.bootstrap.servers": kafka, "topic": "tw-groups"})

    def batches():
        yield pa.RecordBatch.from_pydict({"value": [b"x"]})

    TaskWriter(options).write(batches(), "grp", 0, "q")
    admin = AdminClient({"bootstrap.servers": kafka})
    groups = admin.list_consumer_groups().result().valid
    [g] = [g for g in groups if g.group_id == "grp-0"]
    assert str(g.state).endswith("EMPTY")
