"""Model test of a share-partition and its durable state: random sequences of acquire,
acknowledge (accept/release/reject/gap, valid and not), lock timeouts, member departures and
restarts (the state rebuilt from the encoded ``__share_group_state`` records alone) and
the log start moving up (retention) against
a small reference model, over a log with transactions (committed and aborted, read at
read_committed), control batches and holes.

Checked after every step: a record is acquired by at most one member and only when the
model says it is acquirable, with the delivery count the model expects; the delivery count
never exceeds the limit; an acknowledgement succeeds exactly when the model says it is
valid; the start offset never moves back; a restart keeps exactly the durable view. At the
end every offset is finished (ACKNOWLEDGED or ARCHIVED) exactly once and deliverable records
were archived only by a reject, a gap or the delivery count limit.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

import pytest

from semel.coordinator.share.partition import (
    AcknowledgementBatch,
    FetchedBatch,
    RecordState,
    SharePartition,
)
from semel.coordinator.share.records import SharePartitionKey, decode_record, encode_record
from semel.coordinator.share.store import ShareStateStore
from semel.protocol.errors import Error

LIMIT = 3
LOCK_MS = 100
KEY = SharePartitionKey("g", uuid.UUID(int=1), 0)
MEMBERS = ["m1", "m2", "m3"]


def make_log(rng: random.Random) -> tuple[list[FetchedBatch], list[tuple[int, int]], set[int]]:
    """Batches from offset 0: plain, transactional (committed or aborted, each followed by
    its control batch) and holes. Returns the batches, the aborted transactions and the
    offsets a consumer may be given (data of non-aborted batches)."""
    batches: list[FetchedBatch] = []
    aborted: list[tuple[int, int]] = []
    deliverable: set[int] = set()
    offset = 0
    pid = 100
    while offset < rng.randint(30, 70):
        kind = rng.random()
        size = rng.randint(1, 4)
        if kind < 0.1:
            offset += rng.randint(1, 3)  # compacted away
            continue
        if kind < 0.35:
            pid += 1
            abort = rng.random() < 0.5
            batches.append(FetchedBatch(offset, offset + size - 1, pid, True))
            if abort:
                aborted.append((pid, offset))
            else:
                deliverable.update(range(offset, offset + size))
            offset += size
            batches.append(FetchedBatch(offset, offset, pid, True, True))
            offset += 1
            continue
        batches.append(FetchedBatch(offset, offset + size - 1))
        deliverable.update(range(offset, offset + size))
        offset += size
    return batches, aborted, deliverable


@dataclass
class Rec:
    state: RecordState = RecordState.AVAILABLE
    count: int = 0
    member: str | None = None
    deadline: int = 0
    finished: int = 0  # times it became ACKNOWLEDGED/ARCHIVED
    archived_by: str = ""


class Harness:
    def __init__(self, rng: random.Random, max_in_flight: int) -> None:
        self.rng = rng
        self.batches, self.aborted, self.deliverable = make_log(rng)
        self.log_end = self.batches[-1].last_offset + 1
        self.limits = {"max_delivery_count": LIMIT, "max_in_flight_records": max_in_flight,
                       "record_lock_duration_ms": LOCK_MS}
        self.sp = SharePartition("g", KEY.topic_id, 0, 0, **self.limits)
        self.store = ShareStateStore(snapshot_update_records_per_snapshot=4)
        self.durable: list[tuple[bytes, bytes | None]] = []
        self.durable.append(encode_record(self.store.initialize_state(KEY, 0, 0)))
        self.model = {o: Rec() for o in range(self.log_end)}
        self.now = 0
        self.last_start = 0
        self.log_start = 0  # retention / DeleteRecords move it up

    # -- plumbing ---------------------------------------------------------------------

    def persist(self, write) -> None:
        if write is not None:
            self.durable.append(encode_record(self.store.write_state(KEY, write, self.now)))

    def finish(self, offset: int, state: RecordState, why: str) -> None:
        rec = self.model[offset]
        rec.state, rec.member = state, None
        rec.finished += 1
        rec.archived_by = why

    def fetch(self) -> tuple[int, list[FetchedBatch]]:
        fetch_offset = self.sp.next_fetch_offset()
        found = [b for b in self.batches if b.last_offset >= max(fetch_offset, self.log_start)]
        return fetch_offset, found[: self.rng.randint(1, 4)]

    def retention(self) -> None:
        """The log start moves up; the share-partition hears of it (as before every fetch)."""
        self.log_start = max(self.log_start, self.rng.randint(self.log_start, self.log_end))
        self.apply_log_start()

    def apply_log_start(self) -> None:
        self.persist(self.sp.update_log_start_offset(self.log_start))
        for offset, rec in self.model.items():
            if offset < self.log_start and rec.state == RecordState.AVAILABLE:
                self.finish(offset, RecordState.ARCHIVED, "retention")

    # -- operations -------------------------------------------------------------------

    def acquire(self, member: str) -> None:
        fetch_offset, fetched = self.fetch()
        before = {o: r.state for o, r in self.sp.records.items()}
        got, write = self.sp.acquire(member, fetched, self.rng.randint(1, 8), self.now,
                                     fetch_offset=fetch_offset,
                                     aborted_transactions=self.aborted)
        self.persist(write)
        for run in got:
            for offset in range(run.first_offset, run.last_offset + 1):
                rec = self.model[offset]
                assert offset in self.deliverable, f"undeliverable {offset} acquired"
                assert rec.state == RecordState.AVAILABLE, f"{offset} acquired twice"
                assert rec.count + 1 == run.delivery_count <= LIMIT
                rec.state, rec.count, rec.member = RecordState.ACQUIRED, rec.count + 1, member
                rec.deadline = self.now + LOCK_MS
        # records archived by the acquisition: only what may never be delivered
        for offset, record in self.sp.records.items():
            if record.state == RecordState.ARCHIVED and before.get(offset) != RecordState.ARCHIVED:
                assert offset not in self.deliverable
                self.finish(offset, RecordState.ARCHIVED, "undeliverable")
        for offset in range(self.last_start, self.sp.start_offset):
            if self.model[offset].state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                assert offset not in self.deliverable
                self.finish(offset, RecordState.ARCHIVED, "undeliverable")

    def acknowledge(self, member: str) -> None:
        rng = self.rng
        mine = sorted(o for o, r in self.model.items()
                      if r.state == RecordState.ACQUIRED and r.member == member)
        if mine and rng.random() < 0.8:
            first = rng.choice(mine)
            last = first
            while last + 1 in mine and rng.random() < 0.7:
                last += 1
        else:
            first = rng.randint(max(self.sp.start_offset - 2, 0), self.log_end + 2)
            last = first + rng.randint(0, 3)
        n = last - first + 1
        types = [rng.choice([0, 1, 1, 1, 2, 2, 3])] if rng.random() < 0.5 else \
            [rng.choice([0, 1, 2, 3]) for _ in range(n)]
        if rng.random() < 0.03:
            types = [7]
        valid = types != [7] and all(
            o < self.sp.start_offset
            or (o in self.model and self.model[o].state == RecordState.ACQUIRED
                and self.model[o].member == member)
            for o in range(first, last + 1))
        result = self.sp.acknowledge(member, [AcknowledgementBatch(first, last, types)])
        assert (result.error == Error.NONE) == valid, (first, last, types, result)
        if not valid:
            assert result.error in (Error.INVALID_REQUEST, Error.INVALID_RECORD_STATE)
            return
        self.persist(result.write)
        for offset in range(max(first, self.last_start), last + 1):
            rec = self.model[offset]
            if rec.state != RecordState.ACQUIRED:
                continue  # below the start offset
            kind = types[0] if len(types) == 1 else types[offset - first]
            if kind == 1:
                self.finish(offset, RecordState.ACKNOWLEDGED, "accept")
            elif kind in (0, 3):
                self.finish(offset, RecordState.ARCHIVED, "reject")
            else:
                self.release(offset, "release")

    def release(self, offset: int, why: str) -> None:
        rec = self.model[offset]
        if offset < self.log_start:
            self.finish(offset, RecordState.ARCHIVED, "retention")
        elif rec.count >= LIMIT:
            self.finish(offset, RecordState.ARCHIVED, "limit")
        else:
            rec.state, rec.member = RecordState.AVAILABLE, None

    def advance(self) -> None:
        self.now += self.rng.choice([10, 50, LOCK_MS])
        self.persist(self.sp.expire_locks(self.now))
        for offset, rec in self.model.items():
            if rec.state == RecordState.ACQUIRED and rec.deadline <= self.now:
                self.release(offset, "timeout")

    def leave(self, member: str) -> None:
        self.persist(self.sp.release_acquired_records(member))
        for offset, rec in self.model.items():
            if rec.state == RecordState.ACQUIRED and rec.member == member:
                if offset < self.log_start:  # archived, the count kept (Kafka)
                    self.finish(offset, RecordState.ARCHIVED, "retention")
                else:
                    rec.state, rec.member, rec.count = (RecordState.AVAILABLE, None,
                                                        rec.count - 1)

    def restart(self) -> None:
        before = self.sp.durable_view()
        store = ShareStateStore(snapshot_update_records_per_snapshot=4)
        for key, value in self.durable:
            store.replay(decode_record(key, value))
        state = store.read_state(KEY)
        self.store = store
        self.sp = SharePartition.from_state("g", KEY.topic_id, 0, state.start_offset,
                                            state.state_batches(), **self.limits)
        assert self.sp.durable_view() == before
        for rec in self.model.values():  # acquisitions are not durable
            if rec.state == RecordState.ACQUIRED:
                rec.state, rec.member, rec.count = RecordState.AVAILABLE, None, rec.count - 1
        self.apply_log_start()  # the manager tells a new share-partition of the log start

    # -- checks -----------------------------------------------------------------------

    def check(self) -> None:
        sp = self.sp
        assert sp.start_offset >= self.last_start, "start offset moved back"
        self.last_start = sp.start_offset
        for offset, rec in self.model.items():
            assert rec.finished <= 1
            assert rec.count <= LIMIT
            record = sp.records.get(offset)
            if offset < sp.start_offset:
                assert rec.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED), offset
                continue
            if record is None:
                if offset < sp.log_start_offset:  # gone from the log, never fetched
                    assert rec.finished and rec.archived_by == "retention", (offset, rec)
                else:
                    assert rec.state == RecordState.AVAILABLE and rec.count == 0, (offset, rec)
                continue
            assert record.delivery_count <= LIMIT
            if offset in self.deliverable or rec.finished:
                assert record.state == rec.state, (offset, record, rec)
                assert record.delivery_count == rec.count, (offset, record, rec)
            if record.state == RecordState.ACQUIRED:
                assert record.member_id == rec.member

    def drain(self) -> None:
        """One member takes and accepts everything left; then every offset is finished."""
        for _ in range(10 * self.log_end + 50):
            if self.sp.start_offset >= self.log_end:
                break
            self.now += LOCK_MS
            self.advance()
            fetch_offset = self.sp.next_fetch_offset()
            fetched = [b for b in self.batches
                       if b.last_offset >= max(fetch_offset, self.log_start)]
            got, write = self.sp.acquire("drain", fetched, 1000, self.now,
                                         fetch_offset=fetch_offset,
                                         aborted_transactions=self.aborted)
            self.persist(write)
            for run in got:
                for offset in range(run.first_offset, run.last_offset + 1):
                    rec = self.model[offset]
                    rec.state, rec.count, rec.member = (RecordState.ACQUIRED, rec.count + 1,
                                                        "drain")
                    rec.deadline = self.now + LOCK_MS
                result = self.sp.acknowledge("drain", [AcknowledgementBatch(
                    run.first_offset, run.last_offset, [1])])
                assert result.error == Error.NONE
                self.persist(result.write)
                for offset in range(run.first_offset, run.last_offset + 1):
                    self.finish(offset, RecordState.ACKNOWLEDGED, "accept")
            for offset in range(self.last_start, self.sp.start_offset):
                if self.model[offset].finished == 0:
                    assert offset not in self.deliverable
                    self.finish(offset, RecordState.ARCHIVED, "undeliverable")
            self.check()
        assert self.sp.start_offset == self.log_end
        for offset, rec in self.model.items():
            assert rec.finished == 1, (offset, rec)
            if rec.state == RecordState.ARCHIVED and offset in self.deliverable:
                assert rec.archived_by in ("reject", "limit", "retention"), (offset, rec)
        self.restart()  # and the durable state agrees
        assert self.sp.start_offset == self.log_end and self.sp.records == {}


@pytest.mark.parametrize("seed", range(150))
def test_random_sequences(seed):
    rng = random.Random(seed)
    h = Harness(rng, max_in_flight=rng.choice([5, 20, 1000]))
    for _ in range(rng.randint(20, 120)):
        op = rng.random()
        member = rng.choice(MEMBERS)
        if op < 0.35:
            h.acquire(member)
        elif op < 0.7:
            h.acknowledge(member)
        elif op < 0.85:
            h.advance()
        elif op < 0.92:
            h.leave(member)
        elif op < 0.95:
            h.retention()
        else:
            h.restart()
        h.check()
    h.drain()
