"""The transaction coordinator on the broker's event loop: the async shell around ``core``.

State: one ``TxnMetadata`` per transactional id, owned by the loop (no locks). A change
goes prepare -> persist -> complete: ``core`` prepares a transit (``pending_state`` set,
so concurrent requests for the id get CONCURRENT_TRANSACTIONS), the shell appends it as
one record to ``__transaction_state`` partition ``abs(java_hash(id)) % partitions`` and
waits until it is durable (``PartitionLog.wait_durable``), then ``complete``s it. A failed
append or fsync clears the pending state and answers COORDINATOR_NOT_AVAILABLE. Each
operation starts in the caller's turn of the loop and, once it has to wait (for the disk),
goes on in a task of its own, so a client that disconnects cannot cut it short; without
fsync (log.flush.mode=none) most end at once and are answered in the turn they arrived.

EndTxn: once PREPARE_COMMIT / PREPARE_ABORT is durable (the commit point) the client is
answered, then a completion task calls ``write_markers`` for every partition of the
transaction (one flush round for all of them), retrying retriable errors, and writes
COMPLETE_* lazily: applied as soon as it is appended, its fsync joins the next flush round
(PREPARE_* stays the durable state until then, from which a restart completes again; see
``_complete_lazily``). A request that finds the id busy while the markers' first attempt is
in flight (the client's next AddPartitionsToTxn, a retried EndTxn or InitProducerId) waits
for that attempt instead of being told CONCURRENT_TRANSACTIONS, so a client's next
transaction costs no retry backoff. ``write_markers`` is injected (the function that also
serves WriteTxnMarkers):

    async write_markers(transactional_id, producer_id, producer_epoch, coordinator_epoch,
                        commit, partitions, *, transaction_version) -> {partition: Error}

``__transaction_state`` is created on first use (or by FindCoordinator) with
``transaction.state.log.num.partitions`` partitions, compacted. At ``start`` an existing one
is loaded in the background; ids on a partition still loading get
COORDINATOR_LOAD_IN_PROGRESS. Loaded PREPARE_* transactions are driven to completion.
Background tasks abort ONGOING transactions past their timeout (fencing the producer with an
epoch bump; never KIP-939 two-phase commit transactions, which are logged once and counted in
the semel_two_phase_commit_transactions_overdue metric when open longer than
``two_phase_commit_warn_age_ms``) and
forget transactional ids unused for ``transactional.id.expiration.ms`` (tombstones). Time comes from the injected ``clock``; tests call
``abort_timed_out_transactions`` / ``remove_expired_transactional_ids`` directly.

Where semel differs from Kafka 4.x: COMPLETE_* is applied before it is durable (Kafka waits
for its replication) and requests wait for a completion in flight (Kafka answers
CONCURRENT_TRANSACTIONS); a failed ``__transaction_state`` write answers
COORDINATOR_NOT_AVAILABLE (Kafka: NOT_COORDINATOR for storage errors; both make clients
retry); a marker refused with INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED counts
as written (a newer epoch already closed that partition's transaction; Kafka abandons the
whole completion and leaves the id in PREPARE_* until the partition is reloaded); an epoch
fence bumps the epoch exactly once also with transaction version 2 (as Kafka after its fix
of the double bump); InitProducerId with KIP-939's keepPreparedTxn keeps an ONGOING
transaction as the KIP describes (Kafka 4.x answers UNSUPPORTED_VERSION).

Beyond Kafka (with ``principals``, coordinator/producer_principal.py: the authorizer is on):
InitProducerId records the requesting principal in the transactional id's metadata, which
is persisted with every record of the id (a tagged field) and passed on to a rotated or
next producer id; the producer ids of each loaded or changed id are bound to it, and
unbound when the id expires.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from semel.coordinator.eager import Resumed
from semel.coordinator.loading import batches_to_load
from semel.coordinator.partitioning import partition_for
from semel.coordinator.transaction import core
from semel.coordinator.transaction.config import TxnConfig
from semel.coordinator.transaction.core import Decision
from semel.coordinator.transaction.log import (
    TRANSACTION_STATE_TOPIC_NAME,
    UnknownKeyVersion,
    UnknownValueVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    metadata_from_value,
    value_from_transit,
    value_version_for,
)
from semel.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_0,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TxnMetadata,
    TxnTransit,
    supports_epoch_bump,
)
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error, KafkaError, ProtocolError
from semel.protocol.records import build_batch
from semel.storage.topic_partition import TopicPartition

log = logging.getLogger("coordinator.transaction")

S = TransactionState
_TOMBSTONE_BATCH_BYTES = 256 * 1024  # tombstone batches stay well below max.message.bytes
# marker results after which the partition needs no marker any more (Kafka drops deleted
# partitions and those that cannot take markers; a newer producer or coordinator epoch
# already closed the partition's transaction - Kafka abandons the whole completion then and
# leaves the id in PREPARE_*, semel finishes it)
_MARKER_DONE = frozenset({
    Error.NONE, Error.UNKNOWN_TOPIC_OR_PARTITION, Error.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    Error.UNSUPPORTED_VERSION, Error.INVALID_PRODUCER_EPOCH,
    Error.TRANSACTION_COORDINATOR_FENCED})


class WriteMarkers(Protocol):
    def __call__(self, transactional_id: str | None, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int, commit: bool, partitions: frozenset[TopicPartition],
                 *, transaction_version: int) -> Awaitable[Mapping[TopicPartition, Error]]: ...


@dataclass(frozen=True, slots=True)
class TxnResult:
    """InitProducerId / EndTxn answer: error, and the producer id/epoch where returned."""

    error: Error
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    # InitProducerId v6: the transaction kept open by keepPreparedTxn (KIP-939)
    ongoing_producer_id: int = NO_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TxnDescription:
    """DescribeTransactions' view of one id (error set: the other fields are meaningless)."""

    transactional_id: str
    error: Error
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    transaction_timeout_ms: int = 0
    transaction_start_time_ms: int = -1
    partitions: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TxnListing:
    """ListTransactions' answer: (transactional id, producer id, state name) rows."""

    error: Error
    transactions: list[tuple[str, int, str]] = field(default_factory=list)
    unknown_state_filters: list[str] = field(default_factory=list)


def _chunks(entries: list, max_bytes: int) -> Iterator[list]:
    """Consecutive runs of (transactional id, ...) entries whose ids fit in ``max_bytes``."""
    chunk: list = []
    size = 0
    for entry in entries:
        entry_size = len(entry[0].encode()) + 32  # key and record overhead
        if chunk and size + entry_size > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append(entry)
        size += entry_size
    if chunk:
        yield chunk


class _NeedProducerId(Exception):
    """A decision needs a new producer id: the shell fetches one and decides again."""


def _need_producer_id() -> int:
    raise _NeedProducerId


def _settle(outcome: asyncio.Future, result: Any, exc: BaseException | None) -> None:
    """The end of an operation that ``TransactionCoordinator._run`` started eagerly and a
    task drives on (``Resumed``), set on ``outcome`` (the caller's future) in the step that
    ends it. A caller that went away (its future cancelled) does not stop the operation; a
    fault of ours it then ends with is logged. The task cancelled (before its first step
    too: the operation then gets the CancelledError where it waits) cancels ``outcome``."""
    if isinstance(exc, asyncio.CancelledError):
        outcome.cancel()
    elif outcome.done():
        if exc is not None:
            log.error("a transaction coordinator operation failed after its caller went "
                      "away", exc_info=exc)
    elif exc is not None:
        outcome.set_exception(exc)
    else:
        outcome.set_result(result)


class TransactionCoordinator:
    def __init__(self, log_manager, producer_ids, config: TxnConfig,
                 clock: Callable[[], int], write_markers: WriteMarkers, *,
                 principals=None, transaction_version: Callable[[], int] | None = None) -> None:
        self.log_manager = log_manager
        # the finalized transaction.version, read at each use (UpdateFeatures changes it at
        # run time); config.transaction_version when not given
        self._transaction_version = transaction_version
        # coordinator.producer_principal.ProducerPrincipals, or None: nothing is recorded
        self.principals = principals
        self.producer_ids = producer_ids
        self.config = config
        self.clock = clock
        self.write_markers = write_markers
        self.num_partitions = config.transaction_state_log_num_partitions
        self.active = False
        self.loading: set[int] = set()
        self.txns: dict[str, TxnMetadata] = {}
        # per id written: (its __transaction_state partition, its record key), so that the
        # three or four records of a transaction hash and encode the id once; entries go
        # with the id (expiration, stop) and all of them when the partition count changes
        self._routes: dict[str, tuple[int, bytes]] = {}
        # test hooks: awaited after PREPARE_* is durable, before any marker is written; and
        # after every marker is written, before COMPLETE_* is
        self.before_markers: Callable[[str, TxnMetadata], Awaitable[None]] | None = None
        self.before_complete: Callable[[str, TxnMetadata], Awaitable[None]] | None = None
        self._ops: set[asyncio.Task] = set()
        self._completions: dict[str, asyncio.Task] = {}
        # ids whose completion is in the markers' first attempt: the requests waiting on it
        self._completing: dict[str, list[asyncio.Future]] = {}
        self._background: list[asyncio.Task] = []
        # 2PC transactions already logged as overdue: (id, producer id, start time)
        self._overdue_logged: set[tuple[str, int, int]] = set()

    @property
    def transaction_version(self) -> int:
        """The server's transaction version now: the ``__transaction_state`` value version
        and the epoch fence of InitProducerId and timeouts follow it (a client request is
        served by its own version, as in Kafka)."""
        if self._transaction_version is None:
            return self.config.transaction_version
        return self._transaction_version()

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        info = self.log_manager.topics.get(TRANSACTION_STATE_TOPIC_NAME)
        if info is not None:
            self.num_partitions = info.num_partitions
            self._routes.clear()
            self.loading = set(range(info.num_partitions))
            self._background.append(loop.create_task(self._load_all(), name="semel-txn-load"))
        self.active = True
        self._background.append(loop.create_task(
            self._every(self.config.abort_timed_out_transaction_cleanup_interval_ms,
                        self._check_timeouts), name="semel-txn-timeouts"))
        self._background.append(loop.create_task(
            self._every(self.config.remove_expired_transaction_cleanup_interval_ms,
                        self.remove_expired_transactional_ids), name="semel-txn-expiration"))

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop serving: operations in flight and transactions being completed get
        ``grace_s`` to finish; what is left of the completions stops (a restart completes
        PREPARE_* transactions from the log)."""
        if not self.active:
            return
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        self.active = False  # new requests get COORDINATOR_NOT_AVAILABLE from here on
        pending = [*self._ops, *self._completions.values()]
        if pending:
            await asyncio.wait(pending, timeout=grace_s)
        completions = list(self._completions.values())
        for task in completions:
            task.cancel()
        await asyncio.gather(*completions, return_exceptions=True)
        self.txns.clear()
        self._routes.clear()
        self.loading.clear()

    async def wait_loaded(self) -> None:
        for task in self._background:
            if task.get_name() == "semel-txn-load":
                await asyncio.shield(task)

    async def wait_completions(self) -> None:
        """Until every transaction being completed (markers, COMPLETE_*) is done."""
        while self._completions:
            await asyncio.gather(*self._completions.values(), return_exceptions=True)

    async def _every(self, interval_ms: int, job: Callable[[], Awaitable[Any]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await job()
            except Exception:
                log.exception("transaction coordinator background job failed")

    # -- routing ------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def _route(self, transactional_id: str) -> tuple[int, bytes]:
        """(partition, record key) of an id this coordinator writes, computed once."""
        route = self._routes.get(transactional_id)
        if route is None:
            route = self._routes[transactional_id] = (self.partition_for(transactional_id),
                                                      encode_key(transactional_id))
        return route

    def check_available(self, transactional_id: str | None = None) -> Error:
        if not self.active:
            return Error.COORDINATOR_NOT_AVAILABLE
        if (self.loading and transactional_id is not None
                and self.partition_for(transactional_id) in self.loading):
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        return Error.NONE

    def ensure_topic(self) -> Error:
        """Create __transaction_state if needed (first write; FindCoordinator may too)."""
        if TRANSACTION_STATE_TOPIC_NAME in self.log_manager.topics:
            return Error.NONE
        try:
            self.log_manager.create_topic(
                TRANSACTION_STATE_TOPIC_NAME, self.num_partitions,
                {"cleanup.policy": "compact", "compression.type": "uncompressed",
                 "segment.bytes": str(self.config.transaction_state_log_segment_bytes)})
        except KafkaError as e:
            log.error("cannot create %s: %s", TRANSACTION_STATE_TOPIC_NAME, e)
            return Error.COORDINATOR_NOT_AVAILABLE
        return Error.NONE

    def _owns(self, transactional_id: str, md: TxnMetadata) -> bool:
        return self.txns.get(transactional_id) is md

    async def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run an operation so that cancelling the caller does not cut it short: eagerly,
        in the caller's turn of the loop, up to its first suspension (with
        log.flush.mode=none most operations never suspend: answered in the turn the request
        arrived, with no task); an operation that suspends goes on in a task of its own
        (``Resumed``), which hands its outcome to the caller's future itself (``_settle``)
        - one hop of the loop, not the two of a shielded task."""
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value
        loop = asyncio.get_running_loop()
        outcome = loop.create_future()
        task = loop.create_task(Resumed(coro, yielded, functools.partial(_settle, outcome)))
        self._ops.add(task)
        task.add_done_callback(self._ops.discard)
        return await outcome

    async def _generate_producer_id(self) -> int:
        result = self.producer_ids.generate_producer_id()
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _decide(self, decide: Callable[[core.NewProducerId], Decision]) -> Decision:
        """Run a ``core`` decision; if it needs a new producer id, fetch one and decide
        again on the state as it is then."""
        try:
            return decide(_need_producer_id)
        except _NeedProducerId:
            pass
        try:
            producer_id = await self._generate_producer_id()
        except KafkaError as e:
            error = e

            def source() -> int:
                raise error
        else:
            def source() -> int:
                return producer_id
        return decide(source)

    # -- persistence --------------------------------------------------------------------

    def _append(self, transactional_id: str, transit: TxnTransit) -> tuple[Any, int]:
        """Append ``transit`` as the id's record to its __transaction_state partition;
        returns (partition log, offset to wait for). Raises KafkaError."""
        error = self.ensure_topic()
        plog = None
        partition, key = self._route(transactional_id)
        if not error:
            plog = self.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition)
        if plog is None:
            raise KafkaError(error or Error.COORDINATOR_NOT_AVAILABLE,
                             f"no {TRANSACTION_STATE_TOPIC_NAME} partition")
        version = value_version_for(self.transaction_version)
        if transit.principal is not None or transit.ongoing_producer_id != NO_PRODUCER_ID:
            version = max(version, 1)  # the principal and the kept pair are tagged fields
        value = encode_value(value_from_transit(transit), version)
        batch = build_batch([(key, value, None, self.clock())])
        result = plog.append(bytearray(batch), origin="coordinator")
        return plog, result.next_offset

    async def _persist(self, transactional_id: str, md: TxnMetadata, transit: TxnTransit, *,
                       keep_pending_on_error: bool = False) -> Error:
        """Append ``transit`` to __transaction_state, wait until durable, complete it."""
        try:
            plog, offset = self._append(transactional_id, transit)
            await plog.wait_durable(offset)
        except KafkaError as e:
            return self._write_failed(transactional_id, md, transit, e, keep_pending_on_error)
        except asyncio.CancelledError:
            # the operation stopped from outside (its task cancelled): as for a write whose
            # outcome is unknown, the transition is dropped (Kafka reverts the pending
            # state on any append error); the client's retry decides again
            if self._owns(transactional_id, md) and md.pending_state == transit.state:
                self._persist_failed(md, Error.COORDINATOR_NOT_AVAILABLE, keep_pending_on_error)
            raise
        if not self._owns(transactional_id, md) or md.pending_state != transit.state:
            return Error.NOT_COORDINATOR  # stopped (or unloaded) meanwhile
        md.complete(transit)
        self._bind(md)
        return Error.NONE

    def _write_failed(self, transactional_id: str, md: TxnMetadata, transit: TxnTransit,
                      e: KafkaError, keep_pending: bool) -> Error:
        log.warning("writing %s of %r to %s failed: %s", transit.state.name,
                    transactional_id, TRANSACTION_STATE_TOPIC_NAME, e)
        code = (Error.UNKNOWN_SERVER_ERROR
                if e.code in (Error.MESSAGE_TOO_LARGE, Error.RECORD_LIST_TOO_LARGE)
                else Error.COORDINATOR_NOT_AVAILABLE)
        return self._persist_failed(md, code, keep_pending)

    def _bind(self, md: TxnMetadata) -> None:
        """Bind the id's producer ids to the principal that obtained them."""
        if self.principals is not None and md.principal is not None:
            self.principals.bind((md.producer_id, md.prev_producer_id, md.next_producer_id),
                                 md.principal)

    @staticmethod
    def _persist_failed(md: TxnMetadata, error: Error, keep_pending: bool) -> Error:
        if not keep_pending:
            md.pending_state = None
        return error

    # -- InitProducerId -----------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                               producer_id: int = NO_PRODUCER_ID,
                               producer_epoch: int = NO_PRODUCER_EPOCH, *,
                               enable_two_phase_commit: bool = False,
                               keep_prepared_txn: bool = False,
                               principal: str | None = None) -> TxnResult:
        """InitProducerId with a transactional id: the producer id and a new epoch;
        ``principal`` (the requester) is recorded as the one the producer id belongs to.
        KIP-939: ``enable_two_phase_commit`` (refused unless
        transaction.two.phase.commit.enable) makes the transaction timeout Integer.MAX_VALUE
        (never aborted by the reaper, the requested timeout is not checked);
        ``keep_prepared_txn`` keeps an ONGOING transaction open under a new epoch and answers
        the pair it was written with (Kafka 4.x refuses it with UNSUPPORTED_VERSION; semel
        does what KIP-939 describes)."""
        if not transactional_id:
            return TxnResult(Error.INVALID_REQUEST)
        if enable_two_phase_commit and not self.config.two_phase_commit_enable:
            return TxnResult(Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return TxnResult(Error.INVALID_REQUEST)
        if enable_two_phase_commit:
            transaction_timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS
        elif not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return TxnResult(Error.INVALID_TRANSACTION_TIMEOUT)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        return await self._run(self._init_producer_id(transactional_id,
                                                      transaction_timeout_ms, expected,
                                                      principal, keep_prepared_txn))

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int,
                                expected: tuple[int, int] | None,
                                principal: str | None = None,
                                keep_prepared: bool = False, *, wait: bool = True) -> TxnResult:
        error = self.check_available(transactional_id)
        if error:
            return TxnResult(error)
        md = self.txns.get(transactional_id)
        if md is None:
            try:
                new_id = await self._generate_producer_id()
            except KafkaError as e:
                return TxnResult(e.code)
            error = self.check_available(transactional_id)
            if error:
                return TxnResult(error)
            md = self.txns.get(transactional_id)
            if md is None:
                md = TxnMetadata(transactional_id, new_id, txn_timeout_ms=timeout_ms,
                                 txn_last_update_timestamp=self.clock())
                self.txns[transactional_id] = md
        server_tv = self.transaction_version
        decision = await self._decide(lambda new_producer_id: core.init_producer_id(
            md, timeout_ms, expected, self.clock(), new_producer_id, server_tv,
            keep_prepared=keep_prepared))
        if decision.transit is None:
            if (wait and decision.error == Error.CONCURRENT_TRANSACTIONS
                    and await self._wait_for_completion(transactional_id)):
                return await self._init_producer_id(transactional_id, timeout_ms, expected,
                                                    principal, keep_prepared, wait=False)
            return TxnResult(decision.error)
        if decision.epoch_fence:
            # the ONGOING transaction is being aborted first; the client retries
            result = await self._end_prepared(transactional_id, md, decision, commit=False,
                                              client_tv=server_tv)
            return TxnResult(result.error or Error.CONCURRENT_TRANSACTIONS)
        transit = decision.transit
        if principal is not None:
            transit = dataclasses.replace(transit, principal=principal)
        error = await self._persist(transactional_id, md, transit)
        if error:
            return TxnResult(error)
        ongoing_id, ongoing_epoch = md.ongoing_transaction
        if ongoing_id != NO_PRODUCER_ID:
            log.info("kept the prepared transaction of %r (written by producer id %d epoch %d) "
                     "open under epoch %d%s", transactional_id, ongoing_id, ongoing_epoch,
                     md.producer_epoch, ", two-phase commit" if md.is_two_phase_commit else "")
        else:
            log.info("initialized transactional id %r with producer id %d epoch %d%s",
                     transactional_id, md.producer_id, md.producer_epoch,
                     ", two-phase commit" if md.is_two_phase_commit else "")
        return TxnResult(Error.NONE, md.producer_id, md.producer_epoch, ongoing_id,
                         ongoing_epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartition], *,
                             client_transaction_version: int = TV_0) -> Error:
        """Add partitions to the producer's transaction (starting it if needed)."""
        if not transactional_id:
            return Error.INVALID_REQUEST
        return await self._run(self._add_partitions(
            transactional_id, producer_id, producer_epoch, frozenset(partitions),
            client_transaction_version))

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          offsets_partition: int) -> Error:
        """AddOffsetsToTxn: add the group's ``__consumer_offsets`` partition (the handler
        knows which one: the group coordinator's ``partition_for(group_id)``)."""
        return await self.add_partitions(
            transactional_id, producer_id, producer_epoch,
            [TopicPartition("__consumer_offsets", offsets_partition)])

    async def _add_partitions(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, partitions: frozenset[TopicPartition],
                              client_tv: int, *, wait: bool = True) -> Error:
        error = self.check_available(transactional_id)
        if error:
            return error
        md = self.txns.get(transactional_id)
        if md is None:
            return Error.INVALID_PRODUCER_ID_MAPPING
        decision = core.add_partitions(md, producer_id, producer_epoch, partitions,
                                       self.clock(), client_tv)
        if decision.transit is None:
            if (wait and decision.error == Error.CONCURRENT_TRANSACTIONS
                    and await self._wait_for_completion(transactional_id)):
                return await self._add_partitions(transactional_id, producer_id,
                                                  producer_epoch, partitions, client_tv,
                                                  wait=False)
            return decision.error
        return await self._persist(transactional_id, md, decision.transit)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, Error]:
        """Partition verification (AddPartitionsToTxn verifyOnly, the produce path's check
        before a transactional append): NONE for partitions in the ongoing transaction,
        TRANSACTION_ABORTABLE for others, or one error for all."""
        partitions = list(partitions)
        if not transactional_id:
            return dict.fromkeys(partitions, Error.INVALID_REQUEST)
        error = self.check_available(transactional_id)
        if error:
            return dict.fromkeys(partitions, error)
        return core.verify_partitions(self.txns.get(transactional_id), producer_id,
                                      producer_epoch, partitions)

    # -- EndTxn ---------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, *, client_transaction_version: int = TV_0) -> TxnResult:
        """Commit or abort. Answers once PREPARE_* is durable; markers follow. Transaction
        version 2 answers with the producer id/epoch the client continues with."""
        if not transactional_id:
            return TxnResult(Error.INVALID_REQUEST)
        return await self._run(self._end_txn(transactional_id, producer_id, producer_epoch,
                                             commit, client_transaction_version))

    async def _end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       commit: bool, client_tv: int, *, wait: bool = True) -> TxnResult:
        error = self.check_available(transactional_id)
        if error:
            return TxnResult(error)
        md = self.txns.get(transactional_id)
        if md is None:
            return TxnResult(Error.INVALID_PRODUCER_ID_MAPPING)
        decision = await self._decide(lambda new_producer_id: core.end_txn(
            md, producer_id, producer_epoch, commit=commit, client_tv=client_tv,
            now_ms=self.clock(), new_producer_id=new_producer_id))
        if decision.transit is None:
            if (wait and decision.error == Error.CONCURRENT_TRANSACTIONS
                    and await self._wait_for_completion(transactional_id)):
                return await self._end_txn(transactional_id, producer_id, producer_epoch,
                                           commit, client_tv, wait=False)
            if decision.error == Error.NONE and supports_epoch_bump(client_tv):
                return TxnResult(Error.NONE, decision.producer_id, decision.producer_epoch)
            return TxnResult(decision.error)
        return await self._end_prepared(transactional_id, md, decision, commit, client_tv,
                                        producer_id, producer_epoch)

    async def _end_prepared(self, transactional_id: str, md: TxnMetadata, decision: Decision,
                            commit: bool, client_tv: int, producer_id: int | None = None,
                            producer_epoch: int | None = None) -> TxnResult:
        """Persist a PREPARE_* transit, then start writing markers and answer."""
        transit = decision.transit
        if producer_id is None:  # the coordinator's own abort: the transit's identity
            producer_id, producer_epoch = transit.producer_id, transit.producer_epoch
        error = await self._persist(transactional_id, md, transit)
        if error:
            if decision.epoch_fence and self.txns.get(transactional_id) is md:
                md.has_failed_epoch_fence = True
            return TxnResult(error)
        after = core.complete_after_prepare(md, producer_id, producer_epoch, commit,
                                            transit.client_transaction_version, self.clock())
        if after.transit is None:
            return TxnResult(after.error)
        self._start_completion(transactional_id, md, after.transit, commit)
        if supports_epoch_bump(client_tv):
            return TxnResult(Error.NONE, after.transit.producer_id,
                             after.transit.producer_epoch)
        return TxnResult(Error.NONE)

    # -- completion: markers, then COMPLETE_* ---------------------------------------------

    def _start_completion(self, transactional_id: str, md: TxnMetadata, complete: TxnTransit,
                          commit: bool) -> None:
        # the markers' first attempt is waited for from now on (not only once the task has
        # started: the answer to EndTxn may leave first), unless a test hook holds it
        waiters: list[asyncio.Future] | None = None
        if self.before_markers is None:
            waiters = self._completing[transactional_id] = []
        task = asyncio.get_running_loop().create_task(
            self._complete_transaction(transactional_id, md, complete, commit, waiters),
            name=f"semel-txn-complete-{transactional_id}")
        self._completions[transactional_id] = task

        def done(t: asyncio.Task) -> None:
            if self._completions.get(transactional_id) is t:
                del self._completions[transactional_id]
            if waiters is not None:  # also when cancelled before it ever ran
                self._settle(transactional_id, waiters)

        task.add_done_callback(done)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """Kafka's coordinator epoch: the leader epoch of the id's __transaction_state
        partition (constant on a single node)."""
        plog = self.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME,
                                              self._route(transactional_id)[0])
        return 0 if plog is None else plog.leader_epoch

    async def _complete_transaction(self, transactional_id: str, md: TxnMetadata,
                                    complete: TxnTransit, commit: bool,
                                    waiters: list[asyncio.Future] | None) -> None:
        """Markers to every partition (retried), then COMPLETE_* (``_complete_lazily``).
        Requests that find the id busy meanwhile wait for the markers' first attempt
        (``_wait_for_completion``; ``waiters``, registered by ``_start_completion``, or here
        after the ``before_markers`` test hook); they are let go once it is over, before a
        retry's pause and before the ``before_complete`` test hook."""
        backoff = self.config.retry_backoff_ms / 1000
        if waiters is None:
            if self.before_markers is not None:
                await self.before_markers(transactional_id, md)
            waiters = self._completing[transactional_id] = []
        try:
            coordinator_epoch = self.coordinator_epoch(transactional_id)
            producer_id, producer_epoch = md.producer_id, md.producer_epoch
            while md.topic_partitions:
                if not self._owns(transactional_id, md):
                    return
                partitions = frozenset(md.topic_partitions)
                try:
                    results = await self.write_markers(
                        transactional_id, producer_id, producer_epoch, coordinator_epoch,
                        commit, partitions, transaction_version=md.client_transaction_version)
                except Exception:
                    log.exception("writing markers of %r failed", transactional_id)
                    results = {}
                if not self._owns(transactional_id, md):
                    return
                retry = False
                for tp in partitions:
                    error = Error(results.get(tp, Error.REQUEST_TIMED_OUT))
                    if error in _MARKER_DONE:
                        if error:
                            log.info("no %s marker of %r for %s: %s", "COMMIT" if commit
                                     else "ABORT", transactional_id, tp, error.name)
                        md.remove_partition(tp)
                    else:
                        level = logging.INFO if error.retriable else logging.ERROR
                        log.log(level, "%s marker of %r for %s failed with %s; retrying",
                                "COMMIT" if commit else "ABORT", transactional_id, tp,
                                error.name)
                        retry = True
                if retry:
                    self._settle(transactional_id, waiters)
                    await asyncio.sleep(backoff)
            if self.before_complete is not None:
                self._settle(transactional_id, waiters)
                await self.before_complete(transactional_id, md)
            while self._owns(transactional_id, md) and md.pending_state == complete.state:
                written = self._complete_lazily(transactional_id, md, complete)
                self._settle(transactional_id, waiters)
                if written is not None:
                    log.debug("completed %s of %r", complete.state.name, transactional_id)
                    await self._until_durable(transactional_id, md, complete, *written)
                    return
                await asyncio.sleep(backoff)
        finally:
            self._settle(transactional_id, waiters)

    def _complete_lazily(self, transactional_id: str, md: TxnMetadata,
                         complete: TxnTransit) -> tuple[Any, int] | None:
        """Append COMPLETE_* and apply it at once, before it is durable; returns (partition
        log, offset to wait for), or None if the append failed (the id stays pending).

        Safe because COMPLETE_* only records that every marker is durable: until the record
        is, PREPARE_* is the id's last durable state, from which a restart sends the
        markers again (a partition takes a repeated marker as a no-op) and writes COMPLETE_*
        again. Anything the id does next is written after it in the same log and answered
        only once durable, so no answer ever rests on a COMPLETE_* a crash could undo; and
        the record's fsync joins the flush round of the next transaction's first write."""
        try:
            written = self._append(transactional_id, complete)
        except KafkaError as e:
            self._write_failed(transactional_id, md, complete, e, keep_pending=True)
            return None
        md.complete(complete)
        self._bind(md)
        return written

    async def _until_durable(self, transactional_id: str, md: TxnMetadata,
                             complete: TxnTransit, plog: Any, offset: int) -> None:
        """Wait for the lazily written COMPLETE_* to be durable. If its fsync failed (the log
        is cut back to its durable end) and the id has not moved on since, write it again;
        if it has, the later durable record holds the id's state."""
        backoff = self.config.retry_backoff_ms / 1000
        while True:
            if plog is not None:
                try:
                    await plog.wait_durable(offset)
                    return
                except KafkaError as e:
                    log.warning("%s of %r did not become durable: %s", complete.state.name,
                                transactional_id, e)
            await asyncio.sleep(backoff)
            if not (self._owns(transactional_id, md) and md.pending_state is None
                    and md.state == complete.state
                    and md.txn_last_update_timestamp == complete.txn_last_update_timestamp):
                return
            try:
                plog, offset = self._append(transactional_id, complete)
            except KafkaError as e:
                log.warning("writing %s of %r again failed: %s", complete.state.name,
                            transactional_id, e)
                plog = None

    def _settle(self, transactional_id: str, waiters: list[asyncio.Future]) -> None:
        """Let the requests waiting on this completion go (they decide again)."""
        if self._completing.get(transactional_id) is waiters:
            del self._completing[transactional_id]
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        waiters.clear()

    async def _wait_for_completion(self, transactional_id: str) -> bool:
        """A request answered CONCURRENT_TRANSACTIONS because the id's transaction is being
        completed waits here for the markers' first attempt (then the id is usually
        COMPLETE_* and the request goes through) instead of making the client back off and
        retry (librdkafka waits 20 ms). False if no completion is in that phase (held by a
        test hook, retrying, or none): answer at once, as Kafka does."""
        waiters = self._completing.get(transactional_id)
        if waiters is None:
            return False
        waiter = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        await waiter
        return True

    # -- timeouts and expiration ----------------------------------------------------------

    async def abort_timed_out_transactions(self) -> int:
        """Abort (and fence) every ONGOING transaction older than its timeout; returns how
        many aborts were started. Each abort answers like an EndTxn: once PREPARE_ABORT is
        durable, markers follow."""
        if not self.active:
            return 0
        now = self.clock()
        started = []
        for transactional_id, md in list(self.txns.items()):
            if self.check_available(transactional_id) or not core.timed_out(md, now):
                continue
            log.info("aborting transaction of %r (producer id %d epoch %d): older than its "
                     "timeout of %d ms", transactional_id, md.producer_id, md.producer_epoch,
                     md.txn_timeout_ms)
            started.append(self._run(self._abort_timed_out(transactional_id, md)))
        await asyncio.gather(*started)
        return len(started)

    async def _check_timeouts(self) -> None:
        await self.abort_timed_out_transactions()
        self.log_overdue_two_phase_commits()

    def open_two_phase_commits(self) -> list[tuple[str, TxnMetadata]]:
        """The ONGOING KIP-939 transactions (the reaper never ends them), oldest first."""
        found = [(transactional_id, md) for transactional_id, md in self.txns.items()
                 if md.state == S.ONGOING and md.is_two_phase_commit]
        return sorted(found, key=lambda item: item[1].txn_start_timestamp)

    def log_overdue_two_phase_commits(self) -> int:
        """Log (once each) the two-phase commit transactions open longer than
        ``two_phase_commit_warn_age_ms``; returns how many are overdue."""
        now = self.clock()
        overdue = 0
        seen = set()
        for transactional_id, md in self.open_two_phase_commits():
            age = now - md.txn_start_timestamp
            if age <= self.config.two_phase_commit_warn_age_ms:
                break
            overdue += 1
            key = (transactional_id, md.producer_id, md.txn_start_timestamp)
            seen.add(key)
            if key not in self._overdue_logged:
                ongoing_id, ongoing_epoch = md.ongoing_transaction
                log.warning("two-phase commit transaction of %r (producer id %d epoch %d) open "
                            "for %d s, longer than transaction.two.phase.commit.warn.age.ms: "
                            "the coordinator never aborts it; its transaction manager must "
                            "complete it, or an admin terminate it (read_committed readers of "
                            "its partitions wait until then)", transactional_id, ongoing_id,
                            ongoing_epoch, age // 1000)
        self._overdue_logged = seen
        return overdue

    async def _abort_timed_out(self, transactional_id: str, md: TxnMetadata) -> TxnResult:
        server_tv = self.transaction_version
        decision = await self._decide(lambda new_producer_id: core.abort_timed_out(
            md, self.clock(), server_tv, new_producer_id))
        if decision.transit is None:
            return TxnResult(decision.error)
        result = await self._end_prepared(transactional_id, md, decision, commit=False,
                                          client_tv=server_tv)
        if result.error:
            log.warning("abort of the timed-out transaction of %r failed: %s",
                        transactional_id, result.error.name)
        return result

    async def remove_expired_transactional_ids(self) -> int:
        """Forget transactional ids not used for ``transactional.id.expiration.ms`` (only
        EMPTY / COMPLETE_*): a tombstone per id, then removal. Returns how many."""
        if not self.active:
            return 0
        now = self.clock()
        by_partition: dict[int, list[tuple[str, TxnMetadata, TxnTransit]]] = {}
        for transactional_id, md in list(self.txns.items()):
            if self.check_available(transactional_id):
                continue
            if core.expired(md, now, self.config.transactional_id_expiration_ms):
                by_partition.setdefault(self.partition_for(transactional_id), []).append(
                    (transactional_id, md, md.prepare_dead()))
        if not by_partition:
            return 0
        removed = await asyncio.gather(*(
            self._run(self._write_tombstones(partition, chunk))
            for partition, entries in by_partition.items()
            for chunk in _chunks(entries, _TOMBSTONE_BATCH_BYTES)))
        return sum(removed)

    async def _write_tombstones(self, partition: int,
                                entries: list[tuple[str, TxnMetadata, TxnTransit]]) -> int:
        plog = None
        if not self.ensure_topic():
            plog = self.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition)
        ok = False
        if plog is not None:
            now = self.clock()
            batch = build_batch([(encode_key(tid), None, None, now) for tid, _, _ in entries])
            try:
                result = plog.append(bytearray(batch), origin="coordinator")
                await plog.wait_durable(result.next_offset)
                ok = True
            except KafkaError as e:
                log.warning("writing tombstones to %s-%d failed: %s",
                            TRANSACTION_STATE_TOPIC_NAME, partition, e)
        removed = 0
        for transactional_id, md, transit in entries:
            if (ok and self.txns.get(transactional_id) is md and md.pending_state == S.DEAD
                    and md.producer_epoch == transit.producer_epoch):
                del self.txns[transactional_id]
                self._routes.pop(transactional_id, None)
                if self.principals is not None and md.principal is not None:
                    self.principals.unbind(
                        (md.producer_id, md.prev_producer_id, md.next_producer_id),
                        md.principal)
                removed += 1
                log.info("transactional id %r expired", transactional_id)
            elif md.pending_state == S.DEAD:
                md.pending_state = None
        return removed

    # -- admin ----------------------------------------------------------------------------

    def describe(self, transactional_id: str) -> TxnDescription:
        if not self.active:
            return TxnDescription(transactional_id, Error.COORDINATOR_NOT_AVAILABLE)
        if not transactional_id:
            return TxnDescription(transactional_id, Error.INVALID_REQUEST)
        error = self.check_available(transactional_id)
        if error:
            return TxnDescription(transactional_id, error)
        md = self.txns.get(transactional_id)
        if md is None or md.state == S.DEAD:
            return TxnDescription(transactional_id, Error.TRANSACTIONAL_ID_NOT_FOUND)
        partitions: dict[str, list[int]] = {}
        for tp in sorted(md.topic_partitions):
            partitions.setdefault(tp.topic, []).append(tp.partition)
        return TxnDescription(transactional_id, Error.NONE, md.state.state_name,
                              md.producer_id, md.producer_epoch, md.txn_timeout_ms,
                              md.txn_start_timestamp, partitions)

    def list_transactions(self, state_filters: Iterable[str] = (),
                          producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1,
                          transactional_id_pattern: str | None = None) -> TxnListing:
        """ListTransactions: every id (never DEAD ones) matching all filters: states by
        name (unknown names are reported back), producer ids, open longer than
        ``duration_filter_ms`` (>= 0), transactional id matching the regular expression."""
        if not self.active:
            return TxnListing(Error.COORDINATOR_NOT_AVAILABLE)
        if self.loading:
            return TxnListing(Error.COORDINATOR_LOAD_IN_PROGRESS)
        state_names = list(state_filters)
        states = {TransactionState.from_name(name) for name in state_names} - {None}
        unknown = [name for name in state_names if TransactionState.from_name(name) is None]
        producer_ids = set(producer_id_filters)
        pattern = None
        if transactional_id_pattern:
            try:
                pattern = re.compile(transactional_id_pattern)
            except re.error:
                return TxnListing(Error.INVALID_REGULAR_EXPRESSION)
        now = self.clock()
        rows = []
        for transactional_id, md in sorted(self.txns.items()):
            if md.state == S.DEAD:
                continue
            if producer_ids and md.producer_id not in producer_ids:
                continue
            if state_names and md.state not in states:
                continue
            if duration_filter_ms >= 0 and now - md.txn_start_timestamp <= duration_filter_ms:
                continue
            if pattern is not None and not pattern.fullmatch(transactional_id):
                continue
            rows.append((transactional_id, md.producer_id, md.state.state_name))
        return TxnListing(Error.NONE, rows, unknown)

    # -- loading --------------------------------------------------------------------------

    async def _load_all(self) -> None:
        started = self.clock()
        for partition in sorted(self.loading):
            plog = self.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, partition)
            loaded: dict[str, TxnMetadata] = {}
            if plog is not None:
                await self._load_partition(partition, plog, loaded)
            self.txns.update(loaded)
            self.loading.discard(partition)
            for md in loaded.values():
                self._bind(md)
            for transactional_id, md in loaded.items():
                if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    log.info("completing the %s transaction of %r found at start",
                             md.state.name, transactional_id)
                    self._start_completion(transactional_id, md,
                                           md.prepare_complete(self.clock()),
                                           md.state == S.PREPARE_COMMIT)
        log.info("loaded %d transactional ids from %s in %d ms", len(self.txns),
                 TRANSACTION_STATE_TOPIC_NAME, self.clock() - started)

    async def _load_partition(self, partition: int, plog,
                              loaded: dict[str, TxnMetadata]) -> None:
        name = f"{TRANSACTION_STATE_TOPIC_NAME}-{partition}"
        async for _header, records in batches_to_load(plog, plog.log_end_offset, name, log):
            for record in records:
                try:
                    transactional_id = decode_key(record.key or b"")
                    if record.value is None:
                        loaded.pop(transactional_id, None)
                        continue
                    loaded[transactional_id] = metadata_from_value(
                        transactional_id, decode_value(record.value))
                except (UnknownKeyVersion, UnknownValueVersion) as e:
                    log.warning("%s offset %d: %s; ignored", name, record.offset, e)
                except ProtocolError as e:
                    log.error("%s: unreadable record at %d skipped: %s", name, record.offset, e)


__all__ = ["TransactionCoordinator", "TxnDescription", "TxnListing", "TxnResult",
           "WriteMarkers"]
