"""Incremental fetch sessions (KIP-227) over a real socket (tests/kafka_wire.py).

One in-process broker (log.flush.mode=none) for the module; every test uses its own
three-partition topic. Incremental fetches use a short max_wait so that "nothing changed"
answers come back quickly.
"""

from __future__ import annotations

import re
import time

import pytest

from semel.broker.fetch_session import sessions_of
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.kafka_wire import (
    DELETE_RECORDS,
    FETCH,
    METADATA,
    PRODUCE,
    KafkaWire,
    decode_records,
    fetch_request,
    make_topic,
    message,
    produce_request,
    records_batch,
)

QUICK = 20  # ms: max_wait of fetches expected to find nothing


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("sessions")) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    with KafkaWire.connect(shared_broker.bootstrap) as w:
        yield w


@pytest.fixture
def topic(shared_broker, request) -> str:
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(shared_broker, name, partitions=3)
    return name


def produce(wire: KafkaWire, topic: str, partition: int, values: list[bytes]) -> None:
    resp = wire.request(PRODUCE, 9, produce_request(topic, partition, records_batch(values)))
    assert resp.responses[0].partition_responses[0].error_code == Error.NONE


def answered(resp) -> dict[int, list[bytes]]:
    """partition -> values in a fetch response (a one-topic fetch)."""
    assert resp.error_code == Error.NONE
    return {p.partition_index: [r.value for r in decode_records(p.records)]
            for t in resp.responses for p in t.partitions}


class Session:
    """A client's view of one fetch session: the id and the next epoch."""

    def __init__(self, wire: KafkaWire, topic: str, version: int = 12, topic_ids=None):
        self.wire, self.topic, self.version, self.topic_ids = wire, topic, version, topic_ids
        self.id = 0
        self.epoch = 0

    def full(self, offsets: dict[int, int], **kw):
        req = fetch_request([(self.topic, p, o) for p, o in offsets.items()], session_epoch=0,
                            topic_ids=self.topic_ids, **kw)
        resp = self.wire.request(FETCH, self.version, req)
        self.id, self.epoch = resp.session_id, 1
        return resp

    def incremental(self, offsets: dict[int, int] | None = None, forgotten=(), **kw):
        kw.setdefault("max_wait_ms", QUICK)
        req = fetch_request([(self.topic, p, o) for p, o in (offsets or {}).items()],
                            session_id=self.id, session_epoch=self.epoch,
                            topic_ids=self.topic_ids,
                            forgotten=[(self.topic, p) for p in forgotten], **kw)
        resp = self.wire.request(FETCH, self.version, req)
        if resp.error_code == Error.NONE:
            self.epoch += 1
        return resp


def test_incremental_fetches_answer_only_what_changed(wire, topic):
    produce(wire, topic, 0, [b"a0", b"a1"])
    produce(wire, topic, 1, [b"b0"])
    s = Session(wire, topic)
    resp = s.full({0: 0, 1: 0, 2: 0})
    assert s.id != 0
    assert answered(resp) == {0: [b"a0", b"a1"], 1: [b"b0"], 2: []}

    # the client moved its positions; nothing new: an empty answer
    resp = s.incremental({0: 2, 1: 1})
    assert (resp.session_id, answered(resp)) == (s.id, {})
    resp = s.incremental()
    assert answered(resp) == {}

    # new data on a partition the request does not even name
    produce(wire, topic, 2, [b"c0"])
    resp = s.incremental()
    assert answered(resp) == {2: [b"c0"]}
    assert resp.responses[0].partitions[0].high_watermark == 1

    # forget partition 1: its new data is not read any more
    resp = s.incremental({2: 1}, forgotten=[1])
    assert answered(resp) == {}
    produce(wire, topic, 1, [b"b1"])
    assert answered(s.incremental()) == {}
    produce(wire, topic, 0, [b"a2"])
    assert answered(s.incremental()) == {0: [b"a2"]}


def test_session_errors(wire, topic):
    produce(wire, topic, 0, [b"x"])
    s = Session(wire, topic)
    s.full({0: 0})
    assert s.incremental().error_code == Error.NONE  # epoch 1
    s.epoch -= 1  # replay epoch 1
    assert s.incremental().error_code == Error.INVALID_FETCH_SESSION_EPOCH
    s.epoch += 1
    assert s.incremental().error_code == Error.NONE  # epoch 2 still works
    unknown = wire.request(FETCH, 12, fetch_request([], session_id=s.id ^ 0x5A5A,
                                                   session_epoch=1))
    assert unknown.error_code == Error.FETCH_SESSION_ID_NOT_FOUND
    # topic ids (v13) on a session opened without them
    ids = Session(wire, topic, version=13, topic_ids={topic: topic_id(wire, topic)})
    ids.id, ids.epoch = s.id, s.epoch
    assert ids.incremental().error_code == Error.FETCH_SESSION_TOPIC_ID_ERROR
    # a sessionless full fetch naming the session closes it
    closing = wire.request(FETCH, 12, fetch_request([(topic, 0, 0)], session_id=s.id,
                                                   session_epoch=-1))
    assert (closing.error_code, closing.session_id) == (Error.NONE, 0)
    assert s.incremental().error_code == Error.FETCH_SESSION_ID_NOT_FOUND


def topic_id(wire: KafkaWire, topic: str):
    req = message(METADATA, "request", topics=[message(METADATA, "request",
                                                       "MetadataRequestTopic", name=topic)])
    return wire.request(METADATA, 12, req).topics[0].topic_id


def test_sessions_by_topic_id(wire, topic):
    produce(wire, topic, 1, [b"v"])
    s = Session(wire, topic, version=17, topic_ids={topic: topic_id(wire, topic)})
    resp = s.full({0: 0, 1: 0})
    assert resp.responses[0].topic_id == s.topic_ids[topic]
    assert answered(resp) == {0: [], 1: [b"v"]}
    produce(wire, topic, 0, [b"w"])
    resp = s.incremental({1: 1})
    assert answered(resp) == {0: [b"w"]}


def test_log_start_and_errors_are_reported(wire, topic):
    produce(wire, topic, 0, [b"a", b"b", b"c"])
    s = Session(wire, topic)
    s.full({0: 3, 1: 0})
    p = message(DELETE_RECORDS, "request", "DeleteRecordsPartition", partition_index=0, offset=2)
    t = message(DELETE_RECORDS, "request", "DeleteRecordsTopic", name=topic, partitions=[p])
    wire.request(DELETE_RECORDS, 2, message(DELETE_RECORDS, "request", topics=[t]))
    resp = s.incremental()
    [part] = resp.responses[0].partitions
    assert (part.partition_index, part.log_start_offset, part.error_code) == (0, 2, 0)
    # an error is sent every time, until it goes away
    for _ in range(2):
        [part] = s.incremental({1: 5}).responses[0].partitions
        assert (part.partition_index, part.error_code) == (1, Error.OFFSET_OUT_OF_RANGE)
    [part] = s.incremental({1: 0}).responses[0].partitions
    assert (part.partition_index, part.error_code, part.high_watermark) == (1, 0, 0)
    assert answered(s.incremental()) == {}


def test_partitions_that_returned_data_go_to_the_back(wire, topic):
    for p in (0, 1):
        for i in range(3):
            produce(wire, topic, p, [b"%d-%d" % (p, i)])
    s = Session(wire, topic)
    # a response limit of one batch: only the first partition in session order gets data
    assert answered(s.full({0: 0, 1: 0}, max_bytes=1)) == {0: [b"0-0"], 1: []}
    # partition 0 gets data again (session order 0, 1) and then moves behind partition 1
    assert answered(s.incremental({0: 1}, max_bytes=1)) == {0: [b"0-1"]}
    assert answered(s.incremental({0: 2}, max_bytes=1)) == {1: [b"1-0"]}
    assert answered(s.incremental({1: 1}, max_bytes=1)) == {0: [b"0-2"]}
    assert answered(s.incremental({0: 3}, max_bytes=1)) == {1: [b"1-1"]}


def test_incremental_long_poll_is_woken_by_a_produce(shared_broker, wire, topic):
    s = Session(wire, topic)
    s.full({0: 0, 1: 0, 2: 0})
    wire.send(FETCH, 12, fetch_request([], session_id=s.id, session_epoch=1,
                                       max_wait_ms=60_000))
    key = (topic, 0)
    deadline = time.monotonic() + 30
    while key not in shared_broker.broker.fetch_waiters._by_partition:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    with KafkaWire.connect(shared_broker.bootstrap) as producer:
        produce(producer, topic, 1, [b"late"])
    assert answered(wire.receive()) == {1: [b"late"]}


def test_a_full_cache_answers_without_a_session(tmp_path):
    with BrokerThread(tmp_path / "one-session") as b:
        make_topic(b, "t")
        cache = sessions_of(b.broker)
        cache.max_sessions = 1
        with KafkaWire.connect(b.bootstrap) as w:
            first = Session(w, "t")
            first.full({0: 0})
            second = Session(w, "t")
            resp = second.full({0: 0})
            assert (resp.error_code, resp.session_id) == (Error.NONE, 0)
            assert first.incremental().error_code == Error.NONE
