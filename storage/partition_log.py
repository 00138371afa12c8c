"""Partition log (Kafka's UnifiedLog for a single replica): offsets, high watermark, segments.

On disk a partition is a directory `<topic>-<partition>/` of segments (segment.py) named by
base offset; the log owns log_start_offset (first visible offset), log_end_offset (next
offset to assign) and the high watermark (end of what consumers may read).

Append runs Kafka's order, synchronously on the event loop:
  validate batches (header, CRC, sizes; for client appends the record walk of
  protocol/validator.py: framing, counts, offset deltas, keys on compacted topics,
  timestamps, compressed batches decompressed as a stream under a cap) -> assign offsets
  (rewrite baseOffset in place, stamp the leader epoch, LogAppendTime, or the true largest
  record timestamp as maxTimestamp, as Kafka's LogValidator does) -> roll if needed -> validate producer state (producer_state.py: epochs,
  sequences; a duplicate of a recent batch returns its original offsets and writes nothing)
  -> write to the active segment -> update indexes -> apply the staged producer state ->
  index aborted transactions and complete them -> mark dirty for the flusher.

Transactions: the last stable offset is min(high watermark, first unstable offset) - the
first offset of the oldest open transaction, or of a completed one whose marker is not
below the high watermark yet - so in durable mode it never passes the fsynced end. Markers
(control batches, origin "coordinator") are checked against the producer state (stale
producer epoch: INVALID_PRODUCER_EPOCH, with transaction version 2 the marker's epoch must
exceed the data's; stale coordinator epoch: TRANSACTION_COORDINATOR_FENCED). An ABORT
marker appends (producer id, first offset, marker offset, last stable offset) to its
segment's `.txnindex` (transaction_index.py); `collect_aborted_transactions` gathers the
entries a read_committed fetch reports. The high watermark listener fires whenever the
high watermark moves, which is also when the last stable offset can move.
Unlike Kafka's log, the append does not itself refuse a client's transactional batch that
opens a transaction without a verification guard: the produce handler asks the transaction
coordinator and appends with nothing in between (broker/handlers/produce.py).

The client-origin checks up to the record walk are `validate_client_append` (a
`ClientAppend`): the produce handler runs them first, finishing a large compressed batch's
walk in a worker thread, and hands the result to `append(validated=...)` so nothing is
walked twice; `append` runs them itself when not given one. Nothing invalid reaches a
segment either way.

Producer state snapshots (`%020d.snapshot`) are written on roll, on close and by the log
manager's periodic producer-expiration task, and fsynced by the next flush round; at open
(recovery.py) the newest valid one is loaded and the log after it replayed.

Durability (`durable=True`, flush mode "fsync"): appended bytes are only in the page cache
until the log manager's flusher fsyncs the partition (group commit: one fsync covers every
append made meanwhile); the high watermark is the end of fsynced data, so a consumer never
sees a record a power loss could take back, and `wait_durable` resolves producers' acks.
With `durable=False` (flush mode "none") the high watermark follows the log end offset.

A failed write (OSError) leaves the log as it was and raises KafkaError(KAFKA_STORAGE_ERROR);
a failed fsync truncates back to the high watermark and fails the waiters. If an undo fails,
the partition goes offline for writes but keeps serving reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import random
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from semel.protocol.errors import Error, KafkaError, ProtocolError
from semel.protocol.records import (
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    ControlType,
    InvalidRecordError,
    is_valid_client_batch,
    iter_records,
    parse_control_record,
    set_max_timestamp_and_type,
    validate_batches,
)
from semel.protocol.validator import (
    DEFAULT_MAX_UNCOMPRESSED,
    RecordsSummary,
    RecordWalk,
    quick_summary,
)
from semel.storage.config import LOG_APPEND_TIME as LOG_APPEND_TIME_CONFIG
from semel.storage.config import LogConfig
from semel.storage.file_region import FileRegion
from semel.storage.fs import FileHandle, RealFileSystem
from semel.storage.producer_state import (
    ORIGIN_CLIENT,
    ORIGIN_REPLICATION,
    BatchMetadata,
    CompletedTxn,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateManager,
)
from semel.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
    SegmentRollbackError,
    segment_file_name,
)
from semel.storage.topic_partition import TopicPartition

log = logging.getLogger("storage.partition_log")

NO_TIMESTAMP = -1
_INT32_MAX = 2**31 - 1
_LENGTH = struct.Struct(">i")
_tuple_new = tuple.__new__
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
ORIGINS = ("client", "coordinator", "replication")


# staged updates per producer id | (entry, its next batch) | the batch a retry duplicates
_Analysis = dict[int, ProducerAppendInfo] | tuple[ProducerStateEntry, BatchMetadata] | BatchMetadata


class RecordValidationError(KafkaError):
    """A batch refused with per-record errors (Kafka's RecordValidationException):
    ``record_errors`` is [(index of the record in its batch, message)]."""

    def __init__(self, code: Error, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def _refusal(exc: InvalidRecordError) -> KafkaError:
    if exc.record_errors:
        return RecordValidationError(exc.error_code, exc.reason, exc.record_errors)
    return KafkaError(exc.error_code, exc.reason)


class ClientAppend:
    """A client append's checks up to the record walk (``PartitionLog.validate_client_append``).

    ``run(budget)`` walks the records until done (True) or until ``budget`` decompressed
    bytes were read (False: call again, e.g. in a worker thread); raises KafkaError. Reads
    only the buffer it was made from and the values captured at creation.
    """

    __slots__ = ("_walks", "headers", "summaries")

    def __init__(self, headers: list[BatchHeader], walks: list[RecordWalk],
                 summaries: list[RecordsSummary] | None = None) -> None:
        self.headers = headers
        self._walks = walks
        self.summaries = summaries  # set when walked (already, by the quick walk)

    def run(self, budget: int | None = None) -> bool:
        if self.summaries is not None:
            return True
        refusal = None
        try:
            for walk in self._walks:
                if not walk.run(budget):
                    return False
        except InvalidRecordError as exc:
            refusal = _refusal(exc)
        walks, self._walks = self._walks, []  # done: let go of the records buffer
        if refusal is not None:
            raise refusal  # outside the except: no context holding the walk's frames
        self.summaries = [walk.summary for walk in walks]
        return True


class AppendResult(NamedTuple):
    """(A tuple: one is made per Produce request, and a frozen dataclass takes about a
    microsecond longer to build.)"""

    base_offset: int  # first offset assigned (-1 for an empty append)
    last_offset: int
    log_append_time: int  # broker timestamp for LogAppendTime topics, else -1
    log_start_offset: int
    # a retry of a recent batch of the same producer: nothing was written, the offsets
    # (and, as Kafka answers, log_append_time = the batch's max timestamp) are the original's
    duplicate: bool = False

    @property
    def next_offset(self) -> int:
        """What to pass to `wait_durable` to wait for this append."""
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: bytes | memoryview | FileRegion  # whole batches, possibly empty
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int  # min(high watermark, first unstable offset)


@dataclass(slots=True)
class FlushJob:
    """One group-commit round for one partition (built on the loop, run in a thread)."""

    target_offset: int  # log end offset when the round started
    target_segment: LogSegment
    target_position: int
    segments: list[tuple[LogSegment, bool]]  # (segment, also fsync its indexes)
    fsync_dir: bool
    generation: int
    snapshots: list[str]  # producer snapshot files to fsync
    # when the round is only fdatasyncs of log files (the usual round: no roll, snapshot,
    # new file or transaction index entry), their handles, for FileSystem.fsync_async
    handles: list[FileHandle] | None = None


def _batch_headers(records, *, from_client: bool) -> list[BatchHeader]:
    """validate_batches as a KafkaError; v0/v1 message sets are refused before looking further,
    as Kafka 4 does."""
    if len(records) > MAGIC_OFFSET and records[MAGIC_OFFSET] in (0, 1):
        raise KafkaError(
            Error.INVALID_RECORD,
            f"magic {records[MAGIC_OFFSET]} not supported, only magic {MAGIC} record batches",
        )
    try:
        return validate_batches(records, from_client=from_client)
    except InvalidRecordError as exc:
        raise KafkaError(exc.error_code, exc.reason) from None


class PartitionLog:
    # message.max.uncompressed.bytes for appends that are not given one (the produce
    # handler passes the broker's)
    max_uncompressed_bytes = DEFAULT_MAX_UNCOMPRESSED

    def __init__(
        self,
        directory: str,
        topic_partition: TopicPartition,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        log_start_offset: int,
        fs: RealFileSystem,
        clock: Callable[[], int],
        durable: bool = True,
        leader_epoch: int = 0,
        producer_state: ProducerStateManager | None = None,
    ):
        if not segments:
            raise ValueError("a partition log needs at least one segment")
        self.dir = directory
        self.topic_partition = topic_partition
        self.config = config
        self.durable = durable
        self.leader_epoch = leader_epoch
        self._fs = fs
        self._clock = clock
        self._segments = segments
        self._base_offsets = [s.base_offset for s in segments]
        self._log_end_offset = segments[-1].next_offset
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        # everything present at open is durable (recovery fsyncs what it scanned)
        self.high_watermark = self._log_end_offset
        self._hw_position: tuple[LogSegment, int] | None = (segments[-1], segments[-1].size)
        self._unflushed: dict[int, tuple[LogSegment, bool]] = {}
        # the dirty listener was told since the last begin_flush (its round has this log)
        self._flush_asked = False
        self._dir_dirty = False
        self._generation = 0  # bumped by every truncation
        self._waiters: list[tuple[int, int, asyncio.Future]] = []
        self._waiter_seq = itertools.count()
        self.offline = False
        self.closed = False
        self.deleted_files: list[str] = []  # renamed *.deleted files awaiting removal
        # deleted segments and their renamed files, removed once no reader pins the segment
        self._deleted_segments: list[tuple[LogSegment, list[str]]] = []
        self.dirty_listener: Callable[[PartitionLog], None] | None = None
        # told when deleted files wait for removal (take_deleted_files)
        self.deleted_listener: Callable[[PartitionLog], None] | None = None
        self.high_watermark_listener: Callable[[PartitionLog], None] | None = None
        self.log_start_offset_listener: Callable[[PartitionLog], None] | None = None
        if producer_state is None:
            producer_state = ProducerStateManager(topic_partition, directory, fs, clock=clock)
        self.producer_state = producer_state
        self._snapshots_unflushed: list[str] = []

    # -- state ------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """min(high watermark, first unstable offset), the latter never below the log start
        (Kafka's UnifiedLog.lastStableOffset with firstUnstableOffsetMetadata)."""
        first = self.producer_state.first_unstable_offset()
        if first is None:
            return self.high_watermark
        return min(self.high_watermark, max(first, self.log_start_offset))

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        self.config = config

    def _storage_error(self, what: str, exc: BaseException) -> KafkaError:
        return KafkaError(
            Error.KAFKA_STORAGE_ERROR, f"{self.topic_partition}: {what} failed: {exc}"
        )

    def _check_writable(self) -> None:
        if self.closed:
            raise KafkaError(Error.NOT_LEADER_OR_FOLLOWER, f"{self.topic_partition} is closed")
        if self.offline:
            raise KafkaError(
                Error.KAFKA_STORAGE_ERROR, f"{self.topic_partition} is offline for writes"
            )

    # -- append -----------------------------------------------------------------------------

    def validate_client_append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        max_uncompressed: int | None = None,
        now: int | None = None,
    ) -> ClientAppend:
        """The checks of a client append before offsets are assigned: magic, headers and
        CRCs, sizes (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE), and the record walks, ready
        to ``run``. Raises KafkaError; ``records`` must be what is then appended."""
        config = self.config
        headers = _batch_headers(records, from_client=True)
        self._check_sizes(headers)
        if now is None:
            now = self._clock()
        log_append_time = config.message_timestamp_type == LOG_APPEND_TIME_CONFIG
        bounds = (
            None
            if log_append_time
            else (
                now - config.message_timestamp_before_max_ms,
                now + config.message_timestamp_after_max_ms,
            )
        )
        require_keys = "compact" in config.cleanup_policy
        cap = self.max_uncompressed_bytes if max_uncompressed is None else max_uncompressed
        summaries = []
        for header in headers:
            summary = quick_summary(records, header, require_keys=require_keys,
                                    timestamp_bounds=bounds, log_append_time=log_append_time,
                                    max_uncompressed=cap)
            if summary is None:
                break
            summaries.append(summary)
        else:
            return ClientAppend(headers, [], summaries)
        walks = [
            RecordWalk(
                records,
                header,
                require_keys=require_keys,
                timestamp_bounds=bounds,
                log_append_time=log_append_time,
                max_uncompressed=cap,
                topic_partition=str(self.topic_partition),
            )
            for header in headers
        ]
        return ClientAppend(headers, walks)

    def _check_sizes(self, headers: list[BatchHeader]) -> int:
        config = self.config
        total = 0
        for header in headers:
            if header.size > config.max_message_bytes:
                raise KafkaError(
                    Error.MESSAGE_TOO_LARGE,
                    f"The record batch size in the append to {self.topic_partition} is "
                    f"{header.size} bytes which exceeds the maximum configured value of "
                    f"{config.max_message_bytes}.",
                )
            total += header.size
        if total > config.segment_bytes:
            raise KafkaError(
                Error.RECORD_LIST_TOO_LARGE,
                f"Message batch size is {total} bytes in append to partition "
                f"{self.topic_partition} which exceeds the maximum configured segment size "
                f"of {config.segment_bytes}.",
            )
        return total

    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        origin: str = "client",
        transaction_version: int = 0,
        validated: ClientAppend | None = None,
    ) -> AppendResult:
        """Append a concatenation of v2 batches; returns the offsets assigned.

        Writable buffers (bytearray, writable memoryview) are rewritten in place
        (baseOffset, partitionLeaderEpoch, LogAppendTime); immutable ones are copied once.
        `origin` is "client" (Kafka's AppendOrigin.CLIENT: control batches refused,
        sequences checked, duplicates detected) or "coordinator" (transaction markers,
        internal topics: epochs checked). `transaction_version` applies to markers (2: the
        marker's epoch must exceed the data's). Producer state errors raise KafkaError
        (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE,
        TRANSACTION_COORDINATOR_FENCED) before anything is written. Client appends are
        walked record by record first (``validate_client_append``), unless ``validated``
        (made from these same ``records``, already run) is given.
        """
        self._check_writable()
        if origin not in ORIGINS:
            raise ValueError(f"unknown append origin {origin!r}")
        buf: bytearray | memoryview
        if isinstance(records, bytearray):
            buf = records
        elif isinstance(records, memoryview) and not records.readonly:
            buf = records.cast("B") if records.format != "B" else records
        else:
            buf = bytearray(records)
        config = self.config
        summaries: list[RecordsSummary] | None = None
        if origin == ORIGIN_CLIENT:
            if not records:
                return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset)
            if validated is None:
                validated = self.validate_client_append(buf)
            validated.run()
            headers = validated.headers
            summaries = validated.summaries
            total = sum(header.size for header in headers)
        else:
            headers = _batch_headers(buf, from_client=False)
            if not headers:
                return AppendResult(-1, -1, NO_TIMESTAMP, self.log_start_offset)
            total = self._check_sizes(headers)
        now = self._clock()
        log_append_time = config.message_timestamp_type == LOG_APPEND_TIME_CONFIG

        # assign offsets: rewrite baseOffset (outside the CRC) batch by batch
        first_offset = offset = self._log_end_offset
        batches: list[AppendedBatch] = []
        max_timestamp = NO_TIMESTAMP
        has_producer_ids = False
        for i, header in enumerate(headers):
            if header[9] >= 0:  # producer_id
                has_producer_ids = True
            position = header.position
            # baseOffset, batchLength (unchanged) and partitionLeaderEpoch in one write
            _OFFSET_LENGTH_EPOCH.pack_into(buf, position, offset, header[1], self.leader_epoch)
            batch_max = header.max_timestamp
            if log_append_time:
                set_max_timestamp_and_type(buf, position, now, LOG_APPEND_TIME)
                batch_max = now
            elif summaries is not None:
                # Kafka's LogValidator: maxTimestamp := the largest record timestamp (a
                # no-op, CRC untouched, when the producer wrote it right)
                batch_max = summaries[i].max_timestamp
                if batch_max != header.max_timestamp or header.timestamp_type != CREATE_TIME:
                    set_max_timestamp_and_type(buf, position, batch_max, CREATE_TIME)
            last = offset + header.last_offset_delta
            batches.append(AppendedBatch(header.size, last, batch_max))
            max_timestamp = max(max_timestamp, batch_max)
            offset = last + 1
        last_offset = offset - 1

        self._maybe_roll(total, max_timestamp, last_offset, now)

        # Kafka's analyzeAndValidateProducerState: after offsets and the roll, before the
        # write; it only stages updates, applied below once the write has succeeded
        staged: dict[int, ProducerAppendInfo] | None = None
        fast: tuple[ProducerStateEntry, BatchMetadata] | None = None
        completed: list[CompletedTxn] = []
        if has_producer_ids:
            analysis = self._analyze_producer_state(
                buf, headers, batches, origin, transaction_version, completed
            )
            if type(analysis) is BatchMetadata:
                return AppendResult(
                    analysis.first_offset,
                    analysis.last_offset,
                    analysis.timestamp,
                    self.log_start_offset,
                    duplicate=True,
                )
            if type(analysis) is tuple:
                fast = analysis
            else:
                staged = analysis

        segment = self._segments[-1]
        self._write(segment, buf, batches)
        self._log_end_offset = offset
        producer_state = self.producer_state
        if fast is not None:
            producer_state.apply_in_sequence_append(*fast)
        elif staged:
            for append_info in staged.values():
                producer_state.update(append_info)
            if completed:
                self._complete_txns(segment, completed)
        self._appended(segment, offset)
        return AppendResult(
            first_offset,
            last_offset,
            now if log_append_time else NO_TIMESTAMP,
            self.log_start_offset,
        )

    def append_client_batch(
        self, records: memoryview, header: BatchHeader, max_uncompressed: int
    ) -> AppendResult | None:
        """``append(records, origin="client")`` for Produce's common case in fewer steps:
        one valid CreateTime batch (uncompressed, or small enough for the quick walk) in a
        writable buffer, on a CreateTime topic, either without a producer id or the next
        non-transactional batch of a known producer in its epoch. None, with nothing done,
        for anything else - the caller then validates and appends the full way, which also
        reports what is wrong. ``header`` is the batch's, read at position 0."""
        config = self.config
        size = len(records)
        if (
            self.closed
            or self.offline
            or records.readonly
            or header[5] & (TRANSACTIONAL_MASK | TIMESTAMP_TYPE_MASK)
            or config.message_timestamp_type == LOG_APPEND_TIME_CONFIG
            or size > config.max_message_bytes
            or size > config.segment_bytes
            or not is_valid_client_batch(records, header)
        ):
            return None
        now = self._clock()
        summary = quick_summary(
            records,
            header,
            require_keys="compact" in config.cleanup_policy,
            timestamp_bounds=(
                now - config.message_timestamp_before_max_ms,
                now + config.message_timestamp_after_max_ms,
            ),
            max_uncompressed=max_uncompressed,
        )
        if summary is None:
            return None
        offset = self._log_end_offset
        delta = header[6]
        last = offset + delta
        batch_max = summary.max_timestamp
        producer_id = header[9]
        entry = batch = None
        producer_state = self.producer_state
        if producer_id >= 0:
            entry = producer_state.producers.get(producer_id)
            if entry is None:
                return None
            batch = producer_state.prepare_in_sequence_append(
                entry,
                header[10],
                header[11],
                header.last_sequence,
                batch_max,
                offset,
                last,
            )
            if batch is None:
                return None
        # from here on as append(): offsets, the roll, the write, the bookkeeping
        _OFFSET_LENGTH_EPOCH.pack_into(records, 0, offset, header[1], self.leader_epoch)
        if batch_max != header[8]:  # maxTimestamp := the largest record timestamp
            set_max_timestamp_and_type(records, 0, batch_max, CREATE_TIME)
        segment = self._segments[-1]
        if self._should_roll(segment, size, batch_max, last, now):
            segment = self.roll()
        try:  # _write(segment, records, [AppendedBatch(size, last, batch_max)]), inline
            segment.append_batch(records, last, batch_max)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        self._log_end_offset = last + 1
        if batch is not None:
            producer_state.apply_in_sequence_append(entry, batch)
        self._appended(segment, last + 1)
        # AppendResult(offset, last, NO_TIMESTAMP, log_start_offset), without the named
        # tuple's Python __new__
        return _tuple_new(AppendResult, (offset, last, NO_TIMESTAMP, self.log_start_offset, False))

    def _write(
        self, segment: LogSegment, buf: bytearray | memoryview, batches
    ) -> None:
        """The write of an append into the active segment; a failure the segment undid
        leaves the log as it was, one it could not undo takes the partition offline for
        writes. Both raise KAFKA_STORAGE_ERROR."""
        try:
            segment.append(buf, batches)
        except OSError as exc:
            raise self._write_failed(exc) from exc

    def _write_failed(self, exc: OSError) -> KafkaError:
        """The KAFKA_STORAGE_ERROR for a failed write into the active segment; offline for
        writes when the segment could not undo it."""
        if isinstance(exc, SegmentRollbackError):
            self.offline = True
            log.error(
                "%s: append failed and could not be undone; offline for writes: %s",
                self.topic_partition,
                exc,
            )
        else:
            log.warning("%s: append failed, log unchanged: %s", self.topic_partition, exc)
        return self._storage_error("append", exc)

    def _appended(self, segment: LogSegment, log_end: int) -> None:
        """After an append's write and its producer state: the producer state's map end,
        then the flusher's mark (durable) or the high watermark at once (not durable)."""
        producer_state = self.producer_state
        producer_state.map_end_offset = log_end
        if self.durable:
            # the segment already waits for the round the listener was told of: nothing
            # to add (most appends under load)
            if not (self._flush_asked and segment.base_offset in self._unflushed):
                self._mark_unflushed(segment, False)
        else:
            self.high_watermark = log_end
            self._hw_position = (segment, segment.size)
            if producer_state.unreplicated_txns:
                producer_state.on_high_watermark_updated(log_end)
            listener = self.high_watermark_listener  # _notify_high_watermark, inline
            if listener is not None:
                listener(self)

    def _complete_txns(self, segment: LogSegment, completed: list[CompletedTxn]) -> None:
        """Markers were written: index the aborted transactions in the segment holding the
        marker (with the last stable offset once each is done), then close them in the
        producer state (Kafka's order). A failed index write takes the partition offline
        for writes: read_committed fetches would miss the abort."""
        producer_state = self.producer_state
        failure: OSError | None = None
        for txn in completed:
            if txn.is_aborted and failure is None:
                try:
                    segment.update_txn_index(
                        txn.producer_id,
                        txn.first_offset,
                        txn.last_offset,
                        producer_state.last_stable_offset(txn),
                    )
                except OSError as exc:
                    failure = exc
            producer_state.complete_txn(txn)
        if failure is not None:
            self.offline = True
            log.error(
                "%s: writing the transaction index failed; offline for writes: %s",
                self.topic_partition,
                failure,
            )
            raise self._storage_error("transaction index append", failure)

    def _analyze_producer_state(
        self,
        buf: bytearray | memoryview,
        headers: list[BatchHeader],
        batches: list[AppendedBatch],
        origin: str,
        transaction_version: int,
        completed: list[CompletedTxn],
    ) -> _Analysis:
        """Validate every batch with a producer id against the producer state; the staged
        updates per producer id (or, for the produce path's common case, the producer's
        entry and its next batch), or the metadata of the batch a client batch duplicates."""
        producer_state = self.producer_state
        producers = producer_state.producers
        from_client = origin == ORIGIN_CLIENT
        if from_client and len(headers) == 1 and not headers[0][5] & TRANSACTIONAL_MASK:
            # one batch (Produce v3+), the producer's next in its epoch: no staging objects
            header = headers[0]
            entry = producers.get(header[9])
            if entry is not None:
                base_sequence, delta = header[11], header[6]
                appended = batches[0]
                last_offset = appended.last_offset
                batch = producer_state.prepare_in_sequence_append(
                    entry,
                    header[10],
                    base_sequence,
                    base_sequence + delta
                    if base_sequence <= _INT32_MAX - delta
                    else delta - (_INT32_MAX - base_sequence) - 1,
                    appended.max_timestamp,
                    last_offset - delta,
                    last_offset,
                )
                if batch is not None:
                    return entry, batch
        staged: dict[int, ProducerAppendInfo] = {}
        for header, appended in zip(headers, batches, strict=True):
            producer_id = header[9]
            if producer_id < 0:
                continue
            producer_epoch = header[10]
            if from_client:
                entry = producers.get(producer_id)
                if entry is not None:
                    duplicate = entry.find_duplicate_batch(
                        producer_epoch, header[11], header.last_sequence
                    )
                    if duplicate is not None:
                        if header.is_transactional and entry.transaction_ended_after(duplicate):
                            raise self._reused_sequence(header, duplicate)
                        return duplicate
            # issue 6: Kafka refuses here a transactional batch of a producer without an
            # ongoing transaction on this partition unless the coordinator verified it
            append_info = staged.get(producer_id)
            if append_info is None:
                append_info = staged[producer_id] = producer_state.prepare_update(
                    producer_id, origin
                )
            last_offset = appended.last_offset
            first_offset = last_offset - header.last_offset_delta
            if header.is_control:
                txn = self._append_marker(
                    append_info,
                    BatchHeader(buf, header.position),  # fresh: offsets were rewritten
                    buf,
                    first_offset,
                    transaction_version,
                )
                if txn is not None:
                    completed.append(txn)
            else:
                append_info.append_data_batch(
                    producer_epoch,
                    header[11],
                    header.last_sequence,
                    appended.max_timestamp,
                    first_offset,
                    last_offset,
                    header.is_transactional,
                )
        return staged

    def _reused_sequence(self, header: BatchHeader, duplicate: BatchMetadata) -> KafkaError:
        """A transactional batch repeating the sequences of a batch whose transaction has
        already ended. A client retries a batch only until its transaction ends (EndTxn
        waits for every send, an abort drops unsent ones), so this is a new batch with
        reused sequence numbers: librdkafka does that after an abort that dropped a batch it
        had already sent once. Kafka answers it as a duplicate, which acknowledges records it
        never writes; semel refuses it, which makes the client abort and bump its epoch."""
        return KafkaError(
            Error.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"Sequences {header[11]}..{header.last_sequence} of producer {header[9]} (epoch "
            f"{header[10]}) in {self.topic_partition} were already used by the batch at offset "
            f"{duplicate.first_offset}, whose transaction has ended: sequence numbers reused",
        )

    def _append_marker(
        self,
        append_info: ProducerAppendInfo,
        header: BatchHeader,
        data: bytes | bytearray | memoryview,
        offset: int,
        transaction_version: int,
    ) -> CompletedTxn | None:
        """Feed a control batch's COMMIT/ABORT marker to `append_info` (other control
        records and empty control batches change no producer state)."""
        try:
            record = next(iter_records(data, header), None)
            if record is None:
                return None
            control_type, coordinator_epoch = parse_control_record(record)
        except ProtocolError as exc:
            raise KafkaError(Error.INVALID_RECORD, f"malformed control batch: {exc}") from None
        if control_type not in (ControlType.COMMIT, ControlType.ABORT):
            return None
        return append_info.append_end_txn_marker(
            control_type == ControlType.COMMIT,
            coordinator_epoch,
            header.producer_epoch,
            offset,
            record.timestamp,
            transaction_version,
        )

    def _mark_unflushed(self, segment: LogSegment, with_indexes: bool, notify: bool = True) -> None:
        key = segment.base_offset
        previous = self._unflushed.get(key)
        self._unflushed[key] = (segment, with_indexes or (previous is not None and previous[1]))
        if notify and self.dirty_listener is not None:
            self._flush_asked = True
            self.dirty_listener(self)

    # -- roll -------------------------------------------------------------------------------

    def _should_roll(
        self, segment: LogSegment, size: int, max_timestamp: int, last_offset: int, now: int
    ) -> bool:
        # (run on every append: the segment's cached values are read directly, not through
        # its properties, where that is the same)
        config = self.config
        segment_size = segment.size
        if segment_size == 0:
            return False
        if segment_size > config.segment_bytes - size:
            return True
        rolling = segment._rolling_based_timestamp
        if rolling is None:  # not read from the file yet
            rolling = segment.rolling_based_timestamp
        if rolling is not None and rolling >= 0:
            waited = max_timestamp - rolling
        else:
            waited = now - segment.created_ms
        if waited > config.segment_ms - segment.roll_jitter_ms:
            return True
        offset_index, time_index = segment.offset_index, segment.time_index
        if (offset_index.entries >= offset_index.max_entries
                or time_index.entries >= time_index.max_entries):  # is_full
            return True
        return last_offset - segment.base_offset > _INT32_MAX

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int, now: int) -> None:
        if self._should_roll(self._segments[-1], size, max_timestamp, last_offset, now):
            self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset (no-op if the active one is
        empty). The old one gets its final time index entry and a last fsync."""
        self._check_writable()
        old = self._segments[-1]
        if old.size == 0:
            return old
        try:
            old.on_become_inactive()
            new = self._new_segment(self._log_end_offset)
        except OSError as exc:
            raise self._storage_error("roll", exc) from exc
        self._segments.append(new)
        self._base_offsets.append(new.base_offset)
        self._dir_dirty = True
        # Kafka snapshots the producer state at the new segment's base offset
        self.producer_state.map_end_offset = self._log_end_offset
        self.take_producer_snapshot()
        self._mark_unflushed(old, True)
        log.info("%s: rolled new segment at offset %d", self.topic_partition, new.base_offset)
        return new

    def _new_segment(self, base_offset: int) -> LogSegment:
        config = self.config
        jitter = 0
        if config.segment_jitter_ms > 0:
            jitter = random.randrange(min(config.segment_jitter_ms, config.segment_ms))
        return LogSegment(
            self._fs,
            self.dir,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            created_ms=self._clock(),
            roll_jitter_ms=jitter,
            create=True,
        )

    # -- producer state ---------------------------------------------------------------------

    def take_producer_snapshot(self) -> str | None:
        """Write a producer snapshot at the log end unless one covers it; the next flush
        round fsyncs it. A failed write is logged (the older snapshots still serve)."""
        producer_state = self.producer_state
        producer_state.map_end_offset = self._log_end_offset
        try:
            path = producer_state.take_snapshot()
        except OSError as exc:
            log.error("%s: writing a producer snapshot failed: %s", self.topic_partition, exc)
            return None
        if path is not None:
            self._snapshots_unflushed.append(path)
            self._dir_dirty = True
            if self.dirty_listener is not None:
                self.dirty_listener(self)
        return path

    def remove_expired_producers(self, now_ms: int) -> int:
        return self.producer_state.remove_expired_producers(now_ms)

    def load_producer_state(self) -> None:
        """Kafka's rebuildProducerState at open: the newest valid snapshot in
        (log start, log end], then the log after it; an fsynced snapshot at the log end.
        Segments recovery rebuilt (`txn_index_rebuild`) are replayed whole, so their
        aborted transactions are indexed again (snapshots past the first are dropped)."""
        rebuilt = [s.base_offset for s in self._segments if s.txn_index_rebuild]
        if rebuilt:
            self.producer_state.delete_snapshots_after(min(rebuilt))
            self.producer_state.map_end_offset = -1  # force the reload
        self._reload_producer_state()
        for segment in self._segments:
            segment.txn_index_rebuild = False
        try:
            path = self.producer_state.take_snapshot(sync=True)
        except OSError as exc:
            log.error("%s: writing a producer snapshot failed: %s", self.topic_partition, exc)
            path = None
        if path is not None:
            log.info(
                "%s: producer state rebuilt up to offset %d (%d producer ids)",
                self.topic_partition,
                self._log_end_offset,
                self.producer_state.producer_id_count,
            )

    def _reload_producer_state(self) -> None:
        producer_state = self.producer_state
        end = self._log_end_offset
        producer_state.truncate_and_reload(self.log_start_offset, end)
        start = max(producer_state.map_end_offset, self.log_start_offset)
        if start < end:
            self._replay_producer_state(start, end)
        producer_state.map_end_offset = end
        producer_state.on_high_watermark_updated(self.high_watermark)

    def _replay_producer_state(self, start: int, end: int) -> None:
        """Feed every batch with a producer id in [start, end) to the producer state as
        Kafka's loadProducersFromRecords does (replication origin: nothing is refused)."""
        producer_state = self.producer_state
        first = self._segment_index(start)
        for i, segment in enumerate(self._segments[first:]):
            if i == 0:
                found = segment.translate_offset(start)
                if found is None:
                    continue
                position = found[0]
            else:
                position = 0
            loaded: dict[int, ProducerAppendInfo] = {}
            for pos, header in segment.iter_headers(position):
                if header.base_offset >= end:
                    break
                producer_id = header.producer_id
                if producer_id < 0 or header.last_offset < start:
                    continue
                append_info = loaded.get(producer_id)
                if append_info is None:
                    append_info = loaded[producer_id] = producer_state.prepare_update(
                        producer_id, ORIGIN_REPLICATION
                    )
                try:
                    if header.is_control:
                        data = segment.read(pos, header.size)
                        txn = self._append_marker(
                            append_info, BatchHeader(data, 0), data, header.base_offset, 0
                        )
                        if txn is not None:
                            # as Kafka's LogSegment.recover: state up to the marker applied,
                            # then the index entry (if missing) and the completion
                            for staged in loaded.values():
                                producer_state.update(staged)
                            loaded.clear()
                            if txn.is_aborted:
                                self._reindex_abort(segment, txn)
                            producer_state.complete_txn(txn)
                    else:
                        append_info.append_data_batch(
                            header.producer_epoch,
                            header.base_sequence,
                            header.last_sequence,
                            header.max_timestamp,
                            header.base_offset,
                            header.last_offset,
                            header.is_transactional,
                        )
                except KafkaError as exc:
                    log.warning(
                        "%s: producer state replay at offset %d: %s",
                        self.topic_partition,
                        header.base_offset,
                        exc,
                    )
            for append_info in loaded.values():
                producer_state.update(append_info)

    def _reindex_abort(self, segment: LogSegment, txn: CompletedTxn) -> None:
        try:
            segment.ensure_txn_indexed(
                txn.producer_id,
                txn.first_offset,
                txn.last_offset,
                self.producer_state.last_stable_offset(txn),
            )
        except OSError as exc:
            log.error(
                "%s: could not index the aborted transaction %s: %s",
                self.topic_partition,
                txn,
                exc,
            )

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        return self.producer_state.has_ongoing_transaction(producer_id, producer_epoch)

    # -- durability -------------------------------------------------------------------------

    def begin_flush(self) -> FlushJob | None:
        """Snapshot what the next fsync round must cover (on the loop); None if clean."""
        self._flush_asked = False  # the next append tells the listener again
        if (not self._unflushed and not self._dir_dirty) or self.closed:
            return None
        segments = list(self._unflushed.values())
        self._unflushed.clear()
        for segment, _ in segments:
            segment.pin()
        active = self._segments[-1]
        job = FlushJob(
            self._log_end_offset,
            active,
            active.size,
            segments,
            self._dir_dirty,
            self._generation,
            self._snapshots_unflushed,
        )
        self._snapshots_unflushed = []
        self._dir_dirty = False
        if not job.snapshots and not job.fsync_dir:
            handles = []
            for segment, with_indexes in segments:
                found = None if with_indexes else segment.log_sync_handles()
                if found is None:
                    break
                handles += found
            else:
                job.handles = handles
        return job

    def run_flush(self, job: FlushJob) -> None:
        """fsync everything `job` covers; runs in a thread (fsync calls only). A job with
        `handles` may instead be given to `FileSystem.fsync_async` (the same fsyncs)."""
        for segment, with_indexes in job.segments:
            segment.flush(with_indexes)
        for path in job.snapshots:
            try:
                handle = self._fs.open(path, create=False)
            except FileNotFoundError:  # superseded and deleted meanwhile
                continue
            try:
                handle.fsync()
            finally:
                handle.close()
        if job.fsync_dir:
            self._fs.fsync_dir(self.dir)

    def complete_flush(self, job: FlushJob, error: BaseException | None) -> bool:
        """On the loop after `run_flush`: advance the high watermark and resolve waiters,
        or handle the failure. Returns True if the high watermark moved."""
        for segment, _ in job.segments:
            segment.unpin()
        if self.closed:
            return False
        if error is not None:
            self._flush_failed(job, error)
            return False
        if not self.durable:
            return False
        target = min(job.target_offset, self._log_end_offset)
        if target <= self.high_watermark:
            return False
        self.high_watermark = target
        if self.producer_state.unreplicated_txns:
            self.producer_state.on_high_watermark_updated(target)
        if job.generation == self._generation and target == job.target_offset:
            self._hw_position = (job.target_segment, job.target_position)
        else:
            self._hw_position = None
        self._resolve_waiters()
        self._notify_high_watermark()
        return True

    def _flush_failed(self, job: FlushJob, error: BaseException) -> None:
        log.error("%s: fsync failed: %s", self.topic_partition, error)
        # the flushed segments' state is unknown: keep them for the next round, which the
        # next append triggers (no immediate retry against a failing disk)
        for segment, with_indexes in job.segments:
            if segment in self._segments:
                self._mark_unflushed(segment, with_indexes, notify=False)
        self._dir_dirty = self._dir_dirty or job.fsync_dir
        self._snapshots_unflushed.extend(job.snapshots)
        if not self.durable:
            return
        # after a failed fsync the kernel may have dropped the dirty pages: what lies past
        # the high watermark is unknown, so take it back; producers were not acknowledged
        exc = self._storage_error("fsync", error)
        if self._log_end_offset > self.high_watermark:
            try:
                self.truncate_to(self.high_watermark)
            except (OSError, KafkaError) as undo:
                self.offline = True
                log.error(
                    "%s: truncation after failed fsync failed; offline for writes: %s",
                    self.topic_partition,
                    undo,
                )
        self._fail_waiters(exc)

    def flush(self) -> None:
        """Synchronous flush of everything written so far (close, tests, no log manager)."""
        job = self.begin_flush()
        if job is None:
            return
        try:
            self.run_flush(job)
        except OSError as exc:
            self.complete_flush(job, exc)
            raise self._storage_error("fsync", exc) from exc
        self.complete_flush(job, None)

    async def wait_durable(self, offset: int) -> None:
        """Return once every record before `offset` is fsynced (high watermark >= offset);
        pass `AppendResult.next_offset`. Immediate when not durable. Raises
        KafkaError(KAFKA_STORAGE_ERROR) if the fsync covering it failed."""
        fut = self.durable_future(offset, asyncio.get_running_loop())
        if fut is not None:
            await fut

    def durable_future(
        self, offset: int, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future | None:
        """`wait_durable` without its coroutine, for a caller that waits on many requests'
        behalf (the produce handler): None if every record before `offset` is durable
        already, else a future of `loop` that resolves with None once it is, or fails with
        KafkaError(KAFKA_STORAGE_ERROR). A caller that stops waiting cancels it (a failure
        set later would otherwise be logged as never retrieved). Raises that KafkaError
        at once if the log cannot become durable (offline or closed)."""
        if not self.durable or offset <= self.high_watermark:
            return None
        fut = loop.create_future()
        self.add_durable_waiter(offset, fut)
        return fut

    def add_durable_waiter(self, offset: int, waiter) -> bool:
        """``durable_future`` with the caller's own waiter instead of a new future: anything
        with a future's ``done()``, ``set_result(None)`` and ``set_exception(exc)``, called
        by the log as it would a future's (the produce fast path's ``_OneWait``: no future
        and no callback hop per request). Those calls must not raise. False, with nothing
        kept, if every record before ``offset`` is durable already; raises as
        ``durable_future`` if the log cannot become durable."""
        if not self.durable or offset <= self.high_watermark:
            return False
        if self.offline or self.closed:
            raise KafkaError(
                Error.KAFKA_STORAGE_ERROR, f"{self.topic_partition} cannot become durable"
            )
        heapq.heappush(self._waiters, (offset, next(self._waiter_seq), waiter))
        return True

    def _resolve_waiters(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.high_watermark:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self, exc: KafkaError) -> None:
        """Fail every waiter the high watermark does not cover."""
        self._resolve_waiters()
        waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    def _notify_high_watermark(self) -> None:
        if self.high_watermark_listener is not None:
            self.high_watermark_listener(self)

    # -- reads ------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect_right(self._base_offsets, offset) - 1, 0)

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        upper_bound: int | None = None,
        min_one_batch: bool = True,
        region_min: int | None = None,
    ) -> ReadResult:
        """Whole batches from the one containing `fetch_offset`, from one segment, up to
        `max_bytes` (at least one batch if `min_one_batch`), ending before `upper_bound`
        (default: the high watermark). Raises KafkaError(OFFSET_OUT_OF_RANGE) outside
        [log_start_offset, log_end_offset].

        With `region_min`, a read of at least that many bytes returns a FileRegion (the
        range in the segment's file, pinned; storage/file_region.py) instead of the bytes:
        only the batch headers near its end are read, to end it at a whole batch. The
        bound must be at most the high watermark: the bytes below it never change."""
        log_start, log_end, hw = self.log_start_offset, self._log_end_offset, self.high_watermark
        if fetch_offset < log_start or fetch_offset > log_end:
            raise KafkaError(
                Error.OFFSET_OUT_OF_RANGE,
                f"Received request for offset {fetch_offset} for partition "
                f"{self.topic_partition}, but we only have log segments in the range "
                f"{log_start} to {log_end}.",
            )
        bound = hw if upper_bound is None else min(upper_bound, log_end)
        if region_min is not None and bound > hw:
            raise ValueError(f"a file region must end below the high watermark ({hw})")
        data = b""
        if fetch_offset < bound:
            try:
                data = self._read_range(fetch_offset, bound, max_bytes, min_one_batch,
                                        region_min)
            except OSError as exc:
                raise self._storage_error("read", exc) from exc
        return ReadResult(data, hw, log_start, log_end, self.last_stable_offset)

    def _read_range(
        self, fetch_offset: int, bound: int, max_bytes: int, min_one_batch: bool,
        region_min: int | None = None,
    ) -> bytes | memoryview | FileRegion:
        segments = self._segments
        i = self._segment_index(fetch_offset)
        while i < len(segments):
            segment = segments[i]
            found = segment.translate_offset(fetch_offset)
            if found is None:
                i += 1
                continue
            position, header = found
            if header.base_offset >= bound:
                return b""
            end = self._bound_position(bound, i, position)
            available = end - position
            if available <= 0:
                return b""
            limit = max(max_bytes, header.size) if min_one_batch else max_bytes
            if region_min is not None and min(available, limit) >= region_min:
                if available <= limit:
                    return segment.region(position, available)
                cut, last = segment.last_whole_batch(position, position + limit)
                if cut <= position:
                    return b""
                if cut - position >= region_min:
                    return segment.region(position, cut - position, last)
                return segment.read(position, cut - position)
            if available <= limit:
                return segment.read(position, available)
            data = segment.read(position, limit)
            cut = _whole_batches_end(data)
            return memoryview(data)[:cut] if cut < len(data) else data  # no copy of the cut
        return b""

    def _bound_position(self, bound: int, index: int, start: int) -> int:
        """Byte position in segment `index` where reading must stop for `bound`."""
        segments = self._segments
        segment = segments[index]
        if index + 1 < len(segments) and segments[index + 1].base_offset <= bound:
            return segment.size
        if bound == self._log_end_offset and index == len(segments) - 1:
            return segment.size
        cached = self._hw_position
        if bound == self.high_watermark and cached is not None and cached[0] is segment:
            return cached[1]
        found = segment.translate_offset(bound, start)
        position = segment.size if found is None else found[0]
        if bound == self.high_watermark:
            self._hw_position = (segment, position)
        return position

    def collect_aborted_transactions(
        self, start_offset: int, upper_bound_offset: int
    ) -> list[tuple[int, int]]:
        """(producer id, first offset) of every aborted transaction whose data meets
        [start_offset, upper_bound_offset): the transaction indexes of the segment holding
        `start_offset` and the later ones, until an entry's last stable offset reaches the
        bound (Kafka's UnifiedLog.collectAbortedTransactions)."""
        found: list[tuple[int, int]] = []
        for segment in self._segments[self._segment_index(start_offset) :]:
            if not segment.txn_index.count:
                continue
            try:
                txns, complete = segment.collect_aborted_txns(start_offset, upper_bound_offset)
            except OSError as exc:
                raise self._storage_error("transaction index read", exc) from exc
            found.extend((t.producer_id, t.first_offset) for t in txns)
            if complete:
                break
        return found

    def aborted_transactions_in(
        self, fetch_offset: int, records: bytes | memoryview | FileRegion
    ) -> list[tuple[int, int]]:
        """The aborted transactions a read_committed fetch from `fetch_offset` returning
        `records` (whole batches, as `read` gives them) must report: those with data in
        [fetch_offset, end of the records)."""
        if not records or not any(
            s.txn_index.count for s in self._segments[self._segment_index(fetch_offset) :]
        ):
            return []  # the common case: no abort anywhere near, the records are not walked
        end = (records.end_offset() if isinstance(records, FileRegion)
               else _records_end_offset(records))
        return self.collect_aborted_transactions(fetch_offset, end)

    def iter_batches_from(
        self, start_offset: int, *, with_data: bool = False
    ) -> Iterator[tuple[BatchHeader, bytes | None]]:
        """Every batch from the one containing `start_offset` to the log end, with its bytes
        when `with_data` (header.position is then 0 within them). For rebuilding state
        (producer state, transaction index) at recovery."""
        segments = self._segments[self._segment_index(start_offset) :]
        for segment in segments:  # kept open to the end even if the cleaner or retention
            segment.pin()         # replaces or deletes them meanwhile
        try:
            for segment in segments:
                found = segment.translate_offset(start_offset)
                if found is None:
                    continue
                for position, header in segment.iter_headers(found[0]):
                    if with_data:
                        data = segment.read(position, header.size)
                        yield BatchHeader(data, 0), data
                    else:
                        yield header, None
        finally:
            for segment in segments:
                segment.unpin()

    def offset_for_timestamp(
        self, timestamp: int, upper_bound: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` (Kafka's
        ListOffsets by time), or None; offsets at or past `upper_bound` (default the high
        watermark) are not reported."""
        try:
            return self._offset_for_timestamp(timestamp, upper_bound)
        except OSError as exc:
            raise self._storage_error("timestamp lookup", exc) from exc

    def _offset_for_timestamp(
        self, timestamp: int, upper_bound: int | None
    ) -> tuple[int, int] | None:
        bound = self.high_watermark if upper_bound is None else upper_bound
        start = self.log_start_offset
        for segment in self._segments:
            if segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp)
            if found is None:
                continue
            for position, header in segment.iter_headers(found[0]):
                if header.max_timestamp < timestamp or header.last_offset < start:
                    continue
                for record_offset, record_ts in self._record_timestamps(segment, position, header):
                    if record_ts >= timestamp and record_offset >= start:
                        return (record_offset, record_ts) if record_offset < bound else None
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3),
        the earliest such record if several; None if the log holds no timestamps."""
        try:
            return self._max_timestamp_offset()
        except OSError as exc:
            raise self._storage_error("timestamp lookup", exc) from exc

    def _max_timestamp_offset(self) -> tuple[int, int] | None:
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None:
            return None
        target = best.max_timestamp
        _, position = best.offset_index.lookup(best.offset_of_max_timestamp)
        for pos, header in itertools.chain(best.iter_headers(position), best.iter_headers(0)):
            if header.max_timestamp != target:
                continue
            if header.timestamp_type == LOG_APPEND_TIME:
                return header.base_offset, target
            for record_offset, record_ts in self._record_timestamps(best, pos, header):
                if record_ts == target:
                    return record_offset, target
        return None

    def _record_timestamps(
        self, segment: LogSegment, position: int, header: BatchHeader
    ) -> Iterator[tuple[int, int]]:
        data = segment.read(position, header.size)
        for record in iter_records(data, BatchHeader(data, 0)):
            yield record.offset, record.timestamp

    # -- deletion and retention ------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: advance log_start_offset to `offset` (no-op if lower) and
        delete whole segments below it; returns the new log start offset. An offset past
        the high watermark raises KafkaError(OFFSET_OUT_OF_RANGE)."""
        if offset > self.high_watermark or offset < 0:
            raise KafkaError(
                Error.OFFSET_OUT_OF_RANGE,
                f"Cannot increment the log start offset to {offset} of partition "
                f"{self.topic_partition} since it is larger than the high watermark "
                f"{self.high_watermark}",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.producer_state.on_log_start_offset_incremented(offset)
            if self.log_start_offset_listener is not None:
                self.log_start_offset_listener(self)
        self._delete_segments_below_log_start()
        return self.log_start_offset

    def _delete_segments_below_log_start(self) -> int:
        start = self.log_start_offset
        return self._delete_oldest(lambda seg, nxt: nxt is not None and nxt.base_offset <= start)

    def apply_retention(self, now_ms: int) -> int:
        """Delete old segments by retention.ms and retention.bytes as Kafka does (only with
        cleanup.policy delete; never past the high watermark); returns segments deleted."""
        deleted = self._delete_segments_below_log_start()
        config = self.config
        if "delete" not in config.cleanup_policy:
            return deleted
        if config.retention_bytes >= 0:
            excess = [self.size_in_bytes - config.retention_bytes]

            def over_size(segment: LogSegment, _next: LogSegment | None) -> bool:
                if excess[0] - segment.size >= 0:
                    excess[0] -= segment.size
                    return True
                return False

            if excess[0] > 0:
                deleted += self._delete_oldest(over_size)
        if config.retention_ms >= 0:
            retention_ms = config.retention_ms
            deleted += self._delete_oldest(
                lambda seg, _n: now_ms - seg.largest_timestamp > retention_ms
            )
        return deleted

    def _delete_oldest(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete segments from the oldest while `predicate(segment, next)` holds and the
        high watermark is past them (Kafka's deletableSegments)."""
        segments = self._segments
        doomed: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            last_and_empty = nxt is None and segment.size == 0
            if self.high_watermark >= upper and not last_and_empty and predicate(segment, nxt):
                doomed.append(segment)
            else:
                break
        if not doomed:
            return 0
        if len(doomed) == len(segments):
            self.roll()  # never leave the log without an active segment
        for segment in doomed:
            self._remove_segment(segment)
        if self._segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self._segments[0].base_offset
            self.producer_state.on_log_start_offset_incremented(self.log_start_offset)
            if self.log_start_offset_listener is not None:
                self.log_start_offset_listener(self)
        return len(doomed)

    def _remove_segment(self, segment: LogSegment) -> None:
        index = self._segments.index(segment)
        del self._segments[index]
        del self._base_offsets[index]
        self._unflushed.pop(segment.base_offset, None)
        if self._hw_position is not None and self._hw_position[0] is segment:
            self._hw_position = None
        segment.close(for_deletion=True)
        try:
            self._deleted_segments.append((segment, segment.rename_to_deleted()))
            snapshot = self.producer_state.remove_and_mark_snapshot_for_deletion(
                segment.base_offset, DELETED_SUFFIX
            )
            if snapshot is not None:
                self.deleted_files.append(snapshot)
        except OSError as exc:
            log.error(
                "%s: could not rename deleted segment %d: %s",
                self.topic_partition,
                segment.base_offset,
                exc,
            )
        self._notify_deleted()
        log.info("%s: deleted segment %d", self.topic_partition, segment.base_offset)

    def replace_segments(self, new: LogSegment, old: list[LogSegment]) -> None:
        """Swap a cleaned segment (written as ``.cleaned`` files) in for the run of
        non-active segments ``old`` it was cleaned from (Kafka's replaceSegments), so that a
        crash at any moment leaves the old segments or the new one, never a mixture:

        1. the new files are renamed ``.swap`` (from here recovery completes the swap:
           ``recovery.load_segments`` removes the segments in the swap's offset range and
           gives the swap its own names);
        2. the old segments leave the log and their files are renamed ``.deleted`` (reads
           in progress keep them open until they finish);
        3. the new files get their own names, the directory is fsynced.
        Reads started after this call see only the new segment.

        Only step 1 can fail (an OSError: the new files are then removed, the log is as it
        was); from step 2 on nothing is written (the old segments' pending index entries are
        dropped) and a failed last directory fsync is only logged: the ``.swap`` was
        durable, so a crash then still recovers to the new segment."""
        first = self._segments.index(old[0])
        if (self._segments[first : first + len(old)] != old
                or first + len(old) >= len(self._segments)
                or new.base_offset != old[0].base_offset):
            raise ValueError("not a run of non-active segments starting at the new base")
        try:
            new.flush()
            new.change_file_suffix(SWAP_SUFFIX)
            self._fs.fsync_dir(self.dir)
        except OSError:
            new.close()
            for file_suffix in {CLEANED_SUFFIX, SWAP_SUFFIX, new.file_suffix}:
                for kind in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                    path = os.path.join(self.dir, segment_file_name(new.base_offset, kind)
                                        + file_suffix)
                    with contextlib.suppress(OSError):
                        if self._fs.exists(path):
                            self._fs.remove(path)
            raise
        self._segments[first : first + len(old)] = [new]
        self._base_offsets[first : first + len(old)] = [new.base_offset]
        for segment in old:
            self._unflushed.pop(segment.base_offset, None)
            if self._hw_position is not None and self._hw_position[0] is segment:
                self._hw_position = None
            segment.close(for_deletion=True)
            self._deleted_segments.append((segment, segment.rename_to_deleted()))
            if segment.base_offset != new.base_offset:
                snapshot = self.producer_state.remove_and_mark_snapshot_for_deletion(
                    segment.base_offset, DELETED_SUFFIX)
                if snapshot is not None:
                    self.deleted_files.append(snapshot)
        self._notify_deleted()
        new.change_file_suffix("")
        try:
            self._fs.fsync_dir(self.dir)
        except OSError as exc:
            log.error("%s: fsync of %s after a swap failed: %s", self.topic_partition, self.dir,
                      exc)
        log.info("%s: cleaned segments %s swapped in as %d", self.topic_partition,
                 [s.base_offset for s in old], new.base_offset)

    @property
    def has_deleted_files(self) -> bool:
        """Whether ``take_deleted_files`` may return something."""
        return bool(self.deleted_files or self._deleted_segments)

    def _notify_deleted(self) -> None:
        if self.deleted_listener is not None and self.has_deleted_files:
            self.deleted_listener(self)

    def take_deleted_files(self) -> list[str]:
        """The `.deleted` files waiting to be unlinked (the caller removes them off-loop)."""
        files, self.deleted_files = self.deleted_files, []
        kept = []
        for segment, paths in self._deleted_segments:
            if segment.pinned:  # a reader is still on it: its files go at a later purge
                kept.append((segment, paths))
            else:
                files += paths
        self._deleted_segments = kept
        return files

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after the one containing `offset` (recovery, failed
        fsync). Waiters beyond the new end fail; the high watermark follows."""
        if offset >= self._log_end_offset:
            return
        self._generation += 1
        self._hw_position = None
        full = offset <= self._segments[0].base_offset
        if full:
            # Kafka's truncateFullyAndStartAt
            for segment in list(self._segments):
                self._remove_segment(segment)
            new = self._new_segment(offset)
            self._segments.append(new)
            self._base_offsets.append(new.base_offset)
            self._dir_dirty = True
            self.log_start_offset = offset
        else:
            for segment in [s for s in self._segments if s.base_offset > offset]:
                self._remove_segment(segment)
            self._segments[-1].truncate_to(offset)
        self._log_end_offset = self._segments[-1].next_offset
        self.high_watermark = min(self.high_watermark, self._log_end_offset)
        self.log_start_offset = min(self.log_start_offset, self._log_end_offset)
        # Kafka's truncateFullyAndStartAt / truncateAndReload + rebuildProducerState
        if full:
            self.producer_state.truncate_fully_and_start_at(offset)
        else:
            self._reload_producer_state()
        live = set(self.producer_state.snapshots.values())
        self._snapshots_unflushed = [p for p in self._snapshots_unflushed if p in live]
        self._mark_unflushed(self._segments[-1], True, notify=False)
        if any(offset > self._log_end_offset for offset, _, _ in self._waiters):
            self._fail_waiters(
                KafkaError(Error.KAFKA_STORAGE_ERROR, f"{self.topic_partition} was truncated")
            )
        log.warning("%s: truncated to offset %d", self.topic_partition, self._log_end_offset)

    # -- lifecycle --------------------------------------------------------------------------

    def close(self, flush: bool = True) -> None:
        """Write the final time index entry, flush everything (segments and indexes) unless
        `flush` is False (topic deletion), close files. Pending waiters fail."""
        if self.closed:
            return
        try:
            if flush:
                self.take_producer_snapshot()
                active = self._segments[-1]
                active.on_become_inactive()
                self._unflushed = {k: (seg, True) for k, (seg, _) in self._unflushed.items()}
                self._unflushed[active.base_offset] = (active, True)
                self.flush()
        finally:
            self.closed = True
            self._fail_waiters(
                KafkaError(Error.KAFKA_STORAGE_ERROR, f"{self.topic_partition} was closed")
            )
            for segment in self._segments:
                segment.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.topic_partition}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, end={self._log_end_offset}, "
            f"segments={len(self._segments)})"
        )


def _whole_batches_end(data: bytes) -> int:
    """Length of the longest prefix of `data` made of whole batches."""
    end = 0
    n = len(data)
    unpack = _LENGTH.unpack_from
    while end + LOG_OVERHEAD <= n:
        nxt = end + LOG_OVERHEAD + unpack(data, end + 8)[0]
        if nxt > n:
            break
        end = nxt
    return end


def _records_end_offset(data: bytes | memoryview) -> int:
    """One past the last offset of the last whole batch in `data` (a read's result)."""
    unpack = _LENGTH.unpack_from
    n = len(data)
    position = last = 0
    while position + LOG_OVERHEAD <= n:
        end = position + LOG_OVERHEAD + unpack(data, position + 8)[0]
        if end > n:
            break
        last, position = position, end
    return BatchHeader(data, last).last_offset + 1


def partition_dir_name(topic_partition: TopicPartition) -> str:
    return f"{topic_partition.topic}-{topic_partition.partition}"


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isdigit():
        return None
    return TopicPartition(topic, int(partition))


__all__ = [
    "AppendResult",
    "FlushJob",
    "PartitionLog",
    "ReadResult",
    "parse_partition_dir_name",
    "partition_dir_name",
]
