"""Produce and Fetch over a real socket with hand-built frames (tests/kafka_wire.py).

One in-process broker (log.flush.mode=none) serves the module; every test uses its own
topic. A second broker with log.flush.mode=fsync checks that acks=all answers only once
the data is durable.
"""

from __future__ import annotations

import errno
import re
import struct
import time
import uuid

import pytest
from crc32c import crc32c

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.frame import encode_request_header
from semel.protocol.messages import api_versions_response
from semel.protocol.records import ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_APPEND_TIME, build_batch
from semel.storage.fs import FaultyFileSystem
from tests.kafka_wire import (
    API_VERSIONS,
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    KafkaWire,
    batch_headers,
    decode_records,
    fetch_request,
    list_offsets_request,
    make_topic,
    produce_request,
    records_batch,
)


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("wire")) as b:
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


def produce(wire: KafkaWire, topic: str, values: list[bytes], *, version: int = 9,
            partition: int = 0, **kw):
    """Produce one batch; returns the partition response."""
    resp = wire.request(PRODUCE, version,
                        produce_request(topic, partition, records_batch(values, **kw)))
    return resp.responses[0].partition_responses[0]


def fetch_one(wire: KafkaWire, topic: str, offset: int, *, version: int = 12,
              partition: int = 0, **kw):
    resp = wire.request(FETCH, version, fetch_request([(topic, partition, offset)], **kw))
    assert resp.error_code == Error.NONE
    return resp.responses[0].partitions[0]


def log_end(wire: KafkaWire, topic: str, partition: int = 0) -> int:
    resp = wire.request(LIST_OFFSETS, 9, list_offsets_request(topic, partition, -1))
    return resp.topics[0].partitions[0].offset


def wait_until_parked(broker_thread: BrokerThread, topic: str, partition: int = 0) -> None:
    """Block until a fetch is parked on the partition (a test-only look at FetchWaiters)."""
    key = (topic, partition)
    deadline = time.monotonic() + 30
    while key not in broker_thread.broker.fetch_waiters._by_partition:
        assert time.monotonic() < deadline, "the fetch never parked"
        time.sleep(0.005)


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize(("produce_version", "fetch_version"),
                         [(3, 4), (7, 11), (9, 12), (12, 13), (12, 17)])
def test_produce_then_fetch_round_trip(shared_broker, wire, topic, produce_version,
                                       fetch_version):
    first = produce(wire, topic, [b"a", b"b", b"c"], keys=[b"k0", None, b"k2"],
                    version=produce_version)
    log_start = 0 if produce_version >= 5 else -1  # not in v3-4
    assert (first.error_code, first.base_offset, first.log_append_time_ms,
            first.log_start_offset) == (Error.NONE, 0, -1, log_start)
    second = produce(wire, topic, [b"d"], version=produce_version)
    assert second.base_offset == 3

    topic_ids = None
    if fetch_version >= 13:
        topic_ids = {topic: shared_broker.broker.log_manager.topics[topic].topic_id}
    resp = wire.request(FETCH, fetch_version,
                        fetch_request([(topic, 0, 0)], topic_ids=topic_ids))
    assert (resp.error_code, resp.session_id) == (Error.NONE, 0)
    part = resp.responses[0].partitions[0]
    log_start = 0 if fetch_version >= 5 else -1  # not in v4
    assert (part.error_code, part.high_watermark, part.last_stable_offset,
            part.log_start_offset, part.preferred_read_replica) == (Error.NONE, 4, 4, log_start,
                                                                    -1)
    assert part.aborted_transactions is None
    records = decode_records(part.records)
    assert [(r.offset, r.key, r.value) for r in records] == [
        (0, b"k0", b"a"), (1, None, b"b"), (2, b"k2", b"c"), (3, None, b"d")]
    assert [h.partition_leader_epoch for h in batch_headers(part.records)] == [0, 0]

    # from the middle of a batch: the whole batch comes back, as in Kafka
    middle = fetch_one(wire, topic, 1)
    assert [r.offset for r in decode_records(middle.records)] == [0, 1, 2, 3]
    at_end = fetch_one(wire, topic, 4)
    assert (at_end.error_code, bytes(at_end.records), at_end.high_watermark) == (0, b"", 4)


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4",
                                                               "zstd"])
def test_compressed_batches_are_stored_as_sent(wire, topic, compression):
    values = [f"value-{i}".encode() * 10 for i in range(200)]
    batch = records_batch(values, compression=compression)
    resp = wire.request(PRODUCE, 9, produce_request(topic, 0, batch))
    assert resp.responses[0].partition_responses[0].error_code == Error.NONE
    part = fetch_one(wire, topic, 0)
    # the broker wrote the leader epoch (0) in place; everything else is byte for byte
    stored = bytes(part.records)
    assert stored[:12] == batch[:12] and stored[16:] == batch[16:]
    assert struct.unpack_from(">i", stored, 12)[0] == 0
    [header] = batch_headers(part.records)
    assert header.compression == compression
    assert [r.value for r in decode_records(part.records)] == values


def test_log_append_time_topic(shared_broker, wire):
    make_topic(shared_broker, "append-time", configs={"message.timestamp.type": "LogAppendTime"})
    ack = produce(wire, "append-time", [b"x", b"y"])
    assert ack.error_code == Error.NONE and ack.log_append_time_ms > 0
    part = fetch_one(wire, "append-time", 0)
    [header] = batch_headers(part.records)
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == ack.log_append_time_ms
    assert {r.timestamp for r in decode_records(part.records)} == {ack.log_append_time_ms}


# -- acks ------------------------------------------------------------------------------------


def test_acks_zero_sends_no_response(wire, topic):
    wire.send(PRODUCE, 9, produce_request(topic, 0, records_batch([b"fire"]), acks=0),
              expect_response=False)
    wire.send(PRODUCE, 9, produce_request(topic, 0, records_batch([b"forget"]), acks=0),
              expect_response=False)
    # the next response on the connection answers the ListOffsets sent after them
    assert log_end(wire, topic) == 2
    assert [r.value for r in decode_records(fetch_one(wire, topic, 0).records)] == [
        b"fire", b"forget"]


def test_acks_zero_failure_closes_the_connection(wire):
    wire.send(PRODUCE, 9, produce_request("no-such-topic", 0, records_batch([b"x"]), acks=0),
              expect_response=False)
    assert wire.is_closed_by_peer()


def test_invalid_acks(wire, topic):
    resp = wire.request(PRODUCE, 9, produce_request(topic, 0, records_batch([b"x"]), acks=2))
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (Error.INVALID_REQUIRED_ACKS, -1)
    assert log_end(wire, topic) == 0


def test_acks_all_waits_for_fsync(tmp_path):
    with BrokerThread(tmp_path / "durable", {"log.flush.mode": "fsync"}) as b:
        make_topic(b, "durable")
        plog = b.broker.log_manager.get_partition("durable", 0)
        assert plog.durable
        with KafkaWire.connect(b.bootstrap) as w:
            for i in range(5):
                ack = produce(w, "durable", [b"v%d" % i] * 3)
                assert (ack.error_code, ack.base_offset) == (Error.NONE, 3 * i)
                # answered only once fsynced: the high watermark already covers the batch
                assert plog.high_watermark >= 3 * i + 3
            part = fetch_one(w, "durable", 0)
            assert len(decode_records(part.records)) == 15


# -- produce errors: nothing is stored ----------------------------------------------------


def _patched(batch: bytes, offset: int, fmt: str, value: int) -> bytes:
    """``batch`` with one header field rewritten and the CRC recomputed."""
    data = bytearray(batch)
    struct.pack_into(fmt, data, offset, value)
    struct.pack_into(">I", data, CRC_OFFSET, crc32c(bytes(data[ATTRIBUTES_OFFSET:])))
    return bytes(data)


def _corrupt(batch: bytes) -> bytes:
    data = bytearray(batch)
    data[-1] ^= 0xFF
    return bytes(data)


BAD_BATCHES = {
    "no records": (None, 9, Error.INVALID_RECORD),
    "truncated": (records_batch([b"x"])[:40], 9, Error.INVALID_RECORD),
    "two batches": (records_batch([b"x"]) + records_batch([b"y"]), 9, Error.INVALID_RECORD),
    "crc": (_corrupt(records_batch([b"x", b"y"])), 9, Error.CORRUPT_MESSAGE),
    "record count": (_patched(records_batch([b"x", b"y"]), 57, ">i", 3), 9,
                     Error.INVALID_RECORD),
    "control batch": (build_batch([(b"\0\0\0\0", b"\0\0\0\0\0\0", [], 0)], is_control=True),
                      9, Error.INVALID_RECORD),
    "magic 1": (_patched(records_batch([b"x"]), 16, ">b", 1), 9, Error.INVALID_RECORD),
    "zstd before v7": (records_batch([b"x"], compression=4), 6,
                       Error.UNSUPPORTED_COMPRESSION_TYPE),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_bad_batches_are_refused(wire, topic, case):
    records, version, expected = BAD_BATCHES[case]
    resp = wire.request(PRODUCE, version, produce_request(topic, 0, records))
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (expected, -1)
    if version >= 8:
        assert part.error_message
    assert log_end(wire, topic) == 0
    assert bytes(fetch_one(wire, topic, 0).records) == b""
    # the connection stays usable
    assert produce(wire, topic, [b"fine"]).base_offset == 0


def test_message_too_large(shared_broker, wire):
    make_topic(shared_broker, "small-batches", configs={"max.message.bytes": "1000"})
    part = produce(wire, "small-batches", [b"x" * 2000])
    assert part.error_code == Error.MESSAGE_TOO_LARGE
    assert produce(wire, "small-batches", [b"x" * 100]).base_offset == 0


def test_unknown_topic_or_partition_is_not_created(shared_broker, wire, topic):
    resp = wire.request(PRODUCE, 9, produce_request("never-created", 0, records_batch([b"x"])))
    assert resp.responses[0].partition_responses[0].error_code == Error.UNKNOWN_TOPIC_OR_PARTITION
    assert "never-created" not in shared_broker.broker.log_manager.topics
    resp = wire.request(PRODUCE, 9, produce_request(topic, 7, records_batch([b"x"])))
    assert resp.responses[0].partition_responses[0].error_code == Error.UNKNOWN_TOPIC_OR_PARTITION


def test_internal_topics_refuse_client_writes(shared_broker, wire):
    if "__consumer_offsets" not in shared_broker.broker.log_manager.topics:
        make_topic(shared_broker, "__consumer_offsets")
    part = produce(wire, "__consumer_offsets", [b"x"])
    assert part.error_code == Error.INVALID_TOPIC_EXCEPTION


def test_transactional_batches_without_a_coordinator(wire, topic):
    batch = records_batch([b"t"], is_transactional=True, producer_id=1000, producer_epoch=0,
                          base_sequence=0)
    resp = wire.request(PRODUCE, 9, produce_request(topic, 0, batch))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    resp = wire.request(PRODUCE, 9, produce_request(topic, 0, batch, transactional_id="txn-1"))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == Error.INVALID_PRODUCER_ID_MAPPING
    assert log_end(wire, topic) == 0
    # a transactional id alongside plain batches changes nothing
    resp = wire.request(PRODUCE, 9, produce_request(topic, 0, records_batch([b"plain"]),
                                                     transactional_id="txn-1"))
    assert resp.responses[0].partition_responses[0].error_code == Error.NONE


# -- fetch -----------------------------------------------------------------------------------


def test_offset_out_of_range(wire, topic):
    produce(wire, topic, [b"a", b"b"])
    part = fetch_one(wire, topic, 3)
    assert part.error_code == Error.OFFSET_OUT_OF_RANGE
    assert (part.high_watermark, part.log_start_offset, bytes(part.records)) == (-1, -1, b"")
    assert fetch_one(wire, topic, -1).error_code == Error.OFFSET_OUT_OF_RANGE
    assert fetch_one(wire, topic, 2).error_code == Error.NONE


def test_unknown_topics_partitions_and_ids(shared_broker, wire, topic):
    assert fetch_one(wire, "nope", 0).error_code == Error.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch_one(wire, topic, 0, partition=3).error_code == Error.UNKNOWN_TOPIC_OR_PARTITION
    unknown = uuid.uuid4()
    resp = wire.request(FETCH, 13, fetch_request([("x", 0, 0)], topic_ids={"x": unknown}))
    assert resp.responses[0].topic_id == unknown
    assert resp.responses[0].partitions[0].error_code == Error.UNKNOWN_TOPIC_ID


def test_leader_epoch_checks(wire, topic):
    produce(wire, topic, [b"a"])
    for epoch, expected in [(-1, Error.NONE), (0, Error.NONE), (1, Error.UNKNOWN_LEADER_EPOCH),
                            (-2, Error.FENCED_LEADER_EPOCH)]:
        req = fetch_request([(topic, 0, 0)])
        req.topics[0].partitions[0].current_leader_epoch = epoch
        assert wire.request(FETCH, 12, req).responses[0].partitions[0].error_code == expected


def test_size_limits_return_whole_batches(shared_broker, wire):
    make_topic(shared_broker, "sizes", partitions=2)
    for p in (0, 1):
        for i in range(3):
            produce(wire, "sizes", [bytes([65 + i]) * 1000], partition=p)
    size = batch_headers(fetch_one(wire, "sizes", 0).records)[0].size
    # a partition limit below one batch still returns the first batch whole
    part = fetch_one(wire, "sizes", 0, partition_max_bytes=10)
    assert [h.base_offset for h in batch_headers(part.records)] == [0]
    assert len(part.records) == size
    part = fetch_one(wire, "sizes", 0, partition_max_bytes=2 * size + 10)
    assert [h.base_offset for h in batch_headers(part.records)] == [0, 1]
    # the response limit: the first partition gets one batch, the next nothing
    resp = wire.request(FETCH, 12, fetch_request([("sizes", 0, 0), ("sizes", 1, 0)],
                                                 max_bytes=10))
    p0, p1 = resp.responses[0].partitions
    assert len(batch_headers(p0.records)) == 1
    assert (p1.error_code, bytes(p1.records), p1.high_watermark) == (Error.NONE, b"", 3)
    resp = wire.request(FETCH, 12, fetch_request([("sizes", 0, 0), ("sizes", 1, 0)],
                                                 max_bytes=4 * size))
    p0, p1 = resp.responses[0].partitions
    assert (len(batch_headers(p0.records)), len(batch_headers(p1.records))) == (3, 1)


# -- long poll -------------------------------------------------------------------------------


def test_max_wait_returns_empty_when_nothing_arrives(wire, topic):
    produce(wire, topic, [b"a"])
    part = fetch_one(wire, topic, 1, max_wait_ms=100, min_bytes=1)
    assert (part.error_code, bytes(part.records), part.high_watermark) == (Error.NONE, b"", 1)


def test_min_bytes_not_reached_returns_what_there_is_after_max_wait(wire, topic):
    produce(wire, topic, [b"a"])
    part = fetch_one(wire, topic, 0, max_wait_ms=100, min_bytes=10_000_000)
    assert [r.value for r in decode_records(part.records)] == [b"a"]


def test_long_poll_is_woken_by_a_produce_on_another_connection(shared_broker, topic):
    with KafkaWire.connect(shared_broker.bootstrap) as consumer, \
            KafkaWire.connect(shared_broker.bootstrap) as producer:
        consumer.send(FETCH, 12, fetch_request([(topic, 0, 0)], max_wait_ms=60_000))
        wait_until_parked(shared_broker, topic)
        produce(producer, topic, [b"wake", b"up"])
        part = consumer.receive().responses[0].partitions[0]
        assert [r.value for r in decode_records(part.records)] == [b"wake", b"up"]


def test_pipelined_requests_are_answered_in_order(shared_broker, wire, topic):
    # a long poll first: the produces behind it wake it, and their answers wait for it
    wire.send(FETCH, 12, fetch_request([(topic, 0, 0)], max_wait_ms=60_000))
    wait_until_parked(shared_broker, topic)
    for i in range(50):
        wire.send(PRODUCE, 9, produce_request(topic, 0, records_batch([b"%d" % i]), acks=1))
    wire.send(LIST_OFFSETS, 9, list_offsets_request(topic, 0, -1))
    first = wire.receive()  # receive() checks every correlation id, in order
    assert decode_records(first.responses[0].partitions[0].records)[0].value == b"0"
    offsets = [wire.receive().responses[0].partition_responses[0].base_offset
               for _ in range(50)]
    assert offsets == list(range(50))
    assert wire.receive().topics[0].partitions[0].offset == 50


# -- connection-level faults ---------------------------------------------------------------


def test_malformed_frame_closes_the_connection_and_keeps_the_data(shared_broker, wire, topic):
    produce(wire, topic, [b"keep", b"me"])
    header = encode_request_header(PRODUCE, 9, 99, "bad", 2)
    body = header + b"\x07\xff\xff\xff"  # a produce body cut short
    wire.send_raw(struct.pack(">i", len(body)) + body)
    assert wire.is_closed_by_peer()
    with KafkaWire.connect(shared_broker.bootstrap) as again:
        assert [r.value for r in decode_records(fetch_one(again, topic, 0).records)] == [
            b"keep", b"me"]
        again.send_raw(struct.pack(">i", -5))  # a negative frame size
        assert again.is_closed_by_peer()
    with KafkaWire.connect(shared_broker.bootstrap) as third:
        assert log_end(third, topic) == 2


def test_unsupported_api_versions_version_gets_a_v0_answer(wire):
    header = encode_request_header(API_VERSIONS, 99, 42, "future-client", 2)
    body = header + b"\x00"
    wire.send_raw(struct.pack(">i", len(body)) + body)
    frame = wire.read_frame()
    assert struct.unpack_from(">i", frame, 0)[0] == 42
    response, _ = api_versions_response.decode(0, memoryview(frame), 4)
    assert response.error_code == Error.UNSUPPORTED_VERSION
    # as Kafka: only ApiVersions' own range, to retry with
    served = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert served == {API_VERSIONS: (0, 4)}


def test_failed_fsync_fails_acks_all_with_storage_error(tmp_path):
    fs = FaultyFileSystem()
    with BrokerThread(tmp_path / "faulty", {"log.flush.mode": "fsync"}, fs=fs) as b:
        make_topic(b, "faulty")
        with KafkaWire.connect(b.bootstrap) as w:
            assert produce(w, "faulty", [b"safe"]).error_code == Error.NONE
            fs.fsync_error = errno.EIO
            part = produce(w, "faulty", [b"lost"])
            assert (part.error_code, part.base_offset) == (Error.KAFKA_STORAGE_ERROR, -1)
            fs.clear_faults()
            # the unacknowledged batch was taken back; the log goes on after the safe one
            assert produce(w, "faulty", [b"again"]).base_offset == 1
            values = [r.value for r in decode_records(fetch_one(w, "faulty", 0).records)]
            assert values == [b"safe", b"again"]


def test_parked_fetch_on_a_deleted_topic(shared_broker, wire):
    make_topic(shared_broker, "short-lived")
    wire.send(FETCH, 12, fetch_request([("short-lived", 0, 0)], max_wait_ms=200))
    wait_until_parked(shared_broker, "short-lived")

    async def delete():
        shared_broker.broker.log_manager.delete_topic("short-lived")

    shared_broker.call(delete())
    part = wire.receive().responses[0].partitions[0]
    assert part.error_code == Error.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize("compression", [0, 1])
def test_compacted_topic_refuses_records_without_key(shared_broker, wire, compression):
    name = f"compacted-{compression}"
    make_topic(shared_broker, name, configs={"cleanup.policy": "compact"})
    part = produce(wire, name, [b"a", b"b", b"c", b"d"], keys=[b"k", None, b"k", None],
                   compression=compression)
    assert (part.error_code, part.base_offset) == (Error.INVALID_RECORD, -1)
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    assert "without key" in part.record_errors[0].batch_index_error_message
    assert part.error_message
    assert log_end(wire, name) == 0
    assert produce(wire, name, [b"a"], keys=[b"k"], compression=compression).base_offset == 0


def test_invalid_timestamps_name_the_records(shared_broker, wire):
    make_topic(shared_broker, "recent-only",
               configs={"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    old = now - 7_200_000
    batch = build_batch([(None, b"a", [], old), (None, b"b", [], now), (None, b"c", [], old)])
    resp = wire.request(PRODUCE, 9, produce_request("recent-only", 0, batch))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == Error.INVALID_TIMESTAMP
    assert [e.batch_index for e in part.record_errors] == [0, 2]
    assert part.error_message == "One or more records have been rejected due to invalid timestamp"
    assert log_end(wire, "recent-only") == 0


def test_transactional_batches_without_verification_are_appended(tmp_path):
    overrides = {"transaction.partition.verification.enable": "false"}
    with BrokerThread(tmp_path / "unverified", overrides) as b:
        make_topic(b, "txn")
        batch = records_batch([b"t"], is_transactional=True, producer_id=1000,
                              producer_epoch=0, base_sequence=0)
        with KafkaWire.connect(b.bootstrap) as w:
            resp = w.request(PRODUCE, 9, produce_request("txn", 0, batch,
                                                         transactional_id="txn-1"))
            assert resp.responses[0].partition_responses[0].error_code == Error.NONE
            resp = w.request(PRODUCE, 9, produce_request("txn", 0, batch))
            assert resp.responses[0].partition_responses[0].error_code == (
                Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
