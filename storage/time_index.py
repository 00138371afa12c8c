"""Time index (`%020d.timeindex`): a sparse map from timestamp to offset within a segment.

File format (Kafka's): a flat array of 12-byte big-endian entries
    int64 timestamp         (largest batch max_timestamp seen so far in the segment)
    int32 relative_offset   (last offset of the batch holding that timestamp, minus base)
Timestamps strictly increase from entry to entry (an entry is only added when the segment's
max timestamp grew); offsets never decrease. Entries are added together with offset index
entries, plus one final entry when the segment stops being active (roll or close), so the
last entry always carries the segment's largest timestamp once it is closed.
`lookup(ts)` returns the largest entry with timestamp <= ts, or (-1, base offset).

Not preallocated, and the newest entries are written in groups (see offset_index.py); the
file holds `entries * 12` bytes once they are.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_right

from semel.storage.fs import FileHandle, RealFileSystem
from semel.storage.offset_index import CorruptIndexError, DeferredEntries

ENTRY = struct.Struct(">qi")
ENTRY_SIZE = ENTRY.size
NO_TIMESTAMP = -1


def decode_entries(data: bytes | memoryview, base_offset: int) -> list[tuple[int, int]]:
    """(timestamp, absolute offset) of every whole entry in the bytes of a time index file,
    in file order and unchecked (a read-only view for tools such as dump-log; a partial last
    entry is left out)."""
    view = memoryview(data)
    whole = view[: len(view) - len(view) % ENTRY_SIZE]
    return [(timestamp, base_offset + rel) for timestamp, rel in ENTRY.iter_unpack(whole)]


class TimeIndex:
    __slots__ = (
        "_deferred",
        "_fs",
        "_handle",
        "_offsets",
        "_timestamps",
        "base_offset",
        "entries",
        "last_offset",
        "last_timestamp",
        "max_entries",
        "path",
    )

    def __init__(self, fs: RealFileSystem, path: str, base_offset: int, max_index_size: int):
        self._fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_size // ENTRY_SIZE, 1)
        self._handle: FileHandle | None = None
        self._timestamps: list[int] | None = None
        self._offsets: list[int] | None = None  # absolute offsets
        size = fs.file_size(path) if fs.exists(path) else 0
        self.entries = size // ENTRY_SIZE
        self.last_timestamp = NO_TIMESTAMP
        self.last_offset = base_offset
        if size % ENTRY_SIZE:
            raise CorruptIndexError(f"{path}: size {size} is not a multiple of {ENTRY_SIZE}")
        self._deferred = DeferredEntries(ENTRY_SIZE, self.entries)
        if self.entries:
            ts, rel = ENTRY.unpack(self._file().pread(ENTRY_SIZE, size - ENTRY_SIZE))
            self.last_timestamp = ts
            self.last_offset = base_offset + rel

    def _file(self) -> FileHandle:
        if self._handle is None or self._handle.closed:
            self._handle = self._fs.open(self.path)
        return self._handle

    def create_file(self) -> None:
        """Make sure the file exists (and is open)."""
        self._file()

    def _load(self) -> None:
        if self._timestamps is not None:
            return
        self._deferred.write(self._file())
        data = self._file().pread(self.entries * ENTRY_SIZE, 0)
        timestamps, offsets = [], []
        for ts, rel in ENTRY.iter_unpack(data[: len(data) - len(data) % ENTRY_SIZE]):
            timestamps.append(ts)
            offsets.append(self.base_offset + rel)
        self._timestamps, self._offsets = timestamps, offsets
        self.entries = len(timestamps)

    def sanity_check(self, next_offset: int) -> None:
        """Kafka's cheap check: the last entry lies inside the segment and after the first."""
        if not self.entries:
            return
        if not self.base_offset <= self.last_offset < max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(
                f"{self.path}: last entry offset {self.last_offset} outside segment "
                f"[{self.base_offset}, {next_offset})"
            )
        first = self._deferred.packed(0) or self._file().pread(ENTRY_SIZE, 0)
        first_ts, _ = ENTRY.unpack(first)
        if self.last_timestamp < first_ts:
            raise CorruptIndexError(f"{self.path}: last timestamp before the first")

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * ENTRY_SIZE

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if `timestamp` is larger than the last entry's.

        `is_full` only tells the log to roll before the next append; one append of many
        batches (or the final entry at roll) may go past it, as the file is not preallocated.
        """
        if self.entries and timestamp <= self.last_timestamp:
            return
        if self.entries and offset < self.last_offset:
            raise ValueError(f"time index offset {offset} before {self.last_offset}")
        self._deferred.add(ENTRY.pack(timestamp, offset - self.base_offset), self._file)
        if self._timestamps is not None:
            self._timestamps.append(timestamp)
            self._offsets.append(offset)
        self.entries += 1
        self.last_timestamp = timestamp
        self.last_offset = offset

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= `timestamp`."""
        if not self.entries:
            return NO_TIMESTAMP, self.base_offset
        if timestamp >= self.last_timestamp:
            return self.last_timestamp, self.last_offset
        self._load()
        i = bisect_right(self._timestamps, timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[i], self._offsets[i]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset`."""
        self._load()
        self.truncate_entries(bisect_right(self._offsets, offset - 1))

    def truncate_entries(self, keep: int) -> None:
        """Keep only the first `keep` entries (pending ones are dropped in memory)."""
        deferred = self._deferred
        if deferred.keep(keep) or self._file().size() != deferred.file_entries * ENTRY_SIZE:
            deferred.file_entries = min(keep, deferred.file_entries)
            self._file().truncate(deferred.file_entries * ENTRY_SIZE)
        if self._timestamps is not None:
            del self._timestamps[keep:]
            del self._offsets[keep:]
        self.entries = keep
        if keep:
            if self._timestamps is not None:
                self.last_timestamp, self.last_offset = self._timestamps[-1], self._offsets[-1]
            else:
                packed = deferred.packed(keep - 1) or self._file().pread(
                    ENTRY_SIZE, (keep - 1) * ENTRY_SIZE)
                self.last_timestamp, rel = ENTRY.unpack(packed)
                self.last_offset = self.base_offset + rel
        else:
            self.last_timestamp, self.last_offset = NO_TIMESTAMP, self.base_offset

    def reset(self) -> None:
        self.truncate_to(self.base_offset)

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
        self._load()
        return self._timestamps[n], self._offsets[n]

    def __repr__(self) -> str:
        return f"TimeIndex({os.path.basename(self.path)}, entries={self.entries})"
