"""Offset index (`%020d.index`): a sparse map from offset to byte position in the segment.

File format (Kafka's): a flat array of 8-byte big-endian entries
    int32 relative_offset   (offset - segment base offset)
    int32 position          (byte position of the batch in the .log file)
with both fields strictly increasing. The segment appends an entry (the batch's last offset,
the batch's position) whenever more than `index.interval.bytes` were written since the last
entry. `lookup(offset)` returns the largest entry whose offset is <= the target; the reader
then scans batches forward from that position.

Kafka preallocates index files to `segment.index.bytes` and trims them on close; we do not
preallocate: the file always holds exactly `entries * 8` bytes, which is the same format as
a closed Kafka index. Entries are written with pwrite as they are appended; the in-memory
copy used for lookups is loaded lazily, so opening a log with many segments stays cheap.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right

from storage.fs import FileHandle, RealFileSystem

ENTRY = struct.Struct(">ii")
ENTRY_SIZE = ENTRY.size


class CorruptIndexError(Exception):
    pass


class OffsetIndex:
    __slots__ = (
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
            prev_rel, prev_pos = ENTRY.unpack(
                self._file().pread(ENTRY_SIZE, (self.entries - 2) * ENTRY_SIZE)
            )
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
        self._file().pwrite(ENTRY.pack(rel, position), self.entries * ENTRY_SIZE)
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
        """Keep only the first `keep` entries."""
        if keep == self.entries and self._file().size() == keep * ENTRY_SIZE:
            return
        self._file().truncate(keep * ENTRY_SIZE)
        if self._offsets is not None:
            del self._offsets[keep:]
            del self._positions[keep:]
        self.entries = keep
        if keep:
            self._load()
            self.last_offset = self.base_offset + self._offsets[-1]
            self.last_position = self._positions[-1]
        else:
            self.last_offset = self.base_offset
            self.last_position = 0

    def flush(self) -> None:
        if self._handle is not None and not self._handle.closed:
            self._handle.fsync()

    def close(self) -> None:
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
