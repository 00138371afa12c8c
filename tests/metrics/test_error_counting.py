"""What semel_request_errors_total counts: every non-zero *error_code field of a response,
at any depth, once; and the lock-free histogram's buckets."""

from __future__ import annotations

from semel.broker.metrics import (
    BrokerMetrics,
    BrokerStateCollector,
    _families,
    _Histogram,
    _Snapshot,
)
from semel.protocol import api
from semel.protocol.errors import Error

PRODUCE, FETCH, METADATA, ADD_PARTITIONS, API_VERSIONS = 0, 1, 3, 24, 18


def build(api_key: int, class_name: str | None = None, /, **fields):
    module = api.codec(api_key, "response")
    return getattr(module, class_name or api.BY_KEY[api_key].name + "Response")(**fields)


def counted(api_key: int, response) -> dict[tuple[int, int], int]:
    metrics = BrokerMetrics()
    metrics.observe_request(api_key, 0.001, response)
    return metrics.errors


def test_partition_codes_of_a_produce_response():
    partitions = [build(PRODUCE, "PartitionProduceResponse", index=i, error_code=code)
                  for i, code in enumerate((0, Error.NOT_ENOUGH_REPLICAS, 0,
                                            Error.NOT_ENOUGH_REPLICAS,
                                            Error.CORRUPT_MESSAGE))]
    response = build(PRODUCE, responses=[
        build(PRODUCE, "TopicProduceResponse", name="t", partition_responses=partitions[:3]),
        build(PRODUCE, "TopicProduceResponse", name="u", partition_responses=partitions[3:])])
    assert counted(PRODUCE, response) == {(PRODUCE, Error.NOT_ENOUGH_REPLICAS): 2,
                                          (PRODUCE, Error.CORRUPT_MESSAGE): 1}


def test_top_level_and_nested_codes_count_each_once():
    fetch = build(FETCH, error_code=Error.FETCH_SESSION_ID_NOT_FOUND)
    assert counted(FETCH, fetch) == {(FETCH, Error.FETCH_SESSION_ID_NOT_FOUND): 1}
    fetch = build(FETCH, responses=[build(FETCH, "FetchableTopicResponse", topic="t", partitions=[
        build(FETCH, "PartitionData", partition_index=0, records=b"x" * 100),
        build(FETCH, "PartitionData", partition_index=1,
              error_code=Error.OFFSET_OUT_OF_RANGE)])])
    assert counted(FETCH, fetch) == {(FETCH, Error.OFFSET_OUT_OF_RANGE): 1}
    metadata = build(METADATA, topics=[
        build(METADATA, "MetadataResponseTopic", name="t",
              error_code=Error.UNKNOWN_TOPIC_OR_PARTITION),
        build(METADATA, "MetadataResponseTopic", name="u", partitions=[
            build(METADATA, "MetadataResponsePartition",
                  error_code=Error.LEADER_NOT_AVAILABLE)])])
    assert counted(METADATA, metadata) == {(METADATA, Error.UNKNOWN_TOPIC_OR_PARTITION): 1,
                                           (METADATA, Error.LEADER_NOT_AVAILABLE): 1}


def test_fields_named_otherwise_and_both_versions_shapes():
    """AddPartitionsToTxn names its per-partition code partition_error_code and nests it
    under results_by_transaction (v4+) or results_by_topic_v3_and_below."""
    result = build(ADD_PARTITIONS, "AddPartitionsToTxnPartitionResult", partition_index=0,
                   partition_error_code=Error.INVALID_TXN_STATE)
    topic = build(ADD_PARTITIONS, "AddPartitionsToTxnTopicResult", name="t",
                  results_by_partition=[result])
    old = build(ADD_PARTITIONS, results_by_topic_v3_and_below=[topic])
    new = build(ADD_PARTITIONS, results_by_transaction=[build(
        ADD_PARTITIONS, "AddPartitionsToTxnResult", transactional_id="x", topic_results=[topic])])
    for response in (old, new):
        assert counted(ADD_PARTITIONS, response) == {(ADD_PARTITIONS, Error.INVALID_TXN_STATE): 1}


def test_no_error_counts_nothing_and_the_page_names_the_error():
    metrics = BrokerMetrics()
    metrics.observe_request(API_VERSIONS, 0.001, build(API_VERSIONS))
    assert metrics.errors == {}
    metrics.count_error(API_VERSIONS, Error.UNSUPPORTED_VERSION)
    metrics.count_error(API_VERSIONS, 12345)  # not a code we know: its number
    collector = BrokerStateCollector.__new__(BrokerStateCollector)  # the traffic part only
    collector.metrics = metrics
    snapshot = _Snapshot()
    collector._read_traffic(snapshot, set())
    family = next(f for f in _families(snapshot) if f.name == "semel_request_errors")
    assert {tuple(s.labels.values()) for s in family.samples} == {
        ("ApiVersions", "UNSUPPORTED_VERSION"), ("ApiVersions", "12345")}


def test_histogram_buckets_are_inclusive_upper_bounds():
    h = _Histogram((0.001, 0.01))
    for v in (0.0005, 0.001, 0.002, 0.01, 5.0):
        h.observe(v)
    counts, total = h.snapshot()
    assert counts == [2, 2, 1]  # le=0.001: 0.0005 and 0.001; le=0.01: 0.002, 0.01; +Inf: 5
    assert total == 0.0005 + 0.001 + 0.002 + 0.01 + 5.0
