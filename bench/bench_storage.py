"""Storage throughput: appends of 16 KiB batches (flush mode none, and fsync with group
commit under concurrent producers) and sequential reads, through the real LogManager.

    .venv/bin/python bench/bench_storage.py [--mib 256] [--producers 32] [--dir DIR]

Prints MB/s (10^6 bytes per second) per phase, fsyncs per round, and the time one append
call holds the event loop. The data directory must be on a real disk for the fsync phase
to mean anything (default: a temp dir under the current directory's file system).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from semel.protocol.records import build_batch, iter_batches
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.log_manager import LogManager

BATCH_BYTES = 16 * 1024


class CountingFileSystem(RealFileSystem):
    def __init__(self) -> None:
        self.fsyncs = 0

    def _fsync(self, handle):
        self.fsyncs += 1
        super()._fsync(handle)


def make_batch() -> bytes:
    records, size = [], 61
    while size < BATCH_BYTES - 1100:
        records.append((None, os.urandom(1000), None, int(time.time() * 1000)))
        size += 1010
    return build_batch(records)


async def manager_for(path: Path, flush_mode: str, fs: RealFileSystem) -> LogManager:
    manager = LogManager(path, default_config=LogConfig(), flush_mode=flush_mode, fs=fs)
    await manager.start()
    manager.create_topic("bench", 1)
    return manager


async def bench_append_none(path: Path, total: int, batch: bytes) -> tuple[float, float]:
    manager = await manager_for(path, "none", RealFileSystem())
    plog = manager.get_partition("bench", 0)
    buffers = [bytearray(batch) for _ in range(64)]
    count = total // len(batch)
    start = time.perf_counter()
    for i in range(count):
        plog.append(buffers[i % 64])
    elapsed = time.perf_counter() - start
    await manager.close()
    return count * len(batch) / elapsed / 1e6, elapsed / count * 1e6


async def bench_append_fsync(
    path: Path, total: int, batch: bytes, producers: int
) -> tuple[float, int, int, float]:
    fs = CountingFileSystem()
    manager = await manager_for(path, "fsync", fs)
    plog = manager.get_partition("bench", 0)
    per_producer = total // len(batch) // producers
    held: list[float] = []

    async def producer() -> None:
        buf = bytearray(batch)
        for _ in range(per_producer):
            t0 = time.perf_counter()
            result = plog.append(buf)
            held.append(time.perf_counter() - t0)
            await plog.wait_durable(result.next_offset)

    fsyncs_before = fs.fsyncs
    start = time.perf_counter()
    await asyncio.gather(*(producer() for _ in range(producers)))
    elapsed = time.perf_counter() - start
    fsyncs = fs.fsyncs - fsyncs_before
    await manager.close()
    appended = per_producer * producers
    held.sort()
    return appended * len(batch) / elapsed / 1e6, appended, fsyncs, held[len(held) // 2] * 1e6


async def bench_read(path: Path, max_bytes: int) -> tuple[float, int]:
    manager = LogManager(path, default_config=LogConfig(), flush_mode="none")
    await manager.start()
    plog = manager.get_partition("bench", 0)
    offset, read_bytes, fetches = 0, 0, 0
    start = time.perf_counter()
    while offset < plog.high_watermark:
        records = plog.read(offset, max_bytes).records
        read_bytes += len(records)
        fetches += 1
        # the next fetch offset: the last batch's next offset, from its header
        offset = _next_offset(records)
    elapsed = time.perf_counter() - start
    await manager.close()
    return read_bytes / elapsed / 1e6, fetches


def _next_offset(records: bytes) -> int:
    return list(iter_batches(records))[-1].next_offset


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=256, help="data per append phase")
    parser.add_argument("--producers", type=int, default=32)
    parser.add_argument("--dir", default=None, help="parent of the temporary data dirs")
    args = parser.parse_args()
    total = args.mib * 1024 * 1024
    batch = make_batch()
    root = Path(tempfile.mkdtemp(prefix="semel-bench-", dir=args.dir or "."))
    try:
        mbps, per_append = await bench_append_none(root / "none", total, batch)
        print(
            f"append, flush.mode=none : {mbps:8.1f} MB/s  "
            f"({len(batch)} B batches, {per_append:.1f} us per append)"
        )
        mbps, appends, fsyncs, held = await bench_append_fsync(
            root / "fsync", total // 2, batch, args.producers
        )
        print(
            f"append, fsync + group commit ({args.producers} producers): {mbps:8.1f} MB/s  "
            f"({appends} acknowledged appends, {fsyncs} fsyncs, "
            f"{appends / max(fsyncs, 1):.1f} appends/fsync, median append holds the loop "
            f"{held:.1f} us)"
        )
        for max_bytes in (1 << 20, 50 << 20):
            mbps, fetches = await bench_read(root / "none", max_bytes)
            print(f"read, max_bytes={max_bytes >> 20} MiB: {mbps:8.1f} MB/s ({fetches} reads)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
