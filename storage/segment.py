"""Log segment: one `%020d.log` file plus its offset, time and transaction indexes.

The `.log` file is a plain concatenation of record batches (v2, see protocol/records.py)
exactly as Kafka stores them; the file name is the base offset (the first offset the
segment may hold), zero-padded to 20 digits. Companion files share the stem: `.index`
(offset_index.py), `.timeindex` (time_index.py), `.txnindex` (transaction_index.py, only
once an ABORT marker lands in the segment) and the partition's `.snapshot` files
(`segment_file_name` builds any of them).

A segment appends bytes and reads byte ranges; it never assigns offsets (the partition log
does that before calling `append`). Indexing follows Kafka 4: per appended batch, if more
than `index.interval.bytes` were written since the last index entry, add an offset index
entry (batch last offset, batch position) and a time index entry (max timestamp so far,
offset of that timestamp's batch).

A Fetch may take a range of batches as a `FileRegion` (storage/file_region.py) instead of
bytes: the connection sends it from the `.log` file with sendfile, and the segment stays
pinned (its file open) until then. `last_whole_batch` ends such a range at a whole batch and
`data_records` counts its records from the batch headers, both without reading the range.

`LogFileReader` walks the batches of one `.log` file read-only, outside any log (the
dump-log tool).

Threading: everything runs on the event loop except `flush()`, which the log manager's
flusher calls from an executor thread (fsync only; handles are not closed while pinned).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Self

from semel.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    iter_batches,
    validate_batches,
)
from semel.protocol.records import data_records as _data_records
from semel.storage.file_region import FileRegion
from semel.storage.fs import FileHandle, RealFileSystem
from semel.storage.offset_index import CorruptIndexError, OffsetIndex
from semel.storage.time_index import TimeIndex
from semel.storage.transaction_index import AbortedTxn, TransactionIndex

log = logging.getLogger("storage.segment")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

FIRST_SCAN_CHUNK = 4 * 1024  # first read when walking batch headers (doubles each refill)
SCAN_CHUNK = 64 * 1024  # largest read when walking batch headers
RECOVER_CHUNK = 1024 * 1024  # bytes read at a time when verifying CRCs
# data_records: batches this large are counted from their header alone (one small read
# costs less than reading them); smaller ones are read in pieces of about COUNT_PIECE
COUNT_FROM_HEADER = 8 * 1024
COUNT_PIECE = 256 * 1024
_LENGTH = struct.Struct(">i")
_INT32_MAX = 2**31 - 1


def _whole_batches(chunk: bytes) -> tuple[list[BatchHeader], InvalidRecordError | None]:
    """The CRC-valid whole batches at the start of `chunk`, and the error that stopped the
    walk early (None at the end of the chunk or at a batch cut off by the chunk's end)."""
    headers: list[BatchHeader] = []
    try:
        for header in iter_batches(chunk):
            headers.append(header)  # noqa: PERF402 - keep those before an error
    except InvalidRecordError as exc:
        bad: InvalidRecordError | None = exc
    else:
        bad = None
    if headers:
        consumed = headers[-1].position + headers[-1].size
        try:
            validate_batches(memoryview(chunk)[:consumed], from_client=False)
        except InvalidRecordError as exc:
            headers = [h for h in headers if h.position < (exc.position or 0)]
            bad = exc
    return headers, bad


def _whole_batches_length(chunk: bytes) -> int:
    """Length of the longest prefix of ``chunk`` made of whole batches (framing only)."""
    end, n = 0, len(chunk)
    while end + LOG_OVERHEAD <= n:
        nxt = end + LOG_OVERHEAD + _LENGTH.unpack_from(chunk, end + 8)[0]
        if nxt > n or nxt <= end:
            break
        end = nxt
    return end


def segment_file_name(base_offset: int, suffix: str) -> str:
    """`00000000000000000042.log` for (42, ".log"); works for any Kafka suffix."""
    return f"{base_offset:020d}{suffix}"


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) for a name like `00000000000000000042.timeindex`, else None."""
    stem, dot, rest = name.partition(".")
    if len(stem) != 20 or not stem.isdigit() or not dot:
        return None
    return int(stem), "." + rest


@dataclass(slots=True)
class AppendedBatch:
    """What the segment needs to know about one batch it appends (offsets already set)."""

    size: int
    last_offset: int
    max_timestamp: int


class SegmentRollbackError(OSError):
    """An append failed and undoing its partial write failed too: the segment is suspect."""


class LogSegment:
    __slots__ = (
        "_bytes_since_last_index_entry",
        "_close_pending",
        "_discard_index_writes",
        "_fs",
        "_log",
        "_max_timestamp",
        "_next_offset",
        "_offset_of_max_timestamp",
        "_pins",
        "_rolling_based_timestamp",
        "base_offset",
        "created_ms",
        "dir",
        "file_suffix",
        "index_interval_bytes",
        "offset_index",
        "roll_jitter_ms",
        "size",
        "time_index",
        "txn_index",
        "txn_index_rebuild",
    )

    def __init__(
        self,
        fs: RealFileSystem,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
        roll_jitter_ms: int = 0,
        create: bool = False,
        file_suffix: str = "",
    ):
        """``file_suffix`` follows every file name: the cleaner writes a segment as
        ``.cleaned`` files, then renames them ``.swap`` and finally to their own names
        (``change_file_suffix``)."""
        self._fs = fs
        self.dir = directory
        self.file_suffix = file_suffix
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        self._log: FileHandle | None = None
        self._pins = 0
        self._close_pending = False
        self._discard_index_writes = False
        log_path = self.path(LOG_SUFFIX)
        if create:
            self._log = fs.open(log_path)
            self.size = self._log.size()
        else:
            self.size = fs.file_size(log_path)
        self.offset_index = OffsetIndex(fs, self.path(INDEX_SUFFIX), base_offset, max_index_size)
        self.time_index = TimeIndex(fs, self.path(TIME_INDEX_SUFFIX), base_offset, max_index_size)
        if create:  # like Kafka, a new segment has all three files from the start
            self.offset_index.create_file()
            self.time_index.create_file()
        # a damaged .txnindex is emptied and flagged: the producer state replay at open
        # then covers this segment and indexes its aborted transactions again
        self.txn_index_rebuild = False
        self.txn_index = self._open_txn_index()
        self._bytes_since_last_index_entry = 0
        self._max_timestamp = self.time_index.last_timestamp
        self._offset_of_max_timestamp = self.time_index.last_offset
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = base_offset if self.size == 0 else None

    # -- files ----------------------------------------------------------------------------

    def path(self, suffix: str) -> str:
        return os.path.join(self.dir,
                            segment_file_name(self.base_offset, suffix) + self.file_suffix)

    def change_file_suffix(self, new_suffix: str) -> None:
        """Rename the segment's files from its file suffix to ``new_suffix`` (open handles
        keep working: renames do not touch them)."""
        old = {s: self.path(s) for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX,
                                          TXN_INDEX_SUFFIX)}
        self.file_suffix = new_suffix
        if self._fs.exists(old[LOG_SUFFIX]):
            self._fs.rename(old[LOG_SUFFIX], self.path(LOG_SUFFIX))
        for index, suffix in ((self.offset_index, INDEX_SUFFIX),
                              (self.time_index, TIME_INDEX_SUFFIX)):
            if self._fs.exists(old[suffix]):
                index.rename(self.path(suffix))
            else:
                index.path = self.path(suffix)
        if self._fs.exists(old[TXN_INDEX_SUFFIX]):
            self._fs.rename(old[TXN_INDEX_SUFFIX], self.path(TXN_INDEX_SUFFIX))
        self.txn_index.path = self.path(TXN_INDEX_SUFFIX)

    def _open_txn_index(self) -> TransactionIndex:
        path = self.path(TXN_INDEX_SUFFIX)
        try:
            index = TransactionIndex(self._fs, path, self.base_offset)
            if index.count:
                index.sanity_check()
            return index
        except CorruptIndexError as exc:
            log.warning("%s: %s; rebuilding it", path, exc)
        self._fs.remove(path)
        self.txn_index_rebuild = True
        return TransactionIndex(self._fs, path, self.base_offset)

    def _file(self) -> FileHandle:
        if self._log is None or self._log.closed:
            self._log = self._fs.open(self.path(LOG_SUFFIX), create=False)
        return self._log

    def has_index_files(self) -> bool:
        return self._fs.exists(self.path(INDEX_SUFFIX)) and self._fs.exists(
            self.path(TIME_INDEX_SUFFIX)
        )

    # -- state ----------------------------------------------------------------------------

    @property
    def next_offset(self) -> int:
        """One past the last offset in this segment (base offset if empty)."""
        if self._next_offset is None:
            self.load_tail()
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max_timestamp in the segment, -1 if none."""
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """Kafka's retention timestamp: the max timestamp, else the file's mtime."""
        if self._max_timestamp >= 0:
            return self._max_timestamp
        return self._fs.mtime_ms(self.path(LOG_SUFFIX))

    @property
    def rolling_based_timestamp(self) -> int | None:
        """max_timestamp of the first batch (what segment.ms is measured from)."""
        if self._rolling_based_timestamp is None and self.size > 0:
            for _, header in self.iter_headers(0, limit=1):
                self._rolling_based_timestamp = header.max_timestamp
        return self._rolling_based_timestamp

    def sanity_check(self, next_offset: int | None = None) -> None:
        """Cheap index checks done on every open; raises CorruptIndexError. `next_offset`
        bounds the offsets (the next segment's base; default: found by reading the tail)."""
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.next_offset if next_offset is None else next_offset)

    def load_tail(self) -> None:
        """Walk the batches from the last offset index entry to the end: learn the next
        offset, fold their timestamps into the max (the time index may lag them) and
        restore the bytes-since-last-entry counter appends continue from."""
        position = self.offset_index.last_position
        next_offset = self.base_offset
        since = 0
        for _, header in self.iter_headers(position):
            next_offset = header.next_offset
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
            since += header.size
        self._next_offset = next_offset
        self._bytes_since_last_index_entry = since

    # -- append -----------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, batches: Sequence[AppendedBatch]
    ) -> None:
        """Write `data` (the batches, offsets already assigned) at the end and index them.

        On an OSError the segment is put back exactly as it was (file truncated, index
        entries removed) and the error re-raised; if that undo fails too,
        SegmentRollbackError is raised.
        """
        if not batches:
            return
        start = self.size
        index_entries = self.offset_index.entries
        time_entries = self.time_index.entries
        saved = (
            self._bytes_since_last_index_entry,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._next_offset,
            self._rolling_based_timestamp,
        )
        try:
            handle = self._log
            if handle is None or handle.fd < 0:  # _file(), one call less per append
                handle = self._file()
            handle.pwrite(data, start)
            self.size = start + len(data)
            if start == 0:
                self._rolling_based_timestamp = batches[0].max_timestamp
            position = start
            for batch in batches:
                if batch.max_timestamp > self._max_timestamp:
                    self._max_timestamp = batch.max_timestamp
                    self._offset_of_max_timestamp = batch.last_offset
                if self._bytes_since_last_index_entry > self.index_interval_bytes:
                    self.offset_index.append(batch.last_offset, position)
                    self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                    self._bytes_since_last_index_entry = 0
                position += batch.size
                self._bytes_since_last_index_entry += batch.size
            self._next_offset = batches[-1].last_offset + 1
        except OSError as exc:
            self._undo_append(exc, start, index_entries, time_entries, saved)
            raise

    def append_batch(
        self, data: bytearray | memoryview, last_offset: int, max_timestamp: int
    ) -> None:
        """``append(data, [AppendedBatch(len(data), last_offset, max_timestamp)])``: one
        batch, without the per-append objects (the produce path's common case); the same
        write, index entries and undo."""
        start = self.size
        index_entries = self.offset_index.entries
        time_entries = self.time_index.entries
        since_index = self._bytes_since_last_index_entry
        saved = (
            since_index,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._next_offset,
            self._rolling_based_timestamp,
        )
        size = len(data)
        try:
            handle = self._log
            if handle is None or handle.fd < 0:  # _file(), one call less per append
                handle = self._file()
            handle.pwrite(data, start)
            self.size = start + size
            if start == 0:
                self._rolling_based_timestamp = max_timestamp
            if max_timestamp > self._max_timestamp:
                self._max_timestamp = max_timestamp
                self._offset_of_max_timestamp = last_offset
            if since_index > self.index_interval_bytes:
                self.offset_index.append(last_offset, start)
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                self._bytes_since_last_index_entry = size
            else:
                self._bytes_since_last_index_entry = since_index + size
            self._next_offset = last_offset + 1
        except OSError as exc:
            self._undo_append(exc, start, index_entries, time_entries, saved)
            raise

    def _undo_append(
        self,
        exc: OSError,
        start: int,
        index_entries: int,
        time_entries: int,
        saved: tuple[int, int, int, int, int | None],
    ) -> None:
        """Put the segment back as it was before a failed append (file, indexes, cached
        values); SegmentRollbackError when that fails too."""
        (
            self._bytes_since_last_index_entry,
            self._max_timestamp,
            self._offset_of_max_timestamp,
            self._next_offset,
            self._rolling_based_timestamp,
        ) = saved
        try:
            self._file().truncate(start)
            self.size = start
            self.offset_index.truncate_entries(index_entries)
            self.time_index.truncate_entries(time_entries)
        except OSError as undo_exc:
            raise SegmentRollbackError(
                undo_exc.errno, f"append failed ({exc}) and could not be undone: {undo_exc}"
            ) from exc

    def update_txn_index(
        self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
    ) -> None:
        """Index a transaction aborted by the marker at `last_offset` (Kafka's
        LogSegment.updateTxnIndex for an aborted CompletedTxn)."""
        self.txn_index.append(
            AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset)
        )

    def ensure_txn_indexed(
        self, producer_id: int, first_offset: int, last_offset: int, last_stable_offset: int
    ) -> None:
        """`update_txn_index` unless the index already goes that far (replays at open)."""
        last = self.txn_index.last_offset
        if last is None or last < last_offset:
            self.update_txn_index(producer_id, first_offset, last_offset, last_stable_offset)

    def collect_aborted_txns(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        return self.txn_index.collect_aborted_txns(fetch_offset, upper_bound_offset)

    # -- reads ------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        return self._file().pread(size, position)

    def region(self, position: int, size: int, last: BatchHeader | None = None) -> FileRegion:
        """The whole batches in [position, position + size) as a FileRegion, sent from the
        file by the connection; it pins the segment until released. ``last``: the header of
        the last batch, if known."""
        return FileRegion(self, self._file().fd, position, size, last)

    def last_whole_batch(self, position: int, end: int) -> tuple[int, BatchHeader | None]:
        """Where the whole batches from ``position`` (a batch start) that end at or before
        ``end`` stop, and the header of the last of them (``position`` and None when not even
        the first fits). The walk starts at the offset index entry before ``end``, not at
        ``position``: an index interval of headers, however far apart the two are."""
        stop = end
        while True:
            start = max(self.offset_index.lookup_position(stop - 1)[1], position)
            cut, last = start, None
            for pos, header in self.iter_headers(start, end):
                cut, last = pos + header.size, header
            if last is not None or start <= position:
                return cut, last
            stop = start  # the batch at that entry crosses ``end``: look before it

    def data_records(self, position: int, end: int) -> int:
        """Records of the data batches in [position, end), whole batches, control batches
        left out (Fetch's MessagesOut), without reading every byte: a batch of at least
        COUNT_FROM_HEADER bytes is counted from its header alone (one small read); a run of
        smaller ones is read in pieces of about COUNT_PIECE that end at batch starts (offset
        index entries) and counted by protocol.records.data_records."""
        total = 0
        file = self._file()
        index = self.offset_index
        while position + HEADER_SIZE <= end:
            header = BatchHeader(file.pread(HEADER_SIZE, position))
            size = header.size
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != MAGIC:
                raise CorruptRecordError(
                    f"no batch at position {position} of {self.path(LOG_SUFFIX)}", position
                )
            if size >= COUNT_FROM_HEADER:
                if not header.is_control:
                    total += header.record_count
                position += size
                continue
            stop = min(end, position + max(COUNT_PIECE, size))
            if stop < end:
                entry = index.lookup_position(stop)[1]
                if entry > position:
                    stop = entry
                    piece = file.pread(stop - position, position)
                else:  # no index entry within the piece: cut it at its last whole batch
                    piece = file.pread(stop - position, position)
                    stop = position + _whole_batches_length(piece)
                    piece = memoryview(piece)[: stop - position]
            else:
                piece = file.pread(stop - position, position)
            total += _data_records(piece)
            position = stop
        return total

    def iter_headers(
        self, position: int = 0, end: int | None = None, limit: int | None = None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each whole batch from `position` (a batch start) to `end`.

        Stops at a torn tail; bytes that cannot be a batch raise CorruptRecordError.
        `header.position` is relative to an internal buffer: use the yielded position.
        """
        end = self.size if end is None else min(end, self.size)
        chunk = b""
        chunk_start = position
        chunk_size = FIRST_SCAN_CHUNK  # most walks end within an index interval
        pos = position
        count = 0
        while pos + LOG_OVERHEAD <= end:
            rel = pos - chunk_start
            if rel + HEADER_SIZE > len(chunk):
                chunk = self.read(pos, min(chunk_size, end - pos))
                chunk_size = min(chunk_size * 2, SCAN_CHUNK)
                chunk_start, rel = pos, 0
                if len(chunk) < HEADER_SIZE:
                    return
            header = BatchHeader(chunk, rel)
            size = header.size
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != MAGIC:
                raise CorruptRecordError(
                    f"no batch at position {pos} of {self.path(LOG_SUFFIX)}", pos
                )
            if pos + size > end:
                return
            yield pos, header
            count += 1
            if limit is not None and count >= limit:
                return
            pos += size

    def translate_offset(
        self, offset: int, start_position: int = 0
    ) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= `offset`, or None.

        Like Kafka: start from the offset index's floor entry, then walk batch headers.
        """
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(max(position, start_position)):
            if header.last_offset >= offset:
                return pos, header
        return None

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose max_timestamp is >= `timestamp`."""
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(position):
            if header.max_timestamp >= timestamp:
                return pos, header
        return None

    # -- recovery and truncation -----------------------------------------------------------

    def recover(self, from_position: int = 0) -> int:
        """Verify every batch from `from_position` (CRC, structure, offsets), rebuild the
        index entries after it, truncate at the first invalid byte; returns bytes truncated.

        From position 0 this is Kafka's LogSegment.recover (indexes rebuilt from scratch).
        A later position must be the last offset index entry's position: a tail check of a
        segment whose earlier part is trusted. If the batch there does not match that entry,
        CorruptIndexError is raised (the caller then recovers from 0); if it is invalid, the
        whole segment is recovered.
        """
        offset_index, time_index = self.offset_index, self.time_index
        entry_offset: int | None = None
        if from_position == 0:
            offset_index.reset()
            time_index.reset()
        else:
            entry_offset, entry_position = offset_index.lookup_position(from_position)
            if entry_position != from_position:
                raise CorruptIndexError(f"no offset index entry at position {from_position}")
            offset_index.truncate_to_position(from_position + 1)
            time_index.truncate_to(entry_offset + 1)
        self._max_timestamp = time_index.last_timestamp
        self._offset_of_max_timestamp = time_index.last_offset
        self._rolling_based_timestamp = None
        next_offset = self.base_offset
        since = 0
        position = from_position
        valid_end = from_position
        file_size = self._file().size()
        try:
            while position < file_size:
                chunk = self.read(position, min(RECOVER_CHUNK, file_size - position))
                headers, bad = _whole_batches(chunk)
                if not headers and bad is None and len(chunk) >= LOG_OVERHEAD:
                    size = _LENGTH.unpack_from(chunk, 8)[0] + LOG_OVERHEAD
                    if size > len(chunk) and position + size <= file_size:
                        chunk = self.read(position, size)  # one batch bigger than a chunk
                        headers, bad = _whole_batches(chunk)
                for header in headers:
                    batch_position = position + header.position
                    if entry_offset is not None:
                        if header.last_offset != entry_offset:
                            raise CorruptIndexError(
                                f"index entry {entry_offset} points at a batch ending at "
                                f"{header.last_offset}"
                            )
                        entry_offset = None
                    elif header.base_offset < next_offset:
                        raise CorruptRecordError(
                            f"offset {header.base_offset} follows {next_offset - 1}",
                            header.position,
                        )
                    if header.last_offset - self.base_offset > _INT32_MAX:
                        raise CorruptRecordError(
                            f"offset {header.last_offset} beyond segment {self.base_offset}",
                            header.position,
                        )
                    if header.max_timestamp > self._max_timestamp:
                        self._max_timestamp = header.max_timestamp
                        self._offset_of_max_timestamp = header.last_offset
                    if since > self.index_interval_bytes:
                        offset_index.append(header.last_offset, batch_position)
                        time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
                        since = 0
                    since += header.size
                    next_offset = header.next_offset
                    valid_end = batch_position + header.size
                if bad is not None:
                    raise bad
                if not headers:
                    break  # torn tail
                position = valid_end
        except InvalidRecordError as exc:
            valid_end = position + (exc.position or 0)
            log.warning(
                "%s: invalid data at position %d: %s", self.path(LOG_SUFFIX), valid_end, exc.reason
            )
        if entry_offset is not None:  # the indexed batch itself is torn or invalid
            return self.recover(0)
        truncated = file_size - valid_end
        if truncated:
            self._file().truncate(valid_end)
        self.txn_index.truncate_to(next_offset)
        self.size = valid_end
        self._bytes_since_last_index_entry = since
        self._next_offset = next_offset
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove the batch containing `offset` and everything after; returns bytes removed."""
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if found is None:
            return 0
        cut = found[0]
        removed = self.size - cut
        self._file().truncate(cut)
        self.size = cut
        self.offset_index.truncate_to_position(cut)
        self._rolling_based_timestamp = None
        self._max_timestamp = self.time_index.last_timestamp
        self._offset_of_max_timestamp = self.time_index.last_offset
        self.load_tail()
        return removed

    # -- lifecycle --------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """Roll: write the final time index entry carrying the segment's max timestamp."""
        if self._max_timestamp >= 0:
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)

    @property
    def pinned(self) -> bool:
        return self._pins > 0

    def pin(self) -> None:
        self._pins += 1

    def unpin(self) -> None:
        self._pins -= 1
        if self._pins == 0 and self._close_pending:
            self._close_files()

    def flush(self, with_indexes: bool = True) -> None:
        """fsync the log (and the indexes); may run in an executor thread. Indexes can be
        rebuilt from the log, so the active segment's are only synced on roll and close;
        the transaction index is synced whenever it changed, with the markers it indexes."""
        if self._log is not None and not self._log.closed:
            self._log.fsync()
        self.txn_index.flush()
        if with_indexes:
            self.offset_index.flush()
            self.time_index.flush()

    def log_sync_handles(self) -> list[FileHandle] | None:
        """What ``flush(with_indexes=False)`` fsyncs, when that is all it does: the log's
        handle (none once closed); None if the transaction index has entries to sync too
        (that flush then runs as such, in a thread)."""
        if self.txn_index.dirty:
            return None
        log = self._log
        return [] if log is None or log.closed else [log]

    def close(self, *, for_deletion: bool = False) -> None:
        """Close the files (once no reader pins the segment). ``for_deletion``: the segment
        leaves the log (retention, a cleaning's swap): index entries not yet written are
        dropped, so closing writes nothing and cannot fail on a bad disk part way through
        the caller's renames."""
        if for_deletion:
            self._discard_index_writes = True
        if self._pins:
            self._close_pending = True
        else:
            self._close_files()

    def _close_files(self) -> None:
        self._close_pending = False
        if self._log is not None:
            self._log.close()
            self._log = None
        write_pending = not self._discard_index_writes
        self.offset_index.close(write_pending=write_pending)
        self.time_index.close(write_pending=write_pending)
        self.txn_index.close()

    def rename_to_deleted(self) -> list[str]:
        """Rename every file of the segment to `<name>.deleted`; returns the new paths. The
        segment follows its files: a reader still holding it (a coordinator loading, a fetch)
        that reopens one reads the old data, never a cleaned segment that took the name."""
        suffixes = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        present = [s for s in suffixes if self._fs.exists(self.path(s))]
        self.change_file_suffix(self.file_suffix + DELETED_SUFFIX)
        return [self.path(s) for s in present]

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


# -- a read-only view of one .log file, for tools ---------------------------------------------


class LogFileBatch(NamedTuple):
    """One whole batch of a `.log` file: where it starts, its header (read from `data`, so
    `header.position` is 0) and its bytes. Nothing is checked beyond the framing: the CRC is
    the reader's to verify (protocol.records.validate_batches)."""

    position: int
    header: BatchHeader
    data: bytes


class LogFileReader:
    """Read-only access to the batches of a standalone `.log` file (dump-log).

    It opens the file O_RDONLY and never writes, locks or truncates it, so a segment a
    running broker is appending to can be read: the walk covers the bytes present when the
    reader was opened (`size`). `batches()` yields every whole batch from a position and
    then leaves `valid_end` (where the last whole batch ended) and `stop_reason`: None at
    the end of the file (or of the `end` the caller gave), else why the walk stopped early:
    a torn tail (a batch header or batch cut off by the end of the file) or bytes that
    cannot be a batch (batch length below the minimum, magic not 2).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self.size = os.fstat(self._fd).st_size
        self.valid_end = 0
        self.stop_reason: str | None = None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self, position: int = 0, end: int | None = None) -> Iterator[LogFileBatch]:
        """Every whole batch from `position` (a batch start) up to `end` (default: the
        file's size). A batch crossing a caller's `end` inside the file is not a torn tail:
        the walk just stops there."""
        file_end = self.size
        end = file_end if end is None else min(end, file_end)
        self.valid_end, self.stop_reason = position, None
        pos = position
        chunk_size = FIRST_SCAN_CHUNK * 16
        while pos < end:
            chunk = os.pread(self._fd, min(chunk_size, end - pos), pos)
            chunk_size = min(chunk_size * 2, RECOVER_CHUNK)
            if len(chunk) < HEADER_SIZE:
                if end == file_end:
                    self.stop_reason = (
                        f"torn tail: {end - pos} bytes remain at position {pos}, a batch "
                        f"header needs {HEADER_SIZE}"
                    )
                return
            found = False
            try:
                for header in iter_batches(chunk):
                    data = chunk[header.position : header.position + header.size]
                    self.valid_end = pos + header.position + header.size
                    found = True
                    yield LogFileBatch(pos + header.position, BatchHeader(data), data)
            except CorruptRecordError as exc:
                self.stop_reason = f"{exc.reason} at position {pos + (exc.position or 0)}"
                return
            if found:
                pos = self.valid_end
                continue
            size = BatchHeader(chunk).size  # iter_batches raised had the length been invalid
            data = os.pread(self._fd, size, pos) if pos + size <= end else b""
            if len(data) < size:  # a batch cut off by the end (or a file cut meanwhile)
                if end == file_end:
                    self.stop_reason = (
                        f"torn tail: the batch at position {pos} needs {size} bytes, "
                        f"{end - pos} remain"
                    )
                return
            self.valid_end = pos + size
            yield LogFileBatch(pos, BatchHeader(data), data)
            pos += size

    def header_at(self, position: int) -> BatchHeader:
        """The header of the batch at `position`; CorruptRecordError when there is none
        (past the end, cut off, or bytes that cannot be a batch header)."""
        data = os.pread(self._fd, HEADER_SIZE, position)
        header = BatchHeader(data)  # raises when fewer than HEADER_SIZE bytes came back
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != MAGIC:
            raise CorruptRecordError(f"no batch at position {position}", position)
        if position + header.size > self.size:
            raise CorruptRecordError(f"the batch at position {position} is cut off", position)
        return header


__all__ = [
    "AppendedBatch",
    "CorruptIndexError",
    "LogFileBatch",
    "LogFileReader",
    "LogSegment",
    "SegmentRollbackError",
    "parse_segment_file_name",
    "segment_file_name",
]
