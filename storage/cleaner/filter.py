"""Which batches and records of a compacted partition's cleanable range survive a cleaning:
Kafka's LogCleaner (buildOffsetMap, cleanInto with its RecordFilter) and its
CleanedTransactionMetadata, over batches as bytes.

A cleaning runs over the log from its start to the cleanable end (never at or past the last
stable offset nor into the active segment; the caller picks it), in two steps:

1. ``build_offset_map`` reads the dirty range (from the cleaner checkpoint up) and records
   each key's latest offset, skipping control batches and the data of aborted transactions;
   when the map is full it stops, and this round cleans up to the last offset it holds.
2. ``BatchFilter.filter`` decides each batch of [log start, map's latest offset]:
   - data of an aborted transaction (per the aborted-transaction index) is removed;
   - a record survives if its offset is past the map's latest, or it is its key's latest
     (records without a key do not survive, as in Kafka); a tombstone survives until its
     batch's delete horizon has passed;
   - a COMMIT marker may go once no batch of its transaction is left; an ABORT marker once
     none of the aborted data is left (a reader must never meet aborted data without its
     marker): the first cleaning that finds it removable stamps its batch with a delete
     horizon (now + ``delete.retention.ms``, KIP-534's flag and base timestamp), a cleaning
     after that horizon removes it - Kafka's two passes, so a consumer part way through an
     aborted transaction still finds the marker;
   - a batch left without records is dropped, unless it is the last batch of an active
     producer: then its header is kept, empty, so the producer's last sequence survives and
     the idempotent producer goes on without OUT_OF_ORDER_SEQUENCE_NUMBER;
   - an unchanged batch is kept byte for byte; a changed one is rebuilt
     (``protocol.records.rebuild_batch``) with its base offset, last offset delta, producer
     fields and codec, every kept record at its offset.
   The aborted transactions whose data remains are listed for the cleaned ``.txnindex``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from semel.protocol.records import (
    COMPRESSION_MASK,
    DELETE_HORIZON_MASK,
    HEADER,
    BatchHeader,
    ControlType,
    batch_records_data,
    control_key_type,
    rebuild_batch,
    record_spans,
)
from semel.storage.cleaner.offset_map import OffsetMap
from semel.storage.transaction_index import AbortedTxn

Batch = tuple[bytes | bytearray | memoryview, BatchHeader]


def control_type(buf, header: BatchHeader) -> int:
    """The control record type of a control batch (COMMIT, ABORT, ...); -1 if unreadable."""
    return _control_kind(record_spans(batch_records_data(buf, header), header.record_count))


def _control_kind(spans: list) -> int:
    return control_key_type(spans[0].key) if spans else -1


class TransactionTracker:
    """Kafka's CleanedTransactionMetadata: which transactional batches a pass meets belong to
    aborted transactions, and whether a marker may be removed."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        # producer id -> [its aborted transaction now open, last offset of a batch of it seen]
        self._aborted: dict[int, list] = {}
        self._committed: set[int] = set()
        self.kept_aborted: list[AbortedTxn] = []  # for the cleaned .txnindex

    def _open_up_to(self, header: BatchHeader) -> None:
        """Open the aborted transactions begun by the end of this batch, except those whose
        marker lies before it: a pass that starts part way through the log (the offset map
        reads the dirty range only) never meets those markers, and their producers' later
        data is not aborted."""
        pending = self._pending
        while pending and pending[0].first_offset <= header.last_offset:
            txn = pending.popleft()
            if txn.last_offset >= header.base_offset:
                self._aborted[txn.producer_id] = [txn, None]

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch is read: True if it belongs to an aborted transaction."""
        self._open_up_to(header)
        if not header.is_transactional:
            return False
        open_abort = self._aborted.get(header.producer_id)
        if open_abort is not None:
            open_abort[1] = header.last_offset
            return True
        self._committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, kind: int) -> bool:
        """A control batch is read: True if the marker may be removed (nothing of its
        transaction was met in this pass)."""
        self._open_up_to(header)
        pid = header.producer_id
        if kind == ControlType.ABORT:
            open_abort = self._aborted.pop(pid, None)
            if open_abort is not None and open_abort[1] is not None:
                self.kept_aborted.append(open_abort[0])
                return False
            return True
        if kind == ControlType.COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False


def build_offset_map(batches: Iterable[Batch], aborted: Iterable[AbortedTxn], start: int,
                     offset_map: OffsetMap) -> bool:
    """Fill ``offset_map`` with the latest offset of each key from offset ``start`` on.
    True when it filled up before the end (the round ends at its latest offset)."""
    tracker = TransactionTracker(aborted)
    for buf, header in batches:
        if header.is_control:
            tracker.on_marker(header, control_type(buf, header))
            continue
        if tracker.on_batch(header) or header.last_offset < start:
            continue
        base = header.base_offset
        for span in record_spans(batch_records_data(buf, header), header.record_count):
            offset = base + span.offset_delta
            if span.key is not None and offset >= start and not offset_map.put(span.key, offset):
                return True
    return False


@dataclass
class FilterStats:
    batches_read: int = 0
    records_read: int = 0
    bytes_read: int = 0
    batches_kept: int = 0
    records_kept: int = 0
    bytes_kept: int = 0
    aborted_records_removed: int = 0
    markers_removed: int = 0
    tombstones_removed: int = 0


class BatchFilter:
    """One cleaning pass's decisions, batch by batch in log order (state carries across the
    segments of the pass)."""

    def __init__(self, offset_map: OffsetMap, aborted: Iterable[AbortedTxn], *, now_ms: int,
                 delete_retention_ms: int, last_batch_of_producer: dict[int, int]) -> None:
        """``aborted``: the aborted transactions overlapping the range cleaned;
        ``last_batch_of_producer``: producer id -> last offset of its last batch, for the
        active producers in the producer state."""
        self.map = offset_map
        self.tracker = TransactionTracker(aborted)
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.last_batch_of_producer = last_batch_of_producer
        self.stats = FilterStats()

    def filter(self, buf, header: BatchHeader) -> bytes | memoryview | None:
        """What replaces the batch in the cleaned log: the batch itself, a rebuilt batch, an
        empty header, or None (dropped)."""
        stats = self.stats
        stats.batches_read += 1
        stats.bytes_read += header.size
        stats.records_read += header.record_count
        data = batch_records_data(buf, header)
        spans = record_spans(data, header.record_count)
        if header.is_control:
            removable = self.tracker.on_marker(header, _control_kind(spans))
            discard = (removable and header.has_delete_horizon
                       and header.base_timestamp <= self.now_ms)
            kept = [] if discard else spans
            stats.markers_removed += len(spans) - len(kept)
            needs_horizon = removable and not header.has_delete_horizon
        else:
            aborted = self.tracker.on_batch(header)
            if aborted:
                kept = []
                stats.aborted_records_removed += len(spans)
            else:
                kept = [s for s in spans if self._retain(header, s)]
            needs_horizon = not header.has_delete_horizon and any(s.null_value for s in kept)
        last_of_producer = (header.has_producer_id and self.last_batch_of_producer.get(
            header.producer_id) == header.last_offset)
        if not kept and not last_of_producer:
            return None
        if kept and len(kept) == len(spans) and not needs_horizon:
            out = memoryview(buf)[header.position : header.position + header.size]
        elif kept:
            horizon = self.now_ms + self.delete_retention_ms if needs_horizon else None
            out = rebuild_batch(header, data, kept, delete_horizon_ms=horizon)
        else:
            out = _empty_batch(header)
        stats.batches_kept += 1
        stats.records_kept += len(kept)
        stats.bytes_kept += len(out)
        return out

    def _retain(self, header: BatchHeader, span) -> bool:
        offset = header.base_offset + span.offset_delta
        if offset > self.map.latest_offset:
            return True  # past what this round's map covers
        if span.key is None:
            return False
        if offset < self.map.get(span.key):
            return False
        if span.null_value and header.has_delete_horizon and header.base_timestamp <= self.now_ms:
            self.stats.tombstones_removed += 1
            return False
        return True


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's DefaultRecordBatch.writeEmptyHeader: no records, no compression, both
    timestamps the original max timestamp, the producer fields and offsets kept."""
    fields = list(header[:13])
    fields[5] = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    fields[7] = fields[8] = header.max_timestamp
    return rebuild_batch(BatchHeader(HEADER.pack(*fields)), b"", [])
