"""The /metrics page after a workload of real clients, scraped over HTTP, parsed with
prometheus-client's parser and checked against what the clients see on the wire.

One broker serves the module: an idempotent producer writes 300 records to three
partitions, a transactional producer commits one transaction, aborts one and leaves a third
open, a consumer group reads part of the topic and commits, a raw Produce to a topic that
does not exist fails, a connection sends a bad frame. The tests then read the page and compare it with ListOffsets,
committed offsets, the fetched batches and the partition files.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from prometheus_client.parser import text_string_to_metric_families

from semel.broker.testing import BrokerThread
from semel.coordinator.group.shard import partition_for
from semel.protocol.errors import Error
from tests.kafka_wire import (
    FETCH,
    PRODUCE,
    KafkaWire,
    batch_headers,
    fetch_request,
    produce_request,
    records_batch,
)

DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana-dashboard.json"
ORDERS, TXN, GROUP, TXN_ID = "orders", "txn", "lagging", "metrics-txn"
PARTITIONS = 3
PRODUCED = 300
CONSUMED = 50  # fewer than one partition holds: some lag on a partition read
PARTITION_FAMILIES = ("semel_partition_high_watermark", "semel_partition_log_end_offset",
                      "semel_partition_log_start_offset", "semel_last_stable_offset",
                      "semel_partition_size_bytes", "semel_partition_segments")


def scrape(port: int) -> dict[str, dict[tuple, float]]:
    """sample name -> {sorted label items: value}, from GET /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as r:
        assert r.status == 200
        text = r.read().decode()
    samples: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def value(samples, name: str, **labels) -> float | None:
    return samples.get(name, {}).get(tuple(sorted(labels.items())))


def run_workload(bootstrap: str) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(ORDERS, PARTITIONS, 1),
                                       NewTopic(TXN, 1, 1)]).values():
        future.result(30)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    for i in range(PRODUCED):
        producer.produce(ORDERS, value=b"v" * (i % 50), key=str(i).encode(),
                         partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID})
    txn.init_transactions(30)
    for count, end in ((10, txn.commit_transaction), (5, txn.abort_transaction)):
        txn.begin_transaction()
        for i in range(count):
            txn.produce(TXN, value=b"t%d" % i)
        assert txn.flush(30) == 0  # appended before the end (an abort would purge them)
        end(30)
    txn.begin_transaction()  # left open: the last stable offset stays behind
    for i in range(3):
        txn.produce(TXN, value=b"open%d" % i)
    assert txn.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([ORDERS])
    got = 0
    while got < CONSUMED:
        for message in consumer.consume(CONSUMED - got, timeout=1):
            assert message.error() is None, message.error()
            got += 1
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(ORDERS, p) for p in range(PARTITIONS)], timeout=30)}

    with KafkaWire.connect(bootstrap) as wire:
        response = wire.request(PRODUCE, 9, produce_request("no-such-topic", 0,
                                                            records_batch([b"x"])))
        code = response.responses[0].partition_responses[0].error_code
        assert code == Error.UNKNOWN_TOPIC_OR_PARTITION
    with KafkaWire.connect(bootstrap) as wire:
        wire.send_raw(b"\xff\xff\xff\xff")  # a negative frame size: closed, counted
        assert wire.is_closed_by_peer()
    return {"admin": admin, "txn": txn, "consumer": consumer, "committed": committed}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    data = tmp_path_factory.mktemp("metrics") / "data"
    overrides = {"metrics.listener": "127.0.0.1:0", "group.initial.rebalance.delay.ms": "0",
                 "offsets.topic.num.partitions": "5",
                 "transaction.state.log.num.partitions": "5"}
    with BrokerThread(data, overrides) as bt:
        clients = run_workload(bt.bootstrap)
        try:
            yield bt, data, clients
        finally:
            clients["consumer"].close()
            clients["txn"].abort_transaction(30)


def list_offsets(admin, topic: str, partitions: int, spec, isolation) -> dict[int, int]:
    request = {TopicPartition(topic, p): spec for p in range(partitions)}
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=30)
    return {tp.partition: f.result(30).offset for tp, f in futures.items()}


def fetch_all(bootstrap: str, topic: str, partition: int) -> bytes:
    """Every batch of the partition up to its high watermark, in one raw Fetch."""
    with KafkaWire.connect(bootstrap) as wire:
        response = wire.request(FETCH, 12, fetch_request([(topic, partition, 0)]))
    data = response.responses[0].partitions[0]
    assert data.error_code == 0
    return bytes(data.records or b"")


def test_offsets_match_list_offsets(loaded):
    bt, _, clients = loaded
    samples = scrape(bt.broker.metrics_port)
    admin = clients["admin"]
    for topic, n in ((ORDERS, PARTITIONS), (TXN, 1)):
        hw = list_offsets(admin, topic, n, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
        lso = list_offsets(admin, topic, n, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
        start = list_offsets(admin, topic, n, OffsetSpec.earliest(),
                             IsolationLevel.READ_UNCOMMITTED)
        for p in range(n):
            labels = {"topic": topic, "partition": str(p)}
            assert value(samples, "semel_partition_high_watermark", **labels) == hw[p]
            assert value(samples, "semel_partition_log_end_offset", **labels) == hw[p]
            assert value(samples, "semel_last_stable_offset", **labels) == lso[p]
            assert value(samples, "semel_partition_log_start_offset", **labels) == start[p]
    assert sum(list_offsets(admin, ORDERS, PARTITIONS, OffsetSpec.latest(),
                            IsolationLevel.READ_UNCOMMITTED).values()) == PRODUCED
    # the open transaction: 10 + marker + 5 + marker + 3 records, the last 3 unstable
    hw_txn = value(samples, "semel_partition_high_watermark", topic=TXN, partition="0")
    assert hw_txn == 10 + 1 + 5 + 1 + 3
    assert value(samples, "semel_last_stable_offset", topic=TXN, partition="0") == hw_txn - 3


def test_size_and_segments_match_the_partition_files(loaded):
    bt, data, _ = loaded
    samples = scrape(bt.broker.metrics_port)
    for topic, p in ((ORDERS, 0), (ORDERS, 2), (TXN, 0)):
        logs = sorted(Path(data, f"{topic}-{p}").glob("*.log"))
        labels = {"topic": topic, "partition": str(p)}
        assert value(samples, "semel_partition_size_bytes", **labels) == sum(
            f.stat().st_size for f in logs) > 0
        assert value(samples, "semel_partition_segments", **labels) == len(logs)


def test_bytes_and_messages_in_equal_what_was_appended(loaded):
    bt, _, _ = loaded
    for topic, n, records in ((ORDERS, PARTITIONS, PRODUCED), (TXN, 1, 18)):
        appended = 0  # bytes of the client batches, as stored (markers are the broker's)
        for p in range(n):
            headers = batch_headers(fetch_all(bt.bootstrap, topic, p))
            assert headers
            appended += sum(h.size for h in headers if not h.is_control)
        samples = scrape(bt.broker.metrics_port)
        assert value(samples, "semel_topic_messages_in_total", topic=topic) == records
        assert value(samples, "semel_topic_bytes_in_total", topic=topic) == appended


def test_bytes_and_messages_out_count_the_fetched_records(loaded):
    bt, _, _ = loaded
    samples = scrape(bt.broker.metrics_port)
    before = value(samples, "semel_topic_bytes_out_total", topic=TXN)
    before_records = value(samples, "semel_topic_messages_out_total", topic=TXN)
    fetched = fetch_all(bt.bootstrap, TXN, 0)  # nothing else reads this topic
    samples = scrape(bt.broker.metrics_port)
    after = value(samples, "semel_topic_bytes_out_total", topic=TXN)
    after_records = value(samples, "semel_topic_messages_out_total", topic=TXN)
    assert len(fetched) > 0
    assert after - (before or 0) == len(fetched)
    headers = batch_headers(fetched)
    data = sum(h.record_count for h in headers if not h.is_control)
    assert any(h.is_control for h in headers) and data > 0  # markers are not counted
    assert after_records - (before_records or 0) == data
    # the consumer group read the orders topic
    assert value(scrape(bt.broker.metrics_port), "semel_topic_bytes_out_total",
                 topic=ORDERS) > 0


def test_consumer_group_lag_is_high_watermark_minus_committed(loaded):
    bt, _, clients = loaded
    samples = scrape(bt.broker.metrics_port)
    hw = list_offsets(clients["admin"], ORDERS, PARTITIONS, OffsetSpec.latest(),
                      IsolationLevel.READ_UNCOMMITTED)
    committed = clients["committed"]
    lags = []
    for p in range(PARTITIONS):
        labels = {"group": GROUP, "topic": ORDERS, "partition": str(p)}
        if committed[p] < 0:  # nothing consumed there: no committed offset, no series
            assert value(samples, "semel_consumer_group_lag", **labels) is None
            continue
        assert value(samples, "semel_consumer_group_committed_offset", **labels) == committed[p]
        assert value(samples, "semel_consumer_group_lag", **labels) == hw[p] - committed[p]
        lags.append(hw[p] - committed[p])
    assert sum(c for c in committed.values() if c > 0) == CONSUMED
    assert value(samples, "semel_consumer_group_lag_sum", group=GROUP) == sum(lags) > 0
    assert value(samples, "semel_consumer_group_lag_max", group=GROUP) == max(lags)
    assert value(samples, "semel_consumer_group_members", group=GROUP) == 1
    assert value(samples, "semel_consumer_groups", state="Stable") == 1


def test_request_errors_by_api_and_code(loaded):
    bt, _, _ = loaded
    samples = scrape(bt.broker.metrics_port)
    assert value(samples, "semel_request_errors_total", api="Produce",
                 error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert all(labels[1][1] != "NONE" for labels in samples["semel_request_errors_total"])
    assert value(samples, "semel_bad_input_total", reason="framing") == 1


def test_requests_latency_and_queue_time(loaded):
    bt, _, _ = loaded
    samples = scrape(bt.broker.metrics_port)
    produced = value(samples, "semel_requests_total", api="Produce")
    assert produced >= 2
    assert value(samples, "semel_request_latency_seconds_count", api="Produce") == produced
    assert value(samples, "semel_request_latency_seconds_bucket", api="Produce",
                 le="+Inf") == produced
    queued = value(samples, "semel_request_queue_time_seconds_count")
    assert queued == value(samples, "semel_request_queue_time_seconds_bucket", le="+Inf")
    # every answered request was queued first (the same scrape reads both)
    assert queued >= sum(samples["semel_requests_total"].values())
    assert value(samples, "semel_request_queue_time_seconds_sum") >= 0


def test_transactions_and_connections(loaded):
    bt, _, _ = loaded
    samples = scrape(bt.broker.metrics_port)
    assert value(samples, "semel_transactional_ids", state="Ongoing") == 1
    assert value(samples, "semel_active_transactional_ids") == 1
    assert value(samples, "semel_transaction_oldest_ongoing_age_seconds") >= 0
    assert value(samples, "semel_coordinator_partitions_loading",
                 coordinator="transaction") == 0
    assert value(samples, "semel_live_producer_ids") >= 2
    assert value(samples, "semel_connections") >= 3  # admin, producers, consumer


def test_internal_topics_are_left_out_by_default(loaded):
    bt, data, _ = loaded
    assert (data / "__consumer_offsets-0").is_dir()  # the group committed: they exist
    assert (data / "__transaction_state-0").is_dir()
    samples = scrape(bt.broker.metrics_port)
    for name in PARTITION_FAMILIES:
        topics = {dict(labels)["topic"] for labels in samples[name]}
        assert ORDERS in topics
        assert not [t for t in topics if t.startswith("__")], name


def test_process_metrics(loaded):
    bt, _, _ = loaded
    samples = scrape(bt.broker.metrics_port)
    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 1 << 20
    assert value(samples, "process_open_fds") > 0


def test_head_answers_headers_without_a_body(loaded):
    bt, _, _ = loaded
    url = f"http://127.0.0.1:{bt.broker.metrics_port}/metrics"
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        assert int(r.headers["Content-Length"]) > 1000
        assert r.read() == b""


def test_internal_topics_on_request(tmp_path):
    overrides = {"metrics.listener": "127.0.0.1:0", "metrics.internal.topics.enable": "true",
                 "offsets.topic.num.partitions": "2"}
    with BrokerThread(tmp_path / "data", overrides) as bt:
        consumer = Consumer({"bootstrap.servers": bt.bootstrap, "group.id": "g"})
        try:
            consumer.commit(offsets=[TopicPartition("__consumer_offsets", 0, 0)],
                            asynchronous=False)
        finally:
            consumer.close()
        samples = scrape(bt.broker.metrics_port)
    for name in PARTITION_FAMILIES:
        for p in ("0", "1"):
            assert value(samples, name, topic="__consumer_offsets", partition=p) is not None
    assert value(samples, "semel_partition_high_watermark", topic="__consumer_offsets",
                 partition=str(partition_for("g", 2))) >= 1  # the commit's record
    assert value(samples, "semel_consumer_group_committed_offset", group="g",
                 topic="__consumer_offsets", partition="0") == 0


# -- the Grafana dashboard ------------------------------------------------------------------

_METRIC_NAME = re.compile(r"\b(?:semel|process)_[a-zA-Z0-9_]+")


def queries(node):
    """Every PromQL expression and variable query in the dashboard JSON."""
    if isinstance(node, dict):
        for key, item in node.items():
            if key in ("expr", "definition") and isinstance(item, str):
                yield item
            else:
                yield from queries(item)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def test_every_metric_the_dashboard_queries_is_on_the_page(loaded):
    bt, _, _ = loaded
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    names = {name for query in queries(dashboard) for name in _METRIC_NAME.findall(query)}
    assert len(names) >= 30
    samples = scrape(bt.broker.metrics_port)
    assert sorted(name for name in names if not samples.get(name)) == []

    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert _METRIC_NAME.search(target["expr"]), (panel["title"], target["expr"])
            assert target["datasource"]["uid"] == "${datasource}"
