"""Shared builders for the storage tests: batches, logs, a settable clock."""

from __future__ import annotations

from pathlib import Path

from semel.protocol.records import BatchHeader, build_batch, iter_batches, iter_records
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.log_manager import LogManager
from semel.storage.partition_log import PartitionLog
from semel.storage.recovery import open_partition_log
from semel.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


class FakeClock:
    """Milliseconds that only move when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def make_batch(
    count: int = 1,
    *,
    timestamp: int = 1_700_000_000_000,
    value_size: int = 10,
    fill: int = 0x61,
    timestamps: list[int] | None = None,
    **kwargs,
) -> bytes:
    """One v2 batch of `count` records with `value_size`-byte values, base offset 0."""
    stamps = timestamps or [timestamp + i for i in range(count)]
    value = bytes([fill % 256]) * value_size
    return build_batch([(None, value, None, ts) for ts in stamps], **kwargs)


def headers(data: bytes) -> list[BatchHeader]:
    return list(iter_batches(data))


def offsets(data: bytes) -> list[int]:
    """Every record offset in a concatenation of batches."""
    result = []
    for header in iter_batches(data):
        result.extend(record.offset for record in iter_records(data, header))
    return result


def values(data: bytes) -> list[bytes | None]:
    result = []
    for header in iter_batches(data):
        result.extend(record.value for record in iter_records(data, header))
    return result


def open_log(
    directory: Path,
    config: LogConfig | None = None,
    *,
    fs: RealFileSystem | None = None,
    clock=None,
    durable: bool = False,
    clean: bool = True,
    log_start_offset: int = 0,
) -> PartitionLog:
    return open_partition_log(
        fs or RealFileSystem(),
        str(directory),
        TP,
        config or LogConfig(),
        clock=clock or FakeClock(),
        clean_shutdown=clean,
        log_start_offset=log_start_offset,
        durable=durable,
    )


def read_all(plog: PartitionLog, upper_bound: int | None = None) -> bytes:
    """Every batch from the log start up to the high watermark (reads are per segment)."""
    chunks, offset = [], plog.log_start_offset
    end = plog.high_watermark if upper_bound is None else upper_bound
    while offset < end:
        data = plog.read(offset, 1 << 30, upper_bound).records
        if not data:
            break
        chunks.append(data)
        offset = headers(data)[-1].next_offset
    return b"".join(chunks)


async def started(data_dir, fs=None, flush_mode="fsync", config=None, clock=None) -> LogManager:
    """A started LogManager on ``data_dir`` (fsync by default, a fake clock); segments of
    4000 bytes unless ``config`` says otherwise."""
    manager = LogManager(data_dir, default_config=config or LogConfig(segment_bytes=4000),
                         flush_mode=flush_mode, fs=fs, clock=clock or FakeClock())
    await manager.start()
    return manager


async def one_partition(data_dir, **kwargs) -> tuple[LogManager, PartitionLog]:
    """``started(data_dir, **kwargs)`` with topic "t" of one partition made: the manager and
    the partition's log."""
    manager = await started(data_dir, **kwargs)
    manager.create_topic("t", 1)
    return manager, manager.get_partition("t", 0)
