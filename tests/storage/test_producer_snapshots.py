"""Producer snapshots: Kafka's version 1 byte layout and CRC, compatibility with files Kafka
writes, snapshots on roll / close / periodically, keeping the two newest, and reloading
after clean and unclean restarts (corrupt or lost snapshots fall back to older ones or a
full scan)."""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c
from log_helpers import FakeClock, make_batch, open_log

from semel.protocol.errors import Error, KafkaError
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from semel.storage.log_manager import LogManager
from semel.storage.producer_state import (
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateEntry,
    encode_snapshot,
    read_snapshot,
)

PID = 4242


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


def snapshot_files(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.endswith(".snapshot"))


def state_of(plog) -> dict:
    return {
        pid: (
            e.producer_epoch,
            e.coordinator_epoch,
            e.current_txn_first_offset,
            [(b.last_seq, b.last_offset, b.offset_delta) for b in e.batch_metadata],
        )
        for pid, e in plog.producer_state.producers.items()
    }


def kafka_entry(pid, epoch, last_seq, last_offset, delta, ts, coord, txn) -> bytes:
    # field by field, as Kafka's PRODUCER_SNAPSHOT_ENTRY_SCHEMA lays them out
    return (
        struct.pack(">q", pid)
        + struct.pack(">h", epoch)
        + struct.pack(">i", last_seq)
        + struct.pack(">q", last_offset)
        + struct.pack(">i", delta)
        + struct.pack(">q", ts)
        + struct.pack(">i", coord)
        + struct.pack(">q", txn)
    )


def kafka_file(entries: list[bytes]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(entries)
    return struct.pack(">h", 1) + struct.pack(">I", crc32c(body)) + body


# -- format ----------------------------------------------------------------------------------


def test_byte_layout_of_a_single_batch_producer():
    entry = ProducerStateEntry(
        PID,
        3,
        coordinator_epoch=7,
        last_timestamp=1234,
        current_txn_first_offset=-1,
        batches=[BatchMetadata(19, 119, 4, 1234)],
    )
    data = encode_snapshot([entry])
    assert data == kafka_file([kafka_entry(PID, 3, 19, 119, 4, 1234, 7, -1)])
    assert len(data) == 2 + 4 + 4 + 46
    assert data[:2] == b"\x00\x01"  # version 1
    assert struct.unpack(">I", data[2:6])[0] == crc32c(data[6:])  # CRC32C of the rest


def test_producer_without_batches_is_one_entry_with_no_offset():
    entry = ProducerStateEntry(
        9, 2, coordinator_epoch=1, last_timestamp=55, current_txn_first_offset=300
    )
    data = encode_snapshot([entry])
    assert data == kafka_file([kafka_entry(9, 2, -1, -1, 0, 55, 1, 300)])
    (loaded,) = read_snapshot(data)
    assert loaded.is_empty and loaded.current_txn_first_offset == 300
    assert (loaded.producer_epoch, loaded.coordinator_epoch, loaded.last_timestamp) == (2, 1, 55)


def test_whole_window_is_written_oldest_first_and_the_last_entry_is_kafkas():
    batches = [BatchMetadata(s, 100 + s, 0, 1000 + s) for s in range(5)]
    entry = ProducerStateEntry(PID, 0, -1, 2000, -1, batches)
    data = encode_snapshot([entry])
    assert struct.unpack(">i", data[6:10])[0] == 5
    # Kafka writes exactly the last entry (newest batch, the producer's last timestamp)
    assert data[-46:] == kafka_entry(PID, 0, 4, 104, 0, 2000, -1, -1)
    assert data[10:56] == kafka_entry(PID, 0, 0, 100, 0, 1000, -1, -1)
    (loaded,) = read_snapshot(data)
    assert [(b.last_seq, b.last_offset) for b in loaded.batch_metadata] == [
        (s, 100 + s) for s in range(5)
    ]
    assert loaded.last_timestamp == 2000


def test_files_written_by_kafka_are_read():
    data = kafka_file(
        [kafka_entry(1, 0, 41, 900, 9, 77, -1, -1), kafka_entry(2, 5, -1, -1, 0, 78, 3, 850)]
    )
    one, two = read_snapshot(data)
    assert (one.producer_id, one.last_seq, one.first_seq, one.last_data_offset) == (1, 41, 32, 900)
    assert one.batch_metadata[0].first_offset == 891
    assert two.is_empty and two.current_txn_first_offset == 850 and two.coordinator_epoch == 3


@pytest.mark.parametrize("damage", ["flip", "truncate", "extend", "version", "short"])
def test_corrupt_snapshots_are_refused(damage):
    data = bytearray(
        encode_snapshot([ProducerStateEntry(1, 0, -1, 5, -1, [BatchMetadata(0, 0, 0, 5)])])
    )
    if damage == "flip":
        data[20] ^= 0x01
    elif damage == "truncate":
        data = data[:-1]
    elif damage == "extend":
        data += b"\x00"
    elif damage == "version":
        data[1] = 2
    else:
        data = data[:5]
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(bytes(data))


def test_count_that_does_not_match_the_length_is_refused():
    body = struct.pack(">i", 2) + kafka_entry(1, 0, 0, 0, 0, 0, -1, -1)
    data = struct.pack(">hI", 1, crc32c(body)) + body
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(data)


# -- when snapshots are written ----------------------------------------------------------------


def fill(plog, batches: int, *, start_seq: int = 0, pid: int = PID) -> int:
    seq = start_seq
    for _ in range(batches):
        plog.append(batch(seq, 2, pid=pid))
        seq += 2
    return seq


def test_roll_writes_a_snapshot_at_the_new_base_offset_and_two_are_kept(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=400))
    fill(plog, 5)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) == 2
    assert snapshot_files(tmp_path) == [f"{bases[1]:020d}.snapshot"]
    fill(plog, 12, start_seq=10)
    bases = [s.base_offset for s in plog.segments]
    assert len(bases) >= 4
    assert snapshot_files(tmp_path) == [f"{b:020d}.snapshot" for b in bases[-2:]]


def test_clean_close_writes_a_snapshot_at_the_log_end(tmp_path):
    plog = open_log(tmp_path)
    fill(plog, 3)
    plog.close()
    assert snapshot_files(tmp_path) == [f"{6:020d}.snapshot"]


def test_log_manager_periodic_task_expires_producers_and_snapshots(tmp_path):
    import asyncio

    async def run():
        clock = FakeClock(1_700_000_000_000)
        manager = LogManager(
            tmp_path,
            default_config=LogConfig(),
            clock=clock,
            flush_mode="none",
            producer_id_expiration_ms=1000,
        )
        await manager.start()
        manager.create_topic("t", 2)
        p0, p1 = manager.get_partition("t", 0), manager.get_partition("t", 1)
        p0.append(batch(0, pid=1, timestamp=clock.now_ms))
        p1.append(batch(0, pid=1, timestamp=clock.now_ms))
        p1.append(batch(0, pid=2, timestamp=clock.now_ms + 600))
        assert manager.live_producer_ids == 3
        assert await manager.run_producer_expiration() == 0
        assert snapshot_files(tmp_path / "t-1") == [f"{2:020d}.snapshot"]
        clock.advance(1000)
        assert await manager.run_producer_expiration() == 2
        assert manager.live_producer_ids == 1
        await manager.close()

    asyncio.run(run())


# -- reloading ---------------------------------------------------------------------------------


def test_clean_restart_keeps_the_whole_duplicate_window(tmp_path):
    plog = open_log(tmp_path)
    originals = [plog.append(batch(s, 2)) for s in range(0, 16, 2)]
    before = state_of(plog)
    plog.close()
    plog = open_log(tmp_path, clean=True)
    assert state_of(plog) == before
    for seq, r in zip(range(6, 16, 2), originals[3:], strict=True):
        dup = plog.append(batch(seq, 2))
        assert dup.duplicate and dup.base_offset == r.base_offset
    assert plog.append(batch(16)).base_offset == 16
    with pytest.raises(KafkaError) as excinfo:
        plog.append(batch(18))
    assert excinfo.value.code == Error.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_crash_restart_replays_the_log_after_the_latest_snapshot(tmp_path):
    plog = open_log(tmp_path, LogConfig(segment_bytes=500))
    fill(plog, 6, pid=1)
    fill(plog, 5, pid=2)
    plog.append(batch(0, pid=3, txn=True))
    assert snapshot_files(tmp_path)
    assert plog.producer_state.latest_snapshot_offset() < plog.log_end_offset
    before, lso = state_of(plog), plog.last_stable_offset
    plog.close(flush=False)  # no snapshot at the end: as a crash would leave it
    plog = open_log(tmp_path, LogConfig(segment_bytes=500), clean=False)
    assert state_of(plog) == before
    assert plog.last_stable_offset == lso < plog.high_watermark  # the ongoing transaction
    assert plog.append(batch(8, 2, pid=2)).duplicate
    assert plog.append(batch(10, 2, pid=2)).base_offset == plog.log_end_offset - 2


def test_corrupt_newest_snapshot_falls_back_to_the_older_one(tmp_path):
    config = LogConfig(segment_bytes=400)
    plog = open_log(tmp_path, config)
    fill(plog, 12)
    before = state_of(plog)
    plog.close(flush=False)
    newest, older = snapshot_files(tmp_path)[::-1][:2]
    with open(tmp_path / newest, "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    plog = open_log(tmp_path, config, clean=False)
    assert state_of(plog) == before
    assert older in snapshot_files(tmp_path)
    assert plog.producer_state.snapshots  # a fresh one at the log end replaced the corrupt one


def test_no_valid_snapshot_rebuilds_by_scanning_the_log(tmp_path):
    config = LogConfig(segment_bytes=400)
    plog = open_log(tmp_path, config)
    fill(plog, 12, pid=1)
    fill(plog, 3, pid=2)
    before = state_of(plog)
    plog.close()
    for name in snapshot_files(tmp_path):
        with open(tmp_path / name, "wb") as f:
            f.write(b"garbage")
    plog = open_log(tmp_path, config)
    assert state_of(plog) == before
    assert snapshot_files(tmp_path) == [f"{plog.log_end_offset:020d}.snapshot"]


def test_snapshots_past_the_recovered_log_end_are_ignored(tmp_path):
    plog = open_log(tmp_path)
    fill(plog, 3)
    plog.close()
    # the log lost its tail (a power loss cutting unflushed data) but the snapshot says 6
    with open(tmp_path / f"{0:020d}.log", "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / f"{0:020d}.log") - 10)
    plog = open_log(tmp_path, clean=False)
    assert plog.log_end_offset == 4
    assert state_of(plog)[PID][3][-1] == (3, 3, 1)
    assert plog.append(batch(4, 2)).base_offset == 4  # the lost batch is accepted again


def test_expired_producers_are_not_loaded(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    plog = open_log(tmp_path, clock=clock)
    plog.append(batch(0, pid=1, timestamp=clock.now_ms - 86_400_000))
    plog.append(batch(0, pid=2, timestamp=clock.now_ms))
    plog.close()
    plog = open_log(tmp_path, clock=clock)
    assert set(plog.producer_state.producers) == {2}


def test_power_loss_drops_unflushed_snapshots_and_state_follows_the_log(tmp_path):
    import asyncio

    async def run():
        fs = FaultyFileSystem()
        clock = FakeClock()
        config = LogConfig(segment_bytes=400)

        async def started():
            manager = LogManager(tmp_path, default_config=config, fs=fs, clock=clock)
            await manager.start()
            return manager

        manager = await started()
        manager.create_topic("t", 1)
        plog = manager.get_partition("t", 0)
        seq = 0
        for _ in range(6):
            r = plog.append(batch(seq, 2))
            seq += 2
        await plog.wait_durable(r.next_offset)
        durable_end = plog.high_watermark
        for _ in range(6):  # more rolls and snapshots, never fsynced
            plog.append(batch(seq, 2))
            seq += 2
        await manager.abandon()
        fs.simulate_power_loss()
        manager = await started()
        plog = manager.get_partition("t", 0)
        assert plog.log_end_offset == durable_end
        entry = plog.producer_state.last_entry(PID)
        assert entry.last_data_offset == durable_end - 1 and entry.last_seq == durable_end - 1
        assert plog.append(batch(durable_end, 2)).base_offset == durable_end
        await manager.close()

    asyncio.run(run())
