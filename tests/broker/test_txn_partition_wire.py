"""The partition side of transactions over a real socket: read_committed Fetch (LSO bound,
aborted transactions, long poll woken by a marker), ListOffsets by isolation, WriteTxnMarkers
(stale markers, unknown partitions), TxnOffsetCommit (verification, implicit add in v5,
KIP-447 checks, offsets pending until the marker), DescribeProducers, Produce partition
verification and the v12 implicit add with EndTxn v5, FindCoordinator for transactions,
ApiVersions features and the /metrics gauges.

One in-process broker for the module; every test uses its own transactional ids and topics.
"""

from __future__ import annotations

import threading
import urllib.request

import pytest
from prometheus_client import generate_latest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import (
    ControlType,
    build_batch,
    iter_batches,
    iter_records,
    parse_control_record,
)
from tests.broker.test_txn_wire import (
    ADD_OFFSETS,
    API_VERSIONS,
    add_partitions,
    describe,
    end_txn,
    init,
)
from tests.group_wire import fetch_offsets, join, sync
from tests.kafka_wire import (
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    KafkaWire,
    fetch_request,
    list_offsets_request,
    make_topic,
    message,
    produce_request,
    records_batch,
)
from tests.waiting import until

FIND_COORDINATOR, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, DESCRIBE_PRODUCERS = 10, 27, 28, 61
READ_COMMITTED = 1


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("txn-partition"),
                      {"transaction.state.log.num.partitions": "3",
                       "offsets.topic.num.partitions": "3",
                       "metrics.listener": "127.0.0.1:0"}) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    with KafkaWire.connect(shared_broker.bootstrap, client_id="txn-partition") as w:
        yield w


def produce(wire, topic, values, *, partition=0, version=9, tid=None, **batch):
    response = wire.request(PRODUCE, version, produce_request(
        topic, partition, records_batch(values, **batch), transactional_id=tid))
    return response.responses[0].partition_responses[0]


def produce_txn(wire, tid, r, topic, values, seq, *, partition=0, version=9, epoch=None,
                **batch):
    return produce(wire, topic, values, partition=partition, version=version, tid=tid,
                   producer_id=r.producer_id,
                   producer_epoch=r.producer_epoch if epoch is None else epoch,
                   base_sequence=seq, is_transactional=True, **batch)


def fetch(wire, topic, offset=0, *, isolation_level=READ_COMMITTED, partition=0, **kw):
    response = wire.request(FETCH, 12, fetch_request([(topic, partition, offset)],
                                                     isolation_level=isolation_level, **kw))
    return response.responses[0].partitions[0]


def values_of(part) -> list[bytes]:
    """The data records' values (control records left out)."""
    data = bytes(part.records or b"")
    return [r.value for h in iter_batches(data) if not h.is_control
            for r in iter_records(data, h)]


def aborted(part):
    if part.aborted_transactions is None:
        return None
    return [(a.producer_id, a.first_offset) for a in part.aborted_transactions]


def control_markers(wire, topic, partition=0):
    """(producer id, epoch, control type, coordinator epoch) of every marker, read fetch by
    fetch (a marker's wall-clock timestamp may roll a segment of old test timestamps)."""
    markers, offset = [], 0
    while True:
        part = fetch(wire, topic, offset, isolation_level=0, partition=partition)
        data = bytes(part.records or b"")
        if not data:
            return markers
        for header in iter_batches(data):
            offset = header.next_offset
            if header.is_control:
                [record] = list(iter_records(data, header))
                control_type, coordinator_epoch = parse_control_record(record)
                markers.append((header.producer_id, header.producer_epoch, control_type,
                                coordinator_epoch))


def write_markers(wire, pid, epoch, commit, partitions: dict[str, list[int]], *,
                  coordinator_epoch=0, transaction_version=0, version=2):
    marker = message(WRITE_TXN_MARKERS, "request", "WritableTxnMarker", producer_id=pid,
                     producer_epoch=epoch, transaction_result=commit,
                     coordinator_epoch=coordinator_epoch,
                     transaction_version=transaction_version,
                     topics=[message(WRITE_TXN_MARKERS, "request", "WritableTxnMarkerTopic",
                                     name=t, partition_indexes=ps)
                             for t, ps in partitions.items()])
    response = wire.request(WRITE_TXN_MARKERS, version,
                            message(WRITE_TXN_MARKERS, "request", markers=[marker]))
    [result] = response.markers
    assert result.producer_id == pid
    return {(t.name, p.partition_index): p.error_code
            for t in result.topics for p in t.partitions}


def append_direct(broker, topic, data, origin="client"):
    async def append():
        return broker.broker.log_manager.get_partition(topic, 0).append(data, origin=origin)

    return broker.call(append())


def txn_offset_commit(wire, tid, r, group, offsets: dict[tuple[str, int], int], *,
                      version=3, generation=-1, member_id="", epoch=None):
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(message(
            TXN_OFFSET_COMMIT, "request", "TxnOffsetCommitRequestPartition",
            partition_index=partition, committed_offset=offset))
    response = wire.request(TXN_OFFSET_COMMIT, version, message(
        TXN_OFFSET_COMMIT, "request", transactional_id=tid, group_id=group,
        producer_id=r.producer_id,
        producer_epoch=r.producer_epoch if epoch is None else epoch,
        generation_id=generation, member_id=member_id,
        topics=[message(TXN_OFFSET_COMMIT, "request", "TxnOffsetCommitRequestTopic", name=t,
                        partitions=ps) for t, ps in topics.items()]))
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def add_offsets(wire, tid, r, group):
    return wire.request(ADD_OFFSETS, 3, message(
        ADD_OFFSETS, "request", transactional_id=tid, producer_id=r.producer_id,
        producer_epoch=r.producer_epoch, group_id=group)).error_code


# -- read_committed fetch and ListOffsets -------------------------------------------------------


def test_read_committed_stops_at_the_lso_and_reports_aborted_transactions(shared_broker, wire):
    make_topic(shared_broker, "rc-abort")
    r = init(wire, "rc-abort")
    assert add_partitions(wire, "rc-abort", r.producer_id, r.producer_epoch,
                          {"rc-abort": [0]}) == {("rc-abort", 0): Error.NONE}
    assert produce(wire, "rc-abort", [b"plain-0"]).base_offset == 0
    assert produce_txn(wire, "rc-abort", r, "rc-abort", [b"t1", b"t2"], 0).base_offset == 1
    assert produce(wire, "rc-abort", [b"plain-3"]).base_offset == 3

    committed = fetch(wire, "rc-abort")
    assert (committed.high_watermark, committed.last_stable_offset) == (4, 1)
    assert values_of(committed) == [b"plain-0"] and aborted(committed) == []
    uncommitted = fetch(wire, "rc-abort", isolation_level=0)
    assert values_of(uncommitted) == [b"plain-0", b"t1", b"t2", b"plain-3"]
    assert aborted(uncommitted) is None and uncommitted.last_stable_offset == 1

    assert end_txn(wire, "rc-abort", r.producer_id, r.producer_epoch, False).error_code == 0
    until(lambda: fetch(wire, "rc-abort").last_stable_offset == 5)
    after = fetch(wire, "rc-abort")
    # everything comes back; the client drops the aborted producer's batches from offset 1
    assert values_of(after) == [b"plain-0", b"t1", b"t2", b"plain-3"]
    assert aborted(after) == [(r.producer_id, 1)]
    assert aborted(fetch(wire, "rc-abort", 3)) == [(r.producer_id, 1)]  # marker at 4 >= 3
    assert aborted(fetch(wire, "rc-abort", 5)) == []  # nothing returned past the marker
    assert aborted(fetch(wire, "rc-abort", 0, isolation_level=0)) is None


def test_list_offsets_by_isolation_level(shared_broker, wire):
    make_topic(shared_broker, "rc-offsets")
    r = init(wire, "rc-offsets")
    add_partitions(wire, "rc-offsets", r.producer_id, r.producer_epoch, {"rc-offsets": [0]})
    produce(wire, "rc-offsets", [b"a"], timestamp=1_000)
    produce_txn(wire, "rc-offsets", r, "rc-offsets", [b"b"], 0, timestamp=2_000)

    def lookup(spec, isolation_level):
        response = wire.request(LIST_OFFSETS, 7, list_offsets_request(
            "rc-offsets", 0, spec, isolation_level=isolation_level))
        p = response.topics[0].partitions[0]
        return p.offset, p.timestamp

    assert lookup(-1, 0) == (2, -1) and lookup(-1, READ_COMMITTED) == (1, -1)
    assert lookup(2_000, 0) == (1, 2_000)
    assert lookup(2_000, READ_COMMITTED) == (-1, -1)  # beyond the last stable offset
    assert lookup(1_000, READ_COMMITTED) == (0, 1_000)
    end_txn(wire, "rc-offsets", r.producer_id, r.producer_epoch, True)
    until(lambda: lookup(-1, READ_COMMITTED) == (3, -1))
    assert lookup(2_000, READ_COMMITTED) == (1, 2_000)


def test_read_committed_long_poll_wakes_when_the_transaction_commits(shared_broker, wire):
    make_topic(shared_broker, "rc-poll")
    r = init(wire, "rc-poll")
    add_partitions(wire, "rc-poll", r.producer_id, r.producer_epoch, {"rc-poll": [0]})
    produce_txn(wire, "rc-poll", r, "rc-poll", [b"x", b"y"], 0)
    result = {}

    def poll():
        with KafkaWire.connect(shared_broker.bootstrap) as other:
            result["part"] = fetch(other, "rc-poll", max_wait_ms=60_000)

    waiter = threading.Thread(target=poll)
    waiter.start()
    waiters = shared_broker.broker.fetch_waiters
    until(lambda: ("rc-poll", 0) in waiters._by_partition)  # parked, nothing committed
    assert end_txn(wire, "rc-poll", r.producer_id, r.producer_epoch, True).error_code == 0
    waiter.join(30)
    assert not waiter.is_alive()
    part = result["part"]
    assert values_of(part) == [b"x", b"y"] and part.last_stable_offset == 3
    assert aborted(part) == []


# -- WriteTxnMarkers ------------------------------------------------------------------------------


def test_write_txn_markers_over_the_wire(shared_broker, wire):
    make_topic(shared_broker, "wm")
    pid = 424242
    data = build_batch([(None, b"d", None, 1_700_000_000_000)], producer_id=pid,
                       producer_epoch=2, base_sequence=0, is_transactional=True)
    append_direct(shared_broker, "wm", data)
    assert fetch(wire, "wm").last_stable_offset == 0
    # a marker from an older producer epoch is stale
    assert write_markers(wire, pid, 1, False, {"wm": [0]}) == {
        ("wm", 0): Error.INVALID_PRODUCER_EPOCH}
    # transaction version 2: the marker's epoch must exceed the data's (KIP-890)
    assert write_markers(wire, pid, 2, False, {"wm": [0]}, transaction_version=2) == {
        ("wm", 0): Error.INVALID_PRODUCER_EPOCH}
    assert write_markers(wire, pid, 3, False, {"wm": [0], "wm-none": [0]}, coordinator_epoch=5,
                         transaction_version=2) == {
        ("wm", 0): Error.NONE, ("wm-none", 0): Error.UNKNOWN_TOPIC_OR_PARTITION}
    part = fetch(wire, "wm")
    assert part.last_stable_offset == 2 and aborted(part) == [(pid, 0)]
    assert control_markers(wire, "wm") == [(pid, 3, ControlType.ABORT, 5)]
    # an older coordinator epoch is fenced; v1 carries no transaction version
    assert write_markers(wire, pid, 3, True, {"wm": [0]}, coordinator_epoch=4, version=1) == {
        ("wm", 0): Error.TRANSACTION_COORDINATOR_FENCED}
    assert write_markers(wire, pid, 3, True, {"wm": [0]}, coordinator_epoch=5, version=1) == {
        ("wm", 0): Error.NONE}  # closes nothing: no transaction open


def test_write_txn_markers_aborts_a_hanging_transaction(shared_broker, wire):
    """KIP-664's admin abort: the coordinator forgot the producer (here: never knew it), the
    partition keeps the last stable offset back until a marker is written over the wire."""
    make_topic(shared_broker, "wm-hanging")
    plain = produce(wire, "wm-hanging", [b"before"])
    assert plain.error_code == Error.NONE
    data = build_batch([(None, b"hanging", None, 1_700_000_000_000)], producer_id=777,
                       producer_epoch=0, base_sequence=0, is_transactional=True)
    append_direct(shared_broker, "wm-hanging", data)
    produce(wire, "wm-hanging", [b"after"])
    assert fetch(wire, "wm-hanging").last_stable_offset == 1
    [state] = describe_producers(wire, "wm-hanging", 0)[("wm-hanging", 0)]
    assert (state.producer_id, state.current_txn_start_offset) == (777, 1)
    assert write_markers(wire, 777, 0, False, {"wm-hanging": [0]}) == {
        ("wm-hanging", 0): Error.NONE}
    part = fetch(wire, "wm-hanging")
    assert part.last_stable_offset == 4 and aborted(part) == [(777, 1)]


# -- DescribeProducers ----------------------------------------------------------------------------


def describe_producers(wire, topic, *partitions):
    response = wire.request(DESCRIBE_PRODUCERS, 0, message(
        DESCRIBE_PRODUCERS, "request", topics=[message(
            DESCRIBE_PRODUCERS, "request", "TopicRequest", name=topic,
            partition_indexes=list(partitions))]))
    out = {}
    for t in response.topics:
        for p in t.partitions:
            out[(t.name, p.partition_index)] = (p.error_code if p.error_code
                                                else p.active_producers)
    return out


def test_describe_producers(shared_broker, wire):
    make_topic(shared_broker, "dp")
    r = init(wire, "dp")
    add_partitions(wire, "dp", r.producer_id, r.producer_epoch, {"dp": [0]})
    produce(wire, "dp", [b"i0", b"i1"], producer_id=5555, producer_epoch=3, base_sequence=0,
            timestamp=1_700_000_000_000)
    produce_txn(wire, "dp", r, "dp", [b"t"], 0, timestamp=1_700_000_000_100)
    found = describe_producers(wire, "dp", 0, 7)
    assert found[("dp", 7)] == Error.UNKNOWN_TOPIC_OR_PARTITION
    states = {s.producer_id: s for s in found[("dp", 0)]}
    idem, txn = states[5555], states[r.producer_id]
    assert (idem.producer_epoch, idem.last_sequence, idem.last_timestamp,
            idem.current_txn_start_offset) == (3, 1, 1_700_000_000_001, -1)
    assert (txn.producer_epoch, txn.last_sequence, txn.current_txn_start_offset,
            txn.coordinator_epoch) == (r.producer_epoch, 0, 2, -1)
    end_txn(wire, "dp", r.producer_id, r.producer_epoch, True)
    until(lambda: {s.producer_id: s for s in describe_producers(wire, "dp", 0)[("dp", 0)]}
             [r.producer_id].current_txn_start_offset == -1)
    txn = {s.producer_id: s for s in describe_producers(wire, "dp", 0)[("dp", 0)]}[
        r.producer_id]
    assert txn.coordinator_epoch == 0


# -- Produce: partition verification and transaction version 2 -----------------------------------


def test_produce_verifies_the_partition_is_in_the_transaction(shared_broker, wire):
    make_topic(shared_broker, "pv", 2)
    r = init(wire, "pv")
    add_partitions(wire, "pv", r.producer_id, r.producer_epoch, {"pv": [0]})
    # not added: INVALID_TXN_STATE for clients before TRANSACTION_ABORTABLE (v11)
    for version, expected in ((9, Error.INVALID_TXN_STATE), (10, Error.INVALID_TXN_STATE),
                              (11, Error.TRANSACTION_ABORTABLE)):
        part = produce_txn(wire, "pv", r, "pv", [b"x"], 0, partition=1, version=version)
        assert part.error_code == expected
    assert produce_txn(wire, "pv", r, "pv", [b"x"], 0, partition=1).error_message == \
        "Partition was not added to the transaction"
    assert produce_txn(wire, "pv", r, "pv", [b"ok"], 0).error_code == Error.NONE
    # the hanging-transaction hole: a write arriving after its transaction ended, same epoch
    assert end_txn(wire, "pv", r.producer_id, r.producer_epoch, True).error_code == 0
    until(lambda: describe(wire, "pv")["pv"].transaction_state == "CompleteCommit")
    late = produce_txn(wire, "pv", r, "pv", [b"late"], 1)
    assert late.error_code == Error.INVALID_TXN_STATE
    part = fetch(wire, "pv")
    assert part.last_stable_offset == part.high_watermark == 2  # nothing left hanging
    # a fenced producer's first batch on a partition
    newer = init(wire, "pv")
    until(lambda: init(wire, "pv").error_code == Error.NONE)  # its abort completed
    newest = init(wire, "pv")
    assert newest.producer_epoch > newer.producer_epoch
    part = produce_txn(wire, "pv", r, "pv", [b"late"], 0, partition=1)
    assert part.error_code == Error.INVALID_PRODUCER_EPOCH
    part = produce(wire, "pv", [b"x"], tid="pv-unknown", producer_id=1, producer_epoch=0,
                   base_sequence=0, is_transactional=True)
    assert part.error_code == Error.INVALID_PRODUCER_ID_MAPPING
    assert fetch(wire, "pv", partition=1, isolation_level=0).high_watermark == 0


def test_produce_v12_requests_of_a_producer_stay_in_order(tmp_path):
    """Durable mode: the implicit add waits for an fsync, and the pipelined requests behind
    the first must neither overtake it nor race it to the coordinator."""
    with BrokerThread(tmp_path / "tv2-order", {"log.flush.mode": "fsync"}) as b, \
            KafkaWire.connect(b.bootstrap) as w:
        make_topic(b, "tv2-order")
        r = init(w, "tv2-order")
        for seq in range(4):
            batch = records_batch([b"v%d" % seq], producer_id=r.producer_id,
                                  producer_epoch=r.producer_epoch, base_sequence=seq,
                                  is_transactional=True)
            w.send(PRODUCE, 12, produce_request("tv2-order", 0, batch,
                                                transactional_id="tv2-order"))
        parts = [w.receive().responses[0].partition_responses[0] for _ in range(4)]
        assert [(p.error_code, p.base_offset) for p in parts] == [(0, n) for n in range(4)]
        assert b.broker.log_manager.get_partition("tv2-order", 0).last_stable_offset == 0


def test_produce_v12_adds_partitions_implicitly(shared_broker, wire):
    make_topic(shared_broker, "tv2", 2)
    r = init(wire, "tv2")
    for seq in range(3):
        part = produce_txn(wire, "tv2", r, "tv2", [b"v%d" % seq], seq, version=12)
        assert (part.error_code, part.base_offset) == (Error.NONE, seq)
    assert produce_txn(wire, "tv2", r, "tv2", [b"p1"], 0, partition=1,
                       version=12).error_code == 0
    d = describe(wire, "tv2")["tv2"]
    assert d.transaction_state == "Ongoing"
    assert sorted({t.topic: t.partitions for t in d.topics}["tv2"]) == [0, 1]
    done = end_txn(wire, "tv2", r.producer_id, r.producer_epoch, True, version=5)
    assert (done.error_code, done.producer_epoch) == (Error.NONE, r.producer_epoch + 1)
    until(lambda: fetch(wire, "tv2").last_stable_offset == 4)
    assert control_markers(wire, "tv2") == [
        (r.producer_id, r.producer_epoch + 1, ControlType.COMMIT, 0)]
    assert values_of(fetch(wire, "tv2")) == [b"v0", b"v1", b"v2"]
    # the next transaction with the bumped epoch (sequences restart), aborted
    part = produce_txn(wire, "tv2", r, "tv2", [b"gone"], 0, version=12, epoch=done.producer_epoch)
    assert part.error_code == Error.NONE
    # the old epoch is fenced by the bump
    stale = produce_txn(wire, "tv2", r, "tv2", [b"stale"], 3, partition=1, version=12)
    assert stale.error_code == Error.INVALID_PRODUCER_EPOCH
    end_txn(wire, "tv2", r.producer_id, done.producer_epoch, False, version=5)
    until(lambda: fetch(wire, "tv2").last_stable_offset == 6)
    part = fetch(wire, "tv2", 4)
    assert values_of(part) == [b"gone"] and aborted(part) == [(r.producer_id, 4)]


# -- TxnOffsetCommit --------------------------------------------------------------------------------


def test_txn_offset_commit_pending_until_commit(shared_broker, wire):
    make_topic(shared_broker, "toc")
    r = init(wire, "toc")
    offsets = {("toc", 0): 42, ("toc-none", 0): 1}
    # the offsets partition is not in the transaction yet
    assert txn_offset_commit(wire, "toc", r, "toc-g", offsets) == {
        ("toc", 0): Error.INVALID_TXN_STATE, ("toc-none", 0): Error.UNKNOWN_TOPIC_OR_PARTITION}
    assert txn_offset_commit(wire, "toc", r, "toc-g", offsets, version=4)[("toc", 0)] == \
        Error.TRANSACTION_ABORTABLE
    assert txn_offset_commit(wire, "toc", r, "", offsets)[("toc", 0)] == Error.INVALID_GROUP_ID
    assert add_offsets(wire, "toc", r, "toc-g") == Error.NONE
    # KIP-447: a generation of a group that does not exist
    assert txn_offset_commit(wire, "toc", r, "toc-g", offsets, generation=3,
                             member_id="m")[("toc", 0)] == Error.ILLEGAL_GENERATION
    assert txn_offset_commit(wire, "toc", r, "toc-g", offsets)[("toc", 0)] == Error.NONE
    _, found = fetch_offsets(wire, "toc-g", [("toc", 0)], require_stable=True)
    assert found[("toc", 0)][3] == Error.UNSTABLE_OFFSET_COMMIT
    assert fetch_offsets(wire, "toc-g", [("toc", 0)])[1][("toc", 0)][0] == -1  # pending
    assert end_txn(wire, "toc", r.producer_id, r.producer_epoch, True).error_code == 0
    until(lambda: fetch_offsets(wire, "toc-g", [("toc", 0)])[1][("toc", 0)][0] == 42)


def test_txn_offset_commit_v5_adds_the_offsets_partition_and_abort_drops(shared_broker, wire):
    make_topic(shared_broker, "toc5")
    r = init(wire, "toc5")
    member, joined = join(wire, "toc5-g")
    assert sync(wire, "toc5-g", member, joined.generation_id,
                {member: b""}).error_code == Error.NONE
    # wrong member of a live generation: KIP-447 check by the group coordinator
    assert txn_offset_commit(wire, "toc5", r, "toc5-g", {("toc5", 0): 7}, version=5,
                             generation=joined.generation_id, member_id="someone-else") == {
        ("toc5", 0): Error.UNKNOWN_MEMBER_ID}
    assert txn_offset_commit(wire, "toc5", r, "toc5-g", {("toc5", 0): 7}, version=5,
                             generation=joined.generation_id, member_id=member) == {
        ("toc5", 0): Error.NONE}
    d = describe(wire, "toc5")["toc5"]
    assert "__consumer_offsets" in {t.topic for t in d.topics}
    assert end_txn(wire, "toc5", r.producer_id, r.producer_epoch, False,
                   version=5).error_code == 0
    until(lambda: describe(wire, "toc5")["toc5"].transaction_state == "CompleteAbort")
    assert fetch_offsets(wire, "toc5-g", [("toc5", 0)], require_stable=True)[1][
        ("toc5", 0)][:1] == (-1,)
    # the old epoch is fenced after the TV2 bump
    assert txn_offset_commit(wire, "toc5", r, "toc5-g", {("toc5", 0): 8}, version=3,
                             generation=joined.generation_id, member_id=member) == {
        ("toc5", 0): Error.INVALID_PRODUCER_EPOCH}


# -- FindCoordinator, ApiVersions, metrics ------------------------------------------------------------


def test_find_transaction_coordinator_creates_the_state_topic(tmp_path):
    with BrokerThread(tmp_path / "fc", {"transaction.state.log.num.partitions": "2"}) as b, \
            KafkaWire.connect(b.bootstrap) as w:
        assert "__transaction_state" not in b.broker.log_manager.topics
        response = w.request(FIND_COORDINATOR, 4, message(
            FIND_COORDINATOR, "request", key_type=1, coordinator_keys=["some-id"]))
        [c] = response.coordinators
        assert (c.error_code, c.node_id, c.port) == (Error.NONE, 0, b.broker.port)
        assert b.broker.log_manager.topics["__transaction_state"].num_partitions == 2
        b.call(b.broker.txn_coordinator.stop())
        old = w.request(FIND_COORDINATOR, 3, message(FIND_COORDINATOR, "request",
                                                     key="x", key_type=1))
        assert old.error_code == Error.COORDINATOR_NOT_AVAILABLE


def test_api_versions_finalize_transaction_version_2(wire):
    response = wire.request(API_VERSIONS, 4, message(
        API_VERSIONS, "request", client_software_name="t", client_software_version="1"))
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    finalized = {f.name: f.max_version_level for f in response.finalized_features}
    assert supported["transaction.version"] == (0, 2)
    assert finalized["transaction.version"] == 2
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[WRITE_TXN_MARKERS] == (1, 2)
    assert versions[TXN_OFFSET_COMMIT] == (0, 5)
    assert versions[DESCRIBE_PRODUCERS] == (0, 0)
    assert versions[PRODUCE][1] == 12


def test_metrics_show_producers_lso_and_transactional_ids(shared_broker, wire):
    make_topic(shared_broker, "metrics-t")
    r = init(wire, "metrics-txn")
    add_partitions(wire, "metrics-txn", r.producer_id, r.producer_epoch, {"metrics-t": [0]})
    produce(wire, "metrics-t", [b"a"])
    produce_txn(wire, "metrics-txn", r, "metrics-t", [b"b"], 0)
    url = f"http://127.0.0.1:{shared_broker.broker.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines()
                 if line and not line.startswith("#"))
    assert float(lines['semel_last_stable_offset{partition="0",topic="metrics-t"}']) == 1.0
    assert float(lines["semel_live_producer_ids"]) >= 1
    assert float(lines["semel_active_transactional_ids"]) >= 1
    assert float(lines['semel_transactional_ids{state="Ongoing"}']) >= 1

    async def scrape_on_the_loop():  # the collector reads directly there (no deadlock)
        return generate_latest(shared_broker.broker.metrics.registry).decode()

    assert 'semel_last_stable_offset{partition="0",topic="metrics-t"} 1.0' in \
        shared_broker.call(scrape_on_the_loop(), timeout=10)
    end_txn(wire, "metrics-txn", r.producer_id, r.producer_epoch, True)


def test_batches_of_aborted_transactions_are_whole_batches(shared_broker, wire):
    """The aborted list names first offsets of batches the response carries whole."""
    make_topic(shared_broker, "rc-batches")
    r = init(wire, "rc-batches")
    add_partitions(wire, "rc-batches", r.producer_id, r.producer_epoch, {"rc-batches": [0]})
    produce_txn(wire, "rc-batches", r, "rc-batches", [b"a", b"b", b"c"], 0)
    end_txn(wire, "rc-batches", r.producer_id, r.producer_epoch, False)
    until(lambda: fetch(wire, "rc-batches").last_stable_offset == 4)
    part = fetch(wire, "rc-batches", 1)  # from the middle of the aborted batch
    headers = list(iter_batches(bytes(part.records)))
    assert headers[0].base_offset == 0 and aborted(part) == [(r.producer_id, 0)]
