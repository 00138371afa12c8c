"""Offset index (`%020d.index`): a sparse map from offset to byte position in the segment.

File format (Kafka's): a flat array of 8-byte big-endian entries
    int32 relative_offset   (offset - segment base offset)
    int32 position          (byte position of the batch in the .log file)
with both fields strictly increasing. The segment appends an entry (the batch's last offset,
the batch's position) whenever more than `index.interval.bytes` were written since the last
entry. `lookup(offset)` returns the largest entry whose offset is <= the target; the reader
then scans batches forward from that position.

Kafka preallocates index files to `segment.index.bytes` and trims them on close; we do not
preallocate: the file holds `entries * 8` bytes, the same format as a closed Kafka index.
Kafka writes entries into a memory map; we keep the newest ones in memory (DeferredEntries)
and write them WRITE_EVERY at a time, and before anything reads, syncs, truncates or closes
the file, so an append costs no system call for its index entry. An index is derived data:
entries a crash takes are rebuilt by recovery (the active segment is recovered in full after
an unclean shutdown; a segment's index is written and synced at its roll). The in-memory
copy used for lookups is loaded lazily, so opening a log with many segments stays cheap.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from collections.abc import Callable

from semel.storage.fs import FileHandle, RealFileSystem

ENTRY = struct.Struct(">ii")
ENTRY_SIZE = ENTRY.size


WRITE_EVERY = 32  # index entries kept in memory before one pwrite writes them


class CorruptIndexError(Exception):
    pass


def decode_entries(data: bytes | memoryview, base_offset: int) -> list[tuple[int, int]]:
    """(absolute offset, position) of every whole entry in the bytes of an index file, in
    file order and unchecked (a read-only view for tools such as dump-log; a partial last
    entry is left out)."""
    view = memoryview(data)
    whole = view[: len(view) - len(view) % ENTRY_SIZE]
    return [(base_offset + rel, position) for rel, position in ENTRY.iter_unpack(whole)]


class DeferredEntries:
    """The newest entries of an index file, not written yet: ``file_entries`` are in the
    file, ``pending`` (packed) follow them."""

    __slots__ = ("entry_size", "file_entries", "pending")

    def __init__(self, entry_size: int, file_entries: int) -> None:
        self.entry_size = entry_size
        self.file_entries = file_entries
        self.pending = bytearray()

    def add(self, packed: bytes, handle: Callable[[], FileHandle]) -> None:
        self.pending += packed
        if len(self.pending) >= WRITE_EVERY * self.entry_size:
            self.write(handle())

    def write(self, handle: FileHandle) -> None:
        """Write the pending entries; on an OSError they stay pending."""
        if self.pending:
            handle.pwrite(bytes(self.pending), self.file_entries * self.entry_size)
            self.file_entries += len(self.pending) // self.entry_size
            self.pending.clear()

    def packed(self, n: int) -> bytes | None:
        """Entry n, if it is pending."""
        i = (n - self.file_entries) * self.entry_size
        return bytes(self.pending[i : i + self.entry_size]) if i >= 0 else None

    def keep(self, keep: int) -> bool:
        """Forget pending entries from ``keep`` on; True when the file must be cut as well
        (``keep`` < ``file_entries``; then every pending entry is gone too)."""
        if keep >= self.file_entries:
            del self.pending[(keep - self.file_entries) * self.entry_size :]
            return False
        self.pending.clear()
        return True


class OffsetIndex:
    __slots__ = (
        "_deferred",
        "_fs",
        "_handle",
        "_offsets",
        "_positions",
        "base_offset",
        "entries",
        "last_offset",
        "last_position",
        "max_entries",
        "path",
    )

    def __init__(self, fs: RealFileSystem, path: str, base_offset: int, max_index_size: int):
        self._fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_size // ENTRY_SIZE, 1)
        self._handle: FileHandle | None = None
        self._offsets: array | None = None  # relative offsets, loaded lazily
        self._positions: array | None = None
        size = fs.file_size(path) if fs.exists(path) else 0
        self.entries = size // ENTRY_SIZE
        self.last_offset = base_offset  # absolute offset of the last entry (base if empty)
        self.last_position = 0
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{path}: size {size} is not a multiple of {ENTRY_SIZE}")
        self._deferred = DeferredEntries(ENTRY_SIZE, self.entries)
        if self.entries:
            rel, pos = ENTRY.unpack(self._file().pread(ENTRY_SIZE, size - ENTRY_SIZE))
            self.last_offset = base_offset + rel
            self.last_position = pos

    def _file(self) -> FileHandle:
        if self._handle is None or self._handle.closed:
            self._handle = self._fs.open(self.path)
        return self._handle

    def create_file(self) -> None:
        """Make sure the file exists (and is open)."""
        self._file()

    def _load(self) -> None:
        if self._offsets is not None:
            return
        self._deferred.write(self._file())
        data = self._file().pread(self.entries * ENTRY_SIZE, 0)
        flat = array("i")
        flat.frombytes(data[: len(data) - len(data) % ENTRY_SIZE])
        if sys.byteorder == "little":
            flat.byteswap()
        self._offsets = flat[0::2]
        self._positions = flat[1::2]
        self.entries = len(self._offsets)

    def sanity_check(self, log_size: int) -> None:
        """Kafka's cheap check on open: the last entry must lie inside the segment."""
        if not self.entries:
            return
        if self.last_offset < self.base_offset or self.last_position >= max(log_size, 1):
            raise CorruptIndexError(
                f"{self.path}: last entry ({self.last_offset}, {self.last_position}) outside "
                f"segment [{self.base_offset}, size {log_size})"
            )
        if self.entries >= 2:
            prev_rel, prev_pos = self._entry_at(self.entries - 2)
            if self.base_offset + prev_rel >= self.last_offset or prev_pos >= self.last_position:
                raise CorruptIndexError(f"{self.path}: last entries are not increasing")

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * ENTRY_SIZE

    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must grow. `is_full` only makes the log roll
        before its next append: one append of many batches may go past it."""
        if self.entries and (offset <= self.last_offset or position <= self.last_position):
            raise ValueError(
                f"index entry ({offset}, {position}) not after "
                f"({self.last_offset}, {self.last_position})"
            )
        rel = offset - self.base_offset
        self._deferred.add(ENTRY.pack(rel, position), self._file)
        if self._offsets is not None:
            self._offsets.append(rel)
            self._positions.append(position)
        self.entries += 1
        self.last_offset = offset
        self.last_position = position

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= `offset`, else (base, 0)."""
        if not self.entries or offset < self.base_offset:
            return self.base_offset, 0
        if offset >= self.last_offset:
            return self.last_offset, self.last_position
        self._load()
        i = bisect_right(self._offsets, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """The largest entry whose position is <= `position`, else (base, 0)."""
        if not self.entries:
            return self.base_offset, 0
        if position >= self.last_position:
            return self.last_offset, self.last_position
        self._load()
        i = bisect_right(self._positions, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        self._load()
        keep = bisect_right(self._offsets, offset - 1 - self.base_offset)
        self.truncate_entries(keep)

    def truncate_to_position(self, position: int) -> None:
        """Remove every entry whose position is >= `position`."""
        self._load()
        keep = bisect_right(self._positions, position - 1)
        self.truncate_entries(keep)

    def reset(self) -> None:
        self.truncate_entries(0)

    def truncate_entries(self, keep: int) -> None:
        """Keep only the first `keep` entries (pending ones are dropped in memory, so the
        undo of a failed append needs no write)."""
        deferred = self._deferred
        if deferred.keep(keep) or self._file().size() != deferred.file_entries * ENTRY_SIZE:
            deferred.file_entries = min(keep, deferred.file_entries)
            self._file().truncate(deferred.file_entries * ENTRY_SIZE)
        if self._offsets is not None:
            del self._offsets[keep:]
            del self._positions[keep:]
        self.entries = keep
        if keep:
            rel, self.last_position = self._entry_at(keep - 1)
            self.last_offset = self.base_offset + rel
        else:
            self.last_offset = self.base_offset
            self.last_position = 0

    def _entry_at(self, n: int) -> tuple[int, int]:
        """Entry n as (relative offset, position), from memory or the file."""
        if self._offsets is not None:
            return self._offsets[n], self._positions[n]
        packed = self._deferred.packed(n)
        if packed is None:
            packed = self._file().pread(ENTRY_SIZE, n * ENTRY_SIZE)
        return ENTRY.unpack(packed)

    def flush(self) -> None:
        if self._deferred.pending:
            self._deferred.write(self._file())
        if self._handle is not None and not self._handle.closed:
            self._handle.fsync()

    def close(self, *, write_pending: bool = True) -> None:
        """``write_pending`` False: the index is being deleted; entries not yet written are
        dropped."""
        if self._deferred.pending and write_pending:
            self._deferred.write(self._file())
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def rename(self, new_path: str) -> None:
        self._fs.rename(self.path, new_path)
        self.path = new_path

    def entry(self, n: int) -> tuple[int, int]:
        """Entry n as (absolute offset, position); for tests and debugging."""
        self._load()
        return self.base_offset + self._offsets[n], self._positions[n]

    def __repr__(self) -> str:
        return f"OffsetIndex({os.path.basename(self.path)}, entries={self.entries})"
