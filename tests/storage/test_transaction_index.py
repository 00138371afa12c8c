"""The aborted-transaction index: Kafka's 34-byte `.txnindex` layout, lazy creation,
Kafka's collectAbortedTxns rule, truncation and torn tails; through PartitionLog: ABORT
markers (not COMMIT) indexed with the last stable offset of the moment, collection across
segments, the index following its segment (roll, retention, truncation) and rebuilt by
recovery."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from log_helpers import FakeClock, make_batch, open_log

from semel.protocol.records import build_control_batch
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.offset_index import CorruptIndexError
from semel.storage.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex, decode_entries


def txn_batch(pid: int, seq: int, count: int = 1, *, epoch: int = 0, value_size: int = 10) -> bytes:
    return make_batch(
        count,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
        value_size=value_size,
    )


def marker(commit: bool, pid: int, *, epoch: int = 0) -> bytes:
    return build_control_batch(
        commit=commit,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=0,
        timestamp_ms=1_700_000_000_500,
    )


def txnindex_files(directory) -> dict[str, bytes]:
    return {
        name: (directory / name).read_bytes()
        for name in sorted(os.listdir(directory))
        if name.endswith(".txnindex")
    }


# -- the file --------------------------------------------------------------------------------


def test_entry_layout_is_kafkas(tmp_path):
    path = str(tmp_path / "00000000000000000100.txnindex")
    index = TransactionIndex(RealFileSystem(), path, 100)
    assert not os.path.exists(path)  # created with the first entry
    index.append(
        AbortedTxn(producer_id=7, first_offset=100, last_offset=105, last_stable_offset=103)
    )
    index.append(AbortedTxn(0x0102030405060708, 101, 110, 111))
    index.close()
    data = Path(path).read_bytes()
    assert ENTRY_SIZE == 34 and len(data) == 68
    assert data[:34] == (
        b"\x00\x00"
        + (7).to_bytes(8, "big")
        + (100).to_bytes(8, "big")
        + (105).to_bytes(8, "big")
        + (103).to_bytes(8, "big")
    )
    assert struct.unpack(">hqqqq", data[34:]) == (0, 0x0102030405060708, 101, 110, 111)
    reopened = TransactionIndex(RealFileSystem(), path, 100)
    assert reopened.count == 2 and reopened.last_offset == 110
    assert reopened.entries() == [
        AbortedTxn(7, 100, 105, 103),
        AbortedTxn(0x0102030405060708, 101, 110, 111),
    ]


def test_last_offsets_must_grow(tmp_path):
    index = TransactionIndex(RealFileSystem(), str(tmp_path / "x.txnindex"), 0)
    index.append(AbortedTxn(1, 0, 5, 6))
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(2, 3, 5, 6))
    assert index.count == 1


def test_collect_follows_kafkas_rule(tmp_path):
    index = TransactionIndex(RealFileSystem(), str(tmp_path / "x.txnindex"), 0)
    for txn in [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 30, 40, 41)]:
        index.append(txn)
    # last offset >= fetch offset and first offset < upper bound
    assert index.collect_aborted_txns(11, 30) == ([AbortedTxn(2, 5, 20, 21)], True)
    assert index.collect_aborted_txns(0, 5) == ([AbortedTxn(1, 0, 10, 11)], True)
    # complete once an entry's last stable offset reaches the bound
    found, complete = index.collect_aborted_txns(0, 100)
    assert [t.producer_id for t in found] == [1, 2, 3] and not complete
    assert index.collect_aborted_txns(41, 100) == ([], False)


def test_truncate_torn_tail_and_unknown_version(tmp_path):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(RealFileSystem(), path, 0)
    for n in range(4):
        index.append(AbortedTxn(n, n * 10, n * 10 + 5, n * 10 + 6))
    index.truncate_to(25)  # drops entries ending at 25 and later
    assert [t.last_offset for t in index.entries()] == [5, 15]
    assert os.path.getsize(path) == 2 * ENTRY_SIZE and index.last_offset == 15
    index.append(AbortedTxn(9, 16, 17, 18))
    index.close()
    with open(path, "ab") as f:
        f.write(b"\x00" * 20)  # a torn write
    again = TransactionIndex(RealFileSystem(), path, 0)
    assert again.count == 3 and os.path.getsize(path) == 3 * ENTRY_SIZE
    with pytest.raises(CorruptIndexError, match="version"):
        decode_entries(struct.pack(">hqqqq", 1, 1, 2, 3, 4))


# -- through the partition log -----------------------------------------------------------------


def test_abort_is_indexed_with_the_last_stable_offset_commit_is_not(tmp_path):
    plog = open_log(tmp_path)
    plog.append(make_batch(2))  # 0-1 plain
    plog.append(txn_batch(1, 0, 2))  # 2-3 pid 1
    plog.append(txn_batch(2, 0))  # 4 pid 2
    plog.append(marker(False, 1), origin="coordinator")  # 5: pid 1 aborted, pid 2 still open
    plog.append(marker(True, 2), origin="coordinator")  # 6: commit, not indexed
    plog.append(txn_batch(1, 2))  # 7 pid 1 again
    plog.append(marker(False, 1), origin="coordinator")  # 8
    assert plog.active_segment.txn_index.entries() == [
        AbortedTxn(1, 2, 5, 4),  # LSO stopped at pid 2's open transaction
        AbortedTxn(1, 7, 8, 9),
    ]
    assert plog.collect_aborted_transactions(0, 9) == [(1, 2), (1, 7)]
    assert plog.collect_aborted_transactions(6, 9) == [(1, 7)]
    assert plog.collect_aborted_transactions(0, 3) == [(1, 2)]
    assert plog.collect_aborted_transactions(0, 2) == []


def test_collection_walks_later_segments_until_complete(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=250))
    plog.append(txn_batch(1, 0, value_size=150))  # 0: pid 1 opens, segment 0
    plog.append(txn_batch(2, 0, value_size=150))  # 1: pid 2 opens, segment 1
    plog.append(make_batch(1, value_size=150))  # 2: plain
    plog.append(marker(False, 2), origin="coordinator")  # 3
    plog.append(make_batch(1, value_size=150))  # 4
    plog.append(marker(False, 1), origin="coordinator")  # 5
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 3
    assert not plog.segments[0].txn_index.count
    assert not os.path.exists(plog.segments[0].path(".txnindex"))
    # a fetch from offset 0 meets both transactions, indexed in later segments
    assert sorted(plog.collect_aborted_transactions(0, 1)) == [(1, 0)]
    assert sorted(plog.collect_aborted_transactions(0, 6)) == [(1, 0), (2, 1)]
    assert plog.collect_aborted_transactions(4, 6) == [(1, 0)]
    # what a read_committed fetch reports for the records it returns
    data = plog.read(0, 1 << 20, upper_bound=plog.last_stable_offset).records
    assert plog.aborted_transactions_in(0, data) == [(1, 0)]  # one segment: offset 0 only
    assert plog.aborted_transactions_in(0, b"") == []


def test_index_follows_its_segment(tmp_path):
    clock = FakeClock()
    plog = open_log(tmp_path, LogConfig(segment_bytes=250, retention_ms=1000), clock=clock)
    plog.append(txn_batch(1, 0, value_size=150))
    plog.append(marker(False, 1), origin="coordinator")
    aborted_in = plog.active_segment
    plog.append(txn_batch(1, 1, value_size=150))
    plog.append(marker(False, 1), origin="coordinator")
    assert aborted_in.txn_index.count == 1 and plog.active_segment.txn_index.count == 1
    # truncation drops entries at and past the cut
    plog.truncate_to(plog.log_end_offset - 1)
    assert plog.active_segment.txn_index.count == 0
    assert plog.collect_aborted_transactions(0, 100) == [(1, 0)]
    # retention deletes the index with its segment
    plog.append(make_batch(1, value_size=150, timestamp=clock() + 10_000))
    plog.roll()
    clock.advance(5000)
    assert plog.apply_retention(clock()) >= 1
    deleted = plog.take_deleted_files()
    # (a deleted segment's paths follow its renamed files)
    assert aborted_in.path(".txnindex").endswith(".txnindex.deleted")
    assert aborted_in.path(".txnindex") in deleted
    assert plog.collect_aborted_transactions(plog.log_start_offset, 100) == []


def test_corrupt_index_is_rebuilt_from_the_log(tmp_path):
    config = LogConfig(segment_bytes=250)
    plog = open_log(tmp_path, config)
    for seq in range(4):
        plog.append(txn_batch(1, seq, value_size=150))
        plog.append(make_batch(1, value_size=100))
        plog.append(marker(seq % 2 == 0, 1), origin="coordinator")
    plog.close()
    before = txnindex_files(tmp_path)
    assert len(before) == 2
    victim = max(before)
    (tmp_path / victim).write_bytes(struct.pack(">hqqqq", 0, 1, 0, 0, 0))  # before its segment
    again = open_log(tmp_path, config)
    again.close()
    assert txnindex_files(tmp_path) == before


def test_entry_lost_after_the_last_snapshot_is_indexed_again(tmp_path):
    plog = open_log(tmp_path)
    plog.append(make_batch(1))
    plog.take_producer_snapshot()
    plog.append(txn_batch(1, 0))
    plog.append(marker(False, 1), origin="coordinator")
    plog.flush()
    index_path = plog.active_segment.path(".txnindex")
    expected = Path(index_path).read_bytes()
    # a crash that kept the marker but not its index entry (no clean shutdown marker)
    plog.close()
    Path(index_path).write_bytes(b"")
    snapshots = sorted(p for p in os.listdir(tmp_path) if p.endswith(".snapshot"))
    os.remove(tmp_path / snapshots[-1])  # the one written at close
    again = open_log(tmp_path, clean=False)
    assert Path(index_path).read_bytes() == expected
    assert again.collect_aborted_transactions(0, 10) == [(1, 1)]
