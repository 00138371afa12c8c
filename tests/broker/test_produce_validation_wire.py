"""Produce requests whose batches pass the header and CRC checks but not the record walk
(protocol/validator.py), over a real socket (tests/kafka_wire.py): each is refused with
Kafka's error code and a precise message, the partition's log end offset and stored bytes
do not move, and a librdkafka producer and consumer on the same broker carry on meanwhile.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import build_batch
from tests.kafka_wire import (
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
)
from tests.protocol.walk_fixtures import T0, batch, body, record, records, varint

TIMEOUT_S = 60
DEFAULT_CAP = 64 * 1024 * 1024  # message.max.uncompressed.bytes


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("validation")) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    with KafkaWire.connect(shared_broker.bootstrap) as w:
        yield w


@pytest.fixture(scope="module")
def background(shared_broker):
    """A confluent-kafka producer and consumer working on their own topic all along."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    make_topic(shared_broker, "steady")
    stop = threading.Event()
    delivered: list[int] = []
    errors: list = []

    def produce() -> None:
        producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "acks": "all",
                             "linger.ms": 2, "compression.type": "lz4"})  # fmt: skip
        i = 0
        while not stop.is_set():
            producer.produce("steady", value=b"v%d" % i, key=b"k", partition=0,
                             on_delivery=lambda err, msg: errors.append(err) if err
                             else delivered.append(msg.offset()))  # fmt: skip
            producer.poll(0.005)
            i += 1
        assert producer.flush(TIMEOUT_S) == 0

    thread = threading.Thread(target=produce, name="steady-producer")
    thread.start()
    try:
        yield delivered
    finally:
        stop.set()
        thread.join(TIMEOUT_S)
    assert errors == []
    assert len(delivered) > 100
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "steady",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition("steady", 0, OFFSET_BEGINNING)])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(delivered) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                got.append(msg.offset())
        assert got == sorted(delivered) == list(range(len(delivered)))
    finally:
        consumer.close()


_counter = iter(range(10**6))


@pytest.fixture
def topic(shared_broker, background) -> str:
    name = f"checked-{next(_counter)}"
    make_topic(shared_broker, name)
    # a good batch first: the refusals below must leave it alone
    with KafkaWire.connect(shared_broker.bootstrap) as w:
        assert produce(w, name, build_batch([(b"k", b"first", [], T0)])).error_code == 0
    return name


def produce(wire: KafkaWire, topic: str, data: bytes, version: int = 9):
    resp = wire.request(PRODUCE, version, produce_request(topic, 0, data))
    return resp.responses[0].partition_responses[0]


def log_end(wire: KafkaWire, topic: str) -> int:
    resp = wire.request(LIST_OFFSETS, 9, list_offsets_request(topic, 0, -1))
    return resp.topics[0].partitions[0].offset


def stored_bytes(broker: BrokerThread, topic: str) -> int:
    async def size():
        return broker.broker.log_manager.get_partition(topic, 0).size_in_bytes

    return broker.call(size())


def assert_refused(shared_broker, wire, topic, data, code, message, *, version=9):
    before = (log_end(wire, topic), stored_bytes(shared_broker, topic))
    part = produce(wire, topic, data, version)
    assert (part.error_code, part.base_offset) == (code, -1)
    assert part.error_message == message
    assert (log_end(wire, topic), stored_bytes(shared_broker, topic)) == before
    # the partition still takes good batches, and only those are there
    good = produce(wire, topic, build_batch([(b"k", b"after", [], T0)]))
    assert (good.error_code, good.base_offset) == (0, before[0])
    resp = wire.request(FETCH, 12, fetch_request([(topic, 0, 0)]))
    values = [r.value for r in decode_records(resp.responses[0].partitions[0].records)]
    assert values == [b"first"] + [b"after"] * before[0]
    return part


def test_garbage_records_under_a_valid_crc(shared_broker, wire, topic):
    data = batch(b"\xff" * 40, 3)
    assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                   "record 0: record length is a varint longer than 5 bytes")  # fmt: skip


@pytest.mark.parametrize("codec", [0, 4], ids=["none", "zstd"])
def test_count_says_two_with_five_inside(shared_broker, wire, topic, codec):
    data = batch(records(5), 2, last_offset_delta=1, compression=codec)
    assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                   "bytes remain after the 2 records the batch declares")  # fmt: skip


@pytest.mark.parametrize("codec", [0, 1], ids=["none", "gzip"])
def test_count_says_a_thousand_with_five_inside(shared_broker, wire, topic, codec):
    data = batch(records(5), 1000, compression=codec)
    assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                   "the batch declares 1000 records but holds 5")  # fmt: skip


def test_header_count_and_last_offset_delta_disagree(shared_broker, wire, topic):
    data = batch(records(5), 5, last_offset_delta=1)
    assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                   "record count 5 != lastOffsetDelta+1 (2)")  # fmt: skip


def test_zstd_bomb_is_refused_at_the_cap(shared_broker, wire, topic, background):
    huge = record(0, key=b"k", value=bytes(120 << 20))
    data = batch(huge, 1, compression=4)
    del huge
    assert len(data) < 8192
    deliveries = len(background)
    for _ in range(3):
        assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                       f"zstd: records decompress to more than {DEFAULT_CAP} bytes")  # fmt: skip
    deadline = time.monotonic() + TIMEOUT_S
    while len(background) == deliveries and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(background) > deliveries  # the steady producer carried on


def test_bomb_of_small_records_is_refused_at_the_cap(shared_broker, wire, topic):
    one = body(0, value=bytes(1000))
    n = (80 << 20) // (len(one) + 2)
    data = batch(b"".join(varint(len(b)) + b for b in (body(i, value=bytes(1000))
                                                        for i in range(n))), n, compression=3)  # fmt: skip
    assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                   f"lz4: records decompress to more than {DEFAULT_CAP} bytes")  # fmt: skip


def test_bad_offset_deltas(shared_broker, wire, topic):
    data = batch(record(0) + record(1, offset_delta=0) + record(2), 3)
    assert_refused(shared_broker, wire, topic, data, Error.INVALID_RECORD,
                   "record 1: offset delta 0, expected 1")  # fmt: skip


def test_keyless_record_on_a_compacted_topic(shared_broker, wire, background):
    name = f"compacted-{next(_counter)}"
    make_topic(shared_broker, name, configs={"cleanup.policy": "compact"})
    data = build_batch([(b"k", b"a", [], T0), (None, b"b", [], T0), (b"k", b"c", [], T0)],
                       compression=3)  # fmt: skip
    part = produce(wire, name, data)
    message = f"Compacted topic cannot accept message without key in topic partition {name}-0."
    assert (part.error_code, part.base_offset) == (Error.INVALID_RECORD, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (1, message)]
    assert part.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{message}')]"
    )
    assert log_end(wire, name) == 0 and stored_bytes(shared_broker, name) == 0


def test_timestamps_out_of_range_name_their_records(shared_broker, wire, background):
    name = f"recent-{next(_counter)}"
    make_topic(shared_broker, name, configs={"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    data = build_batch([(None, b"a", [], now - 7_200_000), (None, b"b", [], now)])
    part = produce(wire, name, data)
    assert part.error_code == Error.INVALID_TIMESTAMP
    assert [e.batch_index for e in part.record_errors] == [0]
    assert part.record_errors[0].batch_index_error_message.startswith(
        f"Timestamp {now - 7_200_000} of message with offset 0 is out of range.")
    assert log_end(wire, name) == 0


def test_large_compressed_batch_is_walked_off_the_loop_and_appended(shared_broker, wire, topic):
    """Past the loop's budget the walk finishes in a worker thread; then it is appended."""
    now = int(time.time() * 1000)
    rows = [(b"k%d" % i, os.urandom(64) * 16, [], now) for i in range(4000)]  # ~4 MiB
    part = produce(wire, topic, build_batch(rows, compression=4))
    assert (part.error_code, part.base_offset) == (0, 1)
    assert log_end(wire, topic) == 4001


def test_max_timestamp_is_rewritten_to_the_largest_record_timestamp(shared_broker, wire, topic):
    now = int(time.time() * 1000)
    data = batch(record(0, ts_delta=5) + record(1, ts_delta=500) + record(2), 3,
                 base_timestamp=now, max_timestamp=now)  # fmt: skip
    assert produce(wire, topic, data).error_code == 0
    resp = wire.request(FETCH, 12, fetch_request([(topic, 0, 1)]))
    header = batch_headers(resp.responses[0].partitions[0].records)[0]
    assert header.max_timestamp == now + 500
