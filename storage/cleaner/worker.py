"""The cleaner's heavy part: build the offset map over the dirty range, then write each group
of segments as ``.cleaned`` files. A ``CleaningJob`` is plain data taken on the event loop
(segment files, ranges, aborted transactions, each producer's last batch), so the work runs
in a separate process (the broker's: ``python -m semel.storage.cleaner.worker``, see process.py)
or in a thread (tests), and touches nothing but files: the closed segments it reads and the
``.cleaned`` files it writes. The broker swaps the result in.

As a process it reads jobs from stdin and writes results to stdout, each a 4-byte
big-endian length and a pickle (both ends are this code); it runs at a lower CPU priority
than the broker (``lower_priority``), and dies with its parent (PR_SET_PDEATHSIG, and a
check of the parent pid between chunks) so that a broker killed with -9 never leaves a cleaner writing
``.cleaned`` files under its successor.

``log.cleaner.io.max.bytes.per.second`` (Kafka's Throttler): the bytes read and written
are kept under that rate; ``log.cleaner.max.cpu.share`` (semel's): the worker's CPU time
is kept under that share of the wall time; both over windows of 300 ms.
"""

from __future__ import annotations

import os
import pickle
import resource
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from semel.storage.cleaner.filter import BatchFilter, FilterStats, build_offset_map
from semel.storage.cleaner.offset_map import OffsetMap
from semel.storage.cleaner.writer import (
    READ_CHUNK,
    SegmentFile,
    file_batches,
    group_segments,
    remove_cleaned,
    write_cleaned,
)
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.transaction_index import AbortedTxn

FRAME = struct.Struct(">I")
UNLIMITED = float("inf")


@dataclass(frozen=True)
class CleaningJob:
    directory: str
    config: LogConfig
    segments: tuple[SegmentFile, ...]  # the closed segments below the first uncleanable offset
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted: tuple[AbortedTxn, ...]  # of the segments' .txnindex files
    last_batch_of_producer: dict[int, int]  # active producer id -> last offset of its last batch
    now_ms: int
    dedupe_buffer_bytes: int
    load_factor: float
    max_io_bytes_per_second: float = UNLIMITED
    max_cpu_share: float = 1.0  # of one core, over each 300 ms window
    read_chunk_bytes: int = READ_CHUNK  # segments are read this much at a time


@dataclass
class CleanedGroup:
    base_offset: int  # of the group's first segment and of its .cleaned files
    old_base_offsets: list[int]
    size: int


@dataclass
class CleaningOutput:
    end_offset: int  # the next cleaning's first dirty offset
    groups: list[CleanedGroup]
    stats: FilterStats
    map_entries: int
    max_rss_bytes: int = 0  # of the process that did the work
    seconds: float = 0.0


class Throttler:
    """Kafka's Throttler, and a CPU budget: sleeps whenever, in the current window, the
    bytes observed ran ahead of ``rate`` bytes a second, or the CPU time used ran ahead of
    ``cpu_share`` of the wall time. ``check`` hears every window (and may end the process
    when its parent is gone)."""

    WINDOW_S = 0.3

    def __init__(self, rate: float = UNLIMITED, cpu_share: float = 1.0, *,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_clock: Callable[[], float] = time.thread_time,
                 sleep: Callable[[float], None] = time.sleep,
                 check: Callable[[], None] | None = None) -> None:
        self.rate = rate
        self.cpu_share = cpu_share
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._sleep = sleep
        self._check = check
        self._window_start = clock()
        self._window_cpu = cpu_clock()
        self._observed = 0
        self.slept = 0.0

    def __call__(self, nbytes: int) -> None:
        self._observed += nbytes
        now = self._clock()
        elapsed = now - self._window_start
        if elapsed < self.WINDOW_S:
            return
        if self._check is not None:
            self._check()
        wanted = 0.0  # the wall time this window should have taken
        if self.rate != UNLIMITED:
            wanted = self._observed / self.rate
        if self.cpu_share < 1.0:
            wanted = max(wanted, (self._cpu_clock() - self._window_cpu) / self.cpu_share)
        if wanted > elapsed:
            self._sleep(wanted - elapsed)
            self.slept += wanted - elapsed
            now = self._clock()
        self._window_start = now
        self._window_cpu = self._cpu_clock()
        self._observed = 0


def run_job(job: CleaningJob, fs: RealFileSystem | None = None,
            check: Callable[[], None] | None = None) -> CleaningOutput | None:
    """One cleaning's map and cleaned groups; None when the dirty range holds no key.
    Leaves no ``.cleaned`` file behind when it fails."""
    started = time.monotonic()
    fs = fs or RealFileSystem()
    throttle = Throttler(job.max_io_bytes_per_second, job.max_cpu_share, check=check)
    offset_map = OffsetMap(job.dedupe_buffer_bytes, job.load_factor)
    dirty = [s for s in job.segments if s.next_offset > job.first_dirty_offset]
    build_offset_map((b for s in dirty
                      for b in file_batches(fs, s, throttle, job.read_chunk_bytes)), job.aborted,
                     job.first_dirty_offset, offset_map)
    if offset_map.latest_offset < 0:
        return None
    end = min(offset_map.latest_offset + 1, job.first_uncleanable_offset)
    batch_filter = BatchFilter(offset_map, job.aborted, now_ms=job.now_ms,
                               delete_retention_ms=job.config.delete_retention_ms,
                               last_batch_of_producer=job.last_batch_of_producer)
    groups: list[CleanedGroup] = []
    try:
        for group in group_segments(job.segments, job.config.segment_bytes,
                                    job.config.segment_index_bytes, end):
            if check is not None:
                check()
            size = write_cleaned(fs, job.directory, group, batch_filter, job.config,
                                 job.now_ms, throttle, job.read_chunk_bytes)
            groups.append(CleanedGroup(group[0].base_offset,
                                       [s.base_offset for s in group], size))
    except BaseException:
        for done in groups:
            remove_cleaned(fs, job.directory, done.base_offset)
        raise
    return CleaningOutput(end, groups, batch_filter.stats, len(offset_map),
                          seconds=time.monotonic() - started)


# -- the cleaner process -------------------------------------------------------------------

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pid check below still runs
        pass

    def check() -> None:
        if os.getppid() != parent_pid:
            os._exit(1)

    check()  # the parent may have died before prctl
    return check


def _read_exactly(stream, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def serve(stdin, stdout, check: Callable[[], None]) -> None:
    """Answer jobs until stdin ends: ("ok", CleaningOutput | None) or ("error", text)."""
    while True:
        head = _read_exactly(stdin, FRAME.size)
        if head is None:
            return
        body = _read_exactly(stdin, FRAME.unpack(head)[0])
        if body is None:
            return
        try:
            output = run_job(pickle.loads(body), check=check)
            if output is not None:
                output.max_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            answer = ("ok", output)
        except Exception as exc:  # noqa: BLE001 - sent to the broker, which logs it
            answer = ("error", f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(answer)
        stdout.write(FRAME.pack(len(data)) + data)
        stdout.flush()


def lower_priority(priority: str) -> None:
    """``idle``: Linux's SCHED_IDLE (the process runs on CPU time nothing else wants, and
    any other task that wakes up takes the CPU from it at once); a number: that niceness."""
    if priority == "idle" and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    elif priority == "idle":
        os.nice(19)
    elif int(priority):
        os.nice(int(priority))


def main(argv: list[str]) -> None:
    parent_pid, priority = int(argv[0]), argv[1]
    check = _die_with_parent(parent_pid)
    lower_priority(priority)
    serve(sys.stdin.buffer, sys.stdout.buffer, check)


if __name__ == "__main__":  # run as the module itself, so results pickle under its name
    import importlib

    importlib.import_module("semel.storage.cleaner.worker").main(sys.argv[1:])
