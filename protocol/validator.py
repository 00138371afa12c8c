"""The record walk of a produced v2 batch: Kafka's LogValidator, DefaultRecordBatch's record
iterator and DefaultRecord.readFrom, without building records.

``validate_records(buf, header, ...)`` walks the records of the batch ``header`` describes
(its header and CRC already checked by ``protocol.records.validate_batches``) and returns a
``RecordsSummary``; ``RecordWalk`` is the same walk in steps, so a caller can start it on the
event loop and finish a large one in a worker thread. Rules, in stream order (the first
offending byte decides which error is reported, whatever the decompressor's chunking):

- framing, per record i: a length varint (at most 5 bytes, >= 0) and exactly that many
  bytes of attributes (int8, ignored), timestamp delta (varlong, at most 10 bytes), offset
  delta (varint, must equal i: semel refuses what Kafka would silently renumber by
  recompressing), key and value (length -1 = null, below -1 refused, never past the
  record's end), header count (>= 0, each header takes at least 2 bytes), headers (key
  length >= 0: no null keys; value length >= -1); no field may run past the record's end,
  and the fields must fill it exactly;
- count: the data holds exactly recordCount records (the header check already tied it to
  lastOffsetDelta + 1): missing records and bytes after the last one are refused;
- compressed batches are decompressed as a stream under ``max_uncompressed``
  (``protocol.compression.stream_decompress``: corrupt, truncated or trailing compressed
  data refused, lz4 dependent blocks and zstd windows over 8 MiB too), holding a window of
  about one chunk: records that straddle chunks are completed from the next one; a record
  longer than ``WINDOW`` is walked field by field as its bytes stream past, never held whole;
- per record, reported record by record (``record_errors``) after the whole walk, as
  Kafka's RecordValidationException: a missing key when ``require_keys`` (compacted
  topics), else a CreateTime timestamp outside ``timestamp_bounds`` (-1 = no timestamp is
  not checked), or a LogAppendTime timestamp type set by the producer (Kafka's "Producer
  should not set timestamp type to LogAppendTime"). At most ``MAX_RECORD_ERRORS`` are
  listed (Kafka lists all); the message counts all of them.

Errors: InvalidRecordError (INVALID_RECORD) for everything here, as Kafka's
InvalidRecordException from the record iterator; InvalidTimestampError (INVALID_TIMESTAMP)
when any record's timestamp is refused. Kafka answers a corrupt compressed stream with
UNKNOWN_SERVER_ERROR ("Failed to decompress record stream"); semel answers INVALID_RECORD:
the CRC matched, so retrying cannot help. The summary's ``max_timestamp`` is the true
largest record timestamp (Kafka rewrites the batch's maxTimestamp to it; so does the log).

Speed: complete records in a window are walked by ``_recordwalk.walk`` (an optional C
accelerator, ``protocol/_recordwalk.c``) or else ``_walk_py``; both only tell a record they
accept from one they do not (``SUSPECT``), and ``_careful_record`` re-reads a suspect record
to name precisely what is wrong, so both give the same errors by construction. Pure Python
stays the reference (``tests/protocol/test_validator_differential.py``). ``quick_summary``
of an uncompressed CreateTime batch is one C call (``_recordwalk.quick_summary``: the
timestamp rule and the walk) when built; tests/protocol/test_produce_fast_differential.py
compares it with the Python function.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import NamedTuple

from semel.protocol.compression import STREAM_CHUNK, decompress_small, stream_decompress
from semel.protocol.errors import ProtocolError
from semel.protocol.records import (
    HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    InvalidRecordError,
    InvalidTimestampError,
)

try:  # built from protocol/_recordwalk.c at install when a C compiler is there
    from semel.protocol import _recordwalk  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - exercised by the differential test's fallback
    _recordwalk = None

__all__ = [
    "DEFAULT_MAX_UNCOMPRESSED",
    "MAX_RECORD_ERRORS",
    "WINDOW",
    "RecordWalk",
    "RecordsSummary",
    "accelerated",
    "validate_records",
]

DEFAULT_MAX_UNCOMPRESSED = 64 * 1024 * 1024  # message.max.uncompressed.bytes default
QUICK_COMPRESSED = 64 * 1024  # largest compressed batch quick_summary decompresses whole
MAX_RECORD_ERRORS = 1000  # record_errors listed per batch (the message counts all)
WINDOW = 1024 * 1024  # longer records are walked field by field as they stream past

# walker statuses: all records walked | a record needs _careful_record | the record at pos
# is not whole in the window
DONE, SUSPECT, INCOMPLETE = 0, 1, 2
# timestamp modes: no check | CreateTime range check | every record is refused
TS_NONE, TS_RANGE, TS_ALL = 0, 1, 2
# record error kinds
KEY_MISSING, BAD_TIMESTAMP = 0, 1

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_NO_TIMESTAMP = -1


class RecordsSummary(NamedTuple):
    max_timestamp: int  # largest record timestamp (-1 if none), LogAppendTime batch: its max
    record_count: int
    uncompressed_bytes: int  # bytes of records walked (after decompression)


def accelerated() -> bool:
    """True when the C walker is in use."""
    return _walk is not _walk_py


def validate_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    require_keys: bool = False,
    timestamp_bounds: tuple[int, int] | None = None,
    log_append_time: bool = False,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
    topic_partition: str = "",
) -> RecordsSummary:
    """Walk the records of the batch ``header`` describes (at ``header.position`` in buf).

    ``timestamp_bounds``: (lowest, highest) CreateTime accepted, None = not checked;
    ``log_append_time``: the topic uses LogAppendTime (then no timestamp is checked, but a
    batch claiming LogAppendTime is refused, as Kafka does). ``topic_partition`` only names
    the partition in messages. Raises InvalidRecordError / InvalidTimestampError.
    """
    walk = RecordWalk(
        buf,
        header,
        require_keys=require_keys,
        timestamp_bounds=timestamp_bounds,
        log_append_time=log_append_time,
        max_uncompressed=max_uncompressed,
        topic_partition=topic_partition,
    )
    walk.run()
    return walk.summary


def quick_summary(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    require_keys: bool = False,
    timestamp_bounds: tuple[int, int] | None = None,
    log_append_time: bool = False,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> RecordsSummary | None:
    """The walk of a CreateTime batch with nothing wrong in it, in one call of the walker:
    over the batch in place, or, compressed, over its records decompressed whole when the
    batch is at most QUICK_COMPRESSED bytes and they fit in one STREAM_CHUNK. Its summary,
    or None when ``validate_records`` (or RecordWalk) must walk it (it then finds the same
    summary, or the precise error). Produce's common case: no walk object, no window, no
    error bookkeeping."""
    if header.timestamp_type == LOG_APPEND_TIME:
        return None
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if header.compression != 0:
        if header.size > QUICK_COMPRESSED:
            return None
        payload = memoryview(buf)[start:end]
        whole = decompress_small(header.compression, payload,
                                 min(STREAM_CHUNK, max_uncompressed))
        if whole is None:
            pieces = []
            total = 0
            try:
                for piece in stream_decompress(header.compression, payload,
                                               max_uncompressed, STREAM_CHUNK):
                    total += len(piece)
                    if total > STREAM_CHUNK:
                        return None
                    pieces.append(piece)
            except ProtocolError:
                return None
            whole = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        buf = whole
        start, end = 0, len(whole)
    mode, dlow, dhigh = _timestamp_rule(header, timestamp_bounds, log_append_time)
    count = header.record_count
    errors: list = []
    pos, index, max_delta, found, _, status = _walk(
        buf, start, end, 0, count, dlow, dhigh, _NO_TIMESTAMP - header.base_timestamp, mode,
        require_keys, _INT64_MIN, errors, MAX_RECORD_ERRORS,
    )  # fmt: skip
    if status != DONE or found or pos != end or index != count:
        return None
    return RecordsSummary(
        max(_NO_TIMESTAMP, header.base_timestamp + max_delta), count, end - start
    )


class _End(Exception):
    """The records data ended (inside _careful_record)."""


class _Source:
    """The records as a sliding window: ``buf[pos:]`` is not walked yet, ``base`` is the
    position of buf[0] in the whole records data; more comes from ``chunks``."""

    __slots__ = ("base", "buf", "chunks", "ended", "pos", "pulled")

    def __init__(self, buf, chunks: Iterator | None) -> None:
        self.buf = buf
        self.pos = 0
        self.base = 0
        self.chunks = chunks
        self.ended = chunks is None
        self.pulled = len(buf)

    def pull(self) -> bool:
        """Add the next non-empty chunk to the window (dropping what was walked); False at
        the end of the data."""
        if self.ended:
            return False
        for chunk in self.chunks:
            if not chunk:
                continue
            rest = len(self.buf) - self.pos
            if rest:
                window = bytearray(self.buf[self.pos :])
                window += chunk
                self.buf = window
            else:
                self.buf = chunk
            self.base += self.pos
            self.pos = 0
            self.pulled += len(chunk)
            return True
        self.ended = True
        return False

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def at_end(self) -> bool:
        return self.pos >= len(self.buf) and not self.pull()

    def byte(self) -> int:
        if self.pos >= len(self.buf) and not self.pull():
            raise _End
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def skip(self, n: int) -> None:
        while n > 0:
            available = len(self.buf) - self.pos
            if available <= 0:
                if not self.pull():
                    raise _End
                continue
            take = min(n, available)
            self.pos += take
            n -= take


class RecordWalk:
    """The walk of one batch's records, in steps: ``run(budget)`` walks until done (True) or
    until ``budget`` decompressed bytes have been read (False; call again, from any one
    thread at a time). Raises InvalidRecordError / InvalidTimestampError; ``summary`` once
    done."""

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        header: BatchHeader,
        *,
        require_keys: bool = False,
        timestamp_bounds: tuple[int, int] | None = None,
        log_append_time: bool = False,
        max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
        topic_partition: str = "",
    ) -> None:
        self.header = header
        self.topic_partition = topic_partition
        self.bounds = timestamp_bounds
        # a LogAppendTime batch from a producer: refused as such on a LogAppendTime topic,
        # or when it carries no timestamp; else its maxTimestamp is range checked
        self._type_error = header.timestamp_type == LOG_APPEND_TIME and (
            log_append_time or header.max_timestamp == _NO_TIMESTAMP
        )
        self.require_keys = require_keys
        self.count = header.record_count
        self.index = 0
        self.max_delta = _INT64_MIN
        self.errors: list[tuple[int, int, int]] = []  # (index, kind, timestamp delta)
        self.found = 0
        self.found_timestamps = 0
        self.summary: RecordsSummary | None = None
        self._mode, self._dlow, self._dhigh = _timestamp_rule(
            header, timestamp_bounds, log_append_time
        )
        self._none_delta = _NO_TIMESTAMP - header.base_timestamp
        start = header.position + HEADER_SIZE
        region = memoryview(buf)[start : header.position + header.size]
        if header.compression == 0:
            self._source = _Source(region, None)
        else:
            self._source = _Source(
                b"", stream_decompress(header.compression, region, max_uncompressed, STREAM_CHUNK)
            )

    @property
    def position(self) -> int:
        return self.header.position

    def run(self, budget: int | None = None) -> bool:
        if self.summary is not None:
            return True
        try:
            if not self._walk(budget):
                return False
        except InvalidRecordError:
            raise
        except ProtocolError as e:  # from the decompressor
            raise InvalidRecordError(str(e), self.position) from None
        self._finish()
        return True

    def _walk(self, budget: int | None) -> bool:
        src = self._source
        walk = _walk
        start = src.pulled
        while True:
            buf = src.buf
            pos, self.index, self.max_delta, found, found_ts, status = walk(
                buf, src.pos, len(buf), self.index, self.count, self._dlow, self._dhigh,
                self._none_delta, self._mode, self.require_keys, self.max_delta, self.errors,
                MAX_RECORD_ERRORS - len(self.errors),
            )  # fmt: skip
            src.pos = pos
            self.found += found
            self.found_timestamps += found_ts
            if status == DONE:
                if not src.at_end():
                    raise InvalidRecordError(
                        f"bytes remain after the {self.count} records the batch declares",
                        self.position,
                    )
                return True
            if status == SUSPECT or src.ended:
                self._careful(src)
                continue
            size = _record_size(buf, pos)
            if size is not None and size > WINDOW:
                self._careful(src)
                continue
            src.pull()
            if budget is not None and src.pulled - start >= budget:
                return False

    def _careful(self, src: _Source) -> None:
        index = self.index
        if src.at_end():
            raise InvalidRecordError(
                f"the batch declares {self.count} records but holds {index}", self.position
            )
        key_null, delta = _careful_record(src, index, self.position)
        self.index = index + 1
        self.max_delta = max(self.max_delta, delta)
        mode = self._mode
        bad_ts = mode == TS_ALL or (
            mode == TS_RANGE
            and (delta < self._dlow or delta > self._dhigh)
            and delta != self._none_delta
        )
        if self.require_keys and key_null:
            kind = KEY_MISSING
        elif bad_ts:
            kind = BAD_TIMESTAMP
            self.found_timestamps += 1
        else:
            return
        self.found += 1
        if len(self.errors) < MAX_RECORD_ERRORS:
            self.errors.append((index, kind, delta))

    def _finish(self) -> None:
        header = self.header
        if header.timestamp_type == LOG_APPEND_TIME:
            max_timestamp = max(_NO_TIMESTAMP, header.max_timestamp)
        else:
            max_timestamp = max(_NO_TIMESTAMP, header.base_timestamp + self.max_delta)
        if self.found:
            self._raise_record_errors()
        src = self._source
        self.summary = RecordsSummary(max_timestamp, self.count, src.base + src.pos)

    def _raise_record_errors(self) -> None:
        header = self.header
        lat_batch = header.timestamp_type == LOG_APPEND_TIME
        messages = []
        for index, kind, delta in self.errors:
            offset = header.base_offset + index
            if kind == KEY_MISSING:
                message = (
                    "Compacted topic cannot accept message without key in topic partition "
                    f"{self.topic_partition}."
                )
            else:
                timestamp = header.max_timestamp if lat_batch else header.base_timestamp + delta
                if self._type_error:
                    message = (
                        f"Invalid timestamp type in message with offset {offset}. Producer "
                        "should not set timestamp type to LogAppendTime."
                    )
                else:
                    low, high = self.bounds
                    message = (
                        f"Timestamp {timestamp} of message with offset {offset} is out of "
                        f"range. The timestamp should be within [{low}, {high}]"
                    )
            messages.append((index, message))
        if self.found_timestamps:
            raise InvalidTimestampError(
                "One or more records have been rejected due to invalid timestamp",
                self.position,
                messages,
            )
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in messages[:3])
        raise InvalidRecordError(
            f"One or more records have been rejected due to {self.found} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
            self.position,
            messages,
        )


def _timestamp_rule(
    header: BatchHeader, bounds: tuple[int, int] | None, log_append_time: bool
) -> tuple[int, int, int]:
    """(mode, lowest, highest timestamp delta accepted) for the batch, Kafka's
    validateTimestamp: deltas, not timestamps, so the walkers compare int64s without
    overflow; clamped to int64, an empty range refuses every record."""
    lat_batch = header.timestamp_type == LOG_APPEND_TIME
    if log_append_time:
        return (TS_ALL if lat_batch else TS_NONE), _INT64_MIN, _INT64_MAX
    if lat_batch:  # every record carries the batch's maxTimestamp
        timestamp = header.max_timestamp
        if timestamp == _NO_TIMESTAMP:
            return TS_ALL, _INT64_MIN, _INT64_MAX
        if bounds is not None and not bounds[0] <= timestamp <= bounds[1]:
            return TS_ALL, _INT64_MIN, _INT64_MAX
        return TS_NONE, _INT64_MIN, _INT64_MAX
    if bounds is None:
        return TS_NONE, _INT64_MIN, _INT64_MAX
    base = header.base_timestamp
    # a record's timestamp base + delta must lie in [low, high] and in int64
    dlow = max(bounds[0], _INT64_MIN) - base
    dhigh = min(bounds[1], _INT64_MAX) - base
    if dlow > _INT64_MAX or dhigh < _INT64_MIN:
        return TS_RANGE, _INT64_MAX, _INT64_MIN
    return TS_RANGE, max(dlow, _INT64_MIN), min(dhigh, _INT64_MAX)


def _record_size(buf, pos: int) -> int | None:
    """Bytes the record at pos takes (length varint + body), None if its length varint is
    not whole in buf (the walker already refused bad ones)."""
    raw = 0
    shift = 0
    end = len(buf)
    for i in range(5):
        if pos + i >= end:
            return None
        b = buf[pos + i]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF
            return i + 1 + ((raw >> 1) ^ -(raw & 1))
        shift += 7
    return None


# -- the careful reader: one record, every rule, a precise message --------------------------


def _careful_varint(src: _Source, index: int, field: str, end: int | None, limit: int) -> int:
    raw = 0
    shift = 0
    for _ in range(limit):
        if end is not None and src.offset >= end:
            raise _PastEnd(field)
        b = src.byte()
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF if limit == 5 else 0xFFFFFFFFFFFFFFFF
            return (raw >> 1) ^ -(raw & 1)
        shift += 7
    kind = "varint longer than 5" if limit == 5 else "varlong longer than 10"
    raise _Invalid(f"{field} is a {kind} bytes")


class _Invalid(Exception):
    """A rule broken inside the record (message without the record prefix)."""


class _PastEnd(Exception):
    """A field runs past the end of the record (args: the field)."""


def _careful_record(src: _Source, index: int, position: int) -> tuple[bool, int]:
    """Read the record at the source's position checking every rule; returns (key is null,
    timestamp delta) or raises InvalidRecordError naming the first broken rule."""
    start = src.offset
    length = None
    try:
        try:
            length = _careful_varint(src, index, "record length", None, 5)
            if length < 0:
                raise _Invalid(f"invalid record length {length}")
            end = src.offset + length
            if src.offset >= end:
                raise _PastEnd("attributes")
            src.byte()  # attributes: unused in v2
            delta = _careful_varint(src, index, "timestamp delta", end, 10)
            offset_delta = _careful_varint(src, index, "offset delta", end, 5)
            if offset_delta != index:
                raise _Invalid(f"offset delta {offset_delta}, expected {index}")
            key_length = _careful_bytes(src, index, "key", end)
            _careful_bytes(src, index, "value", end)
            header_count = _careful_varint(src, index, "header count", end, 5)
            if header_count < 0:
                raise _Invalid(f"invalid header count {header_count}")
            left = end - src.offset
            if header_count * 2 > left:
                raise _Invalid(
                    f"{header_count} headers cannot fit in the {left} bytes left of the record"
                )
            for j in range(header_count):
                if _careful_bytes(src, index, f"header {j} key", end) < 0:
                    raise _Invalid(f"header {j} has a null key")
                _careful_bytes(src, index, f"header {j} value", end)
            if src.offset != end:
                raise _Invalid(
                    f"record length {length}, but its fields take {src.offset - end + length} bytes"
                )
        except _PastEnd as e:
            raise _Invalid(
                f"{e.args[0]} runs past the end of the record (record length {length})"
            ) from None
    except _Invalid as e:
        raise InvalidRecordError(f"record {index}: {e.args[0]}", position) from None
    except _End:
        data_end = src.base + len(src.buf)
        raise InvalidRecordError(
            f"record {index}: truncated, the records end {data_end - start} bytes into it",
            position,
        ) from None
    return key_length < 0, delta


def _careful_bytes(src: _Source, index: int, field: str, end: int) -> int:
    """A length-prefixed field (-1 = null); returns the length."""
    n = _careful_varint(src, index, f"{field} length", end, 5)
    if n < -1:
        raise _Invalid(f"invalid {field} length {n}")
    if n > end - src.offset:
        raise _PastEnd(f"{field} of {n} bytes")
    if n > 0:
        src.skip(n)
    return n


# -- the fast walker (pure Python; protocol/_recordwalk.c is the same in C) -----------------


def _varint_slow(buf, pos: int, end: int, limit: int) -> tuple[int, int]:
    """Varint of 1..limit bytes at pos, not reading at or past end: (raw value, next pos);
    next pos -1: runs past end, -2: longer than limit bytes."""
    raw = 0
    shift = 0
    for _ in range(limit):
        if pos >= end:
            return 0, -1
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return raw, pos
        shift += 7
    return 0, -2


def _walk_py(
    buf, pos: int, end: int, index: int, count: int, dlow: int, dhigh: int, none_delta: int,
    mode: int, require_keys: bool, max_delta: int, errors: list, room: int,
) -> tuple[int, int, int, int, int, int]:  # fmt: skip
    """Walk the whole records in buf[pos:end] from record ``index``; stops at the first
    record that is not whole (INCOMPLETE), that breaks a rule (SUSPECT: for
    _careful_record), or after record count-1 (DONE). Appends (index, kind, delta) record
    errors to ``errors`` (at most ``room``). Returns (pos, index, max_delta, errors found,
    timestamp errors found, status)."""
    found = found_ts = 0
    while index < count:
        start = pos
        if pos >= end:
            return pos, index, max_delta, found, found_ts, INCOMPLETE
        b = buf[pos]
        if b < 0x80:
            raw = b
            pos += 1
        elif pos + 1 < end and buf[pos + 1] < 0x80:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            pos += 2
        else:
            raw, pos = _varint_slow(buf, pos, end, 5)
            if pos < 0:
                return (
                    start,
                    index,
                    max_delta,
                    found,
                    found_ts,
                    (INCOMPLETE if pos == -1 else SUSPECT),
                )
            raw &= 0xFFFFFFFF
        length = (raw >> 1) ^ -(raw & 1)
        if length < 0:
            return start, index, max_delta, found, found_ts, SUSPECT
        rec_end = pos + length
        if rec_end > end:
            return start, index, max_delta, found, found_ts, INCOMPLETE
        try:
            pos += 1  # attributes
            b = buf[pos]
            if b < 0x80:
                delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                raw, pos = _varint_slow(buf, pos, rec_end, 10)
                if pos < 0:
                    return start, index, max_delta, found, found_ts, SUSPECT
                raw &= 0xFFFFFFFFFFFFFFFF
                delta = (raw >> 1) ^ -(raw & 1)
            b = buf[pos]
            if b < 0x80:
                raw = b
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = _varint_slow(buf, pos, rec_end, 5)
                if pos < 0:
                    return start, index, max_delta, found, found_ts, SUSPECT
                raw &= 0xFFFFFFFF
            if (raw >> 1) ^ -(raw & 1) != index:
                return start, index, max_delta, found, found_ts, SUSPECT
            b = buf[pos]
            if b < 0x80:
                key_length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                key_length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                raw, pos = _varint_slow(buf, pos, rec_end, 5)
                if pos < 0:
                    return start, index, max_delta, found, found_ts, SUSPECT
                raw &= 0xFFFFFFFF
                key_length = (raw >> 1) ^ -(raw & 1)
            if key_length > 0:
                pos += key_length
            elif key_length < -1:
                return start, index, max_delta, found, found_ts, SUSPECT
            b = buf[pos]
            if b < 0x80:
                value_length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                value_length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                raw, pos = _varint_slow(buf, pos, rec_end, 5)
                if pos < 0:
                    return start, index, max_delta, found, found_ts, SUSPECT
                raw &= 0xFFFFFFFF
                value_length = (raw >> 1) ^ -(raw & 1)
            if value_length > 0:
                pos += value_length
            elif value_length < -1:
                return start, index, max_delta, found, found_ts, SUSPECT
            b = buf[pos]
            if b == 0:
                pos += 1
            else:
                if b < 0x80:
                    header_count = (b >> 1) ^ -(b & 1)
                    pos += 1
                else:
                    raw, pos = _varint_slow(buf, pos, rec_end, 5)
                    if pos < 0:
                        return start, index, max_delta, found, found_ts, SUSPECT
                    raw &= 0xFFFFFFFF
                    header_count = (raw >> 1) ^ -(raw & 1)
                if header_count < 0 or header_count * 2 > rec_end - pos:
                    return start, index, max_delta, found, found_ts, SUSPECT
                for _ in range(header_count):
                    raw, pos = _varint_slow(buf, pos, rec_end, 5)
                    if pos < 0:
                        return start, index, max_delta, found, found_ts, SUSPECT
                    raw &= 0xFFFFFFFF
                    n = (raw >> 1) ^ -(raw & 1)
                    if n < 0:
                        return start, index, max_delta, found, found_ts, SUSPECT
                    pos += n
                    raw, pos = _varint_slow(buf, pos, rec_end, 5)
                    if pos < 0:
                        return start, index, max_delta, found, found_ts, SUSPECT
                    raw &= 0xFFFFFFFF
                    n = (raw >> 1) ^ -(raw & 1)
                    if n > 0:
                        pos += n
                    elif n < -1:
                        return start, index, max_delta, found, found_ts, SUSPECT
        except IndexError:  # read past the window's end, so past the record's
            return start, index, max_delta, found, found_ts, SUSPECT
        if pos != rec_end:
            return start, index, max_delta, found, found_ts, SUSPECT
        if delta > max_delta:  # noqa: PLR1730 (no call on the hot path)
            max_delta = delta
        if require_keys and key_length < 0:
            kind = KEY_MISSING
        elif mode and (mode == TS_ALL or ((delta < dlow or delta > dhigh) and delta != none_delta)):
            kind = BAD_TIMESTAMP
            found_ts += 1
        else:
            index += 1
            continue
        found += 1
        if room > 0:
            errors.append((index, kind, delta))
            room -= 1
        index += 1
    return pos, index, max_delta, found, found_ts, DONE


_walk = _walk_py
_quick_summary_py = quick_summary


def _use_accelerator(enabled: bool) -> None:
    """Tests: switch between the C walker (when built) and the pure-Python one, and
    ``quick_summary`` between the C call (an uncompressed CreateTime batch: the timestamp
    rule and the walk in one call; anything else goes on to the Python function) and the
    Python function alone."""
    global _walk, quick_summary
    native = enabled and _recordwalk is not None
    _walk = _recordwalk.walk if native else _walk_py
    quick_summary = (partial(_recordwalk.quick_summary, _quick_summary_py, RecordsSummary)
                     if native else _quick_summary_py)


_use_accelerator(True)
