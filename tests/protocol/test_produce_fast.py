"""protocol/produce_fast.py against the generated Produce codec: the same fields read from
every request of the common shape, None (never an exception) for anything else, and
responses identical byte for byte."""

from __future__ import annotations

import random

import pytest

from semel.protocol import api, produce_fast
from semel.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from semel.protocol.messages.produce_response import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from semel.protocol.primitives import write_uvarint
from tests.kafka_wire import message

PRODUCE = 0
VERSIONS = range(3, 13)


def _request(rng: random.Random, *, transactional_id=None, record_sizes=(0, 1, 200, 20_000)):
    topics = []
    for t in range(rng.randint(0, 3)):
        partitions = [PartitionProduceData(index=rng.randint(0, 1 << 30),
                                           records=rng.randbytes(rng.choice(record_sizes)))
                      for _ in range(rng.randint(0, 3))]
        name = rng.choice(["t", "topic-é", "x" * 200]) + str(t)
        topics.append(TopicProduceData(name=name, partition_data=partitions))
    return message(PRODUCE, "request", transactional_id=transactional_id,
                   acks=rng.choice([-1, 0, 1, 7]), timeout_ms=rng.randint(-1, 1 << 20),
                   topic_data=topics)


def _frame(version: int, body, client_id: str | None = "client") -> memoryview:
    """The frame without its size prefix, as the dispatcher sees it."""
    return memoryview(api.encode_request(PRODUCE, version, 7, client_id, body))[4:]


@pytest.mark.parametrize("version", VERSIONS)
def test_parse_reads_what_the_codec_reads(version: int) -> None:
    rng = random.Random(version)
    for i in range(200):
        body = _request(rng, transactional_id=None if i % 3 else f"txn-{i}")
        frame = _frame(version, body, client_id=None if i % 5 == 0 else "c" * (i % 40))
        parsed = produce_fast.parse(frame, version)
        assert parsed is not None
        assert (parsed.transactional_id, parsed.acks, parsed.timeout_ms) == (
            body.transactional_id, body.acks, body.timeout_ms)
        assert [(t.name, [(p.index, bytes(p.records)) for p in t.partitions])
                for t in parsed.topics] == [
            (t.name, [(p.index, bytes(p.records)) for p in t.partition_data])
            for t in body.topic_data]


@pytest.mark.parametrize("version", VERSIONS)
def test_records_are_views_into_the_frame(version: int) -> None:
    """Produce rewrites offsets in place: the records must be the frame's own bytes."""
    body = _request(random.Random(1), record_sizes=(100,))
    body.topic_data = [TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"r" * 100)])]
    frame = memoryview(bytearray(_frame(version, body)))
    records = produce_fast.parse(frame, version).topics[0].partitions[0].records
    records[0] = ord("X")
    assert b"X" + b"r" * 99 in bytes(frame)


@pytest.mark.parametrize("version", VERSIONS)
def test_anything_else_is_left_to_the_codec(version: int) -> None:
    """Null records, truncation at every byte, trailing bytes: None, never an exception."""
    rng = random.Random(100 + version)
    body = _request(rng, record_sizes=(30,))
    body.topic_data = [TopicProduceData(name="topic", partition_data=[
        PartitionProduceData(index=1, records=b"a" * 30),
        PartitionProduceData(index=2, records=None)])]
    assert produce_fast.parse(_frame(version, body), version) is None
    body.topic_data[0].partition_data.pop()
    frame = bytes(_frame(version, body))
    assert produce_fast.parse(memoryview(frame), version) is not None
    for cut in range(len(frame)):
        assert produce_fast.parse(memoryview(frame[:cut]), version) is None
    assert produce_fast.parse(memoryview(frame + b"\x00"), version) is None
    for _ in range(300):  # random corruption: whatever it reads, it does not raise
        broken = bytearray(frame)
        broken[rng.randrange(8, len(broken))] = rng.randrange(256)
        produce_fast.parse(memoryview(broken), version)


@pytest.mark.parametrize("version", range(9, 13))
def test_tagged_fields_are_left_to_the_codec(version: int) -> None:
    body = _request(random.Random(5))
    body.topic_data = [TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"abc")])]
    plain = bytes(_frame(version, body))
    assert produce_fast.parse(memoryview(plain), version) is not None
    # the request's own tagged fields (the last byte): one unknown tag of 2 bytes
    tagged = bytearray(plain[:-1])
    write_uvarint(tagged, 1)
    tagged += b"\x05\x02zz"
    decoded, end = api.codec(PRODUCE, "request").decode(version, memoryview(tagged),
                                                        _body_start(plain))
    assert end == len(tagged) and decoded.topic_data[0].name == "t"  # valid for the codec
    assert produce_fast.parse(memoryview(tagged), version) is None


def _body_start(frame: bytes) -> int:
    client_id_length = int.from_bytes(frame[8:10], "big", signed=True)
    return 10 + max(client_id_length, 0) + 1


def _response(rng: random.Random, version: int):
    topics = []
    fast = []
    for t in range(rng.randint(0, 3)):
        partitions, results = [], []
        for _ in range(rng.randint(0, 3)):
            failed = rng.random() < 0.3
            message_ = rng.choice([None, "", "Partition was not added to the transaction",
                                   "é" * 300]) if failed else None
            result = produce_fast.PartitionResult(
                rng.randint(0, 1 << 30), rng.choice([6, 47, 7]) if failed else 0,
                -1 if failed else rng.randint(0, 1 << 50),
                rng.choice([-1, 1_700_000_000_000]), rng.randint(-1, 1 << 40), message_)
            results.append(result)
            partitions.append(PartitionProduceResponse(
                index=result.index, error_code=result.error_code,
                base_offset=result.base_offset, log_append_time_ms=result.log_append_time_ms,
                log_start_offset=result.log_start_offset, record_errors=[],
                error_message=result.error_message))
        name = f"topic-{t}"
        topics.append(TopicProduceResponse(name=name, partition_responses=partitions))
        fast.append((name, results))
    return ProduceResponse(responses=topics), fast


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["t", "x" * 126, "y" * 127, "z" * 249, "é-topic"])
def test_one_partition_answer_matches_the_codec(version: int, name: str) -> None:
    """The common answer (one topic, one partition, no error message) has its own short
    path, with the bytes before the partition cached per topic name: byte for byte the
    codec's, on every version, for names whose length takes one or two varint bytes, and
    again from the cache."""
    for code, base, append_time, start in [(0, 5, -1, 0), (0, (1 << 62) + 1, 1_700_000_000_000,
                                                             7), (6, -1, -1, -1)]:
        result = produce_fast.PartitionResult(3, code, base, append_time, start, None)
        response = ProduceResponse(responses=[TopicProduceResponse(
            name=name, partition_responses=[PartitionProduceResponse(
                index=3, error_code=code, base_offset=base, log_append_time_ms=append_time,
                log_start_offset=start, record_errors=[], error_message=None)])])
        expected = bytearray(4)
        expected += (-7).to_bytes(4, "big", signed=True)
        if version >= produce_fast.FIRST_FLEXIBLE:
            expected.append(0)
        api.codec(PRODUCE, "response").encode(version, response, expected)
        expected[:4] = (len(expected) - 4).to_bytes(4, "big")
        for _ in range(2):  # the second from the cached head
            assert produce_fast.encode_response(version, -7, [(name, [result])]) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_match_the_codec_byte_for_byte(version: int) -> None:
    rng = random.Random(200 + version)
    for _ in range(200):
        response, fast = _response(rng, version)
        expected = bytearray(4)
        expected += (123456).to_bytes(4, "big")
        if version >= produce_fast.FIRST_FLEXIBLE:
            expected.append(0)
        api.codec(PRODUCE, "response").encode(version, response, expected)
        expected[:4] = (len(expected) - 4).to_bytes(4, "big")
        assert produce_fast.encode_response(version, 123456, fast) == expected

