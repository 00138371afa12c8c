"""Producer state of one partition: Kafka's ProducerStateManager, ProducerAppendInfo,
ProducerStateEntry and BatchMetadata, and the `%020d.snapshot` files that persist it.

Per producer id: the epoch, the last five batches (last sequence, last offset, offset delta,
max timestamp: the duplicate window), the coordinator epoch of the last marker, the first
offset of the ongoing transaction (-1: none) and the last timestamp (for expiry). Ongoing
transactions are kept in first-offset order; the first of them, or of the completed ones
whose marker the high watermark has not passed yet, is the first unstable offset.

An append is staged: `prepare_update` gives a ProducerAppendInfo that validates each batch
against the current entry and accumulates the new one; `update` applies it only after the
log write succeeded, so a failed write changes nothing.

Snapshot file, named by the offset up to which it covers the log (the map end offset);
Kafka's version 1 layout, big-endian:
    version     int16   1
    crc         uint32  CRC32C of every byte after this field
    count       int32   number of entries
    entries     count x 46 bytes:
        producer_id int64, producer_epoch int16, last_sequence int32, last_offset int64,
        offset_delta int32, timestamp int64, coordinator_epoch int32,
        current_txn_first_offset int64 (-1 when no transaction is ongoing)
Kafka writes one entry per producer (its newest batch; last_offset -1 when it has none).
semel writes one entry per retained batch, oldest first, so the five-batch duplicate window
survives a restart; the last entry of a producer id is exactly the entry Kafka would write
(its timestamp is the producer's last timestamp), and Kafka, which keeps the last entry it
reads for a producer id, loads such a file as its own. Files are written in place (a torn
one fails its CRC and is ignored); the two newest are kept.

Threading: everything runs on the event loop, except loading at start-up (executor thread,
before the partition serves anything).
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from semel.protocol.errors import Error, KafkaError
from semel.storage.fs import RealFileSystem
from semel.storage.segment import SNAPSHOT_SUFFIX, parse_segment_file_name, segment_file_name
from semel.storage.topic_partition import TopicPartition

log = logging.getLogger("storage.producer_state")

NUM_BATCHES_TO_RETAIN = 5
PRODUCER_SNAPSHOT_VERSION = 1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_OFFSET = -1
INT32_MAX = 2**31 - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
ORIGIN_CLIENT = "client"
ORIGIN_COORDINATOR = "coordinator"
ORIGIN_REPLICATION = "replication"  # recovery replays the log as Kafka's followers do

_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = 6  # the CRC covers everything from here


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be trusted (version, length, CRC)."""


def decrement_sequence(sequence: int, decrement: int) -> int:
    """`sequence - decrement`, wrapping below 0 to 2^31-1 as Kafka's sequences do."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def out_of_order_sequence(
    producer_id: int, offset: int, topic_partition: TopicPartition, first_seq: int, last_seq: int
) -> KafkaError:
    return KafkaError(
        Error.OUT_OF_ORDER_SEQUENCE_NUMBER,
        f"Out of order sequence number for producer {producer_id} at offset {offset} in "
        f"partition {topic_partition}: {first_seq} (incoming seq. number), {last_seq} "
        "(current end sequence number)",
    )


class BatchMetadata:
    """One appended batch of a producer: what a duplicate of it is answered with."""

    __slots__ = ("last_offset", "last_seq", "offset_delta", "timestamp")

    def __init__(self, last_seq: int, last_offset: int, offset_delta: int, timestamp: int):
        self.last_seq = last_seq
        self.last_offset = last_offset
        self.offset_delta = offset_delta
        self.timestamp = timestamp

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BatchMetadata) and (
            self.last_seq,
            self.last_offset,
            self.offset_delta,
            self.timestamp,
        ) == (other.last_seq, other.last_offset, other.offset_delta, other.timestamp)

    def __repr__(self) -> str:
        return (
            f"BatchMetadata(seq={self.first_seq}..{self.last_seq}, "
            f"offsets={self.first_offset}..{self.last_offset}, timestamp={self.timestamp})"
        )


class ProducerStateEntry:
    """What one partition knows of one producer id."""

    __slots__ = (
        "batch_metadata",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int = NO_OFFSET,
        batches: Iterable[BatchMetadata] = (),
    ):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(batches, NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else NO_OFFSET

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else NO_OFFSET

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """A new epoch forgets the batches of the old one."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def add_batch(
        self,
        producer_epoch: int,
        last_seq: int,
        last_offset: int,
        offset_delta: int,
        timestamp: int,
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, nxt: ProducerStateEntry) -> None:
        """Apply a staged entry (Kafka's ProducerStateEntry.update)."""
        self.maybe_update_producer_epoch(nxt.producer_epoch)
        self.batch_metadata.extend(nxt.batch_metadata)  # the deque drops the oldest beyond 5
        self.coordinator_epoch = nxt.coordinator_epoch
        self.current_txn_first_offset = nxt.current_txn_first_offset
        self.last_timestamp = nxt.last_timestamp

    def find_duplicate_batch(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The retained batch with exactly this epoch and sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self.batch_metadata:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def transaction_ended_after(self, batch: BatchMetadata) -> bool:
        """Whether the transaction `batch` was written in (if any) has its marker already:
        no transaction is ongoing here, or the ongoing one started after `batch`."""
        ongoing = self.current_txn_first_offset
        return ongoing == NO_OFFSET or ongoing > batch.first_offset

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, "
            f"producer_epoch={self.producer_epoch}, "
            f"current_txn_first_offset={self.current_txn_first_offset}, "
            f"coordinator_epoch={self.coordinator_epoch}, last_timestamp={self.last_timestamp}, "
            f"batch_metadata={list(self.batch_metadata)})"
        )


@dataclass(slots=True)
class TxnMetadata:
    """A transaction on this partition: from its first data offset to its marker."""

    producer_id: int
    first_offset: int
    last_offset: int = NO_OFFSET  # the marker's offset once completed


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # offset of the marker
    is_aborted: bool


class ProducerAppendInfo:
    """Validates the batches of one producer in one append against its current state and
    accumulates the updated state (Kafka's ProducerAppendInfo). Raises KafkaError with
    Kafka's codes; origin "replication" (recovery) validates nothing but epochs, leniently.
    """

    __slots__ = (
        "current_entry",
        "origin",
        "producer_id",
        "started_transactions",
        "topic_partition",
        "updated_entry",
    )

    def __init__(
        self,
        topic_partition: TopicPartition,
        producer_id: int,
        current_entry: ProducerStateEntry,
        origin: str,
    ):
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current_entry = current_entry
        self.origin = origin
        self.started_transactions: list[TxnMetadata] = []
        # the staged entry starts without batches: they are appended to the current
        # entry's window when the update is applied
        self.updated_entry = ProducerStateEntry(
            producer_id,
            current_entry.producer_epoch,
            current_entry.coordinator_epoch,
            current_entry.last_timestamp,
            current_entry.current_txn_first_offset,
        )

    def _check_producer_epoch(
        self, producer_epoch: int, offset: int, transaction_version: int = 0
    ) -> None:
        current = self.updated_entry.producer_epoch
        # transaction version 2 markers carry an epoch bumped past the data's
        invalid = (
            producer_epoch <= current if transaction_version >= 2 else producer_epoch < current
        )
        if not invalid:
            return
        if (
            transaction_version >= 2
            and producer_epoch == current
            and self.updated_entry.current_txn_first_offset == NO_OFFSET
        ):
            return  # a retried marker of a transaction that already ended (KAFKA-19999)
        comparison = "<=" if transaction_version >= 2 else "<"
        message = (
            f"Epoch of producer {self.producer_id} at offset {offset} in "
            f"{self.topic_partition} is {producer_epoch}, which is {comparison} the last seen "
            f"epoch {current}"
        )
        if self.origin == ORIGIN_REPLICATION:
            log.warning(message)
            return
        # since Kafka 2.7 a stale epoch is INVALID_PRODUCER_EPOCH (abortable), not fenced
        raise KafkaError(Error.INVALID_PRODUCER_EPOCH, message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated = self.updated_entry
        if producer_epoch != updated.producer_epoch:
            # a new epoch starts at 0; an unknown producer (no epoch: never seen, expired,
            # or its data deleted) may start anywhere, as in Kafka since KIP-360
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    Error.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at "
                    f"offset {offset} in partition {self.topic_partition}: {producer_epoch} "
                    f"(request epoch), {first_seq} (seq. number), {updated.producer_epoch} "
                    "(current producer epoch)",
                )
            return
        current = self.current_entry
        if updated.batch_metadata:
            current_last_seq = updated.batch_metadata[-1].last_seq
        elif producer_epoch == current.producer_epoch:
            current_last_seq = current.last_seq
        else:
            current_last_seq = NO_SEQUENCE
        # no epoch known (all of the producer's data deleted): any sequence is accepted
        if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(
            current_last_seq, first_seq
        ):
            raise out_of_order_sequence(
                self.producer_id, offset, self.topic_partition, first_seq, current_last_seq
            )

    def append_data_batch(
        self,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        self._check_producer_epoch(producer_epoch, first_offset)
        if self.origin == ORIGIN_CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        updated = self.updated_entry
        updated.add_batch(
            producer_epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp
        )
        ongoing = updated.current_txn_first_offset != NO_OFFSET
        if ongoing and not is_transactional:
            raise KafkaError(
                Error.INVALID_TXN_STATE,
                f"Expected transactional write from producer {self.producer_id} at offset "
                f"{first_offset} in partition {self.topic_partition}",
            )
        if not ongoing and is_transactional:
            updated.current_txn_first_offset = first_offset
            self.started_transactions.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(
        self,
        is_commit: bool,
        coordinator_epoch: int,
        producer_epoch: int,
        offset: int,
        timestamp: int,
        transaction_version: int = 0,
    ) -> CompletedTxn | None:
        """A COMMIT/ABORT marker at `offset`; the transaction it ends, if it had data here."""
        self._check_producer_epoch(producer_epoch, offset, transaction_version)
        updated = self.updated_entry
        if updated.coordinator_epoch > coordinator_epoch:
            message = (
                f"Invalid coordinator epoch for producerId {self.producer_id} at offset "
                f"{offset} in partition {self.topic_partition}: {coordinator_epoch} (zombie), "
                f"{updated.coordinator_epoch} (current)"
            )
            if self.origin != ORIGIN_REPLICATION:
                raise KafkaError(Error.TRANSACTION_COORDINATOR_FENCED, message)
            log.info(message)
        completed = None
        if updated.current_txn_first_offset != NO_OFFSET:
            completed = CompletedTxn(
                self.producer_id, updated.current_txn_first_offset, offset, not is_commit
            )
        updated.maybe_update_producer_epoch(producer_epoch)  # the window stays otherwise
        updated.coordinator_epoch = coordinator_epoch
        updated.current_txn_first_offset = NO_OFFSET
        updated.last_timestamp = timestamp
        return completed

    def __repr__(self) -> str:
        u = self.updated_entry
        return (
            f"ProducerAppendInfo(producer_id={self.producer_id}, producer_epoch="
            f"{u.producer_epoch}, first_seq={u.first_seq}, last_seq={u.last_seq}, "
            f"current_txn_first_offset={u.current_txn_first_offset}, started_transactions="
            f"{self.started_transactions})"
        )


class ProducerStateManager:
    """Producer ids -> ProducerStateEntry for one partition, ongoing transactions, snapshots.

    `map_end_offset`: the state covers every batch below it. `clock` gives milliseconds for
    expiry (a producer with no ongoing transaction whose last timestamp is at least
    `producer_id_expiration_ms` old is forgotten).
    """

    def __init__(
        self,
        topic_partition: TopicPartition,
        directory: str,
        fs: RealFileSystem,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        clock: Callable[[], int],
    ):
        self.topic_partition = topic_partition
        self.dir = directory
        self.fs = fs
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.clock = clock
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> transaction; appends arrive in offset order, so insertion order is
        # first-offset order (loading sorts before inserting)
        self.ongoing_txns: dict[int, TxnMetadata] = {}
        # completed, but the marker is not below the high watermark yet
        self.unreplicated_txns: dict[int, TxnMetadata] = {}
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self.snapshots: dict[int, str] = self._list_snapshots()

    # -- queries -----------------------------------------------------------------------------

    @property
    def producer_id_count(self) -> int:
        """Live producer ids (the metric Kafka calls ProducerIdCount)."""
        return len(self.producers)

    @property
    def is_empty(self) -> bool:
        return not self.producers and not self.unreplicated_txns

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def first_unstable_offset(self) -> int | None:
        """The first offset of an undecided transaction, or of a decided one whose marker
        is not below the high watermark yet; None when every transaction is stable."""
        ongoing = self.ongoing_txns
        unreplicated = self.unreplicated_txns
        if not ongoing and not unreplicated:
            return None
        first = next(iter(ongoing)) if ongoing else None
        if unreplicated:
            oldest = min(unreplicated)
            first = oldest if first is None else min(first, oldest)
        return first

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Kafka's UnifiedLog.hasOngoingTransaction: the producer, in this epoch, has a
        transaction open on this partition (its later batches need no verification)."""
        entry = self.producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset != NO_OFFSET
            and entry.producer_epoch == producer_epoch
        )

    def first_undecided_offset(self) -> int | None:
        return next(iter(self.ongoing_txns)) if self.ongoing_txns else None

    # -- appends -----------------------------------------------------------------------------

    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        current = self.producers.get(producer_id)
        if current is None:
            current = ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self.topic_partition, producer_id, current, origin)

    def prepare_in_sequence_append(
        self,
        entry: ProducerStateEntry,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        timestamp: int,
        first_offset: int,
        last_offset: int,
    ) -> BatchMetadata | None:
        """The produce path's common case without staging objects: a client's
        non-transactional batch that continues a known producer's sequence in its current
        epoch (so it cannot be a duplicate either). Returns the batch for
        `apply_in_sequence_append`; None for everything else, which `prepare_update` and
        `append_data_batch` decide (duplicates, errors, new epochs, transactions)."""
        batches = entry.batch_metadata
        if (
            entry.producer_epoch != producer_epoch
            or entry.current_txn_first_offset != NO_OFFSET
            or not batches
        ):
            return None
        last = batches[-1].last_seq
        if first_seq != last + 1 and not (first_seq == 0 and last == INT32_MAX):
            return None
        return BatchMetadata(last_seq, last_offset, last_offset - first_offset, timestamp)

    @staticmethod
    def apply_in_sequence_append(entry: ProducerStateEntry, batch: BatchMetadata) -> None:
        entry.batch_metadata.append(batch)
        entry.last_timestamp = batch.timestamp

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a staged append (after the log write succeeded)."""
        producer_id = append_info.producer_id
        if producer_id < 0:
            raise ValueError(f"invalid producer id {producer_id} for {self.topic_partition}")
        updated = append_info.updated_entry
        current = self.producers.get(producer_id)
        if current is not None:
            current.update(updated)
        else:
            self.producers[producer_id] = updated
        ongoing = self.ongoing_txns
        for txn in append_info.started_transactions:
            out_of_order = bool(ongoing) and next(reversed(ongoing)) > txn.first_offset
            ongoing[txn.first_offset] = txn
            if out_of_order:  # staged updates of several producers applied together
                self.ongoing_txns = dict(sorted(ongoing.items()))
                ongoing = self.ongoing_txns

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once `completed` is done (for the transaction index entry), before
        `complete_txn` marks it."""
        for txn in self.ongoing_txns.values():
            if txn.producer_id != completed.producer_id:
                return txn.first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        txn = self.ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(
                f"attempted to complete transaction {completed} on partition "
                f"{self.topic_partition} which was not started"
            )
        txn.last_offset = completed.last_offset
        self.unreplicated_txns[completed.first_offset] = txn

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark are stable."""
        self._remove_unreplicated_transactions(high_watermark)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self._remove_unreplicated_transactions(log_start_offset)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset()
        self.last_snap_offset = log_start_offset if latest is None else latest

    def _remove_unreplicated_transactions(self, offset: int) -> None:
        txns = self.unreplicated_txns
        if txns:
            for first in [f for f, t in txns.items() if t.last_offset < offset]:
                del txns[first]

    # -- expiry ------------------------------------------------------------------------------

    def is_producer_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return (
            entry.current_txn_first_offset == NO_OFFSET
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget idle producers; returns how many."""
        expired = [
            pid for pid, entry in self.producers.items() if self.is_producer_expired(now_ms, entry)
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # -- truncation and loading ---------------------------------------------------------------

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything and delete every snapshot (the log restarts at `offset`)."""
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()
        for snapshot_offset in list(self.snapshots):
            self._delete_snapshot(snapshot_offset)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int) -> None:
        """Drop snapshots outside (log_start_offset, log_end_offset]; unless the state
        already ends at `log_end_offset`, reload it from the newest valid snapshot left
        (the caller replays the log from `map_end_offset`)."""
        for offset in list(self.snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self.ongoing_txns.clear()
            self.unreplicated_txns.clear()
            self._load_from_snapshot(log_start_offset)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int) -> None:
        while self.snapshots:
            offset = max(self.snapshots)
            path = self.snapshots[offset]
            try:
                entries = read_snapshot(self.fs.read_file(path))
            except (CorruptSnapshotError, OSError) as exc:
                log.warning(
                    "%s: ignoring producer snapshot %s: %s", self.topic_partition, path, exc
                )
                self._delete_snapshot(offset)
                continue
            now = self.clock()
            for entry in sorted(entries, key=lambda e: e.current_txn_first_offset):
                if not self.is_producer_expired(now, entry):
                    self.load_producer_entry(entry)
            self.last_snap_offset = self.map_end_offset = offset
            log.info(
                "%s: loaded producer state from snapshot %s (%d producer ids)",
                self.topic_partition,
                os.path.basename(path),
                len(self.producers),
            )
            return
        self.last_snap_offset = self.map_end_offset = log_start_offset

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset != NO_OFFSET:
            first = entry.current_txn_first_offset
            self.ongoing_txns[first] = TxnMetadata(entry.producer_id, first)

    # -- snapshots ---------------------------------------------------------------------------

    def _list_snapshots(self) -> dict[int, str]:
        found = {}
        if not self.fs.exists(self.dir):
            return found
        for name in self.fs.listdir(self.dir):
            parsed = parse_segment_file_name(name)
            if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX:
                found[parsed[0]] = os.path.join(self.dir, name)
        return dict(sorted(found.items()))

    def latest_snapshot_offset(self) -> int | None:
        return max(self.snapshots) if self.snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return min(self.snapshots) if self.snapshots else None

    def take_snapshot(self, *, sync: bool = False, keep: int = 2) -> str | None:
        """Write a snapshot at `map_end_offset` unless one covers it already; returns its
        path (fsync it, and the directory, unless `sync`). Keeps the `keep` newest."""
        if self.map_end_offset <= self.last_snap_offset:
            return None
        offset = self.map_end_offset
        path = os.path.join(self.dir, segment_file_name(offset, SNAPSHOT_SUFFIX))
        data = encode_snapshot(self.producers.values())
        handle = self.fs.open(path)
        try:
            handle.truncate(0)
            handle.pwrite(data, 0)
            if sync:
                handle.fsync()
        finally:
            handle.close()
        if sync:
            self.fs.fsync_dir(self.dir)
        self.snapshots[offset] = path
        self.last_snap_offset = offset
        log.debug(
            "%s: wrote producer snapshot at offset %d with %d producer ids",
            self.topic_partition,
            offset,
            len(self.producers),
        )
        for old in sorted(self.snapshots)[:-keep]:
            self._delete_snapshot(old)
        return path

    def delete_snapshots_after(self, offset: int) -> None:
        """Forget snapshots past `offset` (the state must be replayed from there)."""
        for snapshot_offset in [o for o in self.snapshots if o > offset]:
            self._delete_snapshot(snapshot_offset)

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot_offset in [o for o in self.snapshots if o < offset]:
            self._delete_snapshot(snapshot_offset)

    def remove_and_mark_snapshot_for_deletion(self, offset: int, suffix: str) -> str | None:
        """Rename the snapshot at `offset` to `<name><suffix>` (its segment is being
        deleted); returns the new path, or None if there is none."""
        path = self.snapshots.pop(offset, None)
        if path is None:
            return None
        try:
            self.fs.rename(path, path + suffix)
        except FileNotFoundError:
            return None
        return path + suffix

    def _delete_snapshot(self, offset: int) -> None:
        path = self.snapshots.pop(offset, None)
        if path is None:
            return
        try:
            self.fs.remove(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error(
                "%s: could not delete producer snapshot %s: %s", self.topic_partition, path, exc
            )


# -- snapshot encoding --------------------------------------------------------------------------


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's version 1 snapshot of `entries` (one entry per retained batch, see above)."""
    pack = _SNAPSHOT_ENTRY.pack
    parts: list[bytes] = []
    for e in entries:
        pid, epoch, coord, txn = (
            e.producer_id,
            e.producer_epoch,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        batches = e.batch_metadata
        if not batches:
            parts.append(pack(pid, epoch, NO_SEQUENCE, NO_OFFSET, 0, e.last_timestamp, coord, txn))
            continue
        last = len(batches) - 1
        for i, b in enumerate(batches):
            timestamp = e.last_timestamp if i == last else b.timestamp
            parts.append(
                pack(pid, epoch, b.last_seq, b.last_offset, b.offset_delta, timestamp, coord, txn)
            )
    from crc32c import crc32c  # here: importing crc32c reads package metadata (start-up time)

    body = struct.pack(">i", len(parts)) + b"".join(parts)
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c(body)) + body


def read_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The producer entries of a snapshot file; raises CorruptSnapshotError."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is too short")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    from crc32c import crc32c  # here: importing crc32c reads package metadata (start-up time)

    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
            f"Computed crc: {computed}"
        )
    if count < 0 or len(data) != _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries")
    entries: dict[int, ProducerStateEntry] = {}
    for fields in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEADER.size :]):
        pid, epoch, last_seq, last_offset, offset_delta, timestamp, coord, txn = fields
        entry = entries.get(pid)
        if entry is None or entry.producer_epoch != epoch:
            # a producer's entries share one epoch; anything else restarts it, as Kafka's
            # last-entry-wins reading would
            entry = entries[pid] = ProducerStateEntry(pid, epoch)
        entry.coordinator_epoch = coord
        entry.last_timestamp = timestamp
        entry.current_txn_first_offset = txn if txn >= 0 else NO_OFFSET
        if last_offset >= 0:
            entry.batch_metadata.append(
                BatchMetadata(last_seq, last_offset, offset_delta, timestamp)
            )
        else:
            entry.batch_metadata.clear()
    return list(entries.values())


__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "CorruptSnapshotError",
    "ProducerAppendInfo",
    "ProducerStateEntry",
    "ProducerStateManager",
    "TxnMetadata",
    "decrement_sequence",
    "encode_snapshot",
    "in_sequence",
    "read_snapshot",
]
