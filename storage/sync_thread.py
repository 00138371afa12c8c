"""The flusher's fsync thread: one long-lived thread that runs group-commit jobs off the loop.

A job is a call (``PartitionLog.run_flush``) whose answer is a future of the event loop:
``submit`` queues the call and returns the future; the thread makes the call and settles the
future with one ``call_soon_threadsafe``. Compared with ``loop.run_in_executor`` on a
``ThreadPoolExecutor`` this skips the concurrent future (its condition and callbacks), the
work item, the idle semaphore and the chaining of two futures - per round, on a machine where
each hand-off between threads costs tens of microseconds of CPU (bench/bench_request_cost.py
``--durable`` measures it). The fsync itself is the same call on the same descriptor: a job's
future resolves only once it returned.

Threading: ``submit`` and ``close`` are called on the loop; the thread only runs the queued
calls (which touch nothing but file descriptors) and ``call_soon_threadsafe``. The thread
starts with the first job, so a broker that never fsyncs never starts it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any


class SyncThread:
    """Runs submitted calls one after another in a thread; each answers through a future."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str = "semel-fsync") -> None:
        self._loop = loop
        self._name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, fn: Callable[[Any], None], arg: Any) -> asyncio.Future:
        """Queue ``fn(arg)``; the returned future (of the loop) gets its exception, or None."""
        if self._closed:
            raise RuntimeError("the fsync thread is closed")
        future = self._loop.create_future()
        self._jobs.put((fn, arg, future))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        return future

    def close(self) -> None:
        """Stop the thread once the queued jobs ran (blocks until then)."""
        self._closed = True
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        get = self._jobs.get
        call_soon_threadsafe = self._loop.call_soon_threadsafe
        while (job := get()) is not None:
            fn, arg, future = job
            try:
                fn(arg)
            except BaseException as exc:  # noqa: BLE001 - the job's failure is its answer
                error = exc
            else:
                error = None
            try:
                call_soon_threadsafe(_settle, future, error)
            except RuntimeError:  # the loop closed (a test that abandoned its broker)
                pass
            del job, future, arg, error


def _settle(future: asyncio.Future, error: BaseException | None) -> None:
    if future.done():  # cancelled: its round was abandoned
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
