"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords over a real socket (tests/kafka_wire.py).

One in-process broker (log.flush.mode=none) for the module; every test uses its own topic.
"""

from __future__ import annotations

import re

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import build_batch
from tests.kafka_wire import (
    DELETE_RECORDS,
    FETCH,
    LIST_OFFSETS,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    KafkaWire,
    decode_records,
    fetch_request,
    list_offsets_request,
    make_topic,
    message,
    produce_request,
)

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("offsets")) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    with KafkaWire.connect(shared_broker.bootstrap) as w:
        yield w


@pytest.fixture
def topic(shared_broker, request) -> str:
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(shared_broker, name)
    return name


def produce(wire: KafkaWire, topic: str, timestamps: list[int]) -> None:
    """One batch with a record per timestamp."""
    batch = build_batch([(None, b"v%d" % i, [], ts) for i, ts in enumerate(timestamps)])
    resp = wire.request(PRODUCE, 9, produce_request(topic, 0, batch))
    assert resp.responses[0].partition_responses[0].error_code == Error.NONE


def list_offset(wire: KafkaWire, topic: str, spec: int, *, version: int = 9,
                partition: int = 0, **kw):
    resp = wire.request(LIST_OFFSETS, version, list_offsets_request(topic, partition, spec, **kw))
    p = resp.topics[0].partitions[0]
    return p.error_code, p.offset, p.timestamp, p.leader_epoch


# -- ListOffsets -----------------------------------------------------------------------------


def test_list_offsets_on_an_empty_partition(wire, topic):
    assert list_offset(wire, topic, -2) == (Error.NONE, 0, -1, 0)
    assert list_offset(wire, topic, -1) == (Error.NONE, 0, -1, 0)
    assert list_offset(wire, topic, -3) == (Error.NONE, -1, -1, -1)
    assert list_offset(wire, topic, BASE_TS) == (Error.NONE, -1, -1, -1)


def test_list_offsets_every_spec(wire, topic):
    produce(wire, topic, [BASE_TS + 10, BASE_TS + 30, BASE_TS + 20])
    produce(wire, topic, [BASE_TS + 40, BASE_TS + 40])
    assert list_offset(wire, topic, -2) == (Error.NONE, 0, -1, 0)  # earliest
    assert list_offset(wire, topic, -1) == (Error.NONE, 5, -1, 0)  # latest
    # max timestamp: the first record holding the largest timestamp
    assert list_offset(wire, topic, -3) == (Error.NONE, 3, BASE_TS + 40, 0)
    assert list_offset(wire, topic, -4) == (Error.NONE, 0, -1, 0)  # earliest local
    assert list_offset(wire, topic, -5) == (Error.NONE, -1, -1, -1)  # latest tiered
    # by timestamp: the first record at or after it
    assert list_offset(wire, topic, BASE_TS) == (Error.NONE, 0, BASE_TS + 10, 0)
    assert list_offset(wire, topic, BASE_TS + 10) == (Error.NONE, 0, BASE_TS + 10, 0)
    assert list_offset(wire, topic, BASE_TS + 15) == (Error.NONE, 1, BASE_TS + 30, 0)
    assert list_offset(wire, topic, BASE_TS + 31) == (Error.NONE, 3, BASE_TS + 40, 0)
    assert list_offset(wire, topic, BASE_TS + 41) == (Error.NONE, -1, -1, -1)
    # read_committed: the last stable offset, which equals the high watermark for now
    assert list_offset(wire, topic, -1, isolation_level=1) == (Error.NONE, 5, -1, 0)


@pytest.mark.parametrize("version", [1, 3, 4, 6, 7, 8, 9])
def test_list_offsets_versions(wire, topic, version):
    produce(wire, topic, [BASE_TS, BASE_TS + 5])
    error, offset, timestamp, epoch = list_offset(wire, topic, -1, version=version)
    assert (error, offset, timestamp) == (Error.NONE, 2, -1)
    assert epoch == (0 if version >= 4 else -1)  # leader_epoch is in v4+
    error, offset, timestamp, _ = list_offset(wire, topic, BASE_TS + 1, version=version)
    assert (error, offset, timestamp) == (Error.NONE, 1, BASE_TS + 5)
    for spec, first in [(-3, 7), (-4, 8), (-5, 9)]:
        error, offset, _, _ = list_offset(wire, topic, spec, version=version)
        if version < first:
            assert (error, offset) == (Error.UNSUPPORTED_VERSION, -1)
        else:
            assert error == Error.NONE


def test_list_offsets_errors(wire, topic):
    assert list_offset(wire, "missing", -1)[0] == Error.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(wire, topic, -1, partition=4)[0] == Error.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(wire, topic, -1, current_leader_epoch=0)[0] == Error.NONE
    assert list_offset(wire, topic, -1, current_leader_epoch=1)[0] == Error.UNKNOWN_LEADER_EPOCH
    req = list_offsets_request(topic, 0, -1)
    req.topics[0].partitions.append(req.topics[0].partitions[0])
    resp = wire.request(LIST_OFFSETS, 9, req)
    assert [p.error_code for p in resp.topics[0].partitions] == [Error.INVALID_REQUEST] * 2


# -- OffsetForLeaderEpoch --------------------------------------------------------------------


def epoch_end(wire: KafkaWire, topic: str, leader_epoch: int, *, version: int = 4,
              current_leader_epoch: int = -1, partition: int = 0):
    p = message(OFFSET_FOR_LEADER_EPOCH, "request", "OffsetForLeaderPartition",
                partition=partition, current_leader_epoch=current_leader_epoch,
                leader_epoch=leader_epoch)
    t = message(OFFSET_FOR_LEADER_EPOCH, "request", "OffsetForLeaderTopic", topic=topic,
                partitions=[p])
    req = message(OFFSET_FOR_LEADER_EPOCH, "request", replica_id=-1, topics=[t])
    r = wire.request(OFFSET_FOR_LEADER_EPOCH, version, req).topics[0].partitions[0]
    return r.error_code, r.leader_epoch, r.end_offset


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch(wire, topic, version):
    produce(wire, topic, [BASE_TS] * 3)
    assert epoch_end(wire, topic, 0, version=version) == (Error.NONE, 0, 3)
    assert epoch_end(wire, topic, -1, version=version) == (Error.NONE, -1, -1)
    assert epoch_end(wire, topic, 7, version=version) == (Error.NONE, -1, -1)
    assert epoch_end(wire, topic, 0, version=version, current_leader_epoch=0) == (
        Error.NONE, 0, 3)
    assert epoch_end(wire, topic, 0, version=version, current_leader_epoch=2)[0] == (
        Error.UNKNOWN_LEADER_EPOCH)
    assert epoch_end(wire, "missing", 0, version=version)[0] == Error.UNKNOWN_TOPIC_OR_PARTITION


# -- DeleteRecords ---------------------------------------------------------------------------


def delete_records(wire: KafkaWire, topic: str, offset: int, *, version: int = 2,
                   partition: int = 0):
    p = message(DELETE_RECORDS, "request", "DeleteRecordsPartition", partition_index=partition,
                offset=offset)
    t = message(DELETE_RECORDS, "request", "DeleteRecordsTopic", name=topic, partitions=[p])
    req = message(DELETE_RECORDS, "request", topics=[t], timeout_ms=30_000)
    r = wire.request(DELETE_RECORDS, version, req).topics[0].partitions[0]
    return r.error_code, r.low_watermark


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_then_fetch_below_the_start(wire, topic, version):
    for _ in range(4):
        produce(wire, topic, [BASE_TS, BASE_TS + 1])
    assert delete_records(wire, topic, 5, version=version) == (Error.NONE, 5)
    assert list_offset(wire, topic, -2)[:2] == (Error.NONE, 5)
    resp = wire.request(FETCH, 12, fetch_request([(topic, 0, 2)]))
    assert resp.responses[0].partitions[0].error_code == Error.OFFSET_OUT_OF_RANGE
    part = wire.request(FETCH, 12, fetch_request([(topic, 0, 5)])).responses[0].partitions[0]
    assert part.log_start_offset == 5
    # the batch holding offset 5 starts at 4: it comes back whole, the client skips offset 4
    assert [r.offset for r in decode_records(part.records)][:2] == [4, 5]
    # lower than the start: unchanged
    assert delete_records(wire, topic, 3, version=version) == (Error.NONE, 5)
    # past the high watermark, or negative
    assert delete_records(wire, topic, 9, version=version) == (Error.OFFSET_OUT_OF_RANGE, -1)
    assert delete_records(wire, topic, -7, version=version) == (Error.OFFSET_OUT_OF_RANGE, -1)
    # -1: up to the high watermark
    assert delete_records(wire, topic, -1, version=version) == (Error.NONE, 8)
    assert list_offset(wire, topic, -2)[:2] == list_offset(wire, topic, -1)[:2] == (
        Error.NONE, 8)


def test_delete_records_errors(shared_broker, wire):
    assert delete_records(wire, "missing", 0) == (Error.UNKNOWN_TOPIC_OR_PARTITION, -1)
    make_topic(shared_broker, "compacted", configs={"cleanup.policy": "compact"})
    assert delete_records(wire, "compacted", 0) == (Error.POLICY_VIOLATION, -1)
    make_topic(shared_broker, "compacted-and-deleted",
               configs={"cleanup.policy": "compact,delete"})
    assert delete_records(wire, "compacted-and-deleted", 0) == (Error.NONE, 0)
    if "__transaction_state" not in shared_broker.broker.log_manager.topics:
        make_topic(shared_broker, "__transaction_state")
    assert delete_records(wire, "__transaction_state", 0) == (Error.INVALID_TOPIC_EXCEPTION, -1)
