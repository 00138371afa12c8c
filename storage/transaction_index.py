"""Aborted-transaction index (`%020d.txnindex`): Kafka's TransactionIndex.

One entry per transaction whose ABORT marker landed in the segment, in marker order (so by
last offset), 34 bytes, big-endian (Kafka's AbortedTxn):
    version            int16  0
    producer_id        int64
    first_offset       int64  first offset of the transaction's data in this partition
    last_offset        int64  offset of the ABORT marker
    last_stable_offset int64  the partition's last stable offset once the abort completed
A read_committed fetch collects the entries whose range meets the data it returns
(`collect_aborted_txns`), walking segments until an entry's last stable offset reaches
past the fetched range. Most segments never see an abort: the file is created with the
first entry, and a segment without one has no file.

Entries are written with pwrite as markers are appended and fsynced with the segment's
log in the same flush round (`flush` syncs only when something was appended since). A torn
last entry (crash mid-write) is cut off on open; the in-memory copy is loaded lazily.
Threading: the event loop, except `flush` (the flusher's executor thread).
"""

from __future__ import annotations

import logging
import os
import struct
from typing import NamedTuple

from semel.storage.fs import FileHandle, RealFileSystem
from semel.storage.offset_index import CorruptIndexError

log = logging.getLogger("storage.transaction_index")

ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34
CURRENT_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(CURRENT_VERSION, *self)


def decode_entries(data: bytes | memoryview) -> list[AbortedTxn]:
    """Every whole entry of `data`; raises CorruptIndexError for an unknown version."""
    entries = []
    for version, *fields in ENTRY.iter_unpack(
        memoryview(data)[: len(data) - len(data) % ENTRY_SIZE]
    ):
        if version > CURRENT_VERSION:
            raise CorruptIndexError(
                f"Unexpected aborted transaction version {version}, current version is "
                f"{CURRENT_VERSION}"
            )
        entries.append(AbortedTxn(*fields))
    return entries


class TransactionIndex:
    __slots__ = (
        "_dirty",
        "_entries",
        "_fs",
        "_handle",
        "base_offset",
        "count",
        "last_offset",
        "path",
    )

    def __init__(self, fs: RealFileSystem, path: str, base_offset: int):
        self._fs = fs
        self.path = path
        self.base_offset = base_offset
        self._handle: FileHandle | None = None
        self._entries: list[AbortedTxn] | None = None
        self._dirty = False
        size = fs.file_size(path) if fs.exists(path) else 0
        if size % ENTRY_SIZE:
            log.warning("%s: cutting off a torn entry (%d bytes)", path, size % ENTRY_SIZE)
            size -= size % ENTRY_SIZE
            self._file().truncate(size)
        self.count = size // ENTRY_SIZE
        self.last_offset: int | None = None
        if self.count:
            last = decode_entries(self._file().pread(ENTRY_SIZE, size - ENTRY_SIZE))[0]
            self.last_offset = last.last_offset

    def _file(self) -> FileHandle:
        if self._handle is None or self._handle.closed:
            self._handle = self._fs.open(self.path)
        return self._handle

    def entries(self) -> list[AbortedTxn]:
        """Every entry, oldest first (the list is the index's own: do not modify)."""
        if self._entries is None:
            if not self.count:
                self._entries = []
            else:
                data = self._file().pread(self.count * ENTRY_SIZE, 0)
                self._entries = decode_entries(data)
                self.count = len(self._entries)
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; last offsets must grow (ValueError otherwise)."""
        if self.last_offset is not None and txn.last_offset <= self.last_offset:
            raise ValueError(
                f"The last offset of appended transactions must increase sequentially, but "
                f"{txn.last_offset} is not greater than current last offset {self.last_offset} "
                f"of index {self.path}"
            )
        self._file().pwrite(txn.encode(), self.count * ENTRY_SIZE)
        if self._entries is not None:
            self._entries.append(txn)
        self.count += 1
        self.last_offset = txn.last_offset
        self._dirty = True

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The entries with last offset >= `fetch_offset` and first offset <
        `upper_bound_offset`, and whether the search is complete (an entry's last stable
        offset reaches `upper_bound_offset`: no later segment can hold a match)."""
        found = []
        if not self.count:
            return found, False
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose last offset is >= `offset`."""
        if self.last_offset is None or self.last_offset < offset:
            return
        entries = self.entries()
        keep = next((i for i, t in enumerate(entries) if t.last_offset >= offset), len(entries))
        self._truncate_entries(keep)

    def reset(self) -> None:
        if self.count or self._fs.exists(self.path):
            self._truncate_entries(0)

    def _truncate_entries(self, keep: int) -> None:
        self._file().truncate(keep * ENTRY_SIZE)
        entries = self.entries()
        del entries[keep:]
        self.count = keep
        self.last_offset = entries[-1].last_offset if entries else None
        self._dirty = True

    def sanity_check(self) -> None:
        """Kafka's check on open: no entry may end before the segment starts."""
        for txn in self.entries():
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index {self.path} is less "
                    f"than start offset {self.base_offset}"
                )

    @property
    def dirty(self) -> bool:
        """Whether entries changed since the last flush."""
        return self._dirty

    def flush(self) -> None:
        """fsync if anything changed since the last flush (any thread)."""
        if self._dirty and self._handle is not None and not self._handle.closed:
            self._dirty = False
            self._handle.fsync()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __repr__(self) -> str:
        return f"TransactionIndex({os.path.basename(self.path)}, entries={self.count})"


__all__ = ["ENTRY_SIZE", "AbortedTxn", "TransactionIndex", "decode_entries"]
