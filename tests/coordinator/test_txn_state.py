"""The transaction state table and TxnMetadata's prepare/complete transitions (Kafka's
TransactionState and TransactionMetadata), without an event loop."""

from __future__ import annotations

import itertools

import pytest

from semel.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_0,
    TV_2,
    IllegalTransition,
    TxnMetadata,
)
from semel.coordinator.transaction.state import VALID_PREVIOUS, TransactionState, can_transition
from semel.protocol.errors import Error, KafkaError
from semel.storage.topic_partition import TopicPartition

S = TransactionState
T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
NOW = 1_700_000_000_000

# Kafka 4.x TransactionState, written out as (to, from) pairs: the oracle for the table
KAFKA_TRANSITIONS = {
    (S.EMPTY, S.EMPTY), (S.EMPTY, S.COMPLETE_COMMIT), (S.EMPTY, S.COMPLETE_ABORT),
    (S.ONGOING, S.ONGOING), (S.ONGOING, S.EMPTY), (S.ONGOING, S.COMPLETE_COMMIT),
    (S.ONGOING, S.COMPLETE_ABORT),
    (S.PREPARE_COMMIT, S.ONGOING),
    (S.PREPARE_ABORT, S.ONGOING), (S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE),
    (S.PREPARE_ABORT, S.EMPTY), (S.PREPARE_ABORT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_COMMIT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.DEAD, S.EMPTY), (S.DEAD, S.COMPLETE_ABORT), (S.DEAD, S.COMPLETE_COMMIT),
    (S.PREPARE_EPOCH_FENCE, S.ONGOING),
}


def test_ids_and_names_are_kafkas():
    assert [(s.value, s.state_name) for s in S] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    for s in S:
        assert S.from_name(s.state_name) is s
    assert S.from_name("Ongoing ") is None and S.from_name("ONGOING") is None


def test_only_empty_and_complete_states_may_expire():
    assert {s for s in S if s.expiration_allowed} == {
        S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


@pytest.mark.parametrize(("to_state", "from_state"), list(itertools.product(S, S)))
def test_transition_table_is_kafkas(to_state, from_state):
    expected = (to_state, from_state) in KAFKA_TRANSITIONS
    assert can_transition(from_state, to_state) is expected
    assert (from_state in VALID_PREVIOUS[to_state]) is expected


def md_in(state: TransactionState, *, epoch: int = 5, last_epoch: int = 4,
          partitions=(), tv: int = TV_0, start: int = NOW - 10, next_producer_id: int = -1,
          producer_id: int = 100) -> TxnMetadata:
    if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT) and not partitions:
        partitions = (T0,)
    return TxnMetadata("tid", producer_id, prev_producer_id=producer_id,
                       next_producer_id=next_producer_id, producer_epoch=epoch,
                       last_producer_epoch=last_epoch, txn_timeout_ms=1000, state=state,
                       topic_partitions=partitions,
                       txn_start_timestamp=-1 if state == S.EMPTY else start,
                       txn_last_update_timestamp=NOW - 10, client_transaction_version=tv)


# every prepare_* method, as a function of the metadata, with the target state it asks for
PREPARES = {
    "fence": (S.PREPARE_EPOCH_FENCE, lambda md: md.prepare_fence_producer_epoch()),
    "increment": (S.EMPTY, lambda md: md.prepare_increment_producer_epoch(1000, None, NOW)),
    "rotation": (S.EMPTY, lambda md: md.prepare_producer_id_rotation(200, 1000, NOW, False)),
    "add": (S.ONGOING, lambda md: md.prepare_add_partitions([T1], NOW, TV_0)),
    "commit": (S.PREPARE_COMMIT,
               lambda md: md.prepare_abort_or_commit(S.PREPARE_COMMIT, TV_0, -1, NOW, False)),
    "abort": (S.PREPARE_ABORT,
              lambda md: md.prepare_abort_or_commit(S.PREPARE_ABORT, TV_0, -1, NOW, False)),
    "complete": (None, lambda md: md.prepare_complete(NOW)),
    "dead": (S.DEAD, lambda md: md.prepare_dead()),
}


@pytest.mark.parametrize(("name", "state"), list(itertools.product(PREPARES, S)))
def test_every_prepare_from_every_state_follows_the_table(name, state):
    target, prepare = PREPARES[name]
    md = md_in(state)
    if target is None:  # prepare_complete picks COMPLETE_COMMIT after PREPARE_COMMIT
        target = S.COMPLETE_COMMIT if state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
    allowed = can_transition(state, target)
    if name == "rotation" and state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
        allowed = False  # no rotation while a transaction is pending
    if not allowed:
        with pytest.raises(IllegalTransition):
            prepare(md)
        assert md.pending_state is None
        return
    transit = prepare(md)
    assert transit.state == target and md.pending_state == target
    assert md.state == state  # nothing applied before complete
    with pytest.raises(IllegalTransition):
        prepare(md)  # one pending transition at a time
    if target in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        with pytest.raises(IllegalTransition):
            md.complete(transit)  # never persisted as a state
    else:
        md.complete(transit)
        assert md.state == target and md.pending_state is None
        assert md.snapshot() == transit


def test_new_producer_gets_epoch_zero():
    md = TxnMetadata("tid", 7, txn_timeout_ms=500, txn_last_update_timestamp=NOW - 1)
    transit = md.prepare_increment_producer_epoch(1500, None, NOW)
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (
        7, 0, NO_PRODUCER_EPOCH)
    md.complete(transit)
    assert (md.producer_epoch, md.txn_timeout_ms, md.txn_last_update_timestamp) == (0, 1500, NOW)
    assert md.txn_start_timestamp == -1 and not md.topic_partitions


def test_increment_with_expected_epoch_kip_360():
    md = md_in(S.EMPTY, epoch=10, last_epoch=9)
    transit = md.prepare_increment_producer_epoch(1000, 10, NOW)  # current: bump, remember
    assert (transit.producer_epoch, transit.last_producer_epoch) == (11, 10)
    md.complete(transit)
    retry = md.prepare_increment_producer_epoch(1000, 10, NOW)  # retry of that: no bump
    assert (retry.producer_epoch, retry.last_producer_epoch) == (11, 10)
    md.complete(retry)
    with pytest.raises(KafkaError) as e:
        md.prepare_increment_producer_epoch(1000, 9, NOW)  # neither: fenced
    assert e.value.code == Error.PRODUCER_FENCED
    assert md.pending_state is None


def test_increment_refuses_an_exhausted_epoch():
    md = md_in(S.EMPTY, epoch=MAX_PRODUCER_EPOCH - 1)
    assert md.is_producer_epoch_exhausted
    with pytest.raises(IllegalTransition):
        md.prepare_increment_producer_epoch(1000, None, NOW)
    assert not md_in(S.EMPTY, epoch=MAX_PRODUCER_EPOCH - 2).is_producer_epoch_exhausted


@pytest.mark.parametrize("record_last_epoch", [False, True])
def test_rotation_starts_a_new_producer_id_at_epoch_zero(record_last_epoch):
    md = md_in(S.COMPLETE_COMMIT, epoch=MAX_PRODUCER_EPOCH - 1)
    transit = md.prepare_producer_id_rotation(555, 2000, NOW, record_last_epoch)
    md.complete(transit)
    assert (md.producer_id, md.producer_epoch, md.prev_producer_id) == (555, 0, 100)
    assert md.last_producer_epoch == (MAX_PRODUCER_EPOCH - 1 if record_last_epoch else -1)
    assert md.state == S.EMPTY and md.txn_timeout_ms == 2000


def test_fence_bumps_once_even_when_its_write_failed():
    md = md_in(S.ONGOING, epoch=5)
    assert md.prepare_fence_producer_epoch().producer_epoch == 6
    md.pending_state = None
    md.has_failed_epoch_fence = True
    assert md.prepare_fence_producer_epoch().producer_epoch == 5
    md.pending_state = None
    assert md.prepare_fence_producer_epoch(bump=False).producer_epoch == 5
    with pytest.raises(IllegalTransition):
        md_in(S.ONGOING, epoch=MAX_PRODUCER_EPOCH).prepare_fence_producer_epoch()


def test_add_partitions_starts_the_clock_only_for_a_new_transaction():
    md = md_in(S.COMPLETE_ABORT)
    transit = md.prepare_add_partitions([T0], NOW, TV_0)
    assert transit.txn_start_timestamp == NOW and transit.topic_partitions == {T0}
    md.complete(transit)
    later = md.prepare_add_partitions([T1, T2], NOW + 50, TV_2)
    assert later.txn_start_timestamp == NOW and later.txn_last_update_timestamp == NOW + 50
    assert later.topic_partitions == {T0, T1, T2} and later.client_transaction_version == TV_2
    md.complete(later)


def test_end_txn_keeps_the_epoch_before_tv2_and_bumps_it_with_tv2():
    v1 = md_in(S.ONGOING, epoch=5, last_epoch=3)
    t = v1.prepare_abort_or_commit(S.PREPARE_COMMIT, TV_0, -1, NOW, False)
    assert (t.producer_epoch, t.last_producer_epoch, t.txn_start_timestamp) == (5, 3, NOW - 10)
    v2 = md_in(S.ONGOING, epoch=5, last_epoch=3, tv=TV_2)
    t = v2.prepare_abort_or_commit(S.PREPARE_COMMIT, TV_2, -1, NOW, False)
    assert (t.producer_epoch, t.last_producer_epoch) == (6, 5)
    v2.complete(t)
    complete = v2.prepare_complete(NOW + 1)
    assert (complete.producer_id, complete.producer_epoch) == (100, 6)
    assert complete.state == S.COMPLETE_COMMIT and not complete.topic_partitions
    v2.complete(complete)
    # a TV2 abort of a transaction that never started: its start time is now
    abort = v2.prepare_abort_or_commit(S.PREPARE_ABORT, TV_2, -1, NOW + 2, True)
    assert abort.txn_start_timestamp == NOW + 2 and abort.producer_epoch == 7
    v2.complete(abort)


def test_tv2_epoch_overflow_moves_to_the_next_producer_id_on_completion():
    md = md_in(S.ONGOING, epoch=MAX_PRODUCER_EPOCH - 1, last_epoch=MAX_PRODUCER_EPOCH - 2,
               tv=TV_2)
    prepare = md.prepare_abort_or_commit(S.PREPARE_COMMIT, TV_2, 999, NOW, False)
    assert (prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == (
        100, MAX_PRODUCER_EPOCH, 999)
    md.complete(prepare)
    complete = md.prepare_complete(NOW)
    assert (complete.producer_id, complete.producer_epoch, complete.prev_producer_id) == (
        999, 0, 100)
    assert complete.next_producer_id == NO_PRODUCER_ID
    assert complete.last_producer_epoch == MAX_PRODUCER_EPOCH - 1  # what the client last saw
    md.complete(complete)
    assert (md.producer_id, md.producer_epoch, md.prev_producer_id) == (999, 0, 100)


def test_complete_checks_what_it_applies():
    md = md_in(S.ONGOING)
    transit = md.prepare_abort_or_commit(S.PREPARE_COMMIT, TV_0, -1, NOW, False)
    other = md_in(S.ONGOING).prepare_abort_or_commit(S.PREPARE_ABORT, TV_0, -1, NOW, False)
    with pytest.raises(IllegalTransition):
        md.complete(other)  # not the pending state
    md.pending_state = None
    with pytest.raises(IllegalTransition):
        md.complete(transit)  # nothing pending
    md.pending_state = S.PREPARE_COMMIT
    md.topic_partitions.add(T2)  # partitions changed under the transit
    with pytest.raises(IllegalTransition):
        md.complete(transit)
    assert md.state == S.ONGOING


def test_remove_partition_only_while_preparing():
    md = md_in(S.PREPARE_COMMIT, partitions=(T0, T1))
    md.remove_partition(T0)
    assert md.topic_partitions == {T1}
    with pytest.raises(IllegalTransition):
        md_in(S.ONGOING).remove_partition(T0)


def test_prepare_refuses_negative_producer_ids_and_epochs():
    md = TxnMetadata("tid", 1)  # epoch -1: a brand new id
    with pytest.raises(IllegalTransition):
        md.prepare_add_partitions([T0], NOW, TV_0)
    assert md.prepare_dead().state == S.DEAD  # an unused new id may still expire
    bad = md_in(S.EMPTY, producer_id=NO_PRODUCER_ID)
    with pytest.raises(IllegalTransition):
        bad.prepare_increment_producer_epoch(1000, None, NOW)
