"""The flusher's rounds, step by step: an AIO context that the test completes by hand shows
when a round starts, what it covers, and what its completion does at once - the high
watermark moves and waiters resolve in the completion itself, the next round starts there
if logs became dirty meanwhile, an fsync's failure fails that round's waiters, close waits
for the round in flight and abandon ignores it."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
from log_helpers import FakeClock, make_batch

from semel.protocol.errors import Error, KafkaError
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.log_manager import LogManager


class HandAio:
    """Stands in for AioFsync: records each call; ``finish`` fdatasyncs and completes one."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.calls: list[tuple[list[int], object]] = []

    def start(self, fds, done, future=None) -> None:
        self.calls.append((fds, done))

    def finish(self, i: int, error: OSError | None = None) -> None:
        fds, done = self.calls[i]
        if error is None:
            for fd in fds:
                os.fdatasync(fd)
        done(error)

    def close(self) -> None:
        pass


async def turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def started(tmp_path, partitions=1):
    manager = LogManager(tmp_path, default_config=LogConfig(segment_bytes=100_000),
                         clock=FakeClock())
    await manager.start()
    aio = manager._aio = HandAio(asyncio.get_running_loop())
    manager.create_topic("t", partitions)
    return manager, aio


class Waiter:
    """A waiter as the produce fast path's: called by the log itself."""

    def __init__(self) -> None:
        self.outcome = None

    def done(self) -> bool:
        return self.outcome is not None

    def set_result(self, _) -> None:
        self.outcome = "durable"

    def set_exception(self, exc) -> None:
        self.outcome = exc


def waits_for(plog, records: int) -> Waiter:
    """Appends a batch of ``records`` and adds a waiter for it, as the produce fast path does
    (not durable yet: the log keeps the waiter)."""
    waiter = Waiter()
    assert plog.add_durable_waiter(plog.append(make_batch(records)).next_offset, waiter)
    return waiter


async def one_waiting(tmp_path, records: int):
    """One partition, a waiter for a batch of ``records`` appended to it, and the round that
    covers it started: its AIO call waits for ``aio.finish(0)``."""
    manager, aio = await started(tmp_path)
    plog = manager.get_partition("t", 0)
    waiter = waits_for(plog, records)
    await turns(3)
    return manager, aio, plog, waiter


async def test_appends_of_the_turn_and_the_next_share_a_round(tmp_path):
    manager, aio = await started(tmp_path, 2)
    a, b = manager.get_partition("t", 0), manager.get_partition("t", 1)
    a.append(make_batch(1))
    # a task woken by that turn's work appends in the next turn: it joins the round
    asyncio.get_running_loop().call_soon(b.append, make_batch(2))
    await turns(3)
    assert len(aio.calls) == 2  # one round: one AIO call per partition
    a.append(make_batch(1))  # during the round: waits for it
    await turns(5)
    assert len(aio.calls) == 2
    aio.finish(0)
    aio.finish(1)
    assert (a.high_watermark, b.high_watermark) == (1, 2)
    # the next round starts three turns after the completion: a client just answered
    # appends within them and shares it
    asyncio.get_running_loop().call_soon(b.append, make_batch(1))
    await turns(2)
    assert len(aio.calls) == 2
    await turns(1)
    assert len(aio.calls) == 4  # both partitions in one round
    aio.finish(2)
    aio.finish(3)
    assert (a.high_watermark, b.high_watermark) == (2, 3)
    await manager.close()


async def test_the_completion_resolves_waiters_itself(tmp_path):
    """No hop of the loop between the fsync's completion and the waiters' answers."""
    manager, aio, plog, waiter = await one_waiting(tmp_path, 3)
    assert len(aio.calls) == 1 and waiter.outcome is None
    aio.finish(0)
    assert waiter.outcome == "durable" and plog.high_watermark == 3
    await manager.close()


async def test_a_failed_fsync_fails_its_round_and_the_next_round_runs(tmp_path):
    manager, aio, plog, _ = await one_waiting(tmp_path, 1)
    aio.finish(0)
    failed = waits_for(plog, 2)
    await turns(3)
    aio.finish(1, OSError(errno.EIO, "fdatasync: EIO"))
    assert isinstance(failed.outcome, KafkaError)
    assert failed.outcome.code == Error.KAFKA_STORAGE_ERROR
    assert plog.high_watermark == plog.log_end_offset == 1  # not acknowledged: taken back
    # the flusher goes on (the truncation's segment syncs with its indexes: in a thread)
    await asyncio.wait_for(plog.wait_durable(plog.append(make_batch(1)).next_offset), 10)
    assert plog.high_watermark == 2
    await manager.close()


async def test_close_waits_for_the_round_in_flight(tmp_path):
    manager, aio, _, waiter = await one_waiting(tmp_path, 2)
    closing = asyncio.ensure_future(manager.close())
    await turns(10)
    assert not closing.done() and waiter.outcome is None
    aio.finish(0)
    await closing
    assert waiter.outcome == "durable"


async def test_abandon_ignores_the_round_in_flight(tmp_path):
    manager, aio, plog, waiter = await one_waiting(tmp_path, 2)
    await manager.abandon()
    aio.finish(0)  # a completion after the crash is not believed
    assert plog.high_watermark == 0
    assert waiter.outcome is None or isinstance(waiter.outcome, KafkaError)


@pytest.mark.parametrize("appends", [1, 3])
async def test_a_round_asked_while_idle_starts_three_turns_later(tmp_path, appends):
    manager, aio = await started(tmp_path)
    plog = manager.get_partition("t", 0)
    for _ in range(appends):
        plog.append(make_batch(1))
    await turns(2)
    assert aio.calls == []  # two turns: tasks woken meanwhile may still append
    await turns(1)
    assert len(aio.calls) == 1
    aio.finish(0)
    assert plog.high_watermark == appends
    await manager.close()


class OwnSeam(RealFileSystem):
    """A file system that replaces the AIO seam ``fsync_async_then`` (as broker/faults.py's
    does); ``broken`` makes it raise as a bug would."""

    broken = False

    def fsync_async_then(self, handles, aio, done, future=None):
        if self.broken:
            raise RuntimeError("a bug in the seam")
        aio.start([handle.fd for handle in handles], done, future)
        return True


async def test_a_replaced_seam_is_honoured_and_its_bug_stalls_nothing(tmp_path):
    fs = OwnSeam()
    manager = LogManager(tmp_path, default_config=LogConfig(), fs=fs, clock=FakeClock())
    await manager.start()
    manager.create_topic("t", 1)
    plog = manager.get_partition("t", 0)
    await asyncio.wait_for(plog.wait_durable(plog.append(make_batch(2)).next_offset), 10)
    assert plog.high_watermark == 2
    fs.broken = True
    with pytest.raises(KafkaError) as failed:
        await asyncio.wait_for(plog.wait_durable(plog.append(make_batch(1)).next_offset), 10)
    assert failed.value.code == Error.KAFKA_STORAGE_ERROR
    fs.broken = False  # the flusher still runs rounds
    await asyncio.wait_for(plog.wait_durable(plog.append(make_batch(1)).next_offset), 10)
    assert plog.high_watermark == 3
    await manager.close()
