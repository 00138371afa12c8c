"""Where the cleaner's heavy part runs: ``CleanerProcess`` (the broker's: a child process,
started at the first cleaning and kept) or ``CleanerThread`` (tests: an executor thread that
may share the caller's file system, faults and all). Both take a ``CleaningJob`` and give
its ``CleaningOutput``.

A process rather than a thread, because the filter's per-batch decisions are Python: in a
thread they would hold the GIL for up to the switch interval (5 ms) at a time while the
event loop waits to serve requests; in a process they cost the broker nothing but a share
of the CPU, and that share comes out of idle time: the process runs under SCHED_IDLE
(``priority="idle"``, the default; a number is a niceness instead), so whenever a broker or
client thread wants a core the kernel gives it at once, and idle cores the cleaner uses in
full.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
import pickle
import sys
from concurrent.futures import Executor

from semel import storage
from semel.storage.cleaner.worker import FRAME, CleaningJob, CleaningOutput, run_job
from semel.storage.fs import RealFileSystem

log = logging.getLogger("storage.cleaner")

DEFAULT_PRIORITY = "idle"


class CleanerError(Exception):
    """A cleaning failed in the worker (its files are gone) or the worker died.
    ``error_type``: the worker's exception class name ("died" when the process did)."""

    def __init__(self, message: str, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type

    @property
    def transient(self) -> bool:
        """The worker died or met the file system (a segment deleted meanwhile, a full or
        failing disk): the next cleaning may succeed. Anything else (corrupt records, a
        bug) would fail again."""
        if self.error_type == "died":
            return True
        kind = getattr(builtins, self.error_type, None)
        return isinstance(kind, type) and issubclass(kind, OSError)


class CleanerProcess:
    def __init__(self, priority: str = DEFAULT_PRIORITY) -> None:
        self.priority = priority
        self._proc: asyncio.subprocess.Process | None = None
        self.started = 0  # processes started (one unless one died)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    async def _start(self) -> asyncio.subprocess.Process:
        # the child imports this very tree, wherever it was imported from
        root = os.path.dirname(os.path.dirname(os.path.abspath(storage.__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "semel.storage.cleaner.worker", str(os.getpid()),
            self.priority, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=env)
        self.started += 1
        log.info("log cleaner process %d started", proc.pid)
        return proc

    async def run(self, job: CleaningJob) -> CleaningOutput | None:
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await self._start()
        proc = self._proc
        data = pickle.dumps(job)
        try:
            proc.stdin.write(FRAME.pack(len(data)) + data)
            await proc.stdin.drain()
            head = await proc.stdout.readexactly(FRAME.size)
            status, value = pickle.loads(await proc.stdout.readexactly(FRAME.unpack(head)[0]))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            await self._stop()
            raise CleanerError(f"the cleaner process died ({exc!r})", "died") from None
        except BaseException:  # cancelled part way: its answer would confuse the next job
            await self._stop()
            raise
        if status != "ok":
            raise CleanerError(value, value.split(":", 1)[0])
        return value

    async def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            proc.kill()  # it only ever writes .cleaned files, which recovery removes
        await proc.wait()

    async def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None and proc.stdin is not None:
            proc.stdin.close()  # idle: it exits at the end of its input
            try:
                await asyncio.wait_for(proc.wait(), 2)
            except TimeoutError:
                pass
        await self._stop()


class CleanerThread:
    """The same work in an executor thread (tests): ``fs`` may be a faulty file system."""

    def __init__(self, executor: Executor | None = None, fs: RealFileSystem | None = None):
        self.executor = executor
        self.fs = fs

    async def run(self, job: CleaningJob) -> CleaningOutput | None:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.executor, run_job, job, self.fs)
        except Exception as exc:
            raise CleanerError(f"{type(exc).__name__}: {exc}", type(exc).__name__) from exc

    async def close(self) -> None:
        pass
