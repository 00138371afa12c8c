"""What every request does in every transaction state (coordinator.transaction.core): a
full state x request table from Kafka 4.x's TransactionCoordinator, the KIP-360 / KIP-890
edge cases, and a Hypothesis state machine that drives one transactional id through random
requests and failed writes checking the invariants."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from semel.coordinator.transaction import core
from semel.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    TV_0,
    TV_2,
    IllegalTransition,
    TxnMetadata,
)
from semel.coordinator.transaction.state import TransactionState, can_transition
from semel.protocol.errors import Error, KafkaError
from semel.storage.topic_partition import TopicPartition

S = TransactionState
E = Error
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
NOW = 1_700_000_000_000
PID, EPOCH = 100, 5


def no_new_id() -> int:
    raise AssertionError("no new producer id expected")


def md_in(state: TransactionState, *, epoch: int = EPOCH, last_epoch: int = EPOCH - 1,
          tv: int = TV_0, producer_id: int = PID, prev_producer_id: int = PID,
          next_producer_id: int = -1) -> TxnMetadata:
    with_partitions = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)
    return TxnMetadata("tid", producer_id, prev_producer_id=prev_producer_id,
                       next_producer_id=next_producer_id, producer_epoch=epoch,
                       last_producer_epoch=last_epoch, txn_timeout_ms=1000, state=state,
                       topic_partitions=[T0] if with_partitions else [],
                       txn_start_timestamp=-1 if state == S.EMPTY else NOW - 5000,
                       txn_last_update_timestamp=NOW - 5000, client_transaction_version=tv)


def end(md, commit, tv, epoch=EPOCH, producer_id=PID, new_id=no_new_id):
    return core.end_txn(md, producer_id, epoch, commit=commit, client_tv=tv, now_ms=NOW,
                        new_producer_id=new_id)


REQUESTS = {
    "init": lambda md: core.init_producer_id(md, 2000, None, NOW, no_new_id),
    "init_expected": lambda md: core.init_producer_id(md, 2000, (PID, EPOCH), NOW, no_new_id),
    "add_new": lambda md: core.add_partitions(md, PID, EPOCH, [T1], NOW),
    "add_known": lambda md: core.add_partitions(md, PID, EPOCH, [T0], NOW),
    "commit_v1": lambda md: end(md, True, TV_0),
    "abort_v1": lambda md: end(md, False, TV_0),
    "commit_v2": lambda md: end(md, True, TV_2),
    "abort_v2": lambda md: end(md, False, TV_2),
    "commit_v2_retry": lambda md: end(md, True, TV_2, EPOCH - 1),
    "abort_v2_retry": lambda md: end(md, False, TV_2, EPOCH - 1),
    "timeout": lambda md: core.abort_timed_out(md, NOW, TV_0, no_new_id),
}

X = "raise"  # Kafka: IllegalStateException, the state is never left standing
STATES = [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT,
          S.COMPLETE_ABORT, S.DEAD, S.PREPARE_EPOCH_FENCE]
# per request, the outcome in each state of STATES: an error answered at once, or
# (state, epoch) after the prepared transit is completed
TABLE = {
    "init": [(S.EMPTY, 6), (S.PREPARE_ABORT, 6), E.CONCURRENT_TRANSACTIONS,
             E.CONCURRENT_TRANSACTIONS, (S.EMPTY, 6), (S.EMPTY, 6), X, X],
    "init_expected": [(S.EMPTY, 6), (S.PREPARE_ABORT, 6), E.CONCURRENT_TRANSACTIONS,
                      E.CONCURRENT_TRANSACTIONS, (S.EMPTY, 6), (S.EMPTY, 6), X, X],
    "add_new": [(S.ONGOING, 5), (S.ONGOING, 5), E.CONCURRENT_TRANSACTIONS,
                E.CONCURRENT_TRANSACTIONS, (S.ONGOING, 5), (S.ONGOING, 5), X, X],
    "add_known": [(S.ONGOING, 5), E.NONE, E.CONCURRENT_TRANSACTIONS,
                  E.CONCURRENT_TRANSACTIONS, (S.ONGOING, 5), (S.ONGOING, 5), X, X],
    "commit_v1": [E.INVALID_TXN_STATE, (S.PREPARE_COMMIT, 5), E.CONCURRENT_TRANSACTIONS,
                  E.INVALID_TXN_STATE, E.NONE, E.INVALID_TXN_STATE, X, X],
    "abort_v1": [E.INVALID_TXN_STATE, (S.PREPARE_ABORT, 5), E.INVALID_TXN_STATE,
                 E.CONCURRENT_TRANSACTIONS, E.INVALID_TXN_STATE, E.NONE, X, X],
    "commit_v2": [E.INVALID_TXN_STATE, (S.PREPARE_COMMIT, 6), E.PRODUCER_FENCED,
                  E.PRODUCER_FENCED, E.INVALID_TXN_STATE, E.INVALID_TXN_STATE, X, X],
    "abort_v2": [(S.PREPARE_ABORT, 6), (S.PREPARE_ABORT, 6), E.PRODUCER_FENCED,
                 E.PRODUCER_FENCED, (S.PREPARE_ABORT, 6), (S.PREPARE_ABORT, 6), X, X],
    # (TV2 checks the epoch before the state: a stale one is fenced even in DEAD)
    "commit_v2_retry": [E.PRODUCER_FENCED, E.PRODUCER_FENCED, E.CONCURRENT_TRANSACTIONS,
                        E.INVALID_TXN_STATE, E.NONE, E.INVALID_TXN_STATE,
                        E.PRODUCER_FENCED, E.PRODUCER_FENCED],
    "abort_v2_retry": [E.PRODUCER_FENCED, E.PRODUCER_FENCED, E.INVALID_TXN_STATE,
                       E.CONCURRENT_TRANSACTIONS, E.INVALID_TXN_STATE, E.NONE,
                       E.PRODUCER_FENCED, E.PRODUCER_FENCED],
    "timeout": [E.NONE, (S.PREPARE_ABORT, 6), E.NONE, E.NONE, E.NONE, E.NONE, E.NONE, E.NONE],
}


def outcome(decision: core.Decision, md: TxnMetadata):
    if decision.transit is None:
        assert md.pending_state is None
        return decision.error
    assert decision.error == E.NONE and md.pending_state == decision.transit.state
    md.complete(decision.transit)
    return md.state, md.producer_epoch


@pytest.mark.parametrize(("request_name", "index"),
                         list(itertools.product(TABLE, range(len(STATES)))))
def test_state_x_request(request_name, index):
    state = STATES[index]
    expected = TABLE[request_name][index]
    tv = TV_2 if request_name.endswith(("v2", "retry")) else TV_0
    md = md_in(state, tv=tv)
    before = md.state
    if expected == X:
        with pytest.raises(IllegalTransition):
            REQUESTS[request_name](md)
        return
    got = outcome(REQUESTS[request_name](md), md)
    assert got == expected
    if isinstance(expected, tuple):
        assert can_transition(before, md.state)


@pytest.mark.parametrize("state", [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT,
                                   S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_identity_errors_in_every_state(state):
    for tv in (TV_0, TV_2):
        assert end(md_in(state), True, tv, producer_id=PID + 1).error == \
            E.INVALID_PRODUCER_ID_MAPPING
        assert end(md_in(state), False, tv, epoch=EPOCH + 1).error == E.PRODUCER_FENCED
    assert end(md_in(state), True, TV_0, epoch=EPOCH - 1).error == E.PRODUCER_FENCED
    assert core.add_partitions(md_in(state), PID + 1, EPOCH, [T1], NOW).error == \
        E.INVALID_PRODUCER_ID_MAPPING
    assert core.add_partitions(md_in(state), PID, EPOCH - 1, [T1], NOW).error == \
        E.PRODUCER_FENCED
    assert core.verify_partitions(md_in(state), PID + 1, EPOCH, [T0]) == {
        T0: E.INVALID_PRODUCER_ID_MAPPING}
    assert core.verify_partitions(md_in(state), PID, EPOCH + 1, [T0]) == {
        T0: E.PRODUCER_FENCED}
    # KIP-360: a stale expected epoch or another producer id is fenced (the epoch is only
    # looked at when a bump is due: an ONGOING transaction is fenced and aborted first)
    stale = core.init_producer_id(md_in(state), 1000, (PID, EPOCH - 2), NOW, no_new_id)
    if state == S.ONGOING:
        assert stale.epoch_fence
    else:
        assert stale.error in (E.PRODUCER_FENCED, E.CONCURRENT_TRANSACTIONS)
    assert core.init_producer_id(md_in(state), 1000, (PID + 7, EPOCH), NOW,
                                 no_new_id).error == E.PRODUCER_FENCED


@pytest.mark.parametrize("state", STATES[:6])
def test_a_pending_transition_makes_every_request_wait(state):
    for name in ("init", "add_new", "commit_v1", "abort_v2"):
        md = md_in(state)
        md.pending_state = S.ONGOING if state == S.ONGOING else state
        decision = REQUESTS[name](md)
        if name == "abort_v2" and state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            assert decision.error == E.PRODUCER_FENCED  # the epoch is checked first in TV2
        else:
            assert decision.error == E.CONCURRENT_TRANSACTIONS, name
        assert decision.transit is None


def test_verify_partitions():
    ongoing = md_in(S.ONGOING)
    assert core.verify_partitions(ongoing, PID, EPOCH, [T0, T1]) == {
        T0: E.NONE, T1: E.TRANSACTION_ABORTABLE}
    ongoing.pending_state = S.PREPARE_COMMIT  # the pending state is not looked at
    assert core.verify_partitions(ongoing, PID, EPOCH, [T0]) == {T0: E.NONE}
    assert core.verify_partitions(md_in(S.PREPARE_ABORT), PID, EPOCH, [T0]) == {
        T0: E.CONCURRENT_TRANSACTIONS}
    assert core.verify_partitions(None, PID, EPOCH, [T0, T1]) == {
        T0: E.INVALID_PRODUCER_ID_MAPPING, T1: E.INVALID_PRODUCER_ID_MAPPING}


def test_init_during_an_ongoing_transaction_fences_then_aborts():
    md = md_in(S.ONGOING, epoch=5, last_epoch=4)
    decision = core.init_producer_id(md, 2000, None, NOW, no_new_id)
    assert decision.epoch_fence
    t = decision.transit
    assert (t.state, t.producer_epoch, t.last_producer_epoch) == (S.PREPARE_ABORT, 6, -1)
    assert t.client_transaction_version == TV_0 and t.txn_last_update_timestamp == NOW
    assert md.producer_epoch == 6  # the fence takes effect in memory at once (Kafka)


def test_failed_fence_write_is_not_bumped_again():
    md = md_in(S.ONGOING, epoch=5)
    decision = core.init_producer_id(md, 2000, None, NOW, no_new_id)
    md.pending_state = None  # the write failed
    md.has_failed_epoch_fence = True
    again = core.init_producer_id(md, 2000, None, NOW, no_new_id)
    assert again.transit.producer_epoch == decision.transit.producer_epoch == 6
    md.complete(again.transit)
    assert core.complete_after_prepare(md, PID, 6, False, TV_0, NOW).transit is not None
    assert not md.has_failed_epoch_fence


def test_fence_with_transaction_version_2_bumps_once_even_at_the_last_epoch():
    md = md_in(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, tv=TV_2)
    decision = core.abort_timed_out(md, NOW, TV_2, no_new_id)
    t = decision.transit
    assert (t.state, t.producer_epoch, t.client_transaction_version) == (
        S.PREPARE_ABORT, MAX_PRODUCER_EPOCH, TV_2)
    assert t.next_producer_id == -1  # a fence never moves to a new producer id
    md.complete(t)
    complete = core.complete_after_prepare(md, PID, MAX_PRODUCER_EPOCH, False, TV_2, NOW)
    md.complete(complete.transit)
    assert (md.state, md.producer_id, md.producer_epoch) == (
        S.COMPLETE_ABORT, PID, MAX_PRODUCER_EPOCH)
    # the next InitProducerId rotates the producer id: no epoch is left
    rotated = core.init_producer_id(md, 2000, None, NOW, lambda: 200)
    md.complete(rotated.transit)
    assert (md.producer_id, md.producer_epoch) == (200, 0)


def test_fence_at_the_last_epoch_uses_32767():
    md = md_in(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, last_epoch=MAX_PRODUCER_EPOCH - 2)
    t = core.init_producer_id(md, 2000, None, NOW, no_new_id).transit
    assert (t.producer_epoch, t.last_producer_epoch) == (MAX_PRODUCER_EPOCH, -1)


def test_exhausted_epoch_rotates_the_producer_id_and_retries_get_the_same_answer():
    md = md_in(S.EMPTY, epoch=MAX_PRODUCER_EPOCH - 1, last_epoch=MAX_PRODUCER_EPOCH - 2)
    d = core.init_producer_id(md, 2000, (PID, MAX_PRODUCER_EPOCH - 1), NOW, lambda: 101)
    md.complete(d.transit)
    assert (md.producer_id, md.producer_epoch, md.prev_producer_id) == (101, 0, PID)
    # the producer never saw the answer and retries with its old id and epoch
    retry = core.init_producer_id(md, 2000, (PID, MAX_PRODUCER_EPOCH - 1), NOW, no_new_id)
    md.complete(retry.transit)
    assert (md.producer_id, md.producer_epoch) == (101, 0)
    # an older epoch of the old producer id is fenced
    assert core.init_producer_id(md, 2000, (PID, MAX_PRODUCER_EPOCH - 2), NOW,
                                 no_new_id).error == E.PRODUCER_FENCED


def test_new_id_without_epoch_accepts_any_expected_producer():
    md = TxnMetadata("tid", 42, txn_timeout_ms=1000)
    d = core.init_producer_id(md, 1000, (9, 3), NOW, no_new_id)
    md.complete(d.transit)
    assert (md.producer_id, md.producer_epoch) == (42, 0)


def test_tv2_commit_at_the_last_epoch_continues_with_a_new_producer_id():
    md = md_in(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, last_epoch=MAX_PRODUCER_EPOCH - 2,
               tv=TV_2)
    d = end(md, True, TV_2, epoch=MAX_PRODUCER_EPOCH - 1, new_id=lambda: 300)
    assert (d.transit.producer_epoch, d.transit.next_producer_id) == (MAX_PRODUCER_EPOCH, 300)
    md.complete(d.transit)
    # a retry while the markers are written must wait
    assert end(md, True, TV_2, epoch=MAX_PRODUCER_EPOCH - 1).error == \
        E.CONCURRENT_TRANSACTIONS
    after = core.complete_after_prepare(md, PID, MAX_PRODUCER_EPOCH - 1, True, TV_2, NOW)
    assert (after.transit.producer_id, after.transit.producer_epoch) == (300, 0)
    # the producer already moved on to the new id: adding partitions waits too
    assert core.add_partitions(md, 300, 0, [T1], NOW, TV_2).error == \
        E.CONCURRENT_TRANSACTIONS
    md.complete(after.transit)
    # a retry of the EndTxn that overflowed answers the new identity
    retry = end(md, True, TV_2, epoch=MAX_PRODUCER_EPOCH - 1)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.NONE, 300, 0)
    assert core.add_partitions(md, 300, 0, [T1], NOW, TV_2).transit is not None


def test_tv2_new_producer_id_failure_is_answered():
    md = md_in(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, tv=TV_2)

    def unavailable() -> int:
        raise KafkaError(E.COORDINATOR_LOAD_IN_PROGRESS)

    d = end(md, True, TV_2, epoch=MAX_PRODUCER_EPOCH - 1, new_id=unavailable)
    assert d.error == E.COORDINATOR_LOAD_IN_PROGRESS and md.pending_state is None


def test_complete_after_prepare_checks():
    md = md_in(S.PREPARE_COMMIT)
    assert core.complete_after_prepare(md, PID + 1, EPOCH, True, TV_0, NOW).error == \
        E.INVALID_PRODUCER_ID_MAPPING
    assert core.complete_after_prepare(md, PID, EPOCH + 1, True, TV_0, NOW).error == \
        E.PRODUCER_FENCED
    assert core.complete_after_prepare(md, PID, EPOCH, False, TV_0, NOW).error == \
        E.INVALID_TXN_STATE
    assert core.complete_after_prepare(md, PID, EPOCH - 1, True, TV_2, NOW).transit.state == \
        S.COMPLETE_COMMIT


def test_timeouts_and_expiration_rules():
    md = md_in(S.ONGOING)  # started at NOW - 5000 with a 1000 ms timeout
    assert core.timed_out(md, NOW) and not core.timed_out(md, NOW - 4000)
    md.pending_state = S.PREPARE_COMMIT
    assert not core.timed_out(md, NOW)
    for state in S:
        assert core.expired(md_in(state), NOW, 5000) == state.expiration_allowed
        assert not core.expired(md_in(state), NOW, 5001)


# -- a random walk ---------------------------------------------------------------------------

class OneTransactionalId(RuleBasedStateMachine):
    """A client (sometimes two: a zombie with an old identity) and the coordinator's own
    timeouts against one transactional id; writes fail at random."""

    @initialize()
    def setup(self):
        self.next_id = 1000
        self.md = TxnMetadata("tid", self.new_id(), txn_timeout_ms=1000,
                              txn_last_update_timestamp=NOW)
        self.identity = (-1, -1)  # what the current client was told
        self.zombie = (-1, -1)
        self.identities = [(self.md.producer_id, self.md.producer_epoch)]
        self.tv = TV_0

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def apply(self, decision: core.Decision, write_ok: bool) -> bool:
        before = self.md.state
        if decision.transit is None:
            return False
        if not write_ok:
            self.md.pending_state = None
            if decision.epoch_fence:
                self.md.has_failed_epoch_fence = True
            return False
        self.md.complete(decision.transit)
        assert can_transition(before, self.md.state)
        self.identities.append((self.md.producer_id, self.md.producer_epoch))
        return True

    def finish(self, commit: bool):
        """The markers are written: PREPARE_* -> COMPLETE_*."""
        md = self.md
        after = core.complete_after_prepare(md, md.producer_id, md.producer_epoch, commit,
                                            md.client_transaction_version, NOW)
        assert after.transit is not None
        md.complete(after.transit)
        self.identities.append((md.producer_id, md.producer_epoch))
        return after.transit

    @rule(write_ok=st.booleans(), use_expected=st.booleans(), tv=st.sampled_from([TV_0, TV_2]))
    def init(self, write_ok, use_expected, tv):
        expected = self.identity if use_expected and self.identity[0] >= 0 else None
        decision = core.init_producer_id(self.md, 1000, expected, NOW, self.new_id)
        if self.apply(decision, write_ok) and not decision.epoch_fence:
            self.zombie, self.identity = self.identity, (self.md.producer_id,
                                                         self.md.producer_epoch)
            self.tv = tv

    @rule(write_ok=st.booleans(), partition=st.integers(0, 3), zombie=st.booleans())
    def add(self, write_ok, partition, zombie):
        pid, epoch = self.zombie if zombie else self.identity
        decision = core.add_partitions(self.md, pid, epoch, [TopicPartition("t", partition)],
                                       NOW, self.tv)
        if zombie and self.zombie != self.identity:
            assert decision.transit is None and decision.error != E.NONE
        self.apply(decision, write_ok)

    @rule(write_ok=st.booleans(), commit=st.booleans(), zombie=st.booleans())
    def end_txn(self, write_ok, commit, zombie):
        pid, epoch = self.zombie if zombie else self.identity
        decision = core.end_txn(self.md, pid, epoch, commit=commit, client_tv=self.tv,
                                now_ms=NOW, new_producer_id=self.new_id)
        if zombie and self.zombie != self.identity:
            assert decision.transit is None
        if self.apply(decision, write_ok):
            complete = self.finish(commit)
            if not zombie and self.tv == TV_2:
                self.identity = (complete.producer_id, complete.producer_epoch)

    @precondition(lambda self: self.md.state == S.ONGOING)
    @rule(write_ok=st.booleans(), server_tv=st.sampled_from([TV_0, TV_2]))
    def time_out(self, write_ok, server_tv):
        decision = core.abort_timed_out(self.md, NOW + 10_000, server_tv, self.new_id)
        assert decision.transit is not None
        if self.apply(decision, write_ok):
            self.finish(False)

    @precondition(lambda self: self.md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT))
    @rule()
    def markers(self):
        self.finish(self.md.state == S.PREPARE_COMMIT)

    @invariant()
    def consistent(self):
        md = self.md
        assert md.pending_state is None
        assert md.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE)
        assert (md.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT)) == bool(
            md.topic_partitions)
        assert -1 <= md.producer_epoch <= MAX_PRODUCER_EPOCH
        # identities only move forward: new producer ids are larger, epochs grow
        assert self.identities == sorted(self.identities)
        # a client is never handed the fencing epoch 32767
        assert self.identity[1] < MAX_PRODUCER_EPOCH


TestOneTransactionalId = OneTransactionalId.TestCase
TestOneTransactionalId.settings = settings(max_examples=300, stateful_step_count=40,
                                           deadline=None)
