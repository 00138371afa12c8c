"""One transactional id's state (Kafka's TransactionMetadata), pure: no I/O, no event loop.

Every change is two-phase, exactly as Kafka does it: a ``prepare_*(…, now_ms)`` method checks
the transition against ``state.VALID_PREVIOUS``, records the target in ``pending_state`` and
returns a ``TxnTransit`` (the would-be new values); the caller persists the transit to
``__transaction_state`` and, once that is durable, calls ``complete(transit)``, which
re-validates and applies it. A failed persist only clears ``pending_state``. While a
transition is pending, no other may be prepared.

Epochs (int16): ``producer_epoch`` is the current one; ``last_producer_epoch`` the one before
the last bump (KIP-360 retries, transaction version 2 retries; never persisted). An epoch at
32766 or more is exhausted: clients never get 32767, which stays free for the coordinator to
fence with. Transaction version 2 (KIP-890) bumps the epoch on every EndTxn; when that
exhausts it, ``next_producer_id`` carries the producer id the transaction continues with.

KIP-939 two-phase commit: a transaction timeout of Integer.MAX_VALUE marks a 2PC transaction
(the reaper never aborts it). An InitProducerId with keepPreparedTxn keeps an ONGOING
transaction open and bumps the epoch (fencing the producer that wrote it); the (producer id,
epoch) its records were written with is then kept in ``ongoing_producer_id/epoch`` (persisted,
semel's own tags) so that every later keepPreparedTxn answers with the same pair, the one the
external transaction manager recorded at prepare time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error, KafkaError
from semel.storage.topic_partition import TopicPartition

S = TransactionState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1  # Integer.MaxValue marks a KIP-939 transaction

TV_0, TV_1, TV_2 = 0, 1, 2  # transaction.version feature levels


def supports_epoch_bump(transaction_version: int) -> bool:
    """Transaction version 2: the epoch is bumped at the end of every transaction."""
    return transaction_version >= TV_2


def is_epoch_exhausted(producer_epoch: int) -> bool:
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalTransition(Exception):
    """A transition the state machine forbids: a coordinator bug, never a client error."""


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The values a prepared transition will give the metadata (Kafka's TxnTransitMetadata).
    ``prev_producer_id`` is the producer id before the transition."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int
    # semel: the principal that obtained the producer id (None: not recorded)
    principal: str | None = None
    # KIP-939: the identity of an ONGOING transaction kept by keepPreparedTxn (-1: none)
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


class TxnMetadata:
    __slots__ = ("client_transaction_version", "has_failed_epoch_fence", "last_producer_epoch",
                 "next_producer_id", "ongoing_producer_epoch", "ongoing_producer_id",
                 "pending_state", "prev_producer_id", "principal",
                 "producer_epoch", "producer_id", "state", "topic_partitions", "transactional_id",
                 "txn_last_update_timestamp", "txn_start_timestamp", "txn_timeout_ms")

    def __init__(self, transactional_id: str, producer_id: int, *,
                 prev_producer_id: int = NO_PRODUCER_ID,
                 next_producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = NO_PRODUCER_EPOCH,
                 last_producer_epoch: int = NO_PRODUCER_EPOCH,
                 txn_timeout_ms: int = 60000,
                 state: TransactionState = S.EMPTY,
                 topic_partitions: Iterable[TopicPartition] = (),
                 txn_start_timestamp: int = -1,
                 txn_last_update_timestamp: int = -1,
                 client_transaction_version: int = TV_0,
                 principal: str | None = None,
                 ongoing_producer_id: int = NO_PRODUCER_ID,
                 ongoing_producer_epoch: int = NO_PRODUCER_EPOCH) -> None:
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.prev_producer_id = prev_producer_id
        self.next_producer_id = next_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = state
        self.topic_partitions: set[TopicPartition] = set(topic_partitions)
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        self.client_transaction_version = client_transaction_version
        # semel: the principal that obtained the producer id (coordinator/producer_principal.py)
        self.principal = principal
        # KIP-939: who wrote an ONGOING transaction that keepPreparedTxn kept (-1: the
        # current producer id and epoch did)
        self.ongoing_producer_id = ongoing_producer_id
        self.ongoing_producer_epoch = ongoing_producer_epoch
        self.pending_state: TransactionState | None = None
        # an epoch fence whose write failed: the next fence reuses the bumped epoch
        self.has_failed_epoch_fence = False

    def __repr__(self) -> str:
        return (f"TxnMetadata({self.transactional_id!r}, producer_id={self.producer_id}, "
                f"epoch={self.producer_epoch}, last_epoch={self.last_producer_epoch}, "
                f"state={self.state.name}, pending={getattr(self.pending_state, 'name', None)}, "
                f"partitions={sorted(self.topic_partitions)}, "
                f"tv={self.client_transaction_version})")

    # -- queries ------------------------------------------------------------------------

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def is_two_phase_commit(self) -> bool:
        """A KIP-939 transaction: its timeout is Integer.MAX_VALUE and never expires."""
        return self.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    @property
    def ongoing_transaction(self) -> tuple[int, int]:
        """The (producer id, epoch) the ONGOING transaction's records were written with, or
        (-1, -1) when no transaction is ongoing (InitProducerId v6's OngoingTxn fields)."""
        if self.state != S.ONGOING:
            return NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if self.ongoing_producer_id != NO_PRODUCER_ID:
            return self.ongoing_producer_id, self.ongoing_producer_epoch
        return self.producer_id, self.producer_epoch

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (S.ONGOING, S.PREPARE_ABORT, S.PREPARE_COMMIT)

    def snapshot(self) -> TxnTransit:
        """The current values as a transit (for writing the state as it is, and tests)."""
        return TxnTransit(self.producer_id, self.prev_producer_id, self.next_producer_id,
                          self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms,
                          self.state, frozenset(self.topic_partitions),
                          self.txn_start_timestamp, self.txn_last_update_timestamp,
                          self.client_transaction_version, self.principal,
                          self.ongoing_producer_id, self.ongoing_producer_epoch)

    # -- prepare ------------------------------------------------------------------------

    def prepare_fence_producer_epoch(self, bump: bool = True) -> TxnTransit:
        """ONGOING -> PREPARE_EPOCH_FENCE, bumping the epoch to fence the current producer.

        Never persisted: the caller goes straight on to an abort (``end_txn`` with
        ``is_from_client=False``), which clears this pending state. Without ``bump`` (the
        abort itself will bump: transaction version 2) or after a failed fence (its bumped
        epoch is already in memory and was never given out) the epoch stays as it is.
        """
        if self.producer_epoch == MAX_PRODUCER_EPOCH:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence producer with "
                                    f"epoch {MAX_PRODUCER_EPOCH}, it would overflow")
        epoch = self.producer_epoch
        if bump and not self.has_failed_epoch_fence:
            epoch += 1
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=epoch)

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int,
                                         expected_producer_epoch: int | None,
                                         now_ms: int) -> TxnTransit:
        """-> EMPTY with a bumped epoch (InitProducerId). With an expected epoch (KIP-360): a
        match (or no epoch yet) bumps and remembers the old epoch; the remembered last epoch
        is a retry of a bump that succeeded and returns the current epoch unchanged;
        anything else is PRODUCER_FENCED."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: cannot allocate any more "
                                    f"producer epochs for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif (self.producer_epoch == NO_PRODUCER_EPOCH
              or expected_producer_epoch == self.producer_epoch):
            epoch, last = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise KafkaError(Error.PRODUCER_FENCED,
                             f"expected producer epoch {expected_producer_epoch} is neither "
                             f"the current epoch {self.producer_epoch} nor the last one "
                             f"{self.last_producer_epoch}")
        return self._prepare(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last,
                             txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=now_ms)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int,
                                     now_ms: int, record_last_epoch: bool) -> TxnTransit:
        """-> EMPTY with a new producer id at epoch 0 (epochs exhausted)."""
        if self.has_pending_transaction:
            raise IllegalTransition(f"{self.transactional_id}: cannot rotate the producer id "
                                    f"while a transaction is pending ({self.state.name})")
        return self._prepare(
            S.EMPTY, producer_id=new_producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms, topic_partitions=frozenset(),
            txn_start_timestamp=-1, txn_last_update_timestamp=now_ms)

    def prepare_keep_prepared(self, txn_timeout_ms: int, now_ms: int) -> TxnTransit:
        """ONGOING -> ONGOING with a bumped epoch (InitProducerId with keepPreparedTxn): the
        transaction stays open for the external transaction manager's decision, the producer
        that wrote it is fenced, and the pair it was written with is remembered. An exhausted
        epoch cannot be bumped without a new producer id, which would orphan the records:
        INVALID_TXN_STATE (the transaction can still be aborted)."""
        if self.is_producer_epoch_exhausted:
            raise KafkaError(Error.INVALID_TXN_STATE,
                             f"{self.transactional_id}: the epochs of producer id "
                             f"{self.producer_id} are exhausted; the prepared transaction can "
                             "only be aborted")
        ongoing_id, ongoing_epoch = self.ongoing_transaction
        return self._prepare(S.ONGOING, producer_epoch=self.producer_epoch + 1,
                             last_producer_epoch=self.producer_epoch,
                             txn_timeout_ms=txn_timeout_ms, txn_last_update_timestamp=now_ms,
                             ongoing_producer_id=ongoing_id,
                             ongoing_producer_epoch=ongoing_epoch)

    def prepare_add_partitions(self, partitions: Iterable[TopicPartition], now_ms: int,
                               client_transaction_version: int) -> TxnTransit:
        """-> ONGOING with ``partitions`` added; a new transaction starts its clock now."""
        if self.state in (S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT):
            start = now_ms
        else:
            start = self.txn_start_timestamp
        return self._prepare(S.ONGOING,
                             topic_partitions=frozenset(self.topic_partitions.union(partitions)),
                             txn_start_timestamp=start, txn_last_update_timestamp=now_ms,
                             client_transaction_version=client_transaction_version)

    def prepare_abort_or_commit(self, new_state: TransactionState,
                                client_transaction_version: int, next_producer_id: int,
                                now_ms: int, no_partition_added: bool) -> TxnTransit:
        """-> PREPARE_COMMIT / PREPARE_ABORT (EndTxn). Transaction version 2 bumps the epoch
        (the markers carry it); ``no_partition_added``: a TV2 abort of a transaction that
        never started, whose start time becomes now."""
        if supports_epoch_bump(client_transaction_version):
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        else:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        return self._prepare(
            new_state, producer_epoch=epoch, last_producer_epoch=last,
            next_producer_id=next_producer_id,
            txn_start_timestamp=now_ms if no_partition_added else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
            client_transaction_version=client_transaction_version)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """PREPARE_* -> COMPLETE_* (every marker written). With a next producer id (TV2 epoch
        overflow) the transaction's producer continues as that id at epoch 0; the last epoch
        stays what the client last saw."""
        self.has_failed_epoch_fence = False
        target = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if (supports_epoch_bump(self.client_transaction_version)
                and self.next_producer_id != NO_PRODUCER_ID):
            producer_id, epoch = self.next_producer_id, 0
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch
        return self._prepare(target, producer_id=producer_id, producer_epoch=epoch,
                             next_producer_id=NO_PRODUCER_ID, topic_partitions=frozenset(),
                             txn_last_update_timestamp=now_ms)

    def prepare_dead(self) -> TxnTransit:
        """-> DEAD (transactional id expiration; completed by removal, never persisted as a
        state: a tombstone is written instead)."""
        return self._prepare(S.DEAD, topic_partitions=frozenset())

    def _prepare(self, state: TransactionState, **changes) -> TxnTransit:
        if self.pending_state is not None:
            raise IllegalTransition(f"{self.transactional_id}: preparing {state.name} while "
                                    f"{self.pending_state.name} is pending")
        values = {
            "producer_id": self.producer_id,
            "next_producer_id": self.next_producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "txn_timeout_ms": self.txn_timeout_ms,
            "topic_partitions": frozenset(self.topic_partitions),
            "txn_start_timestamp": self.txn_start_timestamp,
            "txn_last_update_timestamp": self.txn_last_update_timestamp,
            "client_transaction_version": self.client_transaction_version,
            "principal": self.principal,
            "ongoing_producer_id": NO_PRODUCER_ID,
            "ongoing_producer_epoch": NO_PRODUCER_EPOCH,
        }
        if state == S.ONGOING:  # only an ONGOING transaction keeps who wrote it
            values["ongoing_producer_id"] = self.ongoing_producer_id
            values["ongoing_producer_epoch"] = self.ongoing_producer_epoch
        values.update(changes)
        if values["producer_id"] < 0:
            raise IllegalTransition(f"illegal new producer id {values['producer_id']}")
        # a new metadata has epoch -1 until its first InitProducerId; only DEAD may keep it
        if state != S.DEAD and values["producer_epoch"] < 0:
            raise IllegalTransition(f"illegal new producer epoch {values['producer_epoch']}")
        if self.state not in state.valid_previous_states:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.name} -> "
                                    f"{state.name} is not a valid transition")
        self.pending_state = state
        return TxnTransit(prev_producer_id=self.producer_id, state=state, **values)

    # -- complete -----------------------------------------------------------------------

    def complete(self, transit: TxnTransit) -> None:
        """Apply a prepared, now durable, transition (Kafka's completeTransitionTo), after
        checking it is the one pending and consistent with the current values."""
        to_state = self.pending_state
        if to_state is None:
            raise IllegalTransition(f"{self.transactional_id}: completing {transit.state.name} "
                                    "without a pending state")
        if to_state != transit.state:
            self._fail(transit)
        if to_state == S.EMPTY:  # InitProducerId
            if ((self.producer_epoch != transit.producer_epoch
                 and not self._valid_epoch_bump(transit))
                    or transit.topic_partitions or transit.txn_start_timestamp != -1):
                self._fail(transit)
        elif to_state == S.ONGOING and transit.producer_epoch != self.producer_epoch:
            # InitProducerId with keepPreparedTxn: the same transaction under a new epoch
            if (self.state != S.ONGOING or transit.producer_id != self.producer_id
                    or transit.producer_epoch != self.producer_epoch + 1
                    or transit.topic_partitions != self.topic_partitions
                    or transit.ongoing_producer_id == NO_PRODUCER_ID):
                self._fail(transit)
        elif to_state == S.ONGOING:  # AddPartitions
            if (not self._valid_producer_epoch(transit)
                    or not transit.topic_partitions.issuperset(self.topic_partitions)
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._fail(transit)
        elif to_state in (S.PREPARE_ABORT, S.PREPARE_COMMIT):  # EndTxn
            empty_abort = (to_state == S.PREPARE_ABORT
                           and supports_epoch_bump(transit.client_transaction_version)
                           and self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT))
            if (not self._valid_producer_epoch(transit)
                    or self.topic_partitions != transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or not (self.txn_start_timestamp == transit.txn_start_timestamp
                            or empty_abort)):
                self._fail(transit)
        elif to_state in (S.COMPLETE_ABORT, S.COMPLETE_COMMIT):  # markers written
            if (not self._valid_producer_epoch(transit)
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp == -1):
                self._fail(transit)
        else:  # PREPARE_EPOCH_FENCE and DEAD are never completed
            raise IllegalTransition(f"{self.transactional_id}: {to_state.name} is never "
                                    "completed")
        self.producer_id = transit.producer_id
        self.prev_producer_id = transit.prev_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.principal = transit.principal
        self.ongoing_producer_id = transit.ongoing_producer_id
        self.ongoing_producer_epoch = transit.ongoing_producer_epoch
        self.pending_state = None
        self.state = to_state

    def _valid_producer_epoch(self, transit: TxnTransit) -> bool:
        tv2 = supports_epoch_bump(transit.client_transaction_version)
        if (tv2 and transit.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and transit.producer_epoch == 0):
            # TV2 overflow: the producer id moved on to the next one, the last epoch did not
            return (transit.last_producer_epoch == self.last_producer_epoch
                    and transit.prev_producer_id == self.producer_id)
        if tv2 and transit.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return (transit.last_producer_epoch == self.producer_epoch
                    and transit.producer_id == self.producer_id)
        return (transit.producer_epoch == self.producer_epoch
                and transit.producer_id == self.producer_id)

    def _valid_epoch_bump(self, transit: TxnTransit) -> bool:
        return (transit.producer_epoch == self.producer_epoch + 1
                or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))

    def _fail(self, transit: TxnTransit) -> None:
        raise IllegalTransition(f"{self!r}: unexpected transition to {transit}")

    # -- markers ------------------------------------------------------------------------

    def remove_partition(self, partition: TopicPartition) -> None:
        """A marker for ``partition`` is written (or can never be): forget it."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransition(f"{self.transactional_id}: removing a partition in "
                                    f"{self.state.name}")
        self.topic_partitions.discard(partition)
