"""`semel dump-log` on the files of a running semel broker that real clients wrote to.

confluent-kafka (librdkafka) producers write plain, gzip/snappy/lz4/zstd-compressed,
idempotent and transactional (committed and aborted) batches with headers, null keys and
null values; a consumer group commits offsets. What dump-log prints (its --json) is compared
with what a consumer read (offsets, keys, values, headers), with the batch headers a Fetch
returns (producer ids, epochs, sequences), with the read_committed view (the aborted batches
and the .txnindex entry), and with the broker's own state (coordinator epoch). The files are
read while the broker runs and writes them.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.kafka_wire import FETCH, KafkaWire, batch_headers, fetch_request, make_topic
from tests.tools_dumplog.dumplog_helpers import data_records, dump, dump_cli

TIMEOUT_S = 30
CODECS = ("gzip", "snappy", "lz4", "zstd")
DATA, TXN = "dl-data", "dl-txn"
TXN_ID = "dl-tx"
GROUP = "dl-group"
# each transaction: (values, commit)
TRANSACTIONS = [([b"c0", b"c1", b"c2"], True), ([b"a0", b"a1"], False), ([b"c3", b"c4"], True)]


def produce_all(bootstrap: str) -> None:
    from confluent_kafka import Producer

    base = {"bootstrap.servers": bootstrap, "linger.ms": 20}
    plain = Producer({**base, "enable.idempotence": False, "acks": 1})
    plain.produce(DATA, key=b"k0", value=b"v0", partition=0, headers=[("h1", b"x"), ("h2", None)])
    plain.produce(DATA, key=None, value=b"value-with-null-key", partition=0)
    plain.produce(DATA, key=b"key-with-null-value", value=None, partition=0,
                  headers=[("only", b"header")])
    assert plain.flush(TIMEOUT_S) == 0
    for codec in CODECS:
        producer = Producer({**base, "enable.idempotence": False, "compression.type": codec})
        for i in range(4):
            value = (f"{codec}-{i}-" * 40).encode()  # compressible: librdkafka compresses it
            producer.produce(DATA, key=f"{codec}-{i}".encode(), value=value, partition=0,
                             headers=[("codec", codec.encode())])
        assert producer.flush(TIMEOUT_S) == 0
    idem = Producer({**base, "enable.idempotence": True})
    for first, count in ((0, 3), (3, 2)):
        for i in range(first, first + count):
            idem.produce(DATA, key=b"idem-%d" % i, value=b"idem-value-%d" % i, partition=0)
        assert idem.flush(TIMEOUT_S) == 0
    txn = Producer({**base, "transactional.id": TXN_ID})
    txn.init_transactions(TIMEOUT_S)
    for values, commit in TRANSACTIONS:
        txn.begin_transaction()
        for v in values:
            txn.produce(TXN, key=b"t", value=v, partition=0)
        assert txn.flush(TIMEOUT_S) == 0
        (txn.commit_transaction if commit else txn.abort_transaction)(TIMEOUT_S)


def consume(bootstrap: str, topic: str, isolation: str, expected: int, *,
            commit: bool = False) -> list[dict]:
    """(offset, key, value, headers) of the first `expected` records of partition 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    if commit:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[dict] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            got.append({"offset": message.offset(), "key": message.key(),
                        "value": message.value(),
                        "headers": [(k, v) for k, v in message.headers() or []]})
        if commit and got:
            consumer.commit(offsets=[TopicPartition(topic, 0, got[-1]["offset"] + 1)],
                            asynchronous=False)
    finally:
        consumer.close()
    assert len(got) == expected, got
    return got


def fetched_batches(bootstrap: str, topic: str) -> list:
    """The batch headers a Fetch from offset 0 returns (what a consumer receives)."""
    headers = []
    with KafkaWire.connect(bootstrap) as wire:
        offset = 0
        while True:
            resp = wire.request(FETCH, 12, fetch_request([(topic, 0, offset)]))
            part = resp.responses[0].partitions[0]
            assert part.error_code == Error.NONE
            got = [h for h in batch_headers(part.records) if h.last_offset >= offset]
            if not got:
                return headers
            headers.extend(got)
            offset = got[-1].next_offset


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running broker with everything produced, consumed and committed."""
    data_dir = tmp_path_factory.mktemp("dumplog") / "data"
    overrides = {"transaction.state.log.num.partitions": "1",
                 "offsets.topic.num.partitions": "1"}
    with BrokerThread(data_dir, overrides) as b:
        for topic in (DATA, TXN):  # an index entry for every batch after the first
            make_topic(b, topic, 1, {"index.interval.bytes": "0"})
        produce_all(b.bootstrap)
        data_count = 3 + 4 * len(CODECS) + 5
        committed = sum(len(v) for v, c in TRANSACTIONS if c)
        everything = sum(len(v) for v, _ in TRANSACTIONS)
        yield SimpleNamespace(
            broker=b,
            data_dir=Path(data_dir),
            data=consume(b.bootstrap, DATA, "read_uncommitted", data_count, commit=True),
            txn_all=consume(b.bootstrap, TXN, "read_uncommitted", everything),
            txn_committed=consume(b.bootstrap, TXN, "read_committed", committed),
            data_batches=fetched_batches(b.bootstrap, DATA),
            txn_batches=fetched_batches(b.bootstrap, TXN),
            coordinator_epoch=b.broker.txn_coordinator.coordinator_epoch(TXN_ID),
        )


def segment(cluster, topic: str, suffix: str) -> Path:
    return cluster.data_dir / f"{topic}-0" / f"{0:020d}{suffix}"


def batches_of(cluster, topic: str, *args: str) -> list[dict]:
    result = dump("--json", "--print-data", *args, segment(cluster, topic, ".log"))
    assert result.rc == 0, result.err
    summary = result.of_kind("summary")[0]
    assert summary["stopReason"] is None and summary["invalidBytes"] == 0
    return result.of_kind("batch")


def test_records_match_what_a_consumer_read(cluster):
    batches = batches_of(cluster, DATA)
    assert all(b["isvalid"] for b in batches)
    dumped = [{"offset": r["offset"],
               "key": None if r["keyBase64"] is None else r["key"].encode(),
               "value": None if r["payloadBase64"] is None else r["payload"].encode(),
               "headers": [(h["key"], None if h["valueBase64"] is None else h["value"].encode())
                           for h in r["headers"]]}
              for r in data_records(batches)]
    assert dumped == cluster.data
    # the null key, the null value and the null header value are told apart from empty ones
    by_offset = {r["offset"]: r for r in data_records(batches)}
    assert by_offset[0]["headerKeys"] == ["h1", "h2"] and by_offset[0]["headers"][1]["value"] is None
    assert by_offset[1]["keySize"] == -1 and by_offset[1]["key"] is None
    assert by_offset[2]["valueSize"] == -1 and by_offset[2]["payload"] is None
    assert {b["compresscodec"] for b in batches} == {"none", *CODECS}


def test_batch_headers_match_the_fetched_ones(cluster):
    for topic, fetched in ((DATA, cluster.data_batches), (TXN, cluster.txn_batches)):
        dumped = [(b["baseOffset"], b["lastOffset"], b["count"], b["producerId"],
                   b["producerEpoch"], b["baseSequence"], b["lastSequence"], b["isTransactional"],
                   b["isControl"], b["crc"], b["size"]) for b in batches_of(cluster, topic)]
        assert dumped == [(h.base_offset, h.last_offset, h.record_count, h.producer_id,
                           h.producer_epoch, h.base_sequence, h.last_sequence,
                           h.is_transactional, h.is_control, h.crc, h.size) for h in fetched]
    idempotent = [b for b in batches_of(cluster, DATA) if b["producerId"] >= 0]
    assert [(b["baseSequence"], b["lastSequence"]) for b in idempotent] == [(0, 2), (3, 4)]
    assert [r["sequence"] for r in data_records(idempotent)] == [0, 1, 2, 3, 4]


def test_transaction_markers_and_aborted_records(cluster):
    batches = batches_of(cluster, TXN)
    markers = [b for b in batches if b["isControl"]]
    assert [(m["records"][0]["controlType"], m["records"][0]["coordinatorEpoch"])
            for m in markers] == [("COMMIT", cluster.coordinator_epoch),
                                  ("ABORT", cluster.coordinator_epoch),
                                  ("COMMIT", cluster.coordinator_epoch)]
    assert all(b["isTransactional"] for b in batches)
    assert len({b["producerId"] for b in batches}) == 1
    # the records between the first COMMIT and the ABORT are what read_committed skipped
    aborted = [r["offset"] for b in batches
               if markers[0]["baseOffset"] < b["baseOffset"] < markers[1]["baseOffset"]
               for r in b["records"]]
    everything = [r["offset"] for r in cluster.txn_all]
    committed = [r["offset"] for r in cluster.txn_committed]
    assert aborted == [o for o in everything if o not in committed]
    assert [r["payload"].encode() for r in data_records(batches)] == [r["value"] for r in
                                                                      cluster.txn_all]
    text = dump_cli("--deep-iteration", segment(cluster, TXN, ".log"))
    assert text.rc == 0, text.err
    marker_lines = [line for line in text.out.splitlines() if "endTxnMarker" in line]
    assert [line.split("endTxnMarker: ")[1] for line in marker_lines] == [
        f"{kind} coordinatorEpoch: {cluster.coordinator_epoch}"
        for kind in ("COMMIT", "ABORT", "COMMIT")]


def test_txnindex_lists_the_aborted_transaction(cluster):
    batches = batches_of(cluster, TXN)
    abort = next(b for b in batches if b["isControl"]
                 and b["records"][0]["controlType"] == "ABORT")
    first = next(b for b in batches if not b["isControl"] and b["baseOffset"] > next(
        m["baseOffset"] for m in batches if m["isControl"]))
    result = dump("--json", segment(cluster, TXN, ".txnindex"))
    assert result.rc == 0, result.err
    assert [(e["producerId"], e["firstOffset"], e["lastOffset"], e["lastStableOffset"])
            for e in result.of_kind("abortedTxn")] == [
        (abort["producerId"], first["baseOffset"], abort["baseOffset"], abort["baseOffset"] + 1)]
    text = dump(segment(cluster, TXN, ".txnindex"))
    assert text.out.splitlines()[1] == (
        f"version: 0 producerId: {abort['producerId']} firstOffset: {first['baseOffset']} "
        f"lastOffset: {abort['baseOffset']} lastStableOffset: {abort['baseOffset'] + 1}")


@pytest.mark.parametrize("topic", [DATA, TXN])
def test_index_entries_point_at_their_batches(cluster, topic):
    async def write_index_entries():
        # the active segment's newest index entries wait in memory and are written in
        # groups (and at roll or shutdown): write them out now
        seg = cluster.broker.broker.log_manager.get_partition(topic, 0).active_segment
        seg.offset_index.flush()
        seg.time_index.flush()

    cluster.broker.call(write_index_entries())
    batches = batches_of(cluster, topic)
    result = dump("--json", segment(cluster, topic, ".index"))
    assert result.rc == 0, result.err
    entries = result.of_kind("indexEntry")
    assert entries and all(e["matches"] for e in entries)
    assert {(e["offset"], e["position"]) for e in entries} <= {
        (b["lastOffset"], b["position"]) for b in batches}
    # index.interval.bytes=0: every batch after the first has an entry, so the offset
    # index covers the segment; the time index entries carry their batches' max timestamps
    assert len(entries) == len(batches) - 1
    times = dump("--json", segment(cluster, topic, ".timeindex"))
    assert times.rc == 0, times.err
    max_ts = {b["lastOffset"]: b["maxTimestamp"] for b in batches}
    stamps = [(e["timestamp"], e["offset"]) for e in times.of_kind("timeIndexEntry")]
    assert stamps and all(max_ts[offset] == ts for ts, offset in stamps)
    assert [ts for ts, _ in stamps] == sorted({ts for ts, _ in stamps})
    for path in (segment(cluster, topic, ".index"), segment(cluster, topic, ".timeindex")):
        assert dump("--verify-index-only", path).out.splitlines() == [f"Dumping {path}"]
        assert dump("--index-sanity-check", path).out.splitlines()[1] == (
            f"{path} passed sanity check.")


def test_producer_snapshot(cluster):
    async def snapshot(topic):
        return cluster.broker.broker.log_manager.get_partition(topic, 0).take_producer_snapshot()

    for topic in (DATA, TXN):
        path = cluster.broker.call(snapshot(topic))
        batches = [b for b in batches_of(cluster, topic)
                   if b["producerId"] >= 0 and not b["isControl"]]
        result = dump("--json", path)
        assert result.rc == 0, result.err
        producers = {p["producerId"]: p for p in result.of_kind("producer")}
        assert set(producers) == {b["producerId"] for b in batches}
        for pid, p in producers.items():
            own = [b for b in batches if b["producerId"] == pid]
            assert p["producerEpoch"] == own[-1]["producerEpoch"]
            assert p["batches"][-1]["lastSequence"] == own[-1]["lastSequence"]
            assert p["batches"][-1]["lastOffset"] == own[-1]["lastOffset"]
            assert p["currentTxnFirstOffset"] is None  # every transaction ended
        if topic == TXN:
            (pid,) = producers
            assert producers[pid]["coordinatorEpoch"] == cluster.coordinator_epoch
            line = dump(path).out.splitlines()[1]
            assert line.startswith(f"producerId: {pid} producerEpoch: ")
            assert "currentTxnFirstOffset: OptionalLong.empty" in line
            assert f"lastSequence: {batches[-1]['lastSequence']} " in line


def test_transaction_log_decoder(cluster):
    path = cluster.data_dir / "__transaction_state-0" / f"{0:020d}.log"
    result = dump("--json", "--transaction-log-decoder", path)
    assert result.rc == 0, result.err
    records = data_records(result.of_kind("batch"))
    assert {r["key"]["data"]["transactionalId"] for r in records} == {TXN_ID}
    assert {r["key"]["type"] for r in records} == {"0"}
    statuses = [r["payload"]["data"]["transactionStatus"] for r in records]
    # EMPTY, then per transaction ONGOING -> PREPARE_* -> COMPLETE_*
    assert statuses == [0, 1, 2, 4, 1, 3, 5, 1, 2, 4]
    txn_pid = cluster.txn_batches[0].producer_id
    assert {r["payload"]["data"]["producerId"] for r in records} == {txn_pid}
    ongoing = [r["payload"]["data"] for r in records if r["payload"]["data"]["transactionStatus"] == 1]
    assert all(d["transactionPartitions"] == [{"topic": TXN, "partitionIds": [0]}]
               for d in ongoing)
    text = dump("--transaction-log-decoder", path)
    assert f'key: {{"type":"0","data":{{"transactionalId":"{TXN_ID}"}}}} payload: ' in text.out


def test_offsets_decoder(cluster):
    path = cluster.data_dir / "__consumer_offsets-0" / f"{0:020d}.log"
    result = dump("--json", "--offsets-decoder", path)
    assert result.rc == 0, result.err
    records = data_records(result.of_kind("batch"))
    commits = [r for r in records if r["key"]["type"] == "1"]
    assert [c["key"]["data"] for c in commits] == [{"group": GROUP, "topic": DATA,
                                                    "partition": 0}]
    assert commits[0]["payload"]["data"]["offset"] == cluster.data[-1]["offset"] + 1
    groups = [r for r in records if r["key"]["type"] == "2"]
    assert groups and {g["key"]["data"]["group"] for g in groups} == {GROUP}
    assert any(g["payload"] and g["payload"]["data"]["protocolType"] == "consumer"
               for g in groups)
    text = dump("--offsets-decoder", path)
    expected_key = f'key: {{"type":"1","data":{{"group":"{GROUP}","topic":"{DATA}","partition":0}}}}'
    assert expected_key in text.out


def test_live_segment_grows_while_dumped(cluster):
    """The active segment of a running broker: read-only, no lock; a later dump sees the
    batches appended since."""
    from confluent_kafka import Producer

    topic = "dl-live"
    make_topic(cluster.broker, topic)
    producer = Producer({"bootstrap.servers": cluster.broker.bootstrap})
    producer.produce(topic, key=b"early", value=b"early-value", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    before = batches_of(cluster, topic)
    producer.produce(topic, key=b"late", value=b"late-value", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    after = batches_of(cluster, topic)
    assert after[: len(before)] == before
    assert [r["key"] for r in data_records(after)] == ["early", "late"]
    path = segment(cluster, topic, ".log")
    assert path.stat().st_size == after[-1]["position"] + after[-1]["size"]
