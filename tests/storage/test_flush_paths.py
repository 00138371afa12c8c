"""The flusher's ways to fsync a round off the loop: Linux native AIO (aio_fsync.py), the
long-lived fsync thread (sync_thread.py) and the executor, each under the fs seam's faults:
a failed fsync fails exactly the requests waiting on it with KAFKA_STORAGE_ERROR, and a
power loss keeps everything acknowledged. Also the produce handler's durable wait
(``_durable_failures``: one future per log, one timer, no task)."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest
from log_helpers import FakeClock, make_batch, offsets, read_all, values

from semel.broker.handlers.produce import _durable_failures
from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_batch
from semel.storage.aio_fsync import AioFsync
from semel.storage.config import LogConfig
from semel.storage.fs import AioUnsupported, FaultyFileSystem, RealFileSystem
from semel.storage.log_manager import LogManager
from semel.storage.sync_thread import SyncThread

# "aio": native AIO where the kernel offers it; "thread": as on a kernel without it
PATHS = ["aio", "thread"]


async def started(data_dir, path, fs=None, config=None):
    manager = LogManager(data_dir, default_config=config or LogConfig(segment_bytes=4000),
                         fs=fs, clock=FakeClock())
    await manager.start()
    if path == "thread":
        manager._aio_usable = False
    return manager


def aio_available() -> bool:
    return os.uname().machine in ("x86_64", "aarch64") and os.uname().sysname == "Linux"


def open_aio() -> AioFsync:
    aio = AioFsync.open(asyncio.get_running_loop())
    assert aio is not None, "native AIO is expected on Linux x86_64/aarch64"
    return aio


def log_fsyncs(fs: FaultyFileSystem) -> int:
    return sum(n for path, n in fs.fsync_calls.items() if path.endswith(".log"))


def record(value: bytes) -> bytes:
    return build_batch([(None, value, None, 1_700_000_000_000)])


# -- AioFsync ----------------------------------------------------------------------------


async def test_aio_fdatasync_of_real_files(tmp_path):
    if not aio_available():  # elsewhere there is no context to open
        assert AioFsync.open(asyncio.get_running_loop()) is None
        return
    aio = open_aio()
    fds = [os.open(tmp_path / f"f{i}", os.O_RDWR | os.O_CREAT) for i in range(3)]
    try:
        for fd in fds:
            os.pwrite(fd, b"x" * 100, 0)
        futures = [aio.submit(fds), aio.submit(fds[:1]), aio.submit([])]
        assert await asyncio.gather(*futures) == [None, None, None]
        assert not aio._pending and aio._in_flight == 0
    finally:
        aio.close()
        for fd in fds:
            os.close(fd)


async def test_aio_refusal_and_failures(tmp_path):
    if not aio_available():
        return
    aio = open_aio()
    read_end, write_end = os.pipe()
    try:
        # a descriptor without fsync: refused at submission, as a kernel without FDSYNC
        with pytest.raises(AioUnsupported):
            aio.submit([read_end])
        with pytest.raises(OSError) as closed:
            aio.submit([10**6])  # not a descriptor: nothing left pending
        assert closed.value.errno == errno.EBADF and not aio._pending
        # the kernel's answer for one request of a call: -errno fails the whole call
        outcomes = []  # a call of two requests, its callback
        aio._pending[99] = [outcomes.append, 2, None, None]
        aio._in_flight += 2
        aio.complete(99, -errno.EIO)
        assert outcomes == []
        aio.complete(99, 0)
        assert [type(o) for o in outcomes] == [OSError] and outcomes[0].errno == errno.EIO
        assert aio._in_flight == 0 and not aio._pending
    finally:
        aio.close()
        os.close(read_end)
        os.close(write_end)


# -- SyncThread --------------------------------------------------------------------------


async def test_sync_thread_answers_each_job_and_stops():
    thread = SyncThread(asyncio.get_running_loop())
    ran = []

    def job(value):
        if value == "bad":
            raise OSError(errno.EIO, "fsync failed")
        ran.append(value)

    assert thread._thread is None  # starts with the first job
    first, bad, last = (thread.submit(job, v) for v in ("a", "bad", "b"))
    assert await first is None and await last is None
    with pytest.raises(OSError):
        await bad
    assert ran == ["a", "b"]
    abandoned = thread.submit(job, "c")
    abandoned.cancel()  # its round was abandoned: the answer is dropped, the job still runs
    thread.close()
    await asyncio.sleep(0)
    assert ran == ["a", "b", "c"] and thread._thread is None
    with pytest.raises(RuntimeError):
        thread.submit(job, "d")


# -- the flusher over each path ----------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
async def test_round_uses_the_expected_path(tmp_path, path):
    manager = await started(tmp_path, path)
    manager.create_topic("t", 1)
    plog = manager.get_partition("t", 0)
    await plog.wait_durable(plog.append(make_batch(2)).next_offset)
    assert plog.high_watermark == 2
    if path == "aio" and aio_available():
        assert manager._aio is not None and manager._sync_thread._thread is None
    else:
        assert manager._aio is None and manager._sync_thread._thread is not None
    await manager.close()


@pytest.mark.parametrize("path", PATHS)
async def test_failed_fsync_fails_exactly_its_waiters(tmp_path, path):
    fs = FaultyFileSystem()
    manager = await started(tmp_path, path, fs=fs)
    manager.create_topic("good", 1)
    manager.create_topic("bad", 1)
    good, bad = manager.get_partition("good", 0), manager.get_partition("bad", 0)
    await bad.wait_durable(bad.append(make_batch(2, fill=1)).next_offset)
    fs.fsync_error, fs.path_filter = errno.EIO, "bad-0"
    before = log_fsyncs(fs)
    bad_results = [bad.append(make_batch(1, fill=2)) for _ in range(3)]
    good_results = [good.append(make_batch(1, fill=3)) for _ in range(3)]
    outcomes = await asyncio.gather(
        *(p.wait_durable(r.next_offset) for p, r in
          [(bad, r) for r in bad_results] + [(good, r) for r in good_results]),
        return_exceptions=True)
    assert log_fsyncs(fs) - before == 2  # one round, one fsync per partition
    assert all(isinstance(o, KafkaError) and o.code == Error.KAFKA_STORAGE_ERROR
               for o in outcomes[:3])
    assert outcomes[3:] == [None] * 3
    assert bad.high_watermark == bad.log_end_offset == 2  # not acknowledged: taken back
    assert good.high_watermark == 3
    fs.clear_faults()
    await bad.wait_durable(bad.append(make_batch(1, fill=4)).next_offset)
    assert values(bad.read(0, 10**6).records) == [b"\x01" * 10] * 2 + [b"\x04" * 10]
    await manager.close()


@pytest.mark.parametrize("path", PATHS)
async def test_power_loss_keeps_every_acknowledged_append(tmp_path, path):
    fs = FaultyFileSystem()
    manager = await started(tmp_path, path, fs=fs,
                            config=LogConfig(segment_bytes=3000, index_interval_bytes=200))
    manager.create_topic("t", 2)
    confirmed: dict[int, list[tuple[int, bytes]]] = {0: [], 1: []}

    async def producer(i):
        plog = manager.get_partition("t", i % 2)
        for j in range(15):
            value = bytes([i, j]) * 20
            result = plog.append(record(value))
            await plog.wait_durable(result.next_offset)
            confirmed[i % 2].append((result.base_offset, value))

    await asyncio.gather(*(producer(i) for i in range(8)))
    for p in (0, 1):  # appends nobody waited for, then the lights go out
        for k in range(10):
            manager.get_partition("t", p).append(record(b"unacked" * (k + 1)))
    assert len(manager.get_partition("t", 0).segments) >= 3  # rolls: thread rounds too
    await manager.abandon()
    fs.simulate_power_loss()
    again = LogManager(tmp_path, default_config=LogConfig(), clock=FakeClock())
    await again.start()
    for p in (0, 1):
        plog = again.get_partition("t", p)
        data = read_all(plog)
        stored = dict(zip(offsets(data), values(data), strict=True))
        assert len(confirmed[p]) == 60
        for offset, value in confirmed[p]:
            assert stored.get(offset) == value
        assert plog.log_end_offset == 60  # the unflushed tail really was lost
    await again.close()


async def test_kernel_refusal_falls_back_to_the_thread(tmp_path, monkeypatch):
    manager = await started(tmp_path, "aio")
    manager.create_topic("t", 1)
    plog = manager.get_partition("t", 0)

    def refuse(handles, aio, done, future=None):
        raise AioUnsupported(errno.EINVAL, "no FDSYNC")

    monkeypatch.setattr(manager.fs, "fsync_async_then", refuse)
    for i in range(3):
        await plog.wait_durable(plog.append(make_batch(1, fill=i)).next_offset)
    assert plog.high_watermark == 3 and not manager._aio_usable
    await manager.close()


async def test_a_request_not_queued_runs_in_the_thread(tmp_path, monkeypatch):
    """io_submit failing (EAGAIN: no room) synced nothing and is no fsync failure: that
    round's fsync runs in the thread, and AIO stays in use for the next."""
    fs = FaultyFileSystem()
    manager = await started(tmp_path, "aio", fs=fs)
    manager.create_topic("t", 1)
    plog = manager.get_partition("t", 0)
    calls = []

    def full(handles, aio, done, future=None):
        calls.append(handles)
        raise OSError(errno.EAGAIN, "no room")

    monkeypatch.setattr(fs, "fsync_async_then", full)
    await plog.wait_durable(plog.append(make_batch(2)).next_offset)
    assert plog.high_watermark == 2
    assert bool(calls) == manager._aio_usable == aio_available()
    assert fs.synced_length(plog.segments[0].path(".log")) > 0  # the thread's fdatasync
    await manager.close()


# -- the produce handler's durable wait --------------------------------------------------


async def test_durable_failures_per_log_timeout_and_cancel(tmp_path):
    fs = FaultyFileSystem()
    manager = await started(tmp_path, "aio", fs=fs)
    manager.create_topic("a", 1)
    manager.create_topic("b", 1)
    a, b = manager.get_partition("a", 0), manager.get_partition("b", 0)
    # both durable, one already before the wait
    done = a.append(make_batch(1)).next_offset
    await a.wait_durable(done)
    waits = [(a, done), (a, a.append(make_batch(1)).next_offset),
             (b, b.append(make_batch(2)).next_offset)]
    assert await _durable_failures(waits, 30_000) == [None, None, None]
    # b's fsync fails: only b's wait answers KAFKA_STORAGE_ERROR
    fs.fsync_error, fs.path_filter = errno.EIO, "b-0"
    waits = [(a, a.append(make_batch(1)).next_offset), (b, b.append(make_batch(1)).next_offset)]
    failures = await _durable_failures(waits, 0)
    assert failures[0] is None and failures[1][0] == Error.KAFKA_STORAGE_ERROR
    fs.clear_faults()
    # the timeout: no round comes (the flusher is held back), REQUEST_TIMED_OUT
    a.dirty_listener = None
    pending = a.append(make_batch(1)).next_offset
    assert await _durable_failures([(a, pending)], 1) == [(Error.REQUEST_TIMED_OUT, None)]
    # a request cancelled while it waits: its future is cancelled, nothing leaks
    task = asyncio.ensure_future(_durable_failures([(a, pending)], 30_000))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all(future.done() for _, _, future in a._waiters)
    await manager.flush_all()
    assert a.high_watermark == pending
    await manager.close()


async def test_plain_file_system_uses_the_seam(tmp_path):
    """RealFileSystem.fsync_async_then hands the descriptors to the AIO context as they
    are."""
    seen = []

    class Recorder:
        def start(self, fds, done, future=None):
            seen.append(fds)

    handle = RealFileSystem().open(tmp_path / "f")
    try:
        assert RealFileSystem().fsync_async_then([handle], Recorder(), print) is True
        assert seen == [[handle.fd]]
    finally:
        handle.close()


async def test_a_loop_that_cannot_watch_the_eventfd_means_no_aio(tmp_path, monkeypatch):
    """AioFsync.open when the loop refuses the eventfd's reader: no context (it and the
    eventfd released), and the flusher keeps to the thread - rounds succeed, none is failed
    as an fsync error, no second context is tried."""
    loop = asyncio.get_running_loop()
    attempts = []

    def refuse(fd, callback, *args):
        attempts.append(fd)
        raise NotImplementedError("no readers on this loop")

    monkeypatch.setattr(loop, "add_reader", refuse)
    manager = await started(tmp_path, "aio")
    manager.create_topic("t", 1)
    plog = manager.get_partition("t", 0)
    for i in range(3):
        await plog.wait_durable(plog.append(make_batch(1, fill=i)).next_offset)
    assert plog.high_watermark == 3
    assert len(attempts) == (1 if aio_available() else 0) and not manager._aio_usable
    if attempts:
        with pytest.raises(OSError):
            os.fstat(attempts[0])  # the eventfd was closed
    await manager.close()


async def test_flush_all_a_job_that_fails_to_start_fails_alone(tmp_path, monkeypatch):
    """flush_all over several dirty logs, one job's start raising: that log's waiters get
    its error, the other logs' round completes (nothing left pinned or waiting)."""
    manager = await started(tmp_path, "thread")
    manager.create_topic("t", 3)
    logs = [manager.get_partition("t", p) for p in range(3)]
    manager._rounds_on = False  # only flush_all's round runs
    ends = [plog.append(make_batch(1)).next_offset for plog in logs]
    start_job = manager._start_job

    def second_fails(plog, job, alone, aio=True):
        if plog is logs[1]:
            raise RuntimeError("a bug of ours")
        return start_job(plog, job, alone, aio)

    waits = [asyncio.ensure_future(plog.wait_durable(end)) for plog, end in zip(logs, ends)]
    await asyncio.sleep(0)
    monkeypatch.setattr(manager, "_start_job", second_fails)
    await manager.flush_all()
    assert [plog.high_watermark for plog in logs] == [ends[0], 0, ends[2]]
    _, pending = await asyncio.wait(waits, timeout=30)
    assert not pending
    assert [w.exception() is None for w in waits] == [True, False, True]
    monkeypatch.setattr(manager, "_start_job", start_job)
    manager._rounds_on = True
    await manager.close()
