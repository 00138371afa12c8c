"""``format("semel-log")`` against a real broker's data directory: one broker run writes every
kind of batch (keys, headers, null values, an idempotent producer, transactions committed
and aborted side by side, one left open when the broker stops, four codecs, LogAppendTime,
several partitions and segments); a read_committed confluent-kafka consumer reads it all
before the broker stops, and the rows Spark reads from the stopped broker's files must be
exactly those records. Damaged copies of the directory (a torn tail, garbage at the end, a
lost ``.txnindex``) are read without Spark, through the reader's own functions.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from semel.broker.testing import BrokerThread
from semel.pipelines.spark.datadir import (
    AbortedRanges,
    PartitionDir,
    TransactionScan,
    datadir_options,
    plan,
    read_partition,
)
from semel.pipelines.spark.options import OptionError
from semel.protocol.records import BatchHeader, ControlType, iter_batches
from semel.storage.transaction_index import AbortedTxn

TIMEOUT_S = 30
TOPICS = {  # name -> (partitions, configs)
    "plain": (3, {"segment.bytes": "1500"}),
    "txn": (2, {"segment.bytes": "1200"}),
    "open.txn": (2, {"segment.bytes": "1000"}),
    "zipped": (4, {}),
    "appended": (1, {"message.timestamp.type": "LogAppendTime"}),
}
CODECS = ("gzip", "snappy", "lz4", "zstd")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Row = tuple  # (topic, partition, offset, key, value, timestamp ms, timestamp type, headers)


def _producer(bootstrap: str, **config):
    from confluent_kafka import Producer

    def delivered(error, message):
        assert error is None, f"{message.topic()}-{message.partition()}: {error}"

    # batches stay below the topics' small segment.bytes (a larger one is refused)
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 600,
                     "on_delivery": delivered, **config})


def _transactional(bootstrap: str, txn_id: str, **config):
    producer = _producer(bootstrap, **{"transactional.id": txn_id, **config})
    producer.init_transactions(TIMEOUT_S)
    return producer


def _write(bootstrap: str) -> tuple[list, int]:
    """Every kind of batch; returns the producers still alive (one has a transaction open)
    and the offset of the open transaction's first record in open.txn-0."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, config=configs)
                                   for name, (partitions, configs) in TOPICS.items()])
    for future in futures.values():
        future.result(TIMEOUT_S)

    plain = _producer(bootstrap)
    for i in range(120):
        headers = [("h", b"%d" % i), ("h", None), ("ü", b"")] if i % 3 == 0 else None
        key = None if i % 5 == 0 else b"k%d" % (i % 7)
        value = None if i % 11 == 0 else b"plain-%d-" % i + b"x" * (i % 40)
        plain.produce("plain", value=value, key=key, partition=i % 3, headers=headers,
                      timestamp=1_700_000_000_000 + i if i % 4 == 0 else 0)
    plain.flush(TIMEOUT_S)
    idempotent = _producer(bootstrap, **{"enable.idempotence": True})
    for i in range(60):
        idempotent.produce("plain", value=b"idem-%d" % i, key=b"i%d" % i, partition=i % 3)
    idempotent.flush(TIMEOUT_S)
    for codec, partition in zip(CODECS, range(4), strict=True):
        zipper = _producer(bootstrap, **{"compression.type": codec, "linger.ms": 50,
                                          "batch.size": 100_000})
        for i in range(80):
            zipper.produce("zipped", value=b"%s-%d " % (codec.encode(), i) * 8, key=b"z%d" % i,
                           partition=partition, headers=[("codec", codec.encode())])
        zipper.flush(TIMEOUT_S)
    plain.produce("appended", value=b"log-append-time", timestamp=1_600_000_000_000)
    plain.flush(TIMEOUT_S)

    # two transactional producers with transactions open side by side, some aborted, and
    # plain records in between
    a = _transactional(bootstrap, "datadir-a", **{"compression.type": "lz4"})
    b = _transactional(bootstrap, "datadir-b")
    for round_ in range(6):
        a.begin_transaction()
        b.begin_transaction()
        for i in range(12):
            a_outcome = "commit" if round_ % 2 == 0 else "abort"
            b_outcome = "abort" if round_ % 3 == 0 else "commit"
            a.produce("txn", value=b"a-%s-%d-%d" % (a_outcome.encode(), round_, i),
                      key=b"a%d" % i, partition=i % 2)
            b.produce("txn", value=b"b-%s-%d-%d" % (b_outcome.encode(), round_, i),
                      partition=(i + 1) % 2, headers=[("round", b"%d" % round_)])
            if i % 4 == 0:
                plain.produce("txn", value=b"between-%d-%d" % (round_, i), partition=i % 2)
            plain.poll(0)
        a.flush(TIMEOUT_S)
        b.flush(TIMEOUT_S)
        plain.flush(TIMEOUT_S)
        (a.commit_transaction if round_ % 2 == 0 else a.abort_transaction)(TIMEOUT_S)
        (b.abort_transaction if round_ % 3 == 0 else b.commit_transaction)(TIMEOUT_S)

    # a transaction left open in open.txn-0: nothing from its first offset on is stable there,
    # not even what commits after it; open.txn-1 reads on
    c = _transactional(bootstrap, "datadir-open")
    c.begin_transaction()
    c.produce("open.txn", value=b"c-committed", partition=0)
    c.commit_transaction(TIMEOUT_S)
    first_open = []
    c.begin_transaction()
    for i in range(3):
        c.produce("open.txn", value=b"c-open-%d" % i, partition=0,
                  on_delivery=lambda error, m: first_open.append(m.offset()))
    c.flush(TIMEOUT_S)
    a.begin_transaction()
    a.produce("open.txn", value=b"a-after-open", partition=0)
    a.produce("open.txn", value=b"a-visible", partition=1)
    a.commit_transaction(TIMEOUT_S)
    for i in range(20):
        plain.produce("open.txn", value=b"plain-after-open-%d" % i, partition=0)
        plain.produce("open.txn", value=b"plain-visible-%d" % i, partition=1)
    plain.flush(TIMEOUT_S)
    return [plain, idempotent, a, b, c], min(first_open)


def _partitions() -> list[tuple[str, int]]:
    return [(name, p) for name, (count, _) in TOPICS.items() for p in range(count)]


def _wait_stable(bootstrap: str, first_open: int) -> None:
    """Until every partition's last stable offset is where it will stay: the log end (the
    markers, written after EndTxn answers, are in), or the open transaction's start."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    specs = {TopicPartition(t, p): OffsetSpec.latest() for t, p in _partitions()}
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        stable = {(tp.topic, tp.partition): f.result().offset for tp, f in admin.list_offsets(
            specs, isolation_level=IsolationLevel.READ_COMMITTED).items()}
        end = {(tp.topic, tp.partition): f.result().offset for tp, f in admin.list_offsets(
            specs, isolation_level=IsolationLevel.READ_UNCOMMITTED).items()}
        wanted = {**end, ("open.txn", 0): first_open}
        if stable == wanted:
            return
        assert time.monotonic() < deadline, f"offsets never settled: {stable} vs {wanted}"
        time.sleep(0.1)


def _consume(bootstrap: str) -> list[Row]:
    """Everything a read_committed confluent-kafka consumer reads of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "datadir-check",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in _partitions()])
    rows, at_eof = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(at_eof) < len(_partitions()):
            assert time.monotonic() < deadline, f"only {sorted(at_eof)} reached their end"
            for m in consumer.consume(1000, 0.2):
                if m.error():
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    at_eof.add((m.topic(), m.partition()))
                    continue
                at_eof.discard((m.topic(), m.partition()))
                ts_type, ts = m.timestamp()
                rows.append((m.topic(), m.partition(), m.offset(), m.key(), m.value(), ts,
                             ts_type - 1, m.headers() or []))
    finally:
        consumer.close()
    return sorted(rows, key=_order)


def _order(row: Row):
    return row[0], row[1], row[2]


def _digest(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(data directory of a stopped broker, what a read_committed consumer read from it,
    offset of the open transaction's first record in open.txn-0)."""
    data_dir = tmp_path_factory.mktemp("datadir") / "data"
    overrides = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "2"}
    with BrokerThread(data_dir, overrides) as broker:
        producers, first_open = _write(broker.bootstrap)
        _wait_stable(broker.bootstrap, first_open)
        expected = _consume(broker.bootstrap)
    del producers  # after the stop: the open transaction stays open on disk
    return data_dir, expected, first_open


def _spark_rows(df) -> list[Row]:
    rows = df.selectExpr("*", "unix_millis(timestamp) AS ts_ms").collect()
    headers = "headers" in df.columns
    return sorted(((r.topic, r.partition, r.offset, _bytes(r.key), _bytes(r.value), r.ts_ms,
                    r.timestampType,
                    [(h.key, _bytes(h.value)) for h in r.headers] if headers else [])
                   for r in rows), key=_order)


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)


def _read_direct(data_dir: Path, include_headers: bool = True) -> list[Row]:
    """The reader's rows without Spark: plan and read every partition in this process."""
    rows = []
    for part in plan(datadir_options({"path": str(data_dir)})):
        for batch in read_partition(part, include_headers):
            for r in batch.to_pylist():
                rows.append((r["topic"], r["partition"], r["offset"], r["key"], r["value"],
                             (r["timestamp"] - EPOCH) // timedelta(milliseconds=1),
                             r["timestampType"],
                             [(h["key"], h["value"]) for h in r["headers"]]))
    return sorted(rows, key=_order)


# -- what the written data holds ---------------------------------------------------------


def test_written_data_covers_every_case(data):
    data_dir, expected, first_open = data
    logs = {d.name: sorted(p.name for p in d.glob("*.log")) for d in data_dir.iterdir()
            if d.is_dir()}
    assert len(logs["plain-0"]) > 2 and len(logs["txn-0"]) > 2 and len(logs["open.txn-0"]) > 1
    assert list(data_dir.glob("txn-*/*.txnindex"))  # aborted transactions are indexed
    values = {r[4] for r in expected}
    assert not any(v and (v.startswith((b"a-abort", b"b-abort", b"c-open"))
                          or b"after-open" in v) for v in values)
    assert {b"a-visible", b"c-committed", b"plain-visible-19", b"between-5-8"} <= values
    assert {r[6] for r in expected} == {0, 1}  # CreateTime and LogAppendTime
    assert max(r[2] for r in expected if r[:2] == ("open.txn", 0)) < first_open


# -- Spark ------------------------------------------------------------------------------------


def test_rows_are_what_a_read_committed_consumer_reads(spark, data):
    data_dir, expected, _ = data
    before = _digest(data_dir)
    df = spark.read.format("semel-log").option("includeHeaders", "true").load(str(data_dir))
    assert df.rdd.getNumPartitions() == sum(n for n, _ in TOPICS.values())
    assert _spark_rows(df) == expected
    assert _digest(data_dir) == before  # nothing written, nothing created


def test_columns_without_headers(spark, data):
    data_dir, expected, _ = data
    df = spark.read.format("semel-log").option("path", str(data_dir)).load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    assert _spark_rows(df) == [(*r[:7], []) for r in expected]


@pytest.mark.parametrize(("option", "value", "topics"), [
    ("subscribe", "zipped, appended", {"zipped", "appended"}),
    ("subscribePattern", r"open\.txn|t.n", {"open.txn", "txn"}),
    ("SUBSCRIBEPATTERN", "ain", set()),  # a whole name must match
])
def test_topic_selection(spark, data, option, value, topics):
    data_dir, expected, _ = data
    df = spark.read.format("semel-log").option(option, value).load(str(data_dir))
    assert {r.topic for r in df.select("topic").distinct().collect()} == topics
    assert df.count() == sum(1 for r in expected if r[0] in topics)


def test_internal_topics_only_by_name(spark, data):
    data_dir, _, _ = data
    assert (data_dir / "__transaction_state-0").is_dir()
    df = spark.read.format("semel-log").option("subscribe", "__transaction_state")
    assert df.load(str(data_dir)).count() > 0


def test_unknown_option_is_named(spark, data):
    data_dir, _, _ = data
    with pytest.raises(Exception, match="unknown semel-log option 'startingoffsets'"):
        spark.read.format("semel-log").option("startingOffsets", "earliest").load(
            str(data_dir)).collect()


def test_missing_path(spark, tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("semel-log").load(str(missing)).collect()
    with pytest.raises(Exception, match="option 'path' must name a data directory"):
        spark.read.format("semel-log").load().collect()


# -- damaged copies, without Spark --------------------------------------------------------------


def _copy(data: tuple, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(data[0], copy, ignore=shutil.ignore_patterns(".lock"))
    return copy


def _last_batch(log: Path) -> BatchHeader:
    return list(iter_batches(log.read_bytes()))[-1]


def test_direct_read_equals_spark_read(data):
    assert _read_direct(data[0]) == data[1]


def test_torn_tail_ends_the_log(data, tmp_path):
    copy = _copy(data, tmp_path)
    torn = max((copy / "plain-1").glob("*.log"))
    cut = _last_batch(torn)
    with open(torn, "r+b") as f:
        f.truncate(cut.position + cut.size - 7)
    garbage = max((copy / "txn-0").glob("*.log"))
    with open(garbage, "ab") as f:
        f.write(b"\0" * 100)  # what a crash mid-append can leave
    corrupt = max((copy / "zipped-2").glob("*.log"))
    hit = _last_batch(corrupt)
    with open(corrupt, "r+b") as f:
        f.seek(hit.position + hit.size - 1)
        last = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([last[0] ^ 0xFF]))  # a CRC mismatch
    expected = [r for r in data[1]
                if not (r[:2] == ("plain", 1) and r[2] >= cut.base_offset)
                and not (r[:2] == ("zipped", 2) and r[2] >= hit.base_offset)]
    assert len(expected) < len(data[1])
    assert _read_direct(copy) == expected


def test_lost_or_corrupt_txnindex_falls_back_to_the_markers(data, tmp_path):
    copy = _copy(data, tmp_path)
    indexes = sorted(copy.glob("txn-*/*.txnindex"))
    indexes[0].unlink()
    for index in indexes[1:]:
        index.write_bytes(b"\x7f" * 34 + b"\0" * 5)  # an unknown version and a torn entry
    assert _read_direct(copy) == data[1]


def test_log_start_offset_checkpoint(data, tmp_path):
    copy = _copy(data, tmp_path)
    (copy / "log-start-offset-checkpoint").write_text("0\n1\nplain 0 17\n")
    expected = [r for r in data[1] if not (r[:2] == ("plain", 0) and r[2] < 17)]
    assert _read_direct(copy) == expected


def test_a_running_broker_is_refused(data, tmp_path):
    copy = _copy(data, tmp_path)
    fd = os.open(copy / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RuntimeError, match="running broker"):
            plan(datadir_options({"path": str(copy)}))
    finally:
        os.close(fd)
    assert plan(datadir_options({"path": str(copy)}))


def test_subscribing_to_a_topic_with_no_directory(data):
    with pytest.raises(ValueError, match=r"no partition directory of topic\(s\) \['nope'\]"):
        plan(datadir_options({"path": str(data[0]), "subscribe": "plain,nope"}))


def test_empty_partition_directory(tmp_path):
    (tmp_path / "t-0").mkdir()
    part = PartitionDir("t", 0, str(tmp_path / "t-0"), 0)
    assert list(read_partition(part, True)) == []


# -- the decisions ---------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({}, "option 'path'"),
    ({"path": "/d", "kafka.bootstrap.servers": "x"}, "'kafka.bootstrap.servers'"),
    ({"path": "/d", "subscribe": "a", "subscribePattern": "b"}, "cannot both"),
    ({"path": "/d", "subscribe": " , "}, "names no topic"),
    ({"path": "/d", "subscribePattern": "("}, "not a regular expression"),
    ({"path": "/d", "includeHeaders": "yes"}, "true or false"),
])
def test_bad_options(options, message):
    with pytest.raises(OptionError, match=message):
        datadir_options(options)


def test_topic_selection_rules():
    everything = datadir_options({"Path": "/d"})
    assert everything.selects("orders") and not everything.selects("__consumer_offsets")
    named = datadir_options({"path": "/d", "subscribe": "__consumer_offsets,a"})
    assert named.selects("__consumer_offsets") and not named.selects("b")
    pattern = datadir_options({"path": "/d", "subscribePattern": ".*"})
    assert pattern.selects("a.b") and not pattern.selects("__transaction_state")


def _header(base: int, count: int, producer_id: int, transactional: bool = True,
            control: bool = False) -> BatchHeader:
    from semel.protocol.records import build_batch

    return BatchHeader(build_batch([(None, b"v", None, 0)] * count, base_offset=base,
                                   producer_id=producer_id, producer_epoch=0, base_sequence=0,
                                   is_transactional=transactional, is_control=control))


def test_transaction_scan():
    scan = TransactionScan()
    scan.data_batch(_header(0, 2, 7))  # producer 7 opens at 0
    scan.data_batch(_header(2, 1, 8))  # producer 8 opens at 2
    scan.data_batch(_header(3, 1, 9, transactional=False))  # idempotent only
    scan.data_batch(_header(4, 1, 7))
    scan.marker(_header(5, 1, 7, control=True), ControlType.ABORT)
    assert scan.last_stable_offset(6) == 2
    scan.marker(_header(6, 1, 8, control=True), ControlType.COMMIT)
    assert scan.last_stable_offset(7) == 7
    scan.marker(_header(7, 1, 9, control=True), ControlType.ABORT)  # nothing open: no-op
    assert scan.aborted == [AbortedTxn(7, 0, 5, -1)]


def test_aborted_ranges():
    ranges = AbortedRanges([AbortedTxn(7, 10, 20, 10), AbortedTxn(7, 12, 20, -1),
                            AbortedTxn(7, 30, 31, 30), AbortedTxn(8, 0, 100, 0)])
    assert [o for o in range(40) if ranges.contains(7, o)] == [*range(10, 21), 30, 31]
    assert ranges.contains(8, 100) and not ranges.contains(8, 101)
    assert not ranges.contains(9, 15)
