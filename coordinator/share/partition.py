"""One share-partition's state (KIP-932, Kafka's SharePartition): pure, no I/O, no clock.

A share group consumes a topic partition cooperatively. The state of a share-partition is
its start offset (SPSO: every offset below it is done), its end offset (SPEO, exclusive
here: the next offset never fetched for this group) and, for offsets in between, one
in-flight record each: state, delivery count and, while ACQUIRED, the owning member and
the deadline of its acquisition lock.

  AVAILABLE (0) --acquire--> ACQUIRED (1) --ACCEPT--> ACKNOWLEDGED (2)
                             ACQUIRED --REJECT/GAP--> ARCHIVED (4)
                             ACQUIRED --RELEASE / lock timeout--> AVAILABLE, or ARCHIVED
                                     once the delivery count reached the limit
                             ACQUIRED --member leaves--> AVAILABLE, delivery count - 1
                                     (the records were fetched but not delivered)

Acquiring increments the delivery count, so an AVAILABLE record always has a count below
``group.share.delivery.count.limit`` and no record is delivered more often than that.
An offset in [SPSO, SPEO) without an in-flight record was fetched before a restart but its
acquisition never became durable (Kafka persists transitions out of ACQUIRED only): it is
acquirable again with delivery count 0. The SPSO moves past a prefix of ACKNOWLEDGED /
ARCHIVED records, dropping them, and past offsets the log no longer has (below its log
start offset: retention, DeleteRecords), where AVAILABLE records are archived and ACQUIRED
ones are archived when released.

Acquisition works on the log batches a fetch returned (``FetchedBatch``: only headers);
like Kafka it acquires whole batches (``max_records`` is a soft limit) and never more new
records than ``group.share.partition.max.record.locks`` allow in flight. Control batches,
holes between batches and, at read_committed, batches of aborted transactions are archived
at once and never delivered; the caller reads no further than the last stable offset.

Every durable change (acknowledgement, release, lock timeout, archiving) is returned as a
``StateWrite`` (start offset + state batches, Kafka's persister shape) that the caller must
make durable before answering; ``AcknowledgeResult.error`` carries Kafka's codes
(INVALID_REQUEST, INVALID_RECORD_STATE). If a write fails the caller drops this object and
rebuilds it from the durable state (``from_state``), so nothing not durable survives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from semel.protocol.errors import Error


class RecordState(IntEnum):
    """Kafka's RecordState ids (also the persisted DeliveryState)."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes (0 is a gap: no record at the offset)."""
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_ACK_TO_STATE = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState
    delivery_count: int
    member_id: str | None = None  # the owner while ACQUIRED
    lock_deadline_ms: int = 0  # while ACQUIRED


@dataclass(frozen=True, slots=True)
class FetchedBatch:
    """What acquisition needs of a log batch: its offsets and transactional nature."""
    base_offset: int
    last_offset: int
    producer_id: int = -1
    is_transactional: bool = False
    is_control: bool = False


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """ShareFetch's AcquiredRecords: a run of offsets delivered with one delivery count."""
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A persisted run of offsets in one state (Kafka's PersisterStateBatch)."""
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(slots=True)
class StateWrite:
    """One write to ``__share_group_state``: the start offset, the changed runs and the
    number of finished (ACKNOWLEDGED/ARCHIVED) records at or above the start offset (Kafka
    4.2's DeliveryCompleteCount; -1 unknown)."""
    start_offset: int
    state_batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    """ShareAcknowledge's AcknowledgementBatch: one type for the range, or one per offset."""
    first_offset: int
    last_offset: int
    acknowledge_types: Sequence[int]


@dataclass(slots=True)
class AcknowledgeResult:
    error: Error = Error.NONE
    message: str | None = None
    write: StateWrite | None = None


class SharePartition:
    def __init__(self, group_id: str, topic_id, partition: int, start_offset: int, *,
                 max_delivery_count: int = 5, max_in_flight_records: int = 2000,
                 record_lock_duration_ms: int = 30_000) -> None:
        self.group_id = group_id
        self.topic_id = topic_id
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.max_delivery_count = max_delivery_count
        self.max_in_flight_records = max_in_flight_records
        self.record_lock_duration_ms = record_lock_duration_ms
        self.records: dict[int, InFlightRecord] = {}
        # offsets below it are gone from the log (retention, DeleteRecords): one without an
        # in-flight record counts as finished, one released is archived
        self.log_start_offset = 0
        self._earliest_deadline: int | None = None  # no lock expires before it

    @classmethod
    def from_state(cls, group_id: str, topic_id, partition: int, start_offset: int,
                   state_batches: Iterable[StateBatch], **limits) -> SharePartition:
        """Rebuild from durable state (Kafka's maybeInitialize over a ReadShareGroupState
        answer): batches below the start offset are ignored; nothing is ACQUIRED."""
        sp = cls(group_id, topic_id, partition, start_offset, **limits)
        for batch in state_batches:
            state = RecordState(batch.delivery_state)
            if state == RecordState.ACQUIRED:
                state = RecordState.AVAILABLE
            for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
                sp.records[offset] = InFlightRecord(state, batch.delivery_count)
            sp.end_offset = max(sp.end_offset, batch.last_offset + 1)
        sp._advance_start_offset()
        return sp

    # -- queries --------------------------------------------------------------------------

    @property
    def in_flight_count(self) -> int:
        return self.end_offset - self.start_offset

    @property
    def acquired_count(self) -> int:
        """Records ACQUIRED by some member now."""
        return sum(1 for r in self.records.values() if r.state == RecordState.ACQUIRED)

    def next_fetch_offset(self) -> int:
        """The first offset that may be acquired: an AVAILABLE (or never durable) record in
        flight, else the end offset."""
        records = self.records
        for offset in range(max(self.start_offset, self.log_start_offset), self.end_offset):
            record = records.get(offset)
            if record is None or record.state == RecordState.AVAILABLE:
                return offset
        return self.end_offset

    def has_acquirable(self) -> bool:
        return self.next_fetch_offset() < self.end_offset

    def acquired_by(self, member_id: str) -> list[int]:
        return [o for o, r in self.records.items()
                if r.state == RecordState.ACQUIRED and r.member_id == member_id]

    def next_lock_deadline(self) -> int | None:
        deadlines = [r.lock_deadline_ms for r in self.records.values()
                     if r.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def durable_view(self) -> tuple[int, dict[int, tuple[int, int]]]:
        """(start offset, offset -> (state, delivery count)) as a restart would find it:
        an ACQUIRED record is AVAILABLE with its count before the acquisition (Kafka does not
        persist acquisitions), and AVAILABLE records with count 0 - the same as never
        fetched - are left out. Two share-partitions with equal views deliver alike."""
        view: dict[int, tuple[int, int]] = {}
        for offset, record in self.records.items():
            state, count = record.state, record.delivery_count
            if state == RecordState.ACQUIRED:
                state, count = RecordState.AVAILABLE, count - 1
            if state != RecordState.AVAILABLE or count:
                view[offset] = (int(state), count)
        return self.start_offset, view

    # -- acquire --------------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Sequence[FetchedBatch], max_records: int,
                now_ms: int, *, fetch_offset: int | None = None,
                aborted_transactions: Sequence[tuple[int, int]] | None = None,
                ) -> tuple[list[AcquiredRecords], StateWrite | None]:
        """Acquire for ``member_id`` the acquirable records of ``batches`` (whole batches,
        in order, as a read from ``fetch_offset`` returned them). ``aborted_transactions``
        (producer id, first offset), given at read_committed, archives the data of aborted
        transactions. Returns the acquired runs and the write archiving records, if any."""
        acquired: list[AcquiredRecords] = []
        archived: list[int] = []
        if max_records <= 0 or not batches:
            return acquired, None
        deadline = now_ms + self.record_lock_duration_ms
        records = self.records
        pending_aborts = sorted(aborted_transactions or (), key=lambda t: t[1])
        aborting: set[int] = set()
        next_abort = 0
        count = 0
        position = self.start_offset if fetch_offset is None else max(fetch_offset,
                                                                        self.start_offset)
        for batch in batches:
            if batch.last_offset < position:
                continue
            while (next_abort < len(pending_aborts)
                   and pending_aborts[next_abort][1] <= batch.last_offset):
                aborting.add(pending_aborts[next_abort][0])
                next_abort += 1
            first = max(batch.base_offset, self.start_offset, self.log_start_offset)
            new_offsets = max(0, batch.last_offset + 1 - max(first, self.end_offset))
            if count >= max_records:
                break
            if new_offsets and self.in_flight_count >= self.max_in_flight_records:
                break
            # offsets between the previous position and this batch hold no record
            for offset in range(max(position, self.log_start_offset), first):
                if self._archive_unfetched(offset):
                    archived.append(offset)
            skip = batch.is_control or (batch.is_transactional
                                        and batch.producer_id in aborting)
            if batch.is_control:
                aborting.discard(batch.producer_id)
            for offset in range(first, batch.last_offset + 1):
                if offset >= self.end_offset:
                    self.end_offset = offset + 1
                record = records.get(offset)
                if record is None:
                    record = records[offset] = InFlightRecord(RecordState.AVAILABLE, 0)
                elif record.state != RecordState.AVAILABLE:
                    continue
                if skip:
                    record.state = RecordState.ARCHIVED
                    archived.append(offset)
                    continue
                record.state = RecordState.ACQUIRED
                record.delivery_count += 1
                record.member_id = member_id
                record.lock_deadline_ms = deadline
                if self._earliest_deadline is None or deadline < self._earliest_deadline:
                    self._earliest_deadline = deadline
                count += 1
                _append_acquired(acquired, offset, record.delivery_count)
            position = batch.last_offset + 1
        return acquired, self._write_for(archived)

    def _archive_unfetched(self, offset: int) -> bool:
        """An offset the log has no record at (compacted away, between batches)."""
        if offset < self.start_offset:
            return False
        record = self.records.get(offset)
        if record is None:
            self.records[offset] = InFlightRecord(RecordState.ARCHIVED, 0)
            self.end_offset = max(self.end_offset, offset + 1)
            return True
        if record.state == RecordState.AVAILABLE:
            record.state = RecordState.ARCHIVED
            return True
        return False

    # -- acknowledge ----------------------------------------------------------------------

    def acknowledge(self, member_id: str,
                    batches: Sequence[AcknowledgementBatch]) -> AcknowledgeResult:
        """Apply every acknowledgement batch, or none of them (Kafka's acknowledge): an
        invalid type or a range outside the fetched records is INVALID_REQUEST; a record
        not ACQUIRED by ``member_id`` is INVALID_RECORD_STATE."""
        changes: list[tuple[int, RecordState]] = []
        for batch in batches:
            first, last, types = batch.first_offset, batch.last_offset, batch.acknowledge_types
            if first > last:
                return AcknowledgeResult(Error.INVALID_REQUEST, "first offset after last offset")
            if len(types) != 1 and len(types) != last - first + 1:
                return AcknowledgeResult(Error.INVALID_REQUEST,
                                         f"{len(types)} acknowledge types for "
                                         f"{last - first + 1} offsets")
            try:
                kinds = [AcknowledgeType(t) for t in types]
            except ValueError:
                return AcknowledgeResult(Error.INVALID_REQUEST,
                                         f"Invalid acknowledge type: {list(types)}")
            if last < self.start_offset:
                continue  # all done already
            if first >= self.end_offset:
                return AcknowledgeResult(Error.INVALID_REQUEST, "Batch record not found. The "
                                         "first offset in request is past acquired records.")
            if last >= self.end_offset:
                return AcknowledgeResult(Error.INVALID_REQUEST, "Batch record not found. The "
                                         "last offset in request is past acquired records.")
            for offset in range(max(first, self.start_offset), last + 1):
                record = self.records.get(offset)
                if record is None or record.state != RecordState.ACQUIRED:
                    return AcknowledgeResult(Error.INVALID_RECORD_STATE,
                                             "The offset cannot be acknowledged. The offset "
                                             "is not acquired.")
                if record.member_id != member_id:
                    return AcknowledgeResult(Error.INVALID_RECORD_STATE,
                                             "Member is not the owner of offset")
                kind = kinds[0] if len(kinds) == 1 else kinds[offset - first]
                changes.append((offset, _ACK_TO_STATE[kind]))
        seen: set[int] = set()
        for offset, _ in changes:
            if offset in seen:
                return AcknowledgeResult(Error.INVALID_RECORD_STATE,
                                         f"offset {offset} acknowledged twice")
            seen.add(offset)
        changed: list[int] = []
        for offset, state in changes:
            record = self.records[offset]
            if state == RecordState.AVAILABLE:
                self._release(record, offset, decrease=False)
            else:
                record.state = state
                record.member_id = None
            changed.append(offset)
        return AcknowledgeResult(write=self._write_for(changed))

    # -- release ----------------------------------------------------------------------------

    def release_acquired_records(self, member_id: str) -> StateWrite | None:
        """The member left (or its share session closed): its records become AVAILABLE
        again with the delivery count of before the acquisition (Kafka's
        releaseAcquiredRecords, DeliveryCountOps.DECREASE)."""
        changed = self.acquired_by(member_id)
        for offset in changed:
            self._release(self.records[offset], offset, decrease=True)
        return self._write_for(changed)

    def expire_locks(self, now_ms: int) -> StateWrite | None:
        """Acquisition locks past their deadline: AVAILABLE again, or ARCHIVED once the
        delivery count reached the limit (Kafka's acquisition lock timeout)."""
        if self._earliest_deadline is None or now_ms < self._earliest_deadline:
            return None  # the common case: nothing can have expired, no scan
        changed = [o for o, r in self.records.items()
                   if r.state == RecordState.ACQUIRED and r.lock_deadline_ms <= now_ms]
        self._earliest_deadline = None
        for offset in sorted(changed):
            self._release(self.records[offset], offset, decrease=False)
        self._earliest_deadline = self.next_lock_deadline()
        return self._write_for(sorted(changed))

    def _release(self, record: InFlightRecord, offset: int, *, decrease: bool) -> None:
        record.member_id = None
        record.lock_deadline_ms = 0
        if offset < self.log_start_offset:
            record.state = RecordState.ARCHIVED  # gone from the log meanwhile
        elif decrease:
            record.delivery_count = max(record.delivery_count - 1, 0)
            record.state = RecordState.AVAILABLE
        elif record.delivery_count >= self.max_delivery_count:
            record.state = RecordState.ARCHIVED
        else:
            record.state = RecordState.AVAILABLE

    def update_log_start_offset(self, log_start_offset: int) -> StateWrite | None:
        """Records below the log start offset are gone (retention, DeleteRecords): the
        AVAILABLE ones are archived, the ones never fetched count as finished, ACQUIRED ones
        are archived when released; the start offset moves up past what is finished."""
        if log_start_offset <= self.log_start_offset:
            return None
        self.log_start_offset = log_start_offset
        if log_start_offset <= self.start_offset:
            return None
        changed = sorted(o for o, r in self.records.items()
                         if o < log_start_offset and r.state == RecordState.AVAILABLE)
        for offset in changed:
            self.records[offset].state = RecordState.ARCHIVED
        self.end_offset = max(self.end_offset, log_start_offset)
        runs = _runs(self, changed)
        before = self.start_offset
        self._advance_start_offset()
        if not runs and self.start_offset == before:
            return None
        return StateWrite(self.start_offset, runs, self.delivery_complete_count())

    # -- start offset ---------------------------------------------------------------------

    def _advance_start_offset(self) -> None:
        """Move the SPSO past the ACKNOWLEDGED/ARCHIVED prefix, dropping those records."""
        records = self.records
        offset = self.start_offset
        while offset < self.end_offset:
            record = records.get(offset)
            if record is None:
                if offset >= self.log_start_offset:
                    break
                # gone from the log and never fetched: skip to the next record in flight
                following = min((o for o in records if o > offset), default=self.end_offset)
                offset = min(following, self.log_start_offset)
                continue
            if record.state not in TERMINAL:
                break
            del records[offset]
            offset += 1
        self.start_offset = offset

    def _write_for(self, changed: list[int]) -> StateWrite | None:
        """The write persisting the changed offsets (their new state, as runs) and the
        start offset after moving it."""
        if not changed:
            return None
        runs = _runs(self, sorted(changed))
        self._advance_start_offset()
        return StateWrite(self.start_offset, runs, self.delivery_complete_count())

    def delivery_complete_count(self) -> int:
        """Finished records in flight (all at or above the start offset)."""
        return sum(1 for r in self.records.values() if r.state in TERMINAL)


def _runs(sp: SharePartition, offsets: list[int]) -> list[StateBatch]:
    runs: list[StateBatch] = []
    for offset in offsets:
        record = sp.records.get(offset)
        if record is None:
            continue
        _append_run(runs, offset, int(record.state), record.delivery_count)
    return runs


def _append_run(runs: list[StateBatch], offset: int, state: int, count: int) -> None:
    if runs:
        last = runs[-1]
        if (last.last_offset + 1 == offset and last.delivery_state == state
                and last.delivery_count == count):
            runs[-1] = StateBatch(last.first_offset, offset, state, count)
            return
    runs.append(StateBatch(offset, offset, state, count))


def _append_acquired(runs: list[AcquiredRecords], offset: int, count: int) -> None:
    if runs:
        last = runs[-1]
        if last.last_offset + 1 == offset and last.delivery_count == count:
            runs[-1] = AcquiredRecords(last.first_offset, offset, count)
            return
    runs.append(AcquiredRecords(offset, offset, count))
