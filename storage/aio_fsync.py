"""fdatasync without a thread: Linux native AIO (``IOCB_CMD_FDSYNC``), completed on the loop.

``io_submit`` of an FDSYNC control block queues the kernel's own ``vfs_fsync(file,
datasync=1)`` - the very call fdatasync(2) makes - on a kernel worker and returns at once;
the completion is counted on an eventfd the event loop watches, and ``io_getevents`` (with
a zero timeout) reads each request's result (0, or minus the errno fdatasync would have
raised). So a group-commit round costs the loop two or three system calls and no Python
thread: no hand-off through a queue, no GIL passed back and forth between the loop and a
worker (bench/bench_request_cost.py ``--durable`` measures the difference; the kernel
worker's CPU is not the broker's, and is counted apart in that comparison).

Linux 4.18+ on x86_64 or aarch64 only: ``AioFsync.open`` returns None elsewhere, or when
the context cannot be set up (``fs.aio-max-nr`` exhausted, a seccomp profile refusing the
calls), and the caller keeps its thread. A kernel without FDSYNC support refuses the
first request with EINVAL: ``submit`` raises ``AioUnsupported`` and the caller falls back
for good.

Layout of ``struct iocb`` (linux/aio_abi.h, little-endian): u64 aio_data, u32 aio_key,
s32 aio_rw_flags, u16 aio_lio_opcode, s16 aio_reqprio, u32 aio_fildes, u64 aio_buf,
u64 aio_nbytes, s64 aio_offset, u64 aio_reserved2, u32 aio_flags, u32 aio_resfd (64
bytes); ``struct io_event``: u64 data, u64 obj, s64 res, s64 res2 (32 bytes).

Threading: everything runs on the event loop; the kernel copies a control block during
``io_submit``, so one buffer serves every request. The descriptors submitted must stay open
until their call completes (the partition log pins the segments of a round). ``start`` calls
its callback from the eventfd's reader itself (the flusher completes a round there, without
a hop of the loop); ``submit`` wraps it in a future.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import os
import struct
import sys
from collections.abc import Callable

from semel.storage.fs import AioUnsupported, settle_future

# (io_setup, io_destroy, io_getevents, io_submit) per machine
_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB = struct.Struct("<QIiHhIQQqQII")
_EVENT = struct.Struct("<QQqq")
IOCB_CMD_FDSYNC = 3
IOCB_FLAG_RESFD = 1
MAX_EVENTS = 64  # completions the context holds; a round submits one per file


class AioFsync:
    """An AIO context whose FDSYNC completions wake the loop through an eventfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop, libc, calls: tuple[int, int, int, int],
                 context: ctypes.c_ulong, eventfd: int) -> None:
        self._loop = self.loop = loop
        self._syscall = libc.syscall
        self._io_destroy, self._io_getevents, self._io_submit = calls[1], calls[2], calls[3]
        self._context = context
        self._eventfd = eventfd
        self._iocb = ctypes.create_string_buffer(_IOCB.size)
        self._iocbs = (ctypes.c_void_p * 1)(ctypes.addressof(self._iocb))
        self._events = ctypes.create_string_buffer(_EVENT.size * MAX_EVENTS)
        self._no_wait = (ctypes.c_long * 2)(0, 0)
        # key -> [done callback, requests left, first error, submit's future or None]
        self._pending: dict[int, list] = {}
        self._in_flight = 0
        self._next_key = 1
        self.closed = False
        loop.add_reader(eventfd, self._completed)

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop) -> AioFsync | None:
        """A context for ``loop``, or None where native AIO is not to be had."""
        calls = _SYSCALLS.get(os.uname().machine)
        if not sys.platform.startswith("linux") or calls is None or sys.byteorder != "little":
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            context = ctypes.c_ulong(0)
            if libc.syscall(calls[0], MAX_EVENTS, ctypes.byref(context)) != 0:
                return None
        except (OSError, AttributeError):
            return None
        try:
            eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except (OSError, AttributeError):
            libc.syscall(calls[1], context)
            return None
        try:
            return cls(loop, libc, calls, context, eventfd)
        except Exception:  # noqa: BLE001 - the loop cannot watch it (add_reader): no AIO
            libc.syscall(calls[1], context)
            os.close(eventfd)
            return None

    def submit(self, fds: list[int]) -> asyncio.Future:
        """fdatasync every descriptor of ``fds`` (in parallel, on kernel workers); the future
        resolves with None once all returned, or fails with the first one's OSError. Raises
        AioUnsupported if the kernel refuses FDSYNC, OSError if a request cannot be queued
        (nothing of this call is then left pending)."""
        future = self._loop.create_future()
        if fds:
            self.start(fds, functools.partial(settle_future, future), future)
        else:
            future.set_result(None)
        return future

    def start(self, fds: list[int], done: Callable[[OSError | None], object],
              future: asyncio.Future | None = None) -> None:
        """``submit`` without a future: ``done(None)`` or ``done(first OSError)`` is called
        on the loop, from the eventfd's reader itself, once every request returned - no hop
        through a future's callbacks; it must not raise. It is never called if the context is
        closed first. Raises as ``submit``, and then never calls ``done``. (``future``: ``submit``'s, which
        ``close`` cancels.)"""
        if not fds:
            done(None)
            return
        if self._in_flight + len(fds) > MAX_EVENTS:
            raise OSError(errno.EAGAIN, "too many fsync requests in flight")
        key = self._next_key
        self._next_key += 1
        entry = [done, 0, None, future]
        self._pending[key] = entry
        for fd in fds:
            _IOCB.pack_into(self._iocb, 0, key, 0, 0, IOCB_CMD_FDSYNC, 0, fd, 0, 0, 0, 0,
                            IOCB_FLAG_RESFD, self._eventfd)
            if self._syscall(self._io_submit, self._context, 1, self._iocbs) != 1:
                code = ctypes.get_errno()
                if entry[1] == 0:  # none of this call queued: forget it
                    del self._pending[key]
                    if code == errno.EINVAL:
                        raise AioUnsupported(code, "io_submit refused an FDSYNC request")
                    raise OSError(code, os.strerror(code))
                # some queued (a call of several files): it fails once those complete, and
                # the round with it - a failed fsync, never a silent one
                entry[2] = entry[2] or OSError(code, os.strerror(code))
                break
            entry[1] += 1
            self._in_flight += 1

    def _completed(self) -> None:
        """The eventfd is readable: collect every finished request, settle whole calls."""
        try:
            os.eventfd_read(self._eventfd)
        except BlockingIOError:
            return
        events = self._events
        while True:
            count = self._syscall(self._io_getevents, self._context, 0, MAX_EVENTS, events,
                                  self._no_wait)
            if count < 0 and ctypes.get_errno() == errno.EINTR:
                continue  # interrupted by a signal: the completions are still there
            if count <= 0:
                return
            for i in range(count):
                key, _, result, _ = _EVENT.unpack_from(events, i * _EVENT.size)
                self.complete(key, result)
            if count < MAX_EVENTS:
                return

    def complete(self, key: int, result: int) -> None:
        """One request of call ``key`` finished with ``result`` (0 or -errno)."""
        self._in_flight -= 1
        entry = self._pending[key]
        entry[1] -= 1
        if result < 0 and entry[2] is None:
            entry[2] = OSError(-result, f"fdatasync: {os.strerror(-result)}")
        if entry[1] == 0:
            del self._pending[key]
            entry[0](entry[2])

    def close(self) -> None:
        """Wait for requests in flight (io_destroy does), release the context."""
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._eventfd)
        self._syscall(self._io_destroy, self._context)
        os.close(self._eventfd)
        for _, _, _, future in self._pending.values():
            if future is not None:
                future.cancel()
        self._pending.clear()

