"""The PySpark Kafka source against a real broker: batch reads of committed, aborted and plain
records with Spark's schema, offsets options, splitting, data loss, and option errors before a
query starts."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import PySparkException
from pyspark.sql.utils import AnalysisException

from semel.broker.testing import BrokerThread

MIXED = "mixed"  # 2 partitions: committed, aborted and plain records, headers
SPARSE = "sparse"  # 1 partition ending in an aborted transaction and a marker


def produce_mixed(bootstrap: str) -> None:
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "source-test"})
    txn.init_transactions()
    for i in range(8):
        txn.begin_transaction()
        for j in range(10):
            txn.produce(MIXED, key=f"k{j}".encode(), value=f"t{i}-{j}".encode(),
                        partition=j % 2, headers=[("n", str(j).encode()), ("empty", None)])
        txn.flush()  # aborted records reach the log (an abort purges unsent ones)
        (txn.commit_transaction if i % 3 != 1 else txn.abort_transaction)()
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for j in range(6):
        plain.produce(MIXED, key=None if j % 2 else b"p", value=None if j == 5 else
                      f"plain-{j}".encode(), partition=j % 2, timestamp=1_600_000_000_000 + j)
    plain.flush()
    txn.begin_transaction()
    txn.produce(SPARSE, value=b"committed")
    txn.commit_transaction()
    txn.begin_transaction()
    for _ in range(5):
        txn.produce(SPARSE, value=b"aborted")
    txn.flush()
    txn.abort_transaction()


def consume_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[dict]:
    """What a plain librdkafka consumer reads, as Spark rows' fields."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                  "isolation.level": isolation, "enable.partition.eof": True})
    parts = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic).topics[topic]
    c.assign([TopicPartition(topic, p, 0) for p in parts.partitions])
    rows, eof = [], set()
    while len(eof) < len(parts.partitions):
        m = c.poll(5)
        assert m is not None, "consumer stalled"
        if m.error():
            eof.add(m.partition())
            continue
        rows.append({"key": m.key(), "value": m.value(), "topic": m.topic(),
                     "partition": m.partition(), "offset": m.offset(),
                     "timestamp_ms": m.timestamp()[1], "timestampType": m.timestamp()[0] - 1,
                     "headers": [(k, v) for k, v in (m.headers() or [])]})
    c.close()
    return rows


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("broker") / "data",
                      {"group.initial.rebalance.delay.ms": "0"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for f in admin.create_topics([NewTopic(MIXED, 2, 1), NewTopic(SPARSE, 1, 1),
                                      NewTopic("empty", 3, 1)]).values():
            f.result()
        produce_mixed(b.bootstrap)
        yield b.bootstrap


def read(spark, bootstrap, **options):
    reader = spark.read.format("semel").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def as_records(rows) -> list[dict]:
    out = []
    for r in rows:
        d = r.asDict(recursive=True)
        d["timestamp_ms"] = round(d.pop("timestamp").timestamp() * 1000)
        if "headers" in d:
            d["headers"] = [(h["key"], h["value"]) for h in d["headers"]]
        out.append(d)
    return sorted(out, key=lambda d: (d["partition"], d["offset"]))


def test_batch_read_is_exactly_the_committed_and_plain_records(spark, kafka):
    df = read(spark, kafka, subscribe=MIXED, includeHeaders="true")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>")]
    got = as_records(df.collect())
    expected = sorted(consume_all(kafka, MIXED), key=lambda d: (d["partition"], d["offset"]))
    assert got == expected
    values = [r["value"] for r in got]
    assert len(values) == 50 + 6  # 5 committed transactions of 10, 6 plain records
    assert not any(v and v.startswith(b"t1-") for v in values)  # transaction 1 aborted
    assert {r["timestamp_ms"] for r in got if r["value"] == b"plain-0"} == {1_600_000_000_000}
    assert None in values and any(r["key"] is None for r in got)


def test_read_uncommitted_sees_aborted_records_and_no_markers(spark, kafka):
    rows = read(spark, kafka, subscribe=SPARSE,
                **{"kafka.isolation.level": "read_uncommitted"}).collect()
    assert sorted(r.value for r in rows) == [b"aborted"] * 5 + [b"committed"]
    committed = read(spark, kafka, subscribe=SPARSE).collect()
    assert [(r.value, r.offset) for r in committed] == [(b"committed", 0)]


def test_headers_column_only_with_include_headers(spark, kafka):
    assert "headers" not in read(spark, kafka, subscribe=MIXED).columns


def test_offsets_json_assign_and_pattern(spark, kafka):
    all_rows = as_records(read(spark, kafka, subscribe=MIXED).collect())
    p0 = [r for r in all_rows if r["partition"] == 0]
    start, end = p0[3]["offset"], p0[10]["offset"]
    rows = as_records(read(
        spark, kafka, assign=json.dumps({MIXED: [0]}),
        startingOffsets=json.dumps({MIXED: {"0": start}}),
        endingOffsets=json.dumps({MIXED: {"0": end}})).collect())
    assert rows == [r for r in p0 if start <= r["offset"] < end]
    # -2 / -1 inside the JSON: earliest and latest
    last_p1 = max(r["offset"] for r in all_rows if r["partition"] == 1)
    rows = as_records(read(spark, kafka, subscribe=MIXED,
                           startingOffsets=json.dumps({MIXED: {"0": -2, "1": last_p1}}),
                           endingOffsets=json.dumps({MIXED: {"0": -1, "1": -1}})).collect())
    assert rows == p0 + [r for r in all_rows if r["offset"] == last_p1 and r["partition"] == 1]
    pattern = read(spark, kafka, subscribePattern="mix.*|spa.se").collect()
    assert {r.topic for r in pattern} == {MIXED, SPARSE}
    assert read(spark, kafka, subscribePattern="mix").count() == 0  # whole-name match
    assert read(spark, kafka, subscribe="empty,no-such-topic").count() == 0


def test_large_ranges_are_split_into_tasks(spark, kafka):
    df = read(spark, kafka, subscribe=MIXED, maxRecordsPerPartition="7")
    assert df.rdd.getNumPartitions() > 2
    assert as_records(df.collect()) == as_records(read(spark, kafka, subscribe=MIXED).collect())
    assert read(spark, kafka, subscribe=MIXED, minPartitions="9").rdd.getNumPartitions() >= 9


def test_data_loss_fails_or_skips(spark, kafka):
    admin = AdminClient({"bootstrap.servers": kafka})
    topic = "lossy"
    admin.create_topics([NewTopic(topic, 1, 1)])["lossy"].result()
    p = Producer({"bootstrap.servers": kafka})
    for i in range(10):
        p.produce(topic, value=str(i).encode())
    p.flush()
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result()
    starting = json.dumps({topic: {"0": 1}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, kafka, subscribe=topic, startingOffsets=starting).collect()
    rows = read(spark, kafka, subscribe=topic, startingOffsets=starting,
                failOnDataLoss="false").collect()
    assert [r.value for r in rows] == [str(i).encode() for i in range(4, 10)]


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": MIXED, "assign": json.dumps({MIXED: [0]})}, "exactly one of"),
    ({}, "exactly one of"),
    ({"subscribe": MIXED, "startingOffsets": "{not json"}, "startingoffsets' is not valid JSON"),
    ({"subscribe": MIXED, "startingOffsets": json.dumps({MIXED: {"x": 1}})},
     "not a partition number"),
    ({"subscribe": MIXED, "endingOffsets": json.dumps({MIXED: {"0": -2}})}, "not allowed"),
    ({"subscribe": MIXED, "startingOffsets": "latest"}, "cannot be 'latest'"),
    ({"subscribe": MIXED, "startingOffsets": json.dumps({MIXED: {"0": -1}})}, "not allowed"),
    ({"subscribe": MIXED, "subscrib": "x"}, "unknown source option 'subscrib'"),
    ({"subscribe": MIXED, "startingTimestamp": "1"}, "not supported by this connector"),
    ({"subscribe": MIXED, "kafka.auto.offset.reset": "earliest"}, "set startingOffsets"),
    ({"subscribe": MIXED, "startingOffsets": json.dumps({MIXED: {"0": 1}})},
     "must specify all TopicPartitions"),
    ({"subscribe": SPARSE, "endingOffsets": json.dumps({SPARSE: {"0": 100}})},
     "beyond the partitions' last stable offsets"),
    ({"subscribe": MIXED, "includeHeaders": "yes"}, "true or false"),
])
def test_option_errors_before_the_query_runs(spark, kafka, options, message):
    with pytest.raises((AnalysisException, PySparkException, ValueError), match=message):
        read(spark, kafka, **options).collect()


def test_stream_option_errors_before_the_query_starts(spark, kafka, tmp_path):
    def start(**options):
        reader = spark.readStream.format("semel").option("kafka.bootstrap.servers", kafka)
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    with pytest.raises((AnalysisException, PySparkException, ValueError), match="exactly one"):
        start(subscribe=MIXED, subscribePattern=".*")
    with pytest.raises((AnalysisException, PySparkException, ValueError),
                       match="batch queries only"):
        q = start(subscribe=MIXED, endingOffsets="latest").writeStream.format("noop") \
            .option("checkpointLocation", str(tmp_path / "ck")).start()
        try:
            q.awaitTermination(60)
        finally:
            q.stop()
    with pytest.raises((AnalysisException, PySparkException, ValueError),
                       match="bootstrap.servers' must be specified"):
        spark.readStream.format("semel").option("subscribe", MIXED).load()


def test_compacted_topic_gaps(spark, tmp_path):
    """Offsets the cleaner removed (and markers, aborted records) leave gaps everywhere,
    also at the ends of the tasks' ranges: every range still ends, and the rows are the
    read_committed consumer's."""
    with BrokerThread(tmp_path / "data", {"log.cleaner.enable": "false"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("compacted", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "2000",
            "min.cleanable.dirty.ratio": "0.01"})])["compacted"].result()
        plain = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "compacting"})
        txn.init_transactions()
        for round_ in range(30):
            for k in range(4):
                plain.produce("compacted", key=b"k%d" % k, value=b"p%d" % round_)
            plain.flush()
            txn.begin_transaction()
            txn.produce("compacted", key=b"t%d" % (round_ % 3), value=b"t%d" % round_)
            txn.flush()
            (txn.abort_transaction if round_ % 4 == 3 else txn.commit_transaction)()

        async def clean_all():
            while await b.broker.log_manager.run_cleaner_once() is not None:
                pass

        b.call(clean_all())
        expected = sorted(consume_all(b.bootstrap, "compacted"),
                          key=lambda d: (d["partition"], d["offset"]))
        offsets = [r["offset"] for r in expected]
        assert offsets[-1] + 1 > 2 * len(offsets)  # the log from offset 0 is mostly gaps now
        for per_task in ("3", "1000"):
            got = as_records(read(spark, b.bootstrap, subscribe="compacted",
                                  maxRecordsPerPartition=per_task).collect())
            for r in got + expected:
                r.pop("headers", None)
            assert got == [{k: v for k, v in r.items() if k != "headers"} for r in expected]
