"""KIP-939 two-phase commit over a real socket: InitProducerId v6 with ``enable2Pc`` and
``keepPreparedTxn`` in every state of a transaction, with the broker's
``transaction.two.phase.commit.enable`` off and on, and with the authorizer (Write and
TwoPhaseCommit on the transactional id). The records a kept transaction wrote become visible
to read_committed only with the commit that the restarted producer sends under its new epoch.

Time is the broker's injected clock: a test moves it a year ahead and runs the timeout reaper
(``abort_timed_out_transactions``) instead of waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from semel.broker.security import AclOperation, AclPermissionType, PatternType
from semel.broker.security import ResourceType as R
from semel.broker.security.acl import AclBinding
from semel.broker.security.authorizer import EVERY_ACL
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
    add_partitions,
    describe,
    end_txn,
    list_txns,
)
from tests.kafka_wire import FETCH, PRODUCE, KafkaWire, fetch_request, make_topic, message
from tests.waiting import until

INIT_PRODUCER_ID = 22
MAX_TIMEOUT = 2**31 - 1
YEAR_MS = 365 * 24 * 3600 * 1000
READ_COMMITTED = 1


class Clock:
    """Wall time plus whatever a test adds."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms

    def advance(self, ms: int) -> None:
        self.offset_ms += ms


@pytest.fixture(scope="module")
def clock():
    return Clock()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, clock):
    with BrokerThread(tmp_path_factory.mktemp("2pc"),
                      {"transaction.two.phase.commit.enable": "true",
                       "transaction.state.log.num.partitions": "2",
                       "offsets.topic.num.partitions": "2"}, clock=clock) as b:
        make_topic(b, "tp", 2)
        yield b


@pytest.fixture
def wire(broker):
    with KafkaWire.connect(broker.bootstrap, client_id="2pc-wire") as w:
        yield w


def init(wire, tid, *, enable_2pc=False, keep=False, timeout_ms=60000, version=6,
         producer_id=-1, producer_epoch=-1):
    return wire.request(INIT_PRODUCER_ID, version, message(
        INIT_PRODUCER_ID, "request", transactional_id=tid, transaction_timeout_ms=timeout_ms,
        producer_id=producer_id, producer_epoch=producer_epoch, enable2_pc=enable_2pc,
        keep_prepared_txn=keep))


def init_retrying(wire, tid, **kw):
    """InitProducerId until it is not CONCURRENT_TRANSACTIONS (an abort it started)."""
    deadline = time.monotonic() + 10
    while True:
        r = init(wire, tid, **kw)
        if r.error_code != Error.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
            return r
        time.sleep(0.01)


def write(wire, tid, pid, epoch, topic, partition, values, sequence=0):
    """AddPartitionsToTxn, then one transactional batch (acks=all)."""
    assert add_partitions(wire, tid, pid, epoch, {topic: [partition]}) == {
        (topic, partition): Error.NONE}
    now = int(time.time() * 1000)
    batch = build_batch([(None, v, [], now) for v in values],
                        producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                        is_transactional=True)
    p = message(PRODUCE, "request", "PartitionProduceData", index=partition, records=batch)
    t = message(PRODUCE, "request", "TopicProduceData", name=topic, partition_data=[p])
    response = wire.request(PRODUCE, 9, message(
        PRODUCE, "request", acks=-1, timeout_ms=30000, transactional_id=tid, topic_data=[t]))
    return response.responses[0].partition_responses[0].error_code


def fetch_all(wire, topic, partition, isolation_level=0):
    """Every batch up to the high watermark (read_committed: the last stable offset), over
    as many fetches as segments, and the aborted transactions the fetches listed."""
    data, aborted, offset = b"", set(), 0
    while True:
        response = wire.request(FETCH, 12, fetch_request([(topic, partition, offset)],
                                                         isolation_level=isolation_level))
        part = response.responses[0].partitions[0]
        chunk = bytes(part.records or b"")
        aborted |= {(a.producer_id, a.first_offset) for a in part.aborted_transactions or ()}
        if not chunk:
            return data, aborted
        data += chunk
        last = list(iter_batches(chunk))[-1]
        offset = last.base_offset + last.last_offset_delta + 1


def committed_values(wire, topic, partition):
    """The data records a read_committed consumer gets (aborted ones dropped as a client
    drops them, by the aborted-transaction list)."""
    data, aborted = fetch_all(wire, topic, partition, READ_COMMITTED)
    aborting: set[int] = set()
    values = []
    for header in iter_batches(data):
        if (header.producer_id, header.base_offset) in aborted:
            aborting.add(header.producer_id)
        if header.is_control:
            aborting.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in aborting):
            values += [r.value for r in iter_records(data, header)]
    return values


def control_markers(wire, topic, partition):
    """(producer id, epoch, control type, coordinator epoch) of every marker."""
    data, _ = fetch_all(wire, topic, partition)
    markers = []
    for header in iter_batches(data):
        if header.is_control:
            for record in iter_records(data, header):
                control_type, coordinator_epoch = parse_control_record(record)
                markers.append((header.producer_id, header.producer_epoch, control_type,
                                coordinator_epoch))
    return markers


def run(broker, coro):
    return broker.call(coro)


# -- the broker's switch ---------------------------------------------------------------------

def test_enable_2pc_refused_when_the_broker_has_it_off(tmp_path):
    with BrokerThread(tmp_path / "off") as off, KafkaWire.connect(off.bootstrap) as w:
        r = init(w, "off-2pc", enable_2pc=True)
        assert (r.error_code, r.producer_id, r.producer_epoch) == (
            Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        # keepPreparedTxn alone does not need two-phase commit (KIP-939)
        r = init(w, "off-2pc", keep=True)
        assert (r.error_code, r.producer_epoch, r.ongoing_txn_producer_id) == (Error.NONE, 0, -1)
        # without a transactional id both flags are ignored, as in Kafka
        r = init(w, None, enable_2pc=True, keep=True)
        assert r.error_code == Error.NONE and r.producer_id >= 0


def test_request_checks_before_the_flags(wire):
    assert init(wire, "", enable_2pc=True).error_code == Error.INVALID_REQUEST
    assert init(wire, "chk-2pc", enable_2pc=True, producer_id=5).error_code == \
        Error.INVALID_REQUEST
    # enable2Pc skips the timeout check; without it the timeout is checked as always
    assert init(wire, "chk-2pc", enable_2pc=True, timeout_ms=0).error_code == Error.NONE
    assert init(wire, "chk-2pc", timeout_ms=0).error_code == Error.INVALID_TRANSACTION_TIMEOUT
    assert init(wire, "chk-2pc", keep=True, timeout_ms=MAX_TIMEOUT).error_code == \
        Error.INVALID_TRANSACTION_TIMEOUT


# -- enable2Pc: a transaction that never times out -------------------------------------------

def test_two_phase_commit_transaction_never_times_out(broker, wire, clock):
    tid, plain = "never-2pc", "plain-2pc"
    r = init(wire, tid, enable_2pc=True, timeout_ms=1000)
    pid, epoch = r.producer_id, r.producer_epoch
    assert write(wire, tid, pid, epoch, "tp", 0, [b"kept"]) == Error.NONE
    q = init(wire, plain, timeout_ms=1000)
    assert write(wire, plain, q.producer_id, q.producer_epoch, "tp", 1, [b"x"]) == Error.NONE
    d = describe(wire, tid)[tid]
    assert (d.transaction_state, d.transaction_timeout_ms) == ("Ongoing", MAX_TIMEOUT)
    assert describe(wire, plain)[plain].transaction_timeout_ms == 1000
    clock.advance(YEAR_MS)
    try:
        coordinator = broker.broker.txn_coordinator
        aborted = run(broker, coordinator.abort_timed_out_transactions())
        assert aborted >= 1
        until(lambda: describe(wire, plain)[plain].transaction_state == "CompleteAbort")
        assert describe(wire, tid)[tid].transaction_state == "Ongoing"
        # how long it has been open: ListTransactions' duration filter, DescribeTransactions'
        # start time
        listed = list_txns(wire, duration_filter=YEAR_MS - 60_000)
        assert tid in {t.transactional_id for t in listed.transaction_states}
        start = describe(wire, tid)[tid].transaction_start_time_ms
        assert clock() - start >= YEAR_MS
        # and it is still the producer's to commit
        assert end_txn(wire, tid, pid, epoch, True).error_code == Error.NONE
        until(lambda: describe(wire, tid)[tid].transaction_state == "CompleteCommit")
        assert b"kept" in committed_values(wire, "tp", 0)
    finally:
        clock.advance(-YEAR_MS)


def test_a_plain_init_resets_the_timeout(wire):
    tid = "reset-2pc"
    init(wire, tid, enable_2pc=True)
    r = init(wire, tid, timeout_ms=5000)
    assert write(wire, tid, r.producer_id, r.producer_epoch, "tp", 0, [b"r"]) == Error.NONE
    assert describe(wire, tid)[tid].transaction_timeout_ms == 5000
    assert end_txn(wire, tid, r.producer_id, r.producer_epoch, False).error_code == Error.NONE


def test_force_terminate_aborts_a_prepared_transaction(wire):
    """Kafka's Admin.forceTerminateTransaction / fenceProducers: a plain InitProducerId (no
    keepPreparedTxn) aborts the ongoing 2PC transaction (CONCURRENT_TRANSACTIONS while it
    does), the retry answers a new epoch."""
    tid = "terminate-2pc"
    r = init(wire, tid, enable_2pc=True)
    pid, epoch = r.producer_id, r.producer_epoch
    assert write(wire, tid, pid, epoch, "tp", 1, [b"terminated"]) == Error.NONE
    first = init(wire, tid, enable_2pc=True)
    assert first.error_code == Error.CONCURRENT_TRANSACTIONS
    again = init_retrying(wire, tid, timeout_ms=30000)
    assert again.error_code == Error.NONE and again.producer_epoch > epoch + 1
    assert describe(wire, tid)[tid].transaction_state == "Empty"
    assert b"terminated" not in committed_values(wire, "tp", 1)
    assert any(m[:3] == (pid, epoch + 1, ControlType.ABORT)
               for m in control_markers(wire, "tp", 1))
    # the old producer is fenced
    assert end_txn(wire, tid, pid, epoch, True).error_code == Error.PRODUCER_FENCED


# -- keepPreparedTxn in each state ---------------------------------------------------------

def test_keep_prepared_without_a_transaction_is_a_plain_init(wire):
    tid = "keep-none"
    fresh = init(wire, tid, enable_2pc=True, keep=True)
    assert (fresh.error_code, fresh.producer_epoch, fresh.ongoing_txn_producer_id,
            fresh.ongoing_txn_producer_epoch) == (Error.NONE, 0, -1, -1)
    empty = init(wire, tid, enable_2pc=True, keep=True)  # EMPTY
    assert (empty.producer_id, empty.producer_epoch, empty.ongoing_txn_producer_id) == (
        fresh.producer_id, 1, -1)
    pid, epoch = empty.producer_id, empty.producer_epoch
    assert write(wire, tid, pid, epoch, "tp", 0, [b"c"]) == Error.NONE
    assert end_txn(wire, tid, pid, epoch, True).error_code == Error.NONE
    until(lambda: describe(wire, tid)[tid].transaction_state == "CompleteCommit")
    done = init(wire, tid, enable_2pc=True, keep=True)  # COMPLETE_COMMIT
    assert (done.producer_epoch, done.ongoing_txn_producer_id,
            done.ongoing_txn_producer_epoch) == (epoch + 1, -1, -1)


def test_keep_prepared_keeps_the_ongoing_transaction(broker, wire):
    tid = "keep-ongoing"
    r = init(wire, tid, enable_2pc=True)
    pid, epoch = r.producer_id, r.producer_epoch
    assert write(wire, tid, pid, epoch, "tp", 1, [b"a", b"b"]) == Error.NONE
    assert b"a" not in committed_values(wire, "tp", 1)
    # the producer "restarts": its transaction stays, under a new epoch
    kept = init(wire, tid, enable_2pc=True, keep=True)
    assert (kept.error_code, kept.producer_id, kept.producer_epoch) == (
        Error.NONE, pid, epoch + 1)
    assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (pid, epoch)
    d = describe(wire, tid)[tid]
    assert (d.transaction_state, d.producer_epoch, d.transaction_timeout_ms) == (
        "Ongoing", epoch + 1, MAX_TIMEOUT)
    # again (another restart): the same ongoing pair, one more epoch
    again = init(wire, tid, enable_2pc=True, keep=True)
    assert (again.producer_epoch, again.ongoing_txn_producer_id,
            again.ongoing_txn_producer_epoch) == (epoch + 2, pid, epoch)
    # the producer instances before are fenced
    assert end_txn(wire, tid, pid, epoch, True).error_code == Error.PRODUCER_FENCED
    assert end_txn(wire, tid, pid, epoch + 1, True).error_code == Error.PRODUCER_FENCED
    assert b"a" not in committed_values(wire, "tp", 1)
    # the commit under the newest epoch makes the records visible
    assert end_txn(wire, tid, pid, epoch + 2, True).error_code == Error.NONE
    until(lambda: describe(wire, tid)[tid].transaction_state == "CompleteCommit")
    assert committed_values(wire, "tp", 1)[-2:] == [b"a", b"b"]
    assert (pid, epoch + 2, ControlType.COMMIT, 0) in control_markers(wire, "tp", 1)
    # nothing ongoing any more
    after = init(wire, tid, enable_2pc=True, keep=True)
    assert (after.error_code, after.ongoing_txn_producer_id) == (Error.NONE, -1)


def test_keep_prepared_then_abort(wire):
    tid = "keep-abort"
    r = init(wire, tid, enable_2pc=True)
    assert write(wire, tid, r.producer_id, r.producer_epoch, "tp", 0, [b"gone"]) == Error.NONE
    kept = init(wire, tid, enable_2pc=True, keep=True)
    assert kept.ongoing_txn_producer_epoch == r.producer_epoch
    assert end_txn(wire, tid, kept.producer_id, kept.producer_epoch, False).error_code == \
        Error.NONE
    until(lambda: describe(wire, tid)[tid].transaction_state == "CompleteAbort")
    assert b"gone" not in committed_values(wire, "tp", 0)


def test_keep_prepared_while_the_commit_is_being_completed(broker, wire):
    """PREPARE_COMMIT (markers not yet written): CONCURRENT_TRANSACTIONS, the client retries
    and then finds no ongoing transaction."""
    tid = "keep-preparing"
    r = init(wire, tid, enable_2pc=True)
    pid, epoch = r.producer_id, r.producer_epoch
    assert write(wire, tid, pid, epoch, "tp", 0, [b"p"]) == Error.NONE
    coordinator = broker.broker.txn_coordinator
    release: asyncio.Event | None = None

    async def install():
        nonlocal release
        release = asyncio.Event()

        async def hold(transactional_id, md):
            if transactional_id == tid:
                await release.wait()
        coordinator.before_markers = hold

    run(broker, install())
    try:
        assert end_txn(wire, tid, pid, epoch, True).error_code == Error.NONE
        assert describe(wire, tid)[tid].transaction_state == "PrepareCommit"
        held = init(wire, tid, enable_2pc=True, keep=True)
        assert held.error_code == Error.CONCURRENT_TRANSACTIONS
    finally:
        async def uninstall():
            coordinator.before_markers = None
            release.set()
        run(broker, uninstall())
    done = init_retrying(wire, tid, enable_2pc=True, keep=True)
    assert (done.error_code, done.ongoing_txn_producer_id) == (Error.NONE, -1)
    assert b"p" in committed_values(wire, "tp", 0)


def test_keep_prepared_with_an_exhausted_epoch(broker, wire):
    tid = "keep-exhausted"
    r = init(wire, tid, enable_2pc=True)
    assert write(wire, tid, r.producer_id, r.producer_epoch, "tp", 1, [b"e"]) == Error.NONE

    async def exhaust():
        broker.broker.txn_coordinator.txns[tid].producer_epoch = 32766

    run(broker, exhaust())
    assert init(wire, tid, enable_2pc=True, keep=True).error_code == Error.INVALID_TXN_STATE
    # it can still be terminated
    assert init(wire, tid, enable_2pc=True).error_code == Error.CONCURRENT_TRANSACTIONS
    after = init_retrying(wire, tid, enable_2pc=True)
    assert after.error_code == Error.NONE and after.producer_id != r.producer_id


def test_versions_below_6_have_no_flags(wire):
    r = init(wire, "v5-2pc", version=5)
    assert r.error_code == Error.NONE and r.producer_epoch == 0


# -- survives a restart ------------------------------------------------------------------------

def test_kept_transaction_survives_a_restart(tmp_path):
    data = tmp_path / "d"
    overrides = {"transaction.two.phase.commit.enable": "true",
                 "transaction.state.log.num.partitions": "1"}
    tid = "restart-2pc"
    with BrokerThread(data, overrides) as b, KafkaWire.connect(b.bootstrap) as w:
        make_topic(b, "rt", 1)
        r = init(w, tid, enable_2pc=True)
        pid, epoch = r.producer_id, r.producer_epoch
        assert write(w, tid, pid, epoch, "rt", 0, [b"one", b"two"]) == Error.NONE
        kept = init(w, tid, enable_2pc=True, keep=True)
        assert kept.producer_epoch == epoch + 1
    with BrokerThread(data, overrides) as b, KafkaWire.connect(b.bootstrap) as w:
        again = init_retrying(w, tid, enable_2pc=True, keep=True)
        assert (again.error_code, again.producer_epoch, again.ongoing_txn_producer_id,
                again.ongoing_txn_producer_epoch) == (Error.NONE, epoch + 2, pid, epoch)
        d = describe(w, tid)[tid]
        assert (d.transaction_state, d.transaction_timeout_ms) == ("Ongoing", MAX_TIMEOUT)
        assert committed_values(w, "rt", 0) == []
        assert end_txn(w, tid, pid, epoch + 2, True).error_code == Error.NONE
        until(lambda: describe(w, tid)[tid].transaction_state == "CompleteCommit")
        assert committed_values(w, "rt", 0) == [b"one", b"two"]


# -- overdue transactions: a log line and the metrics --------------------------------------------

def test_overdue_two_phase_commits_are_logged_once_and_counted(broker, wire, clock, caplog):
    tid = "overdue-2pc"
    r = init(wire, tid, enable_2pc=True)
    assert write(wire, tid, r.producer_id, r.producer_epoch, "tp", 0, [b"o"]) == Error.NONE
    coordinator = broker.broker.txn_coordinator

    def overdue_gauge() -> float:
        from prometheus_client import generate_latest
        text = generate_latest(broker.broker.metrics.registry).decode()
        line = next(ln for ln in text.splitlines()
                    if ln.startswith("semel_two_phase_commit_transactions_overdue "))
        return float(line.split()[1])

    async def check():
        return coordinator.log_overdue_two_phase_commits()

    async def open_ids():
        return [t for t, _ in coordinator.open_two_phase_commits()]

    assert tid in run(broker, open_ids())
    before = overdue_gauge()
    clock.advance(2 * 3600 * 1000)  # past the default hour
    try:
        with caplog.at_level(logging.WARNING, logger="coordinator.transaction"):
            assert run(broker, check()) >= 1
            assert run(broker, check()) >= 1
        lines = [r.getMessage() for r in caplog.records if tid in r.getMessage()]
        assert len(lines) == 1 and "open for" in lines[0]
        assert overdue_gauge() >= before + 1
    finally:
        clock.advance(-2 * 3600 * 1000)
        init_retrying(wire, tid, enable_2pc=True)  # terminate it


# -- the authorizer ------------------------------------------------------------------------------

ANON = "User:ANONYMOUS"


def _acl(op: AclOperation, name: str) -> AclBinding:
    return AclBinding(R.TRANSACTIONAL_ID, name, PatternType.LITERAL, ANON, "*", op,
                      AclPermissionType.ALLOW)


def test_two_phase_commit_acl(tmp_path):
    """Kafka: Write on the transactional id for any InitProducerId with one, and
    TwoPhaseCommit besides for enable2Pc; keepPreparedTxn alone needs only Write."""
    overrides = {"authorizer.class.name":
                 "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "transaction.two.phase.commit.enable": "true"}
    with BrokerThread(tmp_path / "authz", overrides) as b, KafkaWire.connect(b.bootstrap) as w:
        def grant(*bindings):
            async def create():
                assert await b.broker.authorizer.create_acls(list(bindings)) == \
                    [None] * len(bindings)
            b.call(create())

        def revoke():
            async def delete():
                await b.broker.authorizer.delete_acls([EVERY_ACL])
            b.call(delete())

        failed = Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert init(w, "acl-2pc", enable_2pc=True).error_code == failed
        grant(_acl(AclOperation.TWO_PHASE_COMMIT, "acl-2pc"))
        assert init(w, "acl-2pc", enable_2pc=True).error_code == failed  # no Write
        revoke()
        grant(_acl(AclOperation.WRITE, "acl-2pc"))
        assert init(w, "acl-2pc", enable_2pc=True).error_code == failed  # no TwoPhaseCommit
        assert init(w, "acl-2pc", keep=True).error_code == Error.NONE
        grant(_acl(AclOperation.TWO_PHASE_COMMIT, "acl-2pc"))
        assert init(w, "acl-2pc", enable_2pc=True, keep=True).error_code == Error.NONE
        # TwoPhaseCommit on another id does not count
        grant(_acl(AclOperation.WRITE, "other-2pc"),
              _acl(AclOperation.TWO_PHASE_COMMIT, "acl-2pc-x"))
        assert init(w, "other-2pc", enable_2pc=True).error_code == failed
        revoke()
