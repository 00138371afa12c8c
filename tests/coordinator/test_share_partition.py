"""SharePartition (KIP-932): acquisition, acknowledgement, release, lock timeouts, delivery
count limit, in-flight limit, start offset movement, read_committed filtering, reload."""

from __future__ import annotations

import uuid

import pytest

from semel.coordinator.share.partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    FetchedBatch,
    RecordState,
    SharePartition,
    StateBatch,
)
from semel.protocol.errors import Error

A, ACQ, ACK, ARC = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                    RecordState.ARCHIVED)
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
TOPIC = uuid.UUID(int=7)


def sp(start: int = 0, **limits) -> SharePartition:
    limits.setdefault("record_lock_duration_ms", 1000)
    return SharePartition("g", TOPIC, 0, start, **limits)


def batches(*ranges: tuple[int, int]) -> list[FetchedBatch]:
    return [FetchedBatch(first, last) for first, last in ranges]


def states(p: SharePartition) -> dict[int, tuple[RecordState, int]]:
    return {o: (r.state, r.delivery_count) for o, r in sorted(p.records.items())}


def ack(first, last, *types):
    return AcknowledgementBatch(first, last, list(types))


def test_acquire_new_batches_whole_and_soft_limit():
    p = sp()
    got, write = p.acquire("m1", batches((0, 4), (5, 9), (10, 14)), 7, now_ms=0)
    # whole batches: the second batch starts below the limit of 7 and is taken whole
    assert got == [AcquiredRecords(0, 9, 1)]
    assert write is None
    assert p.start_offset == 0 and p.end_offset == 10
    assert all(r.member_id == "m1" and r.lock_deadline_ms == 1000 for r in p.records.values())
    assert p.next_fetch_offset() == 10


def test_acquired_records_are_not_acquired_again():
    p = sp()
    p.acquire("m1", batches((0, 4)), 10, now_ms=0)
    got, _ = p.acquire("m2", batches((0, 4), (5, 6)), 10, now_ms=0, fetch_offset=0)
    assert got == [AcquiredRecords(5, 6, 1)]
    assert p.acquired_by("m1") == [0, 1, 2, 3, 4]
    assert p.acquired_by("m2") == [5, 6]


def test_accept_moves_start_offset():
    p = sp()
    p.acquire("m1", batches((0, 9)), 10, now_ms=0)
    result = p.acknowledge("m1", [ack(0, 3, ACCEPT)])
    assert result.error == Error.NONE
    assert result.write.start_offset == 4
    assert result.write.state_batches == [StateBatch(0, 3, 2, 1)]
    assert p.start_offset == 4 and 0 not in p.records


def test_per_offset_types_and_gap():
    p = sp()
    p.acquire("m1", batches((0, 4)), 10, now_ms=0)
    result = p.acknowledge("m1", [ack(0, 4, ACCEPT, GAP, RELEASE, REJECT, ACCEPT)])
    assert result.error == Error.NONE
    assert result.write.state_batches == [StateBatch(0, 0, 2, 1), StateBatch(1, 1, 4, 1),
                                          StateBatch(2, 2, 0, 1), StateBatch(3, 3, 4, 1),
                                          StateBatch(4, 4, 2, 1)]
    assert p.start_offset == 2  # 0 accepted, 1 gap (archived), 2 released
    assert states(p) == {2: (A, 1), 3: (ARC, 1), 4: (ACK, 1)}
    assert p.next_fetch_offset() == 2


def test_release_redelivers_with_higher_count():
    p = sp()
    p.acquire("m1", batches((0, 1)), 10, now_ms=0)
    p.acknowledge("m1", [ack(0, 1, RELEASE)])
    got, _ = p.acquire("m2", batches((0, 1)), 10, now_ms=0, fetch_offset=p.next_fetch_offset())
    assert got == [AcquiredRecords(0, 1, 2)]


def test_delivery_count_limit_archives_on_release_and_timeout():
    p = sp(max_delivery_count=2)
    p.acquire("m1", batches((0, 0)), 10, now_ms=0)
    p.acknowledge("m1", [ack(0, 0, RELEASE)])
    p.acquire("m1", batches((0, 0)), 10, now_ms=0, fetch_offset=0)
    assert states(p) == {0: (ACQ, 2)}
    write = p.expire_locks(1000)  # the second delivery timed out: archived, never a third
    assert write.state_batches == [StateBatch(0, 0, 4, 2)]
    assert p.start_offset == 1 and p.records == {}


def test_lock_timeout_makes_available_again_and_late_ack_fails():
    p = sp()
    p.acquire("m1", batches((0, 2)), 10, now_ms=0)
    assert p.expire_locks(999) is None
    write = p.expire_locks(1000)
    assert write.state_batches == [StateBatch(0, 2, 0, 1)] and write.start_offset == 0
    result = p.acknowledge("m1", [ack(0, 2, ACCEPT)])
    assert result.error == Error.INVALID_RECORD_STATE
    assert states(p) == {0: (A, 1), 1: (A, 1), 2: (A, 1)}


def test_member_leave_releases_with_count_decreased():
    p = sp()
    p.acquire("m1", batches((0, 1)), 10, now_ms=0)
    p.acquire("m2", batches((2, 3)), 10, now_ms=0)
    write = p.release_acquired_records("m1")
    assert write.state_batches == [StateBatch(0, 1, 0, 0)]
    assert states(p)[0] == (A, 0) and states(p)[2] == (ACQ, 1)
    assert p.release_acquired_records("m1") is None


@pytest.mark.parametrize("batch, error", [
    (ack(0, 1, 9), Error.INVALID_REQUEST),  # unknown type
    (ack(1, 0, ACCEPT), Error.INVALID_REQUEST),  # first > last
    (ack(0, 2, ACCEPT, ACCEPT), Error.INVALID_REQUEST),  # types neither 1 nor one per offset
    (ack(5, 6, ACCEPT), Error.INVALID_REQUEST),  # past the fetched records
    (ack(3, 5, ACCEPT), Error.INVALID_REQUEST),  # last past the fetched records
    (ack(4, 4, ACCEPT), Error.INVALID_RECORD_STATE),  # another member's record
])
def test_acknowledge_errors_change_nothing(batch, error):
    p = sp()
    p.acquire("m1", batches((0, 3)), 10, now_ms=0)
    p.acquire("m2", batches((4, 4)), 10, now_ms=0)
    before = states(p)
    result = p.acknowledge("m1", [ack(0, 0, ACCEPT), batch])
    assert result.error == error and result.write is None
    assert states(p) == before and p.start_offset == 0


def test_acknowledging_twice_is_invalid_record_state():
    p = sp()
    p.acquire("m1", batches((0, 3)), 10, now_ms=0)
    assert p.acknowledge("m1", [ack(1, 1, ACCEPT)]).error == Error.NONE
    assert p.acknowledge("m1", [ack(1, 1, ACCEPT)]).error == Error.INVALID_RECORD_STATE
    # in one request, the same offset twice
    assert p.acknowledge("m1", [ack(2, 2, ACCEPT), ack(2, 3, REJECT)]).error == \
        Error.INVALID_RECORD_STATE
    # below the start offset: already done, ignored
    p.acknowledge("m1", [ack(0, 0, ACCEPT)])
    assert p.start_offset == 2
    assert p.acknowledge("m1", [ack(0, 1, ACCEPT)]).error == Error.NONE


def test_in_flight_limit_stops_new_records_not_redelivery():
    p = sp(max_in_flight_records=4)
    got, _ = p.acquire("m1", batches((0, 2), (3, 5), (6, 8)), 100, now_ms=0)
    assert got == [AcquiredRecords(0, 5, 1)]  # the second batch overshoots, the third waits
    got, _ = p.acquire("m1", batches((6, 8)), 100, now_ms=0)
    assert got == []
    p.acknowledge("m1", [ack(0, 1, RELEASE)])
    got, _ = p.acquire("m2", batches((0, 2)), 100, now_ms=0, fetch_offset=0)
    assert got == [AcquiredRecords(0, 1, 2)]
    p.acknowledge("m1", [ack(2, 5, ACCEPT)])
    p.acknowledge("m2", [ack(0, 1, ACCEPT)])
    assert p.start_offset == 6
    got, _ = p.acquire("m1", batches((6, 8)), 100, now_ms=0)
    assert got == [AcquiredRecords(6, 8, 1)]


def test_control_batches_aborted_transactions_and_holes_are_archived():
    p = sp()
    fetched = [FetchedBatch(0, 1, producer_id=7, is_transactional=True),
               FetchedBatch(2, 2, producer_id=7, is_transactional=True, is_control=True),
               FetchedBatch(3, 4, producer_id=8, is_transactional=True),
               FetchedBatch(5, 5, producer_id=8, is_transactional=True, is_control=True),
               FetchedBatch(8, 9)]  # 6-7 compacted away
    got, write = p.acquire("m1", fetched, 100, now_ms=0, aborted_transactions=[(7, 0)])
    assert got == [AcquiredRecords(3, 4, 1), AcquiredRecords(8, 9, 1)]
    assert states(p) == {3: (ACQ, 1), 4: (ACQ, 1), 8: (ACQ, 1), 9: (ACQ, 1),
                         5: (ARC, 0), 6: (ARC, 0), 7: (ARC, 0)}
    assert p.start_offset == 3  # 0-2 archived and persisted
    assert write.start_offset == 3
    assert write.state_batches[0] == StateBatch(0, 2, 4, 0)


def test_log_start_offset_movement():
    p = sp()
    p.acquire("m1", batches((0, 4)), 100, now_ms=0)
    p.acknowledge("m1", [ack(0, 1, RELEASE)])
    write = p.update_log_start_offset(3)
    assert write.start_offset == 2  # 2 is still acquired
    assert states(p)[2] == (ACQ, 1)
    p.acknowledge("m1", [ack(2, 4, ACCEPT)])
    assert p.start_offset == 5
    p.update_log_start_offset(20)
    assert p.start_offset == p.end_offset == 20 and p.records == {}


def test_reload_from_state_batches():
    p = SharePartition.from_state("g", TOPIC, 0, 5, [
        StateBatch(3, 6, 2, 1),  # below the start offset partly
        StateBatch(7, 7, 0, 2),
        StateBatch(9, 10, 4, 1),
    ])
    # 5, 6 acknowledged: the start moves to 7; 8 was never durable: acquirable, count 0
    assert p.start_offset == 7 and p.end_offset == 11
    assert p.next_fetch_offset() == 7
    got, _ = p.acquire("m", batches((7, 7), (8, 8), (9, 10), (11, 11)), 100, now_ms=0)
    assert got == [AcquiredRecords(7, 7, 3), AcquiredRecords(8, 8, 1), AcquiredRecords(11, 11, 1)]


def test_log_start_passing_records_in_flight():
    p = sp()
    p.acquire("m1", batches((0, 4)), 100, now_ms=0)
    assert p.acknowledge("m1", [ack(0, 1, ACCEPT)]).error == Error.NONE
    write = p.update_log_start_offset(10)  # 5-9 gone before ever being fetched
    assert write is None and p.start_offset == 2  # 2-4 still acquired, nothing changed
    assert p.end_offset == 10 and p.next_fetch_offset() == 10
    got, _ = p.acquire("m2", batches((8, 12)), 100, now_ms=0, fetch_offset=10)
    assert got == [AcquiredRecords(10, 12, 1)]  # nothing below the log start
    # released records below the log start are archived, not offered again
    write = p.acknowledge("m1", [ack(2, 4, RELEASE)]).write
    assert write.state_batches == [StateBatch(2, 4, 4, 1)]
    assert write.start_offset == 10 and p.start_offset == 10
    write = p.expire_locks(10**6)  # m2's lock: available again, the start stays
    assert write.start_offset == 10 and write.state_batches == [StateBatch(10, 12, 0, 1)]
