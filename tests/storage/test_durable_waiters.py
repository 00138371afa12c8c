"""The flush rounds' per-append and per-round bookkeeping: a caller's own durable waiter
(``PartitionLog.add_durable_waiter``), one dirty notification per round however many
appends, and the purge of deleted files that looks only at the logs that have some."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
from log_helpers import make_batch, one_partition, started

from semel.protocol.errors import Error, KafkaError
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from semel.storage.partition_log import PartitionLog


class Waiter:
    """A future's three methods, recording what the log called."""

    def __init__(self) -> None:
        self.calls: list = []

    def done(self) -> bool:
        return bool(self.calls)

    def set_result(self, value) -> None:
        self.calls.append(("result", value))

    def set_exception(self, exc) -> None:
        self.calls.append(("exception", exc))


async def test_own_waiter_is_resolved_by_the_round_that_covers_it(tmp_path):
    manager, plog = await one_partition(tmp_path)
    first, second = Waiter(), Waiter()
    assert plog.add_durable_waiter(plog.append(make_batch(2)).next_offset, first)
    assert plog.add_durable_waiter(plog.append(make_batch(1)).next_offset, second)
    future = plog.durable_future(plog.log_end_offset, asyncio.get_running_loop())
    assert first.calls == second.calls == []
    await future  # the same round resolves the futures and the waiters
    assert plog.high_watermark == 3
    assert first.calls == second.calls == [("result", None)]
    assert not plog.add_durable_waiter(3, Waiter())  # durable already: nothing kept
    assert plog._waiters == []
    await manager.close()


async def test_own_waiter_gets_the_fsync_failure(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs)
    fs.fsync_error = errno.EIO
    waiter = Waiter()
    assert plog.add_durable_waiter(plog.append(make_batch(1)).next_offset, waiter)
    future = plog.durable_future(plog.log_end_offset, asyncio.get_running_loop())
    with pytest.raises(KafkaError):
        await future
    [(kind, exc)] = waiter.calls
    assert kind == "exception" and exc.code == Error.KAFKA_STORAGE_ERROR
    assert plog.high_watermark == plog.log_end_offset == 0
    fs.clear_faults()
    plog.offline = True
    with pytest.raises(KafkaError) as refused:
        plog.add_durable_waiter(1, Waiter())
    assert refused.value.code == Error.KAFKA_STORAGE_ERROR
    plog.offline = False
    await manager.close()


async def test_one_dirty_notification_per_round(tmp_path):
    """Appends while the log already waits for a round do not tell the flusher again; the
    first append after a round's snapshot does, also after a failed fsync (whose segments
    wait for the next round without a notification of their own)."""
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs, config=LogConfig())
    told = []
    listener = plog.dirty_listener
    plog.dirty_listener = lambda p: (told.append(p.log_end_offset), listener(p))
    for _ in range(10):
        plog.append(make_batch(1))
    assert told == [1]
    await plog.wait_durable(plog.log_end_offset)
    fs.fsync_error = errno.EIO
    for _ in range(3):
        plog.append(make_batch(1))
    with pytest.raises(KafkaError):
        await plog.wait_durable(plog.log_end_offset)
    fs.clear_faults()
    assert told == [1, 11]
    plog.append(make_batch(1))
    await plog.wait_durable(plog.log_end_offset)  # the failed round's segment included
    assert told == [1, 11, 11] and plog.high_watermark == 11
    await manager.close()


async def test_purge_looks_only_at_logs_with_deleted_files(tmp_path, monkeypatch):
    manager = await started(tmp_path, config=LogConfig(segment_bytes=200))
    manager.create_topic("t", 3)
    logs = [manager.get_partition("t", p) for p in range(3)]
    for plog in logs:
        for _ in range(10):
            plog.append(make_batch(2))
        await plog.wait_durable(plog.log_end_offset)
    plog = logs[1]
    assert len(plog.segments) > 3
    pinned = plog.segments[1]
    pinned.pin()  # a reader on it: its files stay until it is let go
    plog.delete_records_before(plog.segments[3].base_offset)
    files = [os.path.join(plog.dir, f) for f in os.listdir(plog.dir) if f.endswith(".deleted")]
    assert files
    looked = []
    has_deleted_files = PartitionLog.has_deleted_files
    monkeypatch.setattr(PartitionLog, "has_deleted_files", property(
        lambda self: looked.append(self) or has_deleted_files.fget(self)))
    await manager.purge_deleted()
    assert set(looked) == {plog}  # not the logs without deleted files
    left = [f for f in files if os.path.exists(f)]
    assert left and all(".log" in f or "index" in f for f in left)
    assert all(os.path.basename(f).startswith(f"{pinned.base_offset:020d}") for f in left)
    pinned.unpin()
    looked.clear()
    await manager.purge_deleted()
    assert not any(os.path.exists(f) for f in files)
    assert set(looked) == {plog}
    looked.clear()
    await manager.purge_deleted()  # nothing left anywhere: no log looked at
    assert looked == []
    await manager.close()
