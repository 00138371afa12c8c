"""Transaction coordinator APIs over a real socket (tests/kafka_wire.py): InitProducerId with
a transactional id, AddPartitionsToTxn (v0-3 and batched v4+ with verify_only),
AddOffsetsToTxn, EndTxn (v0-5), DescribeTransactions, ListTransactions - versions and error
codes, and the markers a commit leaves in the partitions.

One in-process broker for the module; every test uses its own transactional id and topics.
"""

from __future__ import annotations

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import ControlType, iter_batches, iter_records, parse_control_record
from tests.kafka_wire import FETCH, KafkaWire, fetch_request, make_topic, message
from tests.waiting import until

API_VERSIONS, INIT_PRODUCER_ID = 18, 22
ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("txn"),
                      {"transaction.state.log.num.partitions": "3",
                       "offsets.topic.num.partitions": "3"}) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    with KafkaWire.connect(shared_broker.bootstrap, client_id="txn-wire") as w:
        yield w


def init(wire, tid, version=4, timeout_ms=60000, producer_id=-1, producer_epoch=-1):
    return wire.request(INIT_PRODUCER_ID, version, message(
        INIT_PRODUCER_ID, "request", transactional_id=tid, transaction_timeout_ms=timeout_ms,
        producer_id=producer_id, producer_epoch=producer_epoch))


def add_partitions(wire, tid, pid, epoch, partitions: dict[str, list[int]], version=3):
    topics = [message(ADD_PARTITIONS, "request", "AddPartitionsToTxnTopic", name=t,
                      partitions=ps) for t, ps in partitions.items()]
    response = wire.request(ADD_PARTITIONS, version, message(
        ADD_PARTITIONS, "request", v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=topics))
    return {(t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(wire, tid, pid, epoch, commit, version=3):
    return wire.request(END_TXN, version, message(
        END_TXN, "request", transactional_id=tid, producer_id=pid, producer_epoch=epoch,
        committed=commit))


def describe(wire, *tids):
    response = wire.request(DESCRIBE_TRANSACTIONS, 0, message(
        DESCRIBE_TRANSACTIONS, "request", transactional_ids=list(tids)))
    return {s.transactional_id: s for s in response.transaction_states}


def list_txns(wire, version=2, **filters):
    return wire.request(LIST_TRANSACTIONS, version,
                        message(LIST_TRANSACTIONS, "request", **filters))



def control_markers(wire, topic, partition=0):
    response = wire.request(FETCH, 12, fetch_request([(topic, partition, 0)]))
    data = response.responses[0].partitions[0].records or b""
    markers = []
    for header in iter_batches(bytes(data)):
        if header.is_control:
            for record in iter_records(bytes(data), header):
                control_type, coordinator_epoch = parse_control_record(record)
                markers.append((header.producer_id, header.producer_epoch, control_type,
                                coordinator_epoch))
    return markers


def test_api_versions_advertise_the_transaction_apis(wire):
    response = wire.request(API_VERSIONS, 3, message(
        API_VERSIONS, "request", client_software_name="t", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[ADD_PARTITIONS] == (0, 5)
    assert versions[ADD_OFFSETS] == (0, 4)
    assert versions[END_TXN] == (0, 5)
    assert versions[DESCRIBE_TRANSACTIONS] == (0, 0)
    assert versions[LIST_TRANSACTIONS] == (0, 2)


def test_commit_over_the_wire_writes_markers(shared_broker, wire):
    make_topic(shared_broker, "txn-commit", 2)
    first = init(wire, "wire-commit")
    assert first.error_code == Error.NONE and first.producer_epoch == 0
    pid, epoch = first.producer_id, first.producer_epoch
    assert add_partitions(wire, "wire-commit", pid, epoch, {"txn-commit": [0, 1]}) == {
        ("txn-commit", 0): Error.NONE, ("txn-commit", 1): Error.NONE}
    offsets = wire.request(ADD_OFFSETS, 3, message(
        ADD_OFFSETS, "request", transactional_id="wire-commit", producer_id=pid,
        producer_epoch=epoch, group_id="wire-group"))
    assert offsets.error_code == Error.NONE
    d = describe(wire, "wire-commit")["wire-commit"]
    assert (d.error_code, d.transaction_state, d.producer_id) == (Error.NONE, "Ongoing", pid)
    assert {t.topic: sorted(t.partitions) for t in d.topics}["txn-commit"] == [0, 1]
    assert "__consumer_offsets" in {t.topic for t in d.topics}
    assert end_txn(wire, "wire-commit", pid, epoch, True).error_code == Error.NONE
    until(lambda: describe(wire, "wire-commit")["wire-commit"].transaction_state
             == "CompleteCommit")
    for p in (0, 1):
        assert control_markers(wire, "txn-commit", p) == [(pid, epoch, ControlType.COMMIT, 0)]
    # a retried commit is answered OK, an abort now is not
    assert end_txn(wire, "wire-commit", pid, epoch, True).error_code == Error.NONE
    assert end_txn(wire, "wire-commit", pid, epoch, False).error_code == \
        Error.INVALID_TXN_STATE


def test_add_partitions_rejects_unknown_and_internal_topics(shared_broker, wire):
    make_topic(shared_broker, "txn-known")
    r = init(wire, "wire-unknown")
    pid, epoch = r.producer_id, r.producer_epoch
    assert add_partitions(wire, "wire-unknown", pid, epoch,
                          {"txn-known": [0, 5], "nope": [0]}) == {
        ("txn-known", 0): Error.OPERATION_NOT_ATTEMPTED,
        ("txn-known", 5): Error.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): Error.UNKNOWN_TOPIC_OR_PARTITION}
    assert add_partitions(wire, "wire-unknown", pid, epoch,
                          {"__consumer_offsets": [0]}) == {
        ("__consumer_offsets", 0): Error.TOPIC_AUTHORIZATION_FAILED}
    assert describe(wire, "wire-unknown")["wire-unknown"].transaction_state == "Empty"


def test_fencing_errors_by_version(shared_broker, wire):
    make_topic(shared_broker, "txn-fence")
    old = init(wire, "wire-fence")
    new = init(wire, "wire-fence")
    assert new.producer_epoch == old.producer_epoch + 1
    for version, expected in ((0, Error.INVALID_PRODUCER_EPOCH),
                              (1, Error.INVALID_PRODUCER_EPOCH), (2, Error.PRODUCER_FENCED),
                              (3, Error.PRODUCER_FENCED)):
        assert add_partitions(wire, "wire-fence", old.producer_id, old.producer_epoch,
                              {"txn-fence": [0]}, version=version) == {
            ("txn-fence", 0): expected}
        assert end_txn(wire, "wire-fence", old.producer_id, old.producer_epoch, True,
                       version=version).error_code == expected
    offsets = wire.request(ADD_OFFSETS, 1, message(
        ADD_OFFSETS, "request", transactional_id="wire-fence", producer_id=old.producer_id,
        producer_epoch=old.producer_epoch, group_id="g"))
    assert offsets.error_code == Error.INVALID_PRODUCER_EPOCH
    assert end_txn(wire, "wire-fence", old.producer_id + 99, new.producer_epoch,
                   True).error_code == Error.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(wire, "wire-fence", new.producer_id, new.producer_epoch,
                   True).error_code == Error.INVALID_TXN_STATE  # nothing started


def test_init_during_a_transaction_aborts_it(shared_broker, wire):
    make_topic(shared_broker, "txn-init-abort")
    first = init(wire, "wire-reinit")
    assert add_partitions(wire, "wire-reinit", first.producer_id, first.producer_epoch,
                          {"txn-init-abort": [0]}) == {("txn-init-abort", 0): Error.NONE}
    second = init(wire, "wire-reinit")
    assert second.error_code == Error.CONCURRENT_TRANSACTIONS
    until(lambda: init(wire, "wire-reinit").error_code == Error.NONE)
    assert control_markers(wire, "txn-init-abort") == [
        (first.producer_id, first.producer_epoch + 1, ControlType.ABORT, 0)]
    assert init(wire, "wire-reinit", timeout_ms=10**9).error_code == \
        Error.INVALID_TRANSACTION_TIMEOUT
    assert init(wire, "", version=3).error_code == Error.INVALID_REQUEST


def test_batched_add_and_verify(shared_broker, wire):
    make_topic(shared_broker, "txn-batch", 2)
    a = init(wire, "wire-batch-a")
    b = init(wire, "wire-batch-b")

    def txn(tid, r, partitions, verify_only):
        return message(ADD_PARTITIONS, "request", "AddPartitionsToTxnTransaction",
                       transactional_id=tid, producer_id=r.producer_id,
                       producer_epoch=r.producer_epoch, verify_only=verify_only,
                       topics=[message(ADD_PARTITIONS, "request", "AddPartitionsToTxnTopic",
                                       name="txn-batch", partitions=partitions)])

    def request(version, *transactions):
        response = wire.request(ADD_PARTITIONS, version, message(
            ADD_PARTITIONS, "request", transactions=list(transactions)))
        assert response.error_code == Error.NONE
        return {(r.transactional_id, t.name, p.partition_index): p.partition_error_code
                for r in response.results_by_transaction for t in r.topic_results
                for p in t.results_by_partition}

    assert request(4, txn("wire-batch-a", a, [0], False),
                   txn("wire-batch-b", b, [0, 1], True)) == {
        ("wire-batch-a", "txn-batch", 0): Error.NONE,
        ("wire-batch-b", "txn-batch", 0): Error.TRANSACTION_ABORTABLE,
        ("wire-batch-b", "txn-batch", 1): Error.TRANSACTION_ABORTABLE}
    assert request(4, txn("wire-batch-a", a, [0, 1], True)) == {
        ("wire-batch-a", "txn-batch", 0): Error.NONE,
        ("wire-batch-a", "txn-batch", 1): Error.TRANSACTION_ABORTABLE}
    # v5: a transaction version 2 producer's partition, added implicitly
    assert request(5, txn("wire-batch-b", b, [1], False)) == {
        ("wire-batch-b", "txn-batch", 1): Error.NONE}
    result = end_txn(wire, "wire-batch-b", b.producer_id, b.producer_epoch, True, version=5)
    assert (result.error_code, result.producer_id, result.producer_epoch) == (
        Error.NONE, b.producer_id, b.producer_epoch + 1)
    until(lambda: control_markers(wire, "txn-batch", 1) != [])
    assert control_markers(wire, "txn-batch", 1) == [
        (b.producer_id, b.producer_epoch + 1, ControlType.COMMIT, 0)]
    retry = end_txn(wire, "wire-batch-b", b.producer_id, b.producer_epoch, True, version=5)
    assert (retry.error_code, retry.producer_epoch) == (Error.NONE, b.producer_epoch + 1)
    assert request(4, txn("unknown-id", a, [0], True)) == {
        ("unknown-id", "txn-batch", 0): Error.INVALID_PRODUCER_ID_MAPPING}


def test_describe_and_list(shared_broker, wire):
    make_topic(shared_broker, "txn-list")
    r = init(wire, "wire-list-1")
    add_partitions(wire, "wire-list-1", r.producer_id, r.producer_epoch, {"txn-list": [0]})
    init(wire, "wire-list-2")
    states = describe(wire, "wire-list-1", "wire-list-2", "wire-list-none", "")
    assert states["wire-list-1"].transaction_state == "Ongoing"
    assert states["wire-list-1"].transaction_timeout_ms == 60000
    assert states["wire-list-2"].transaction_state == "Empty"
    assert states["wire-list-none"].error_code == Error.TRANSACTIONAL_ID_NOT_FOUND
    assert states[""].error_code == Error.INVALID_REQUEST

    def ids(response):
        assert response.error_code == Error.NONE
        return {s.transactional_id: (s.producer_id, s.transaction_state)
                for s in response.transaction_states if s.transactional_id.startswith("wire-list")}

    assert ids(list_txns(wire, 0)) == {"wire-list-1": (r.producer_id, "Ongoing"),
                                       "wire-list-2": (r.producer_id + 1, "Empty")}
    assert ids(list_txns(wire, 0, state_filters=["Ongoing"])) == {
        "wire-list-1": (r.producer_id, "Ongoing")}
    response = list_txns(wire, 0, state_filters=["Empty", "Nonsense"])
    assert response.unknown_state_filters == ["Nonsense"]
    assert set(ids(response)) == {"wire-list-2"}
    assert set(ids(list_txns(wire, 0, producer_id_filters=[r.producer_id + 1]))) == {
        "wire-list-2"}
    assert set(ids(list_txns(wire, 1, duration_filter=10**9))) == {"wire-list-2"}
    assert set(ids(list_txns(wire, 2, transactional_id_pattern="wire-list-1"))) == {
        "wire-list-1"}
    assert list_txns(wire, 2, transactional_id_pattern="[").error_code == \
        Error.INVALID_REGULAR_EXPRESSION


def test_init_producer_id_versions(shared_broker, wire):
    first = init(wire, "wire-init", version=0)
    assert (first.error_code, first.producer_epoch) == (Error.NONE, 0)
    # KIP-360 (v3+): continuing from the current producer bumps it; a retry gets the same
    bumped = init(wire, "wire-init", version=3, producer_id=first.producer_id,
                  producer_epoch=first.producer_epoch)
    assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, 1)
    again = init(wire, "wire-init", version=3, producer_id=first.producer_id,
                 producer_epoch=first.producer_epoch)
    assert again.producer_epoch == 1
    # a stale epoch: INVALID_PRODUCER_EPOCH before v4, PRODUCER_FENCED from v4 (KIP-588)
    assert init(wire, "wire-init", version=3, producer_id=first.producer_id,
                producer_epoch=9).error_code == Error.INVALID_PRODUCER_EPOCH
    stale = init(wire, "wire-init", version=4, producer_id=first.producer_id,
                 producer_epoch=9)
    assert (stale.error_code, stale.producer_id, stale.producer_epoch) == (
        Error.PRODUCER_FENCED, -1, -1)
    assert init(wire, "wire-init", version=4, producer_id=first.producer_id).error_code == \
        Error.INVALID_REQUEST  # a producer id without an epoch
    two_pc = wire.request(INIT_PRODUCER_ID, 6, message(
        INIT_PRODUCER_ID, "request", transactional_id="wire-init",
        transaction_timeout_ms=60000, enable2_pc=True))
    # two-phase commit is off by default (tests/broker/test_two_phase_commit_wire.py)
    assert two_pc.error_code == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert init(wire, "wire-init", version=6).producer_epoch == 2
