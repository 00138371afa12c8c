"""What each request does to one transactional id's state: the transaction coordinator's
decisions, pure (Kafka's TransactionCoordinator minus the I/O).

Each function takes the ``TxnMetadata`` and the request and returns a ``Decision``: an error
(or NONE) to answer at once, or a prepared ``TxnTransit`` (``pending_state`` set) that the
shell must persist to ``__transaction_state`` and then ``complete``. Nothing here awaits; a
new producer id, when one may be needed, comes from the ``new_producer_id`` callable
(raising KafkaError when none is available).

Transaction version (``client_tv``): EndTxn v5 / AddPartitionsToTxn v5 come from clients of
transaction version 2 (KIP-890, epoch bump per transaction); everything else is version 0.
``server_tv`` is the finalized ``transaction.version``; the coordinator's own aborts
(fencing, timeouts) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from semel.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_0,
    IllegalTransition,
    TxnMetadata,
    TxnTransit,
    is_epoch_exhausted,
    supports_epoch_bump,
)
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error, KafkaError
from semel.storage.topic_partition import TopicPartition

S = TransactionState
NewProducerId = Callable[[], int]


@dataclass(frozen=True, slots=True)
class Decision:
    """``transit`` None: answer ``error`` now (with ``producer_id``/``producer_epoch`` where
    the API returns them). Otherwise persist ``transit`` first."""

    error: Error = Error.NONE
    transit: TxnTransit | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    epoch_fence: bool = False  # the transit is the abort that fences the current producer


def _answer(error: Error, producer_id: int = NO_PRODUCER_ID,
            producer_epoch: int = NO_PRODUCER_EPOCH) -> Decision:
    return Decision(error, None, producer_id, producer_epoch)


def _persist(transit: TxnTransit, *, epoch_fence: bool = False) -> Decision:
    return Decision(Error.NONE, transit, epoch_fence=epoch_fence)


def _never(md: TxnMetadata) -> IllegalTransition:
    return IllegalTransition(f"{md.transactional_id} found in {md.state.name}: the "
                             "coordinator never leaves a transactional id in this state")


# -- InitProducerId ------------------------------------------------------------------------

def init_producer_id(md: TxnMetadata, txn_timeout_ms: int,
                     expected: tuple[int, int] | None, now_ms: int,
                     new_producer_id: NewProducerId, server_tv: int = TV_0, *,
                     keep_prepared: bool = False) -> Decision:
    """A fresh epoch for the transactional id (fencing older instances). ``expected`` is the
    (producer id, epoch) a KIP-360 client asks to continue from. An ONGOING transaction is
    aborted first: the returned transit is that abort (``epoch_fence``) and the client, once
    it is durable, is told CONCURRENT_TRANSACTIONS so it retries. With ``keep_prepared``
    (KIP-939 keepPreparedTxn) an ONGOING transaction stays open under a bumped epoch, for the
    client to commit or abort."""
    if md.pending_transition_in_progress:
        return _answer(Error.CONCURRENT_TRANSACTIONS)
    if expected is not None and not _valid_expected_producer_id(md, *expected):
        return _answer(Error.PRODUCER_FENCED)
    state = md.state
    if state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):
        return _answer(Error.CONCURRENT_TRANSACTIONS)
    if state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT, S.EMPTY):
        try:
            if md.is_producer_epoch_exhausted and (
                    expected is None or expected[1] == md.producer_epoch):
                return _persist(md.prepare_producer_id_rotation(
                    new_producer_id(), txn_timeout_ms, now_ms, expected is not None))
            return _persist(md.prepare_increment_producer_epoch(
                txn_timeout_ms, None if expected is None else expected[1], now_ms))
        except KafkaError as e:
            return _answer(e.code)
    if state == S.ONGOING and keep_prepared:
        try:
            return _persist(md.prepare_keep_prepared(txn_timeout_ms, now_ms))
        except KafkaError as e:
            return _answer(e.code)
    if state == S.ONGOING:
        # The fencing epoch is never returned: the client retries after the abort and then
        # gets an epoch bumped once more (a new producer id if that exhausts the epochs).
        return _fence_and_abort(md, now_ms, server_tv, new_producer_id)
    raise _never(md)


def _valid_expected_producer_id(md: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: continuing is allowed from a just-created id (no epoch yet), from the current
    producer id (the epoch is checked by the bump), or from the previous producer id with an
    exhausted epoch (a retry after the rotation it caused)."""
    return (md.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == md.producer_id
            or (producer_id == md.prev_producer_id and is_epoch_exhausted(epoch)))


def _fence_and_abort(md: TxnMetadata, now_ms: int, server_tv: int,
                     new_producer_id: NewProducerId) -> Decision:
    """Fence the producer of an ONGOING transaction and abort it (Kafka:
    prepareFenceProducerEpoch, then endTransaction with isFromClient false). The epoch is
    bumped exactly once: by the fence, or, with transaction version 2, by the abort."""
    fence = md.prepare_fence_producer_epoch(bump=not supports_epoch_bump(server_tv))
    return end_txn(md, md.producer_id, fence.producer_epoch, commit=False, client_tv=server_tv,
                   now_ms=now_ms, new_producer_id=new_producer_id, is_from_client=False)


# -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------

def add_partitions(md: TxnMetadata, producer_id: int, producer_epoch: int,
                   partitions: Iterable[TopicPartition], now_ms: int,
                   client_tv: int = TV_0) -> Decision:
    """Add partitions to the (new or ongoing) transaction."""
    partitions = frozenset(partitions)
    if md.pending_transition_in_progress:
        # first, so a TV2 producer already using the next producer id of an epoch overflow
        # is told to wait for the completion instead of INVALID_PRODUCER_ID_MAPPING
        return _answer(Error.CONCURRENT_TRANSACTIONS)
    if md.producer_id != producer_id:
        return _answer(Error.INVALID_PRODUCER_ID_MAPPING)
    if md.producer_epoch != producer_epoch:
        return _answer(Error.PRODUCER_FENCED)
    if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return _answer(Error.CONCURRENT_TRANSACTIONS)
    if md.state == S.ONGOING and partitions <= md.topic_partitions:
        return _answer(Error.NONE)  # already there: nothing to write
    if md.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        raise _never(md)
    return _persist(md.prepare_add_partitions(partitions, now_ms, client_tv))


def verify_partitions(md: TxnMetadata | None, producer_id: int, producer_epoch: int,
                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Error]:
    """AddPartitionsToTxn with verifyOnly (KIP-890 partition verification): is each
    partition part of the producer's ongoing transaction? The pending state is not looked
    at; the append that follows validates again."""
    partitions = list(partitions)
    if md is None or md.producer_id != producer_id:
        error = Error.INVALID_PRODUCER_ID_MAPPING
    elif md.producer_epoch != producer_epoch:
        error = Error.PRODUCER_FENCED
    elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        error = Error.CONCURRENT_TRANSACTIONS
    else:
        return {tp: Error.NONE if tp in md.topic_partitions else Error.TRANSACTION_ABORTABLE
                for tp in partitions}
    return dict.fromkeys(partitions, error)


# -- EndTxn ----------------------------------------------------------------------------------

def end_txn(md: TxnMetadata, producer_id: int, producer_epoch: int, *, commit: bool,
            client_tv: int, now_ms: int, new_producer_id: NewProducerId,
            is_from_client: bool = True) -> Decision:
    """Commit or abort: the transit to PREPARE_COMMIT / PREPARE_ABORT, or the answer.

    ``is_from_client`` False: the coordinator's own abort of an ONGOING transaction after
    ``prepare_fence_producer_epoch`` (pending PREPARE_EPOCH_FENCE), with the fencing epoch.
    A retry of an EndTxn that completed answers NONE; transaction version 2 answers it with
    the producer id/epoch the client continues with.
    """
    if supports_epoch_bump(client_tv):
        return _end_txn_v2(md, producer_id, producer_epoch, commit, client_tv, now_ms,
                           new_producer_id, is_from_client)
    return _end_txn_v1(md, producer_id, producer_epoch, commit, now_ms, is_from_client)


def _end_txn_v1(md: TxnMetadata, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int, is_from_client: bool) -> Decision:
    if md.producer_id != producer_id:
        return _unfence(md, Error.INVALID_PRODUCER_ID_MAPPING)
    # clients must match exactly: only the coordinator's own fence raises the epoch
    if (is_from_client and producer_epoch != md.producer_epoch) \
            or producer_epoch < md.producer_epoch:
        return _unfence(md, Error.PRODUCER_FENCED)
    if md.pending_transition_in_progress and md.pending_state != S.PREPARE_EPOCH_FENCE:
        return _answer(Error.CONCURRENT_TRANSACTIONS)
    state = md.state
    if state == S.ONGOING:
        fence = _take_fence(md, producer_epoch) if not commit else False
        return _persist(md.prepare_abort_or_commit(
            S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, TV_0, NO_PRODUCER_ID, now_ms,
            False), epoch_fence=fence)
    if state == S.COMPLETE_COMMIT:
        return _answer(Error.NONE if commit else Error.INVALID_TXN_STATE)
    if state == S.COMPLETE_ABORT:
        return _answer(Error.INVALID_TXN_STATE if commit else Error.NONE)
    if state == S.PREPARE_COMMIT:
        return _answer(Error.CONCURRENT_TRANSACTIONS if commit else Error.INVALID_TXN_STATE)
    if state == S.PREPARE_ABORT:
        return _answer(Error.INVALID_TXN_STATE if commit else Error.CONCURRENT_TRANSACTIONS)
    if state == S.EMPTY:
        return _answer(Error.INVALID_TXN_STATE)
    raise _never(md)


def _end_txn_v2(md: TxnMetadata, producer_id: int, producer_epoch: int, commit: bool,
                client_tv: int, now_ms: int, new_producer_id: NewProducerId,
                is_from_client: bool) -> Decision:
    # Transaction version 2: the epoch was bumped by the last EndTxn, so "same epoch" means
    # the next transaction and "epoch + 1 in the state" a retry of the last EndTxn.
    current_id, current_epoch = md.producer_id, md.producer_epoch
    epoch_fence = md.pending_state == S.PREPARE_EPOCH_FENCE
    retry_on_overflow = (not epoch_fence and md.prev_producer_id == producer_id
                         and producer_epoch == MAX_PRODUCER_EPOCH - 1 and current_epoch == 0)
    retry_on_epoch_bump = not epoch_fence and current_epoch == producer_epoch + 1
    if epoch_fence:
        valid_epoch = ((not is_from_client or producer_epoch == current_epoch)
                       and producer_epoch >= current_epoch)
    elif md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        valid_epoch = retry_on_epoch_bump
    elif md.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
        valid_epoch = retry_on_epoch_bump or retry_on_overflow or producer_epoch == current_epoch
    else:  # ONGOING, EMPTY (DEAD / PREPARE_EPOCH_FENCE never stay)
        valid_epoch = producer_epoch == current_epoch
    is_retry = retry_on_epoch_bump or retry_on_overflow

    if current_id != producer_id and not retry_on_overflow:
        return _unfence(md, Error.INVALID_PRODUCER_ID_MAPPING)
    if not valid_epoch:
        return _unfence(md, Error.PRODUCER_FENCED)
    if md.pending_transition_in_progress and not epoch_fence:
        return _answer(Error.CONCURRENT_TRANSACTIONS)

    def prepare(new_state: TransactionState, no_partition_added: bool) -> Decision:
        next_producer_id = NO_PRODUCER_ID
        if not epoch_fence and md.is_producer_epoch_exhausted:
            try:
                next_producer_id = new_producer_id()
            except KafkaError as e:
                return _unfence(md, e.code)
        fence = _take_fence(md, producer_epoch) if epoch_fence else False
        return _persist(md.prepare_abort_or_commit(new_state, client_tv, next_producer_id,
                                                   now_ms, no_partition_added),
                        epoch_fence=fence)

    state = md.state
    if state == S.ONGOING:
        return prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, False)
    if state == S.COMPLETE_COMMIT:
        if commit:
            if is_retry:
                return _answer(Error.NONE, current_id, current_epoch)
            return _answer(Error.INVALID_TXN_STATE)
        if is_retry:
            return _answer(Error.INVALID_TXN_STATE)
        return prepare(S.PREPARE_ABORT, True)
    if state == S.COMPLETE_ABORT:
        if commit:
            return _answer(Error.INVALID_TXN_STATE)
        if is_retry:
            return _answer(Error.NONE, current_id, current_epoch)
        return prepare(S.PREPARE_ABORT, True)
    if state == S.PREPARE_COMMIT:
        return _answer(Error.CONCURRENT_TRANSACTIONS if commit else Error.INVALID_TXN_STATE)
    if state == S.PREPARE_ABORT:
        return _answer(Error.INVALID_TXN_STATE if commit else Error.CONCURRENT_TRANSACTIONS)
    if state == S.EMPTY:
        if commit:
            return _answer(Error.INVALID_TXN_STATE)
        return prepare(S.PREPARE_ABORT, True)
    raise _never(md)


def _take_fence(md: TxnMetadata, fencing_epoch: int) -> bool:
    """Turn a pending PREPARE_EPOCH_FENCE into the state the abort is prepared from: the
    fencing epoch becomes current at once (Kafka does this before the write; a failed write
    leaves it, marked ``has_failed_epoch_fence``, so the next fence does not bump again)."""
    if md.pending_state != S.PREPARE_EPOCH_FENCE:
        return False
    md.pending_state = None
    md.producer_epoch = fencing_epoch
    md.last_producer_epoch = NO_PRODUCER_EPOCH
    return True


def _unfence(md: TxnMetadata, error: Error) -> Decision:
    """An answer without a transit: a fence prepared for it must not stay pending."""
    if md.pending_state == S.PREPARE_EPOCH_FENCE:
        md.pending_state = None
    return _answer(error)


def complete_after_prepare(md: TxnMetadata, producer_id: int, producer_epoch: int,
                           commit: bool, client_tv: int, now_ms: int) -> Decision:
    """Once PREPARE_* is durable: the transit to COMPLETE_* (to persist after the markers),
    or the error to answer instead (Kafka's checks before sending markers)."""
    if md.producer_id != producer_id:
        return _answer(Error.INVALID_PRODUCER_ID_MAPPING)
    if md.producer_epoch != producer_epoch and not (
            supports_epoch_bump(client_tv) and md.producer_epoch == producer_epoch + 1):
        return _answer(Error.PRODUCER_FENCED)
    if md.pending_transition_in_progress:
        return _answer(Error.CONCURRENT_TRANSACTIONS)
    if md.state == (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
        return _persist(md.prepare_complete(now_ms))
    if md.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        raise _never(md)
    return _answer(Error.INVALID_TXN_STATE)


# -- timeouts and expiration ----------------------------------------------------------------

def timed_out(md: TxnMetadata, now_ms: int) -> bool:
    """An ONGOING transaction past its timeout (never a KIP-939 two-phase commit one: its
    outcome is the external transaction manager's to decide)."""
    return (md.state == S.ONGOING and not md.pending_transition_in_progress
            and not md.is_two_phase_commit
            and md.txn_start_timestamp + md.txn_timeout_ms < now_ms)


def abort_timed_out(md: TxnMetadata, now_ms: int, server_tv: int,
                    new_producer_id: NewProducerId) -> Decision:
    """The coordinator's abort of a timed-out transaction, fencing the producer (an epoch
    bump, so its late writes are rejected at every partition)."""
    if not timed_out(md, now_ms):
        return _answer(Error.NONE)
    return _fence_and_abort(md, now_ms, server_tv, new_producer_id)


def expired(md: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """A transactional id unused for ``transactional.id.expiration.ms`` and not in a
    transaction may be forgotten."""
    return (md.pending_state is None and md.state.expiration_allowed
            and md.txn_last_update_timestamp <= now_ms - expiration_ms)
