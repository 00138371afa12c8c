"""File-system seam for the log: every byte the storage layer reads or writes goes through here.

`RealFileSystem` maps each call to one `os` call (pwrite/pread/fdatasync/ftruncate on plain
file descriptors; no Python buffering, so a write is in the page cache when it returns).
`FaultyFileSystem` wraps it for tests: it can fail writes (ENOSPC, EIO, optionally after a
partial write), make writes short, fail fsync or truncate, counts fsyncs, and remembers how
many bytes of each file were fsynced (and which new files had their directory entry fsynced)
so `simulate_power_loss()` can cut every file back to what a real power loss could leave.

`fsync_async_then` is the flusher's fsync of a round without a thread (storage/aio_fsync.py,
Linux AIO), with a callback: the real file system submits the descriptors; the faulty one
counts, fails or records it exactly as `_fsync` does, so fault and power-loss tests cover
that path too. It is the one AIO seam a file system replaces; `fsync_async` is the same
with a future.

Threading: a `FileHandle` may be fsynced from an executor thread while the event loop
appends to it; everything else happens on the loop.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import threading
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from semel.storage.aio_fsync import AioFsync


def settle_future(future: asyncio.Future, error: BaseException | None) -> None:
    """An fsync's outcome into its future, unless the future was cancelled (its round
    abandoned)."""
    if not future.done():
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class MetadataFileError(RuntimeError):
    """A broker metadata file (topic list, meta.properties, producer id block) that cannot be
    read. The broker refuses to start rather than guess: guessing could drop topics or hand
    out a producer id twice. The message names the file and what is wrong with it."""


class AioUnsupported(OSError):
    """The kernel refuses AIO fdatasync requests (EINVAL, storage/aio_fsync.py): the caller
    uses a thread instead."""


class FileHandle:
    """An open file: positional reads and writes on a raw descriptor."""

    __slots__ = ("_fs", "fd", "path")

    def __init__(self, fs: RealFileSystem, path: str, fd: int):
        self._fs = fs
        self.path = path
        self.fd = fd

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, size: int, position: int) -> bytes:
        return self._fs._pread(self, size, position)

    def pwrite(self, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write all of `data` at `position`, looping over short writes."""
        view = memoryview(data).cast("B")
        total = len(view)
        if not total:
            return
        n = written = self._fs._write_at(self, view, position)  # all of it, usually
        while written < total:  # a short write: the rest, from where it stopped
            if n <= 0:
                raise OSError(errno.EIO, "write returned no progress", self.path)
            n = self._fs._write_at(self, view[written:], position + written)
            written += n

    def truncate(self, size: int) -> None:
        self._fs._truncate(self, size)

    def fsync(self) -> None:
        self._fs._fsync(self)

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    @property
    def closed(self) -> bool:
        return self.fd < 0


class RealFileSystem:
    """The operating system's file system."""

    def open(self, path: str | Path, *, create: bool = True) -> FileHandle:
        """Open read-write (creating it when `create`); never truncates."""
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT
        path = os.fspath(path)
        existed = create and os.path.exists(path)
        fd = os.open(path, flags, 0o644)
        handle = FileHandle(self, path, fd)
        self._opened(handle, created=create and not existed)
        return handle

    # -- whole-file helpers -------------------------------------------------------------

    def read_file(self, path: str | Path) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_file_atomic(self, path: str | Path, data: bytes) -> None:
        """Write `data` to a temp file, fsync it, rename over `path`, fsync the directory."""
        path = os.fspath(path)
        tmp = path + ".tmp"
        handle = self.open(tmp)
        try:
            handle.truncate(0)
            handle.pwrite(data, 0)
            handle.fsync()
        finally:
            handle.close()
        self.rename(tmp, path)
        self.fsync_dir(os.path.dirname(path) or ".")

    # -- directory operations -----------------------------------------------------------

    def exists(self, path: str | Path) -> bool:
        return os.path.exists(path)

    def file_size(self, path: str | Path) -> int:
        return os.stat(path).st_size

    def mtime_ms(self, path: str | Path) -> int:
        return int(os.stat(path).st_mtime * 1000)

    def listdir(self, path: str | Path) -> list[str]:
        return os.listdir(path)

    def is_dir(self, path: str | Path) -> bool:
        return os.path.isdir(path)

    def mkdir(self, path: str | Path) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str | Path) -> None:
        os.remove(path)

    def rename(self, src: str | Path, dst: str | Path) -> None:
        os.replace(src, dst)

    def rmtree(self, path: str | Path) -> None:
        shutil.rmtree(path)

    def fsync_dir(self, path: str | Path) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_async(self, handles: list[FileHandle], aio: AioFsync) -> asyncio.Future | None:
        """`fsync_async_then` with a future: of None, or of the first failure; cancelled if
        ``aio`` is closed first. None where `fsync_async_then` returns False."""
        future = aio.loop.create_future()
        if not self.fsync_async_then(handles, aio, functools.partial(settle_future, future),
                                     future):
            return None
        return future

    def fsync_async_then(self, handles: list[FileHandle], aio: AioFsync,
                         done: Callable[[BaseException | None], object],
                         future: asyncio.Future | None = None) -> bool:
        """fdatasync ``handles`` through ``aio`` (on the loop; same effect as `_fsync` on
        each): ``done(None)``, or ``done(the first failure)``, on the loop once they
        returned - straight from the AIO completion, no hop through a future's callbacks.
        ``done`` may be called before this returns, and must not raise. False, and ``done``
        is never called: call `_fsync` in a thread instead (a subclass with its own `_fsync`,
        such as a test's disk that holds fsyncs). Raises AioUnsupported, or OSError if the
        requests could not be queued (``done`` not called). ``future``: `fsync_async`'s,
        which closing ``aio`` cancels. The AIO seam a file system with faults replaces."""
        if type(self)._fsync is not RealFileSystem._fsync:
            return False
        aio.start([handle.fd for handle in handles], done, future)
        return True

    # -- low-level hooks FaultyFileSystem overrides --------------------------------------

    def _opened(self, handle: FileHandle, created: bool) -> None:
        pass

    def _pread(self, handle: FileHandle, size: int, position: int) -> bytes:
        return os.pread(handle.fd, size, position)

    def _write_at(self, handle: FileHandle, view: memoryview, position: int) -> int:
        return os.pwrite(handle.fd, view, position)

    def _truncate(self, handle: FileHandle, size: int) -> None:
        os.ftruncate(handle.fd, size)

    def _fsync(self, handle: FileHandle) -> None:
        # fdatasync also persists the file size, which is all an append needs
        if hasattr(os, "fdatasync"):
            os.fdatasync(handle.fd)
        else:  # pragma: no cover - macOS
            os.fsync(handle.fd)


class FaultyFileSystem(RealFileSystem):
    """A real file system with injectable faults and power-loss bookkeeping (tests only).

    Counters: fsync_calls (per path), write_calls, bytes_read.

    Faults are plain attributes, set and cleared by the test:
      write_error       errno raised by every write (None: writes work)
      write_error_after bytes a write still puts on disk before raising write_error (torn write)
      short_write       cap in bytes per write call (the seam must loop)
      fsync_error       errno raised by every fsync
      truncate_error    errno raised by every truncate
      path_filter       substring a path must contain for a fault to apply (None: every file)
    """

    def __init__(self) -> None:
        self.write_error: int | None = None
        self.write_error_after: int = 0
        self.short_write: int | None = None
        self.fsync_error: int | None = None
        self.truncate_error: int | None = None
        self.path_filter: str | None = None
        self.fsync_calls: Counter[str] = Counter()
        self.write_calls = 0
        self.bytes_read = 0
        self._synced: dict[str, int] = {}
        self._unsynced_new: set[str] = set()
        self._lock = threading.Lock()

    def clear_faults(self) -> None:
        self.write_error = None
        self.write_error_after = 0
        self.short_write = None
        self.fsync_error = None
        self.truncate_error = None
        self.path_filter = None

    @property
    def total_fsyncs(self) -> int:
        """fsync calls on data files (directory fsyncs are not counted)."""
        return sum(self.fsync_calls.values())

    def synced_length(self, path: str | Path) -> int:
        return self._synced.get(os.fspath(path), 0)

    def _applies(self, path: str) -> bool:
        return self.path_filter is None or self.path_filter in path

    def _opened(self, handle: FileHandle, created: bool) -> None:
        with self._lock:
            if handle.path not in self._synced:
                # a file that was already there when we first saw it counts as durable
                self._synced[handle.path] = 0 if created else handle.size()
            if created:
                self._unsynced_new.add(handle.path)

    def _pread(self, handle: FileHandle, size: int, position: int) -> bytes:
        data = os.pread(handle.fd, size, position)
        self.bytes_read += len(data)
        return data

    def _write_at(self, handle: FileHandle, view: memoryview, position: int) -> int:
        self.write_calls += 1
        if self.write_error is not None and self._applies(handle.path):
            if self.write_error_after > 0:
                os.pwrite(handle.fd, view[: self.write_error_after], position)
            raise OSError(self.write_error, os.strerror(self.write_error), handle.path)
        if self.short_write is not None and self._applies(handle.path):
            view = view[: self.short_write]
        return os.pwrite(handle.fd, view, position)

    def _truncate(self, handle: FileHandle, size: int) -> None:
        if self.truncate_error is not None and self._applies(handle.path):
            raise OSError(self.truncate_error, os.strerror(self.truncate_error), handle.path)
        os.ftruncate(handle.fd, size)
        with self._lock:
            if self._synced.get(handle.path, 0) > size:
                self._synced[handle.path] = size

    def _fsync(self, handle: FileHandle) -> None:
        with self._lock:
            self.fsync_calls[handle.path] += 1
        if self.fsync_error is not None and self._applies(handle.path):
            raise OSError(self.fsync_error, os.strerror(self.fsync_error), handle.path)
        size = handle.size()  # bytes present when fsync starts are covered by it
        super()._fsync(handle)
        with self._lock:
            self._synced[handle.path] = max(size, self._synced.get(handle.path, 0))

    def fsync_async_then(self, handles: list[FileHandle], aio: AioFsync,
                         done: Callable[[BaseException | None], object],
                         future: asyncio.Future | None = None) -> bool:
        """As `_fsync` per handle: counted, failed by `fsync_error` (``done`` is called at
        once with the error, as a failed kernel request would report it), and on success
        each file is synced up to the size it had when the request was made. False for a
        subclass with its own `_fsync`."""
        if type(self)._fsync is not FaultyFileSystem._fsync:
            return False
        with self._lock:
            for handle in handles:
                self.fsync_calls[handle.path] += 1
        failing = [h for h in handles if self.fsync_error is not None and self._applies(h.path)]
        if failing:
            done(OSError(self.fsync_error, os.strerror(self.fsync_error), failing[0].path))
            return True
        sizes = [(handle.path, handle.size()) for handle in handles]

        def synced(error: OSError | None) -> None:  # before the round learns of it
            if error is None:
                with self._lock:
                    for path, size in sizes:
                        self._synced[path] = max(size, self._synced.get(path, 0))
            done(error)

        aio.start([handle.fd for handle in handles], synced, future)
        return True

    def fsync_dir(self, path: str | Path) -> None:
        if self.fsync_error is not None and self._applies(os.fspath(path)):
            raise OSError(self.fsync_error, os.strerror(self.fsync_error), os.fspath(path))
        super().fsync_dir(path)
        prefix = os.path.join(os.fspath(path), "")
        with self._lock:
            self._unsynced_new = {
                p for p in self._unsynced_new if os.path.dirname(p) + os.sep != prefix
            }

    def rename(self, src: str | Path, dst: str | Path) -> None:
        super().rename(src, dst)
        src, dst = os.fspath(src), os.fspath(dst)
        with self._lock:
            if src in self._synced:
                self._synced[dst] = self._synced.pop(src)
            if src in self._unsynced_new:
                self._unsynced_new.discard(src)
                self._unsynced_new.add(dst)

    def remove(self, path: str | Path) -> None:
        super().remove(path)
        with self._lock:
            self._synced.pop(os.fspath(path), None)
            self._unsynced_new.discard(os.fspath(path))

    def rmtree(self, path: str | Path) -> None:
        super().rmtree(path)
        prefix = os.path.join(os.fspath(path), "")
        with self._lock:
            for p in [p for p in self._synced if p.startswith(prefix)]:
                del self._synced[p]
            self._unsynced_new = {p for p in self._unsynced_new if not p.startswith(prefix)}

    def simulate_power_loss(self) -> None:
        """Cut every file this seam touched back to its fsynced length; new files whose
        directory entry was never fsynced disappear. Open handles must be abandoned."""
        with self._lock:
            for path in self._unsynced_new:
                if os.path.exists(path):
                    os.remove(path)
            for path, length in self._synced.items():
                if path in self._unsynced_new or not os.path.exists(path):
                    continue
                if os.path.getsize(path) > length:
                    os.truncate(path, length)
            self._unsynced_new.clear()
