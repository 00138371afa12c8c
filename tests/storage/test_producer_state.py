"""Producer state through PartitionLog.append: epochs, sequences (wrap-around), the
five-batch duplicate window and its edges, epoch bumps, expiry, transactions and the first
unstable offset, staging (a failed write changes nothing), truncation."""

from __future__ import annotations

import errno

import pytest
from log_helpers import FakeClock, make_batch, offsets, open_log, read_all

from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_control_batch
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from semel.storage.producer_state import (
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerStateEntry,
    decrement_sequence,
    in_sequence,
)

INT32_MAX = 2**31 - 1
PID = 1000


def batch(
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    txn: bool = False,
    timestamp: int = 1_700_000_000_000,
) -> bytes:
    return make_batch(
        count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        timestamp=timestamp,
    )


def marker(commit: bool, *, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_control_batch(
        commit=commit,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=1_700_000_000_500,
    )


def error_of(plog, data, **kw) -> Error:
    with pytest.raises(KafkaError) as excinfo:
        plog.append(data, **kw)
    return excinfo.value.code


# -- sequence arithmetic -------------------------------------------------------------------------


def test_sequence_helpers_wrap_at_int32_max():
    assert in_sequence(4, 5) and not in_sequence(4, 6) and not in_sequence(4, 4)
    assert in_sequence(INT32_MAX, 0) and not in_sequence(INT32_MAX, 1)
    assert decrement_sequence(10, 3) == 7
    assert decrement_sequence(1, 3) == INT32_MAX - 1  # 2147483646, 2147483647, 0, 1
    assert BatchMetadata(1, 103, 3, 0).first_seq == INT32_MAX - 1
    assert BatchMetadata(1, 103, 3, 0).first_offset == 100


# -- epochs and sequences ----------------------------------------------------------------------


def test_in_sequence_batches_are_appended_and_tracked(tmp_path):
    plog = open_log(tmp_path)
    assert plog.append(batch(0, 3)).base_offset == 0
    assert plog.append(batch(3, 2)).base_offset == 3
    entry = plog.producer_state.last_entry(PID)
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (0, 0, 4)
    assert (entry.first_data_offset, entry.last_data_offset) == (0, 4)
    assert plog.producer_state.producer_id_count == 1


def test_a_gap_or_an_old_sequence_is_out_of_order(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, 2))
    assert error_of(plog, batch(3)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER  # expected 2
    assert error_of(plog, batch(1)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps
    assert error_of(plog, batch(0, 1)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER  # range differs
    assert plog.log_end_offset == 2
    assert plog.append(batch(2)).base_offset == 2


def test_unknown_producer_may_start_at_any_sequence(tmp_path):
    # Kafka >= 2.5 (KIP-360): no state (never seen, expired, or data deleted) accepts any
    # sequence; UNKNOWN_PRODUCER_ID is no longer returned by produce
    plog = open_log(tmp_path)
    assert plog.append(batch(57, 2)).base_offset == 0
    assert plog.append(batch(59)).base_offset == 2
    assert error_of(plog, batch(61)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_wraps_from_int32_max_to_zero(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(INT32_MAX - 2, 2))  # ..., INT32_MAX - 1
    plog.append(batch(INT32_MAX, 3))  # INT32_MAX, 0, 1 within one batch
    entry = plog.producer_state.last_entry(PID)
    assert entry.last_seq == 1 and entry.batch_metadata[-1].first_seq == INT32_MAX
    assert error_of(plog, batch(0)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    plog.append(batch(2))
    # the wrapped batch is still recognised as a duplicate
    dup = plog.append(batch(INT32_MAX, 3))
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (2, 4)


def test_batch_ending_exactly_at_int32_max_continues_at_zero(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(INT32_MAX - 1, 2))
    assert error_of(plog, batch(INT32_MAX)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert error_of(plog, batch(1)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.append(batch(0)).base_offset == 2


def test_older_epoch_is_invalid_producer_epoch(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, epoch=3))
    assert error_of(plog, batch(1, epoch=2)) == Error.INVALID_PRODUCER_EPOCH
    assert error_of(plog, batch(0, epoch=2)) == Error.INVALID_PRODUCER_EPOCH


def test_epoch_bump_starts_at_sequence_zero_and_forgets_the_window(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, 2, epoch=0))
    plog.append(batch(2, 2, epoch=0))
    assert error_of(plog, batch(4, epoch=1)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    r = plog.append(batch(0, epoch=1))
    assert r.base_offset == 4 and not r.duplicate
    entry = plog.producer_state.last_entry(PID)
    assert entry.producer_epoch == 1 and len(entry.batch_metadata) == 1
    # the old epoch's batches are no duplicates any more: they are fenced
    assert error_of(plog, batch(2, 2, epoch=0)) == Error.INVALID_PRODUCER_EPOCH
    assert plog.append(batch(1, epoch=1)).base_offset == 5


def test_record_count_and_sequence_range_come_from_the_batch(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, 5))
    plog.append(batch(5, 1))
    # a batch re-sent with a different record count is no duplicate of either
    assert error_of(plog, batch(0, 4)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.append(batch(6, 3)).last_offset == 8


def test_producers_are_independent(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, pid=1))
    plog.append(batch(0, pid=2))
    plog.append(batch(1, pid=1))
    assert error_of(plog, batch(2, pid=2)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.producer_state.producer_id_count == 2
    plog.append(make_batch(1))  # no producer id: not tracked
    assert plog.producer_state.producer_id_count == 2


def test_several_batches_of_one_producer_in_one_append(tmp_path):
    plog = open_log(tmp_path)
    r = plog.append(batch(0, 2) + batch(2, 1) + batch(3, 2))
    assert (r.base_offset, r.last_offset) == (0, 4)
    assert len(plog.producer_state.last_entry(PID).batch_metadata) == 3
    # one bad batch refuses the whole append
    assert error_of(plog, batch(5) + batch(7)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.log_end_offset == 5 and plog.producer_state.last_entry(PID).last_seq == 4


# -- the duplicate window --------------------------------------------------------------------


def test_each_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets(tmp_path):
    plog = open_log(tmp_path)
    firsts = {}
    seq = 0
    for n in range(1, 8):  # batches of 1..7 records
        r = plog.append(batch(seq, n, timestamp=1_700_000_000_000 + n))
        firsts[seq] = (n, r.base_offset, r.last_offset)
        seq += n
    end = plog.log_end_offset
    window = sorted(firsts)[-NUM_BATCHES_TO_RETAIN:]
    for first_seq in window:
        n, base, last = firsts[first_seq]
        r = plog.append(batch(first_seq, n))
        assert r.duplicate and (r.base_offset, r.last_offset) == (base, last)
        assert r.log_append_time == 1_700_000_000_000 + n + n - 1  # the batch's max timestamp
    assert plog.log_end_offset == end
    # older than the window: not recognised, and out of sequence
    for first_seq in sorted(firsts)[:-NUM_BATCHES_TO_RETAIN]:
        n = firsts[first_seq][0]
        assert error_of(plog, batch(first_seq, n)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert offsets(read_all(plog)) == list(range(end))


def test_window_edge_sixth_batch_evicts_the_first(tmp_path):
    plog = open_log(tmp_path)
    for seq in range(5):
        plog.append(batch(seq))
    assert plog.append(batch(0)).duplicate  # five batches: the first is still there
    plog.append(batch(5))
    assert error_of(plog, batch(0)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.append(batch(1)).base_offset == 1  # now the oldest retained


def test_duplicate_detection_needs_the_same_epoch(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, epoch=0))
    plog.append(batch(0, epoch=1))
    r = plog.append(batch(0, epoch=1))
    assert r.duplicate and r.base_offset == 1
    assert error_of(plog, batch(0, epoch=0)) == Error.INVALID_PRODUCER_EPOCH


def test_transactional_retry_is_a_duplicate_while_its_transaction_is_open(tmp_path):
    plog = open_log(tmp_path)
    first = plog.append(batch(0, 2, txn=True))
    again = plog.append(batch(0, 2, txn=True))
    assert again.duplicate and again.base_offset == first.base_offset


@pytest.mark.parametrize("commit", [False, True])
def test_sequences_of_an_ended_transaction_are_not_reused(tmp_path, commit):
    """librdkafka, after aborting a transaction whose batch it had sent once and then
    dropped, starts the next transaction at that batch's sequence in the same epoch. Kafka
    answers that as a duplicate and the new records are acknowledged but never written;
    semel refuses them (the client aborts and bumps its epoch)."""
    plog = open_log(tmp_path)
    plog.append(batch(0, txn=True))
    plog.append(batch(1, txn=True))
    plog.append(marker(commit), origin="coordinator")
    end = plog.log_end_offset
    assert error_of(plog, batch(1, txn=True)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.log_end_offset == end
    # the next transaction started: a batch of the ended one is still refused, its own
    # retries are duplicates
    plog.append(batch(2, txn=True))
    assert error_of(plog, batch(1, txn=True)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.append(batch(2, txn=True)).duplicate
    # after a restart the snapshot / replayed state decides the same way
    plog.close()
    plog = open_log(tmp_path)
    assert error_of(plog, batch(1, txn=True)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.append(batch(2, txn=True)).duplicate


# -- staging ---------------------------------------------------------------------------------


def test_failed_write_changes_no_producer_state(tmp_path):
    fs = FaultyFileSystem()
    plog = open_log(tmp_path, fs=fs)
    plog.append(batch(0))
    fs.write_error = errno.ENOSPC
    fs.path_filter = ".log"
    assert error_of(plog, batch(1, 3)) == Error.KAFKA_STORAGE_ERROR
    entry = plog.producer_state.last_entry(PID)
    assert entry.last_seq == 0 and len(entry.batch_metadata) == 1
    fs.clear_faults()
    r = plog.append(batch(1, 3))  # the same batch again: not a duplicate, appended
    assert not r.duplicate and (r.base_offset, r.last_offset) == (1, 3)


def test_refused_append_changes_no_producer_state(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, pid=1))
    # the first batch is fine, the second is out of order: nothing of it is applied
    assert error_of(plog, batch(0, pid=2) + batch(5, pid=1)) == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert plog.producer_state.last_entry(2) is None
    assert plog.log_end_offset == 1


# -- expiry -----------------------------------------------------------------------------------


def test_producer_expires_after_producer_id_expiration_ms(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    plog = open_log(tmp_path, clock=clock)
    plog.producer_state.producer_id_expiration_ms = 60_000
    plog.append(batch(0, timestamp=clock.now_ms))
    clock.advance(59_999)
    assert plog.remove_expired_producers(clock()) == 0
    clock.advance(1)
    assert plog.remove_expired_producers(clock()) == 1
    assert plog.producer_state.producer_id_count == 0
    # after expiry Kafka accepts the producer's next batch whatever its sequence
    assert plog.append(batch(7, timestamp=clock.now_ms)).base_offset == 1


def test_producer_with_ongoing_transaction_never_expires(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    plog = open_log(tmp_path, clock=clock)
    plog.producer_state.producer_id_expiration_ms = 1000
    plog.append(batch(0, txn=True, timestamp=clock.now_ms))
    clock.advance(10**9)
    assert plog.remove_expired_producers(clock()) == 0


# -- transactions and the first unstable offset ---------------------------------------------


def test_ongoing_transactions_hold_back_the_last_stable_offset(tmp_path):
    plog = open_log(tmp_path)
    plog.append(make_batch(2))
    plog.append(batch(0, 2, pid=1, txn=True))  # offsets 2-3
    plog.append(batch(0, 1, pid=2, txn=True))  # offset 4
    plog.append(batch(2, 1, pid=1, txn=True))  # offset 5
    assert plog.producer_state.first_unstable_offset() == 2
    assert plog.last_stable_offset == 2 and plog.high_watermark == 6
    assert plog.read(0, 10**6).last_stable_offset == 2
    assert error_of(plog, batch(3, pid=1)) == Error.INVALID_TXN_STATE  # must be transactional
    # pid 1 commits: pid 2's transaction is now the first unstable one
    plog.append(marker(True, pid=1), origin="coordinator")
    assert plog.last_stable_offset == 4
    plog.append(marker(False, pid=2), origin="coordinator")
    assert plog.last_stable_offset == plog.high_watermark == 8
    assert plog.producer_state.ongoing_txns == {}
    entry = plog.producer_state.last_entry(1)
    assert entry.current_txn_first_offset == -1 and entry.last_seq == 2  # window kept


def test_markers_check_producer_and_coordinator_epochs(tmp_path):
    plog = open_log(tmp_path)
    plog.append(batch(0, epoch=2, txn=True))
    error = error_of(plog, marker(True, epoch=1), origin="coordinator")
    assert error == Error.INVALID_PRODUCER_EPOCH
    # transaction version 2: the marker's epoch must be greater than the data's
    error = error_of(plog, marker(True, epoch=2), origin="coordinator", transaction_version=2)
    assert error == Error.INVALID_PRODUCER_EPOCH
    plog.append(marker(True, epoch=2, coordinator_epoch=5), origin="coordinator")
    plog.append(batch(0, epoch=3, txn=True))
    error = error_of(plog, marker(False, epoch=3, coordinator_epoch=4), origin="coordinator")
    assert error == Error.TRANSACTION_COORDINATOR_FENCED
    plog.append(
        marker(False, epoch=4, coordinator_epoch=5), origin="coordinator", transaction_version=2
    )
    assert plog.last_stable_offset == plog.high_watermark


def test_unreplicated_completed_transaction_waits_for_the_high_watermark(tmp_path):
    import asyncio

    async def run():
        from semel.storage.log_manager import LogManager

        manager = LogManager(tmp_path, default_config=LogConfig(), clock=FakeClock())
        await manager.start()
        manager.create_topic("t", 1)
        plog = manager.get_partition("t", 0)
        r = plog.append(batch(0, txn=True))
        await plog.wait_durable(r.next_offset)
        assert plog.last_stable_offset == 0
        r = plog.append(marker(True), origin="coordinator")
        assert plog.producer_state.first_unstable_offset() == 0  # marker not durable yet
        await plog.wait_durable(r.next_offset)
        assert plog.producer_state.first_unstable_offset() is None
        assert plog.last_stable_offset == plog.high_watermark == 2
        await manager.close()

    asyncio.run(run())


# -- truncation ------------------------------------------------------------------------------


def test_truncation_reloads_producer_state(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=300))
    for seq in range(0, 12, 2):
        plog.append(batch(seq, 2))
    assert len(plog.segments) > 1
    plog.truncate_to(7)  # cuts the batch holding offset 7 (offsets 6-7) and all after it
    entry = plog.producer_state.last_entry(PID)
    assert plog.log_end_offset == 6 and entry.last_seq == 5 and entry.last_data_offset == 5
    r = plog.append(batch(6, 2))  # the truncated batch comes back: appended, not a duplicate
    assert not r.duplicate and r.base_offset == 6
    plog.truncate_to(0)
    assert plog.producer_state.producer_id_count == 0
    assert plog.producer_state.snapshots == {}


def test_entry_update_keeps_five_batches():
    entry = ProducerStateEntry(7, 0)
    for i in range(8):
        entry.add_batch(0, i, i, 0, i)
    assert [b.last_seq for b in entry.batch_metadata] == [3, 4, 5, 6, 7]
    staged = ProducerStateEntry(7, 0)
    staged.add_batch(0, 8, 8, 0, 8)
    entry.update(staged)
    assert [b.last_seq for b in entry.batch_metadata] == [4, 5, 6, 7, 8]
    bumped = ProducerStateEntry(7, 1)
    bumped.add_batch(1, 0, 9, 0, 9)
    entry.update(bumped)
    assert entry.producer_epoch == 1 and [b.last_seq for b in entry.batch_metadata] == [0]
