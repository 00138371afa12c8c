"""Group commit, the durable high watermark, and faults injected through the fs seam:
ENOSPC/EIO on append, torn and short writes, failed fsync, simulated power loss."""

from __future__ import annotations

import asyncio
import errno

import pytest
from log_helpers import make_batch, offsets, one_partition, read_all, started, values

from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_batch
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem


def log_fsyncs(fs: FaultyFileSystem) -> int:
    return sum(n for path, n in fs.fsync_calls.items() if path.endswith(".log"))


async def test_durable_high_watermark_waits_for_fsync(tmp_path):
    manager, plog = await one_partition(tmp_path)
    notified = []
    manager.on_high_watermark = lambda p: notified.append(p.high_watermark)
    result = plog.append(make_batch(3))
    assert plog.log_end_offset == 3 and plog.high_watermark == 0
    assert plog.read(0, 10**6).records == b""  # not durable yet: invisible to consumers
    await plog.wait_durable(result.next_offset)
    assert plog.high_watermark == 3 and notified == [3]
    assert offsets(plog.read(0, 10**6).records) == [0, 1, 2]
    await manager.close()


async def test_flush_mode_none_exposes_appends_at_once(tmp_path):
    manager, plog = await one_partition(tmp_path, flush_mode="none")
    notified = []
    manager.on_high_watermark = lambda p: notified.append(p.high_watermark)
    result = plog.append(make_batch(2))
    assert plog.high_watermark == 2 and notified == [2]
    await plog.wait_durable(result.next_offset)
    await plog.wait_durable(10**6)  # never waits in this mode
    await manager.close()


async def test_group_commit_one_fsync_covers_many_appends(tmp_path):
    fs = FaultyFileSystem()
    manager = await started(tmp_path, fs=fs, config=LogConfig())
    manager.create_topic("t", 4)
    base = log_fsyncs(fs)

    async def producer(i):
        plog = manager.get_partition("t", i % 4)
        result = plog.append(make_batch(1, fill=i))
        await plog.wait_durable(result.next_offset)
        return plog.high_watermark >= result.next_offset

    assert all(await asyncio.gather(*(producer(i) for i in range(200))))
    # every append happened before the flusher first ran: one fsync per partition
    assert log_fsyncs(fs) - base == 4
    for p in range(4):
        assert manager.get_partition("t", p).high_watermark == 50
    await manager.close()


async def test_group_commit_under_a_stream_of_appends(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs, config=LogConfig())
    base = log_fsyncs(fs)

    async def producer(i):
        for _ in range(20):
            result = plog.append(make_batch(1, fill=i))
            await plog.wait_durable(result.next_offset)
            assert plog.high_watermark >= result.next_offset

    await asyncio.gather(*(producer(i) for i in range(25)))
    assert plog.high_watermark == 500
    assert log_fsyncs(fs) - base <= 60  # 500 acknowledged appends, a few dozen fsyncs
    await manager.close()


async def test_enospc_on_append_leaves_the_log_intact(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs)
    await plog.wait_durable(plog.append(make_batch(2, fill=1)).next_offset)
    size = plog.active_segment.size
    for torn in (0, 30):
        fs.write_error, fs.write_error_after = errno.ENOSPC, torn
        with pytest.raises(KafkaError) as info:
            plog.append(make_batch(2, fill=2))
        assert info.value.code == Error.KAFKA_STORAGE_ERROR
        assert plog.log_end_offset == 2 and plog.active_segment.size == size
        assert fs.file_size(plog.active_segment.path(".log")) == size
        assert values(plog.read(0, 10**6).records) == [b"\x01" * 10] * 2
    fs.clear_faults()
    result = plog.append(make_batch(1, fill=3))
    assert result.base_offset == 2
    await plog.wait_durable(result.next_offset)
    assert values(plog.read(0, 10**6).records) == [b"\x01" * 10] * 2 + [b"\x03" * 10]
    await manager.close()
    again = await started(tmp_path)
    assert again.get_partition("t", 0).log_end_offset == 3
    await again.close()


async def test_short_writes_are_completed(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs, flush_mode="none")
    fs.short_write = 7
    batches = [make_batch(2, value_size=100, fill=i) for i in range(5)]
    for batch in batches:
        plog.append(batch)
    assert fs.write_calls > 5 * 30
    assert values(plog.read(0, 10**6).records) == [
        bytes([i]) * 100 for i in range(5) for _ in range(2)
    ]
    await manager.close()


async def test_failed_undo_takes_the_partition_offline_for_writes(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs, flush_mode="none")
    plog.append(make_batch(1, fill=1))
    fs.write_error, fs.write_error_after, fs.truncate_error = errno.EIO, 20, errno.EIO
    with pytest.raises(KafkaError) as info:
        plog.append(make_batch(1))
    assert info.value.code == Error.KAFKA_STORAGE_ERROR and plog.offline
    fs.clear_faults()
    with pytest.raises(KafkaError) as info:
        plog.append(make_batch(1))
    assert info.value.code == Error.KAFKA_STORAGE_ERROR
    assert values(plog.read(0, 10**6).records) == [b"\x01" * 10]  # reads still served
    await manager.close()


async def test_fsync_failure_fails_waiters_and_takes_back_the_tail(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs)
    await plog.wait_durable(plog.append(make_batch(2, fill=1)).next_offset)
    fs.fsync_error = errno.EIO
    results = [plog.append(make_batch(1, fill=2)) for _ in range(3)]
    outcomes = await asyncio.gather(
        *(plog.wait_durable(r.next_offset) for r in results), return_exceptions=True
    )
    assert all(isinstance(o, KafkaError) and o.code == Error.KAFKA_STORAGE_ERROR for o in outcomes)
    assert plog.high_watermark == plog.log_end_offset == 2  # not acknowledged: taken back
    assert not plog.offline
    fs.clear_faults()
    result = plog.append(make_batch(1, fill=3))
    await plog.wait_durable(result.next_offset)
    assert values(plog.read(0, 10**6).records) == [b"\x01" * 10] * 2 + [b"\x03" * 10]
    await manager.close()


async def test_power_loss_keeps_everything_wait_durable_confirmed(tmp_path):
    fs = FaultyFileSystem()
    manager = await started(
        tmp_path, fs=fs, config=LogConfig(segment_bytes=3000, index_interval_bytes=200)
    )
    manager.create_topic("t", 2)
    confirmed: dict[int, list[bytes]] = {0: [], 1: []}

    async def producer(i):
        plog = manager.get_partition("t", i % 2)
        for j in range(15):
            value = bytes([i, j]) * 20
            result = plog.append(_with_value(value))
            await plog.wait_durable(result.next_offset)
            confirmed[i % 2].append((result.base_offset, value))

    await asyncio.gather(*(producer(i) for i in range(8)))
    # more appends that nobody waited for, then the lights go out
    for p in (0, 1):
        for k in range(10):
            manager.get_partition("t", p).append(_with_value(b"unacked" * k))
    assert len(manager.get_partition("t", 0).segments) >= 3
    await manager.abandon()
    fs.simulate_power_loss()
    again = await started(tmp_path)  # no close(): unclean start, fresh file system seam
    for p in (0, 1):
        plog = again.get_partition("t", p)
        data = read_all(plog)
        stored = dict(zip(offsets(data), values(data), strict=True))
        for offset, value in confirmed[p]:
            assert stored.get(offset) == value
        assert len(confirmed[p]) == 60
        assert plog.log_end_offset == 60  # the unflushed tail really was lost
    await again.close()


def _with_value(value: bytes) -> bytes:
    return build_batch([(None, value, None, 1_700_000_000_000)])


async def test_close_flushes_and_marks_clean(tmp_path):
    fs = FaultyFileSystem()
    manager, plog = await one_partition(tmp_path, fs=fs, flush_mode="none")
    for _ in range(5):
        plog.append(make_batch(2))
    await manager.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert fs.synced_length(plog.active_segment.path(".log")) == plog.active_segment.size
    fs.simulate_power_loss()
    again = await started(tmp_path)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # until the next clean close
    assert again.get_partition("t", 0).log_end_offset == 10
    await again.close()
