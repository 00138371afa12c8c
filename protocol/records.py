"""Record batch v2 ("magic 2"): the unit in which Kafka stores and ships records.

A batch, big-endian, offsets from the batch start (every offset below is derived from the
one ``HEADER`` struct):

     0  baseOffset            int64   offset of the first record; assigned by the broker
     8  batchLength           int32   bytes after this field (batch size - 12)
    12  partitionLeaderEpoch  int32   set by the broker
    16  magic                 int8    2
    17  crc                   uint32  CRC32C of everything from attributes to the batch end
    21  attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4,
                                      4 zstd), 3 timestamp type (0 create, 1 log append),
                                      4 transactional, 5 control, 6 delete horizon set
    23  lastOffsetDelta       int32
    27  baseTimestamp         int64
    35  maxTimestamp          int64
    43  producerId            int64   -1 when not idempotent
    51  producerEpoch         int16
    53  baseSequence          int32
    57  recordCount           int32
    61  records               compressed as one stream when compression != 0

A record: length varint, attributes int8 (unused), timestampDelta varlong, offsetDelta
varint, keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
headerCount varint, then per header keyLength varint, key (UTF-8), valueLength varint
(-1 = null), value. Varints are zigzag base-128, at most 5 bytes (varlong 10).

A control batch (transactional + control bits) holds one control record. Its key is
version int16 (0) + type int16 (0 ABORT, 1 COMMIT, ...); an ABORT/COMMIT value (Kafka's
EndTransactionMarker) is version int16 (0) + coordinatorEpoch int32.

The produce path checks headers and CRCs with ``validate_batches``, then walks the records of
every batch with ``protocol.validator`` (framing, counts, offset deltas, timestamps, keys,
headers; compressed batches streamed under a cap) without building ``Record`` objects, and
rewrites baseOffset / partitionLeaderEpoch in place (outside the CRC). ``iter_records``
materialises records only where the broker must understand them (control records, internal
topics, log reading tools).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import IntEnum
from functools import partial
from operator import itemgetter
from typing import NoReturn, Self

from semel.protocol.compression import compress, decompress
from semel.protocol.errors import Error, ProtocolError

try:  # built from protocol/_recordwalk.c at install when a C compiler is there
    from semel.protocol import _recordwalk  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the pure-Python reader is used
    _recordwalk = None


def _first_crc32c(data) -> int:
    """``crc32c`` until its first call: imports the ``crc32c`` package's C function (that
    package reads its version through importlib.metadata when imported, ~15 ms of the
    broker's start-up), makes it this module's ``crc32c`` and returns its CRC-32C of
    ``data``."""
    global crc32c
    from crc32c import crc32c as c_crc32c

    crc32c = c_crc32c
    return c_crc32c(data)


crc32c = _first_crc32c

__all__ = [
    "CREATE_TIME",
    "DEFAULT_MAX_UNCOMPRESSED",
    "HEADER",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "BatchHeader",
    "ControlType",
    "CorruptRecordError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "Record",
    "build_batch",
    "build_control_batch",
    "is_valid_client_batch",
    "iter_batches",
    "iter_records",
    "parse_control_record",
    "read_header",
    "set_base_offset",
    "set_max_timestamp_and_type",
    "set_partition_leader_epoch",
    "validate_batches",
]

_FIELDS = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("record_count", "i"),
)
HEADER = struct.Struct(">" + "".join(fmt for _, fmt in _FIELDS))
HEADER_SIZE = HEADER.size  # 61
_OFFSET = {
    name: struct.calcsize(">" + "".join(fmt for _, fmt in _FIELDS[:i]))
    for i, (name, _) in enumerate(_FIELDS)
}
BASE_OFFSET_OFFSET = _OFFSET["base_offset"]
BATCH_LENGTH_OFFSET = _OFFSET["batch_length"]
PARTITION_LEADER_EPOCH_OFFSET = _OFFSET["partition_leader_epoch"]
MAGIC_OFFSET = _OFFSET["magic"]
CRC_OFFSET = _OFFSET["crc"]
ATTRIBUTES_OFFSET = _OFFSET["attributes"]
MAX_TIMESTAMP_OFFSET = _OFFSET["max_timestamp"]
LOG_OVERHEAD = PARTITION_LEADER_EPOCH_OFFSET  # baseOffset + batchLength: 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a header and no records
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
CREATE_TIME = 0
LOG_APPEND_TIME = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
_INT32_MAX = 2**31 - 1

DEFAULT_MAX_UNCOMPRESSED = 128 * 1024 * 1024

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
_unpack_header = HEADER.unpack_from


class InvalidRecordError(ProtocolError):
    """A batch the broker must refuse; Kafka answers INVALID_RECORD.

    ``reason`` says precisely what is wrong; ``position`` is the start of the offending
    batch in the buffer that was examined (None when not about one batch). ``record_errors``
    lists ``(index of the record in its batch, message)`` for the per-record rules whose
    failures Kafka reports record by record (a missing key on a compacted topic, a timestamp
    out of range); empty for everything else.
    """

    error_code = Error.INVALID_RECORD

    def __init__(
        self,
        reason: str,
        position: int | None = None,
        record_errors: list[tuple[int, str]] | None = None,
    ) -> None:
        super().__init__(reason if position is None else f"{reason} (batch at position {position})")
        self.reason = reason
        self.position = position
        self.record_errors = record_errors or []


class InvalidTimestampError(InvalidRecordError):
    """Records whose timestamps the topic refuses; Kafka answers INVALID_TIMESTAMP."""

    error_code = Error.INVALID_TIMESTAMP


class CorruptRecordError(InvalidRecordError):
    """Bytes that cannot be a batch (CRC mismatch, impossible length, unknown magic).

    Kafka answers CORRUPT_MESSAGE; log recovery truncates at ``position``.
    """

    error_code = Error.CORRUPT_MESSAGE


class ControlType(IntEnum):
    """Kafka's ControlRecordType ids (the type in a control record's key)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


class BatchHeader(tuple):
    """Read-only view of the 61-byte header of the batch at ``position`` in a buffer.

    The fields are read once, at construction (one ``unpack_from``, or the C accelerator's
    ``batch_header``); after an in-place rewrite (``set_base_offset`` ...) construct a new
    one to see the new values.
    """

    __slots__ = ()

    def __new__(cls, buf: bytes | bytearray | memoryview, position: int = 0) -> Self:
        try:
            return tuple.__new__(cls, _unpack_header(buf, position) + (position,))
        except struct.error:
            cls._truncated(buf, position)

    @staticmethod
    def _truncated(buf, position: int) -> NoReturn:
        """Raise the error of a header that does not fit (the C constructor's too)."""
        raise CorruptRecordError(
            f"truncated batch header: {max(0, len(buf) - position)} bytes, need {HEADER_SIZE}",
            position,
        ) from None

    base_offset = property(itemgetter(0))
    batch_length = property(itemgetter(1))
    partition_leader_epoch = property(itemgetter(2))
    magic = property(itemgetter(3))
    crc = property(itemgetter(4))
    attributes = property(itemgetter(5))
    last_offset_delta = property(itemgetter(6))
    base_timestamp = property(itemgetter(7))
    max_timestamp = property(itemgetter(8))
    producer_id = property(itemgetter(9))
    producer_epoch = property(itemgetter(10))
    base_sequence = property(itemgetter(11))
    record_count = property(itemgetter(12))
    position = property(itemgetter(13))

    def _compression_py(self) -> int:
        return self[5] & COMPRESSION_MASK

    compression = property(_compression_py)

    def _timestamp_type_py(self) -> int:
        return (self[5] & TIMESTAMP_TYPE_MASK) >> 3

    timestamp_type = property(_timestamp_type_py)

    def _is_transactional_py(self) -> bool:
        return bool(self[5] & TRANSACTIONAL_MASK)

    is_transactional = property(_is_transactional_py)

    @property
    def is_control(self) -> bool:
        return bool(self[5] & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self[5] & DELETE_HORIZON_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self[9] > NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        return self[0] + self[6]

    @property
    def next_offset(self) -> int:
        return self[0] + self[6] + 1

    def _size_py(self) -> int:
        """Bytes the whole batch occupies: batch_length + 12."""
        return self[1] + LOG_OVERHEAD

    size = property(_size_py)

    def _last_sequence_py(self) -> int:
        """base_sequence + last_offset_delta, wrapping past 2^31-1 to 0 as Kafka does."""
        base, delta = self[11], self[6]
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        if base > _INT32_MAX - delta:
            return delta - (_INT32_MAX - base) - 1
        return base + delta

    last_sequence = property(_last_sequence_py)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={self[i]!r}" for i, (name, _) in enumerate(_FIELDS))
        return f"BatchHeader({fields}, position={self[13]})"

    def __reduce__(self):  # copy/pickle: tuple's default would call __new__ with a tuple
        return (_restore_header, (tuple(self),))


def _restore_header(values: tuple) -> BatchHeader:
    return tuple.__new__(BatchHeader, values)


def _header_at(view: memoryview, pos: int) -> BatchHeader:
    return tuple.__new__(BatchHeader, _unpack_header(view, pos) + (pos,))


def validate_batches(
    buf: bytes | bytearray | memoryview, *, from_client: bool = True
) -> list[BatchHeader]:
    """Check a concatenation of v2 batches as the produce path must; return their headers.

    Checks per batch: a whole header, magic 2, a sane batchLength that fits, the CRC32C,
    a known compression codec. With ``from_client`` (the default) also Kafka's client-origin
    rules: recordCount >= 1 and == lastOffsetDelta + 1, no control batches, a producer id
    needs a base sequence >= 0. Trailing bytes that are not a whole batch are refused.
    Raises CorruptRecordError (CORRUPT_MESSAGE) or InvalidRecordError (INVALID_RECORD).
    An empty buffer yields no headers.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    headers = []
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_SIZE:
            raise CorruptRecordError(
                f"truncated batch: {remaining} bytes remain, a batch header needs {HEADER_SIZE}",
                pos,
            )
        header = _header_at(view, pos)
        (
            _,
            batch_length,
            _,
            magic,
            crc,
            attributes,
            last_offset_delta,
            _,
            _,
            producer_id,
            _,
            base_sequence,
            record_count,
            _,
        ) = header
        if magic != MAGIC:
            if magic == 0 or magic == 1:
                raise InvalidRecordError(f"magic {magic} not supported, only magic 2", pos)
            raise CorruptRecordError(f"invalid magic {magic}", pos)
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {batch_length} is below the minimum {MIN_BATCH_LENGTH}", pos
            )
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            raise CorruptRecordError(
                f"truncated batch: batch length {batch_length} needs {size} bytes, "
                f"{remaining} remain",
                pos,
            )
        computed = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
        if computed != crc:
            raise CorruptRecordError(
                f"crc mismatch: stored {crc:#010x} computed {computed:#010x}", pos
            )
        if attributes & COMPRESSION_MASK > 4:
            raise InvalidRecordError(
                f"unknown compression codec {attributes & COMPRESSION_MASK}", pos
            )
        if from_client:
            if record_count <= 0:
                raise InvalidRecordError(f"invalid record count {record_count}", pos)
            if record_count != last_offset_delta + 1:
                raise InvalidRecordError(
                    f"record count {record_count} != lastOffsetDelta+1 ({last_offset_delta + 1})",
                    pos,
                )
            if attributes & CONTROL_MASK:
                raise InvalidRecordError("clients are not allowed to write control batches", pos)
            if producer_id > NO_PRODUCER_ID and base_sequence < 0:
                raise InvalidRecordError(
                    f"invalid base sequence {base_sequence} for producer id {producer_id}", pos
                )
        headers.append(header)
        pos += size
    return headers


def is_valid_client_batch(view: memoryview, header: BatchHeader) -> bool:
    """``validate_batches(view)`` would return ``[header]`` without an error: ``view`` is
    exactly one batch (``header`` read at its start) passing every check of a client's
    batch. The produce fast path's question; on False, ``validate_batches`` says what is
    wrong."""
    (_, batch_length, _, magic, crc, attributes, last_offset_delta, _, _, producer_id, _,
     base_sequence, record_count, position) = header
    return (position == 0 and magic == MAGIC and batch_length >= MIN_BATCH_LENGTH
            and batch_length + LOG_OVERHEAD == len(view)
            and attributes & COMPRESSION_MASK <= 4 and not attributes & CONTROL_MASK
            and 0 < record_count == last_offset_delta + 1
            and (producer_id <= NO_PRODUCER_ID or base_sequence >= 0)
            and crc32c(view[ATTRIBUTES_OFFSET:]) == crc)


_is_valid_client_batch_py = is_valid_client_batch
_new_header_py = BatchHeader.__new__
# BatchHeader's computed properties read per Produce request: C getters when built
_NATIVE_PROPERTIES = ("compression", "timestamp_type", "is_transactional", "size",
                      "last_sequence")
# read_header(buf, position=0): BatchHeader(buf, position) in one C call when the accelerator
# is built (without type.__call__'s dispatch to __new__); for the produce path
read_header = BatchHeader


def _use_accelerator(enabled: bool) -> None:
    """Tests and benchmarks: switch ``BatchHeader()`` and ``is_valid_client_batch`` between
    the C accelerator (when built) and pure Python, the reference (the C versions give the
    same answers and errors: tests/protocol/test_produce_fast_differential.py)."""
    global is_valid_client_batch, read_header
    native = enabled and _recordwalk is not None
    BatchHeader.__new__ = staticmethod(_recordwalk.batch_header if native else _new_header_py)
    read_header = partial(_recordwalk.batch_header, BatchHeader) if native else BatchHeader
    for name in _NATIVE_PROPERTIES:
        getter = getattr(_recordwalk, "header_" + name) if native else getattr(
            BatchHeader, f"_{name}_py")
        setattr(BatchHeader, name, property(getter, doc=getattr(BatchHeader, f"_{name}_py").__doc__))
    is_valid_client_batch = (_recordwalk.valid_client_batch if native
                             else _is_valid_client_batch_py)


_use_accelerator(True)


def iter_batches(
    buf: bytes | bytearray | memoryview, position: int = 0, *, strict: bool = False
) -> Iterator[BatchHeader]:
    """Walk stored batches from ``position``.

    Default: stop quietly at a torn tail (fewer bytes left than a header or than the
    declared batch size), as a log reader must; bytes that cannot be a batch (length
    below 49, magic not 2) raise CorruptRecordError. ``strict`` (log recovery): also verify
    every CRC and raise on a torn tail; the error's ``position`` is where to truncate.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    pos = position
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_SIZE:
            if strict:
                raise CorruptRecordError(
                    f"torn tail: {remaining} bytes remain, a batch header needs {HEADER_SIZE}",
                    pos,
                )
            return
        header = _header_at(view, pos)
        batch_length = header[1]
        if batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batch length {batch_length} is below the minimum {MIN_BATCH_LENGTH}", pos
            )
        if header[3] != MAGIC:
            raise CorruptRecordError(f"invalid magic {header[3]}", pos)
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            if strict:
                raise CorruptRecordError(
                    f"torn tail: batch length {batch_length} needs {size} bytes, "
                    f"{remaining} remain",
                    pos,
                )
            return
        if strict:
            computed = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
            if computed != header[4]:
                raise CorruptRecordError(
                    f"crc mismatch: stored {header[4]:#010x} computed {computed:#010x}", pos
                )
        yield header
        pos += size


_LENGTH_MAGIC = struct.Struct(">8xi4xb")  # batch length (offset 8), magic (offset 16)
_ATTRIBUTES_LOW = 22  # the low byte of the attributes (offset 21, int16)
_RECORDS_COUNT = struct.Struct(">57xi")
_CONTROL_BIT = 0x20


def _data_records_py(data: bytes | memoryview) -> int:
    total, pos, end = 0, 0, len(data)
    while end - pos >= HEADER_SIZE:
        length, magic = _LENGTH_MAGIC.unpack_from(data, pos)
        size = 12 + length
        if size < HEADER_SIZE or size > end - pos or magic != 2:
            break
        if not data[pos + _ATTRIBUTES_LOW] & _CONTROL_BIT:
            total += _RECORDS_COUNT.unpack_from(data, pos)[0]
        pos += size
    return total


# data_records(data): the records in the whole v2 batches at the start of ``data``, control
# batches left out, read from two header fields per batch (the fetch path's MessagesOut):
# the C walker's version (protocol/_recordwalk.c) where it was built
try:
    from semel.protocol._recordwalk import data_records  # type: ignore[import-not-found]
except ImportError:
    data_records = _data_records_py


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Rewrite baseOffset of the batch at ``position`` in place (outside the CRC)."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch of the batch at ``position`` in place (outside the CRC)."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp_and_type(
    buf: bytearray | memoryview,
    position: int,
    max_timestamp: int,
    timestamp_type: int = LOG_APPEND_TIME,
) -> None:
    """Set maxTimestamp and the timestamp-type bit in place and recompute the CRC.

    What the broker does for a topic with LOG_APPEND_TIME; like Kafka, nothing is written
    when both already hold the requested values.
    """
    attributes = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)[0]
    current_max = _INT64.unpack_from(buf, position + MAX_TIMESTAMP_OFFSET)[0]
    current_type = (attributes & TIMESTAMP_TYPE_MASK) >> 3
    if current_type == timestamp_type and current_max == max_timestamp:
        return
    attributes = (attributes & ~TIMESTAMP_TYPE_MASK) | (
        TIMESTAMP_TYPE_MASK if timestamp_type else 0
    )
    size = _INT32.unpack_from(buf, position + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    view = memoryview(buf)
    crc = crc32c(view[position + ATTRIBUTES_OFFSET : position + size])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


class Record:
    """One decoded record: absolute offset and timestamp, key, value, headers."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (
            self.offset == other.offset
            and self.timestamp == other.timestamp
            and self.key == other.key
            and self.value == other.value
            and self.headers == other.headers
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
            f"value={self.value!r}, headers={self.headers!r})"
        )


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint (int32) at pos -> (value, next pos); at most 5 bytes."""
    try:
        b = data[pos]
        pos += 1
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos
        raw = b & 0x7F
        shift = 7
        while True:
            b = data[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 28:
                raise ProtocolError(f"varint longer than 5 bytes at {pos - 5}")
    except IndexError:
        raise ProtocolError("varint runs past the end of the data") from None
    raw &= 0xFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def _read_varlong(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varlong (int64) at pos -> (value, next pos); at most 10 bytes."""
    try:
        b = data[pos]
        pos += 1
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos
        raw = b & 0x7F
        shift = 7
        while True:
            b = data[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise ProtocolError(f"varlong longer than 10 bytes at {pos - 10}")
    except IndexError:
        raise ProtocolError("varlong runs past the end of the data") from None
    raw &= 0xFFFFFFFFFFFFFFFF
    return (raw >> 1) ^ -(raw & 1), pos


def iter_records(
    batch: bytes | bytearray | memoryview,
    header: BatchHeader,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> Iterator[Record]:
    """Decode the records of the batch ``header`` describes (at header.position in batch).

    Decompresses per header.compression with an output cap of ``max_uncompressed``.
    Records with LOG_APPEND_TIME carry the batch's maxTimestamp, as in Kafka. Any
    inconsistency (lengths, count, trailing bytes, bad varints) raises ProtocolError.
    """
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if end > len(batch) or end < start:
        raise CorruptRecordError(
            f"truncated batch: needs {header.size} bytes, buffer holds "
            f"{len(batch) - header.position}",
            header.position,
        )
    region = memoryview(batch)[start:end]
    codec = header.compression
    if codec == 0:
        data = bytes(region)
    else:
        data = decompress(codec, region, max_uncompressed)
    log_append_time = header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
    yield from _decode_records(data, header, log_append_time)


def _decode_records(
    data: bytes, header: BatchHeader, log_append_time: int | None
) -> Iterator[Record]:
    count = header.record_count
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    n = len(data)
    if count < 0:
        raise InvalidRecordError(f"invalid record count {count}", header.position)
    if count > n // 7 + 1:  # a record takes at least 7 bytes
        raise InvalidRecordError(
            f"record count {count} cannot fit in {n} bytes of records", header.position
        )
    read_varint = _read_varint
    pos = 0
    for index in range(count):
        length, pos = read_varint(data, pos)
        if length < 0 or length > n - pos:
            raise ProtocolError(f"record {index}: length {length} exceeds the {n - pos} bytes left")
        record_end = pos + length
        pos += 1  # attributes: unused
        timestamp_delta, pos = _read_varlong(data, pos)
        offset_delta, pos = read_varint(data, pos)
        key_length, pos = read_varint(data, pos)
        if key_length < 0:
            key = None
        else:
            if key_length > record_end - pos:
                raise ProtocolError(f"record {index}: key length {key_length} exceeds the record")
            key = data[pos : pos + key_length]
            pos += key_length
        value_length, pos = read_varint(data, pos)
        if value_length < 0:
            value = None
        else:
            if value_length > record_end - pos:
                raise ProtocolError(
                    f"record {index}: value length {value_length} exceeds the record"
                )
            value = data[pos : pos + value_length]
            pos += value_length
        header_count, pos = read_varint(data, pos)
        if header_count < 0 or header_count * 2 > record_end - pos:
            raise ProtocolError(f"record {index}: invalid header count {header_count}")
        headers = []
        for _ in range(header_count):
            hkey_length, pos = read_varint(data, pos)
            if hkey_length < 0 or hkey_length > record_end - pos:
                raise ProtocolError(f"record {index}: invalid header key length {hkey_length}")
            hkey = data[pos : pos + hkey_length].decode("utf-8", "replace")
            pos += hkey_length
            hvalue_length, pos = read_varint(data, pos)
            if hvalue_length < 0:
                hvalue = None
            else:
                if hvalue_length > record_end - pos:
                    raise ProtocolError(
                        f"record {index}: header value length {hvalue_length} exceeds the record"
                    )
                hvalue = data[pos : pos + hvalue_length]
                pos += hvalue_length
            headers.append((hkey, hvalue))
        if pos != record_end:
            raise ProtocolError(
                f"record {index}: declared length {length}, fields take {length + pos - record_end}"
            )
        timestamp = (
            log_append_time if log_append_time is not None else base_timestamp + timestamp_delta
        )
        yield Record(base_offset + offset_delta, timestamp, key, value, headers)
    if pos != n:
        raise ProtocolError(f"{n - pos} bytes remain after {count} records")


def _write_varint(out: bytearray, value: int) -> None:
    """Zigzag varint/varlong (the encoding is the same for both widths)."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # zigzag(-1)
    else:
        _write_varint(out, len(data))
        out += data


def build_batch(
    records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int]],
    *,
    base_offset: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    compression: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: int = CREATE_TIME,
) -> bytes:
    """Encode ``(key, value, headers, timestamp)`` tuples as one v2 batch, offsets 0..n-1.

    baseTimestamp is the first record's timestamp and maxTimestamp the largest, as Kafka's
    MemoryRecordsBuilder writes them.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    base_timestamp = records[0][3]
    max_timestamp = base_timestamp
    body = bytearray()
    record = bytearray()
    for offset_delta, (key, value, headers, timestamp) in enumerate(records):
        max_timestamp = max(max_timestamp, timestamp)
        record.clear()
        record.append(0)  # attributes
        _write_varint(record, timestamp - base_timestamp)
        _write_varint(record, offset_delta)
        _write_bytes(record, key)
        _write_bytes(record, value)
        headers = headers or ()
        _write_varint(record, len(headers))
        for hkey, hvalue in headers:
            _write_bytes(record, hkey.encode("utf-8"))
            _write_bytes(record, hvalue)
        _write_varint(body, len(record))
        body += record
    payload = body if compression == 0 else compress(compression, body)
    attributes = (
        compression
        | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
        | (TRANSACTIONAL_MASK if is_transactional else 0)
        | (CONTROL_MASK if is_control else 0)
    )
    batch = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        batch,
        0,
        base_offset,
        MIN_BATCH_LENGTH + len(payload),
        partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        len(records) - 1,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    batch[HEADER_SIZE:] = payload
    _UINT32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def build_control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT or ABORT marker batch, as Kafka's MemoryRecords.withEndTransactionMarker."""
    key = _CONTROL_KEY.pack(0, ControlType.COMMIT if commit else ControlType.ABORT)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, None, timestamp_ms)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record: Record) -> tuple[int, int | None]:
    """(control type, coordinator epoch) of a control record; the epoch only for ABORT/COMMIT.

    Newer key/value versions are read as version 0, as Kafka does.
    """
    key = record.key
    if key is None or len(key) < _CONTROL_KEY.size:
        raise ProtocolError(f"control record key of {0 if key is None else len(key)} bytes, need 4")
    version, control_type = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise ProtocolError(f"invalid control record key version {version}")
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        try:
            return ControlType(control_type), None
        except ValueError:
            return control_type, None
    value = record.value
    if value is None or len(value) < _END_TXN_VALUE.size:
        raise ProtocolError(
            f"end transaction marker value of {0 if value is None else len(value)} bytes, need 6"
        )
    value_version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
    if value_version < 0:
        raise ProtocolError(f"invalid end transaction marker version {value_version}")
    return ControlType(control_type), coordinator_epoch


# -- the log cleaner's view of a batch: records as spans, a batch rebuilt from some of them ---


class RecordSpan(tuple):
    """One record of decompressed records data: its bytes ``data[start:end]`` (length
    varint included), offset and timestamp deltas, key (None when null) and whether its value
    is null (a tombstone); ``rest`` is where the fields after the timestamp delta begin."""

    __slots__ = ()
    start = property(itemgetter(0))
    end = property(itemgetter(1))
    offset_delta = property(itemgetter(2))
    timestamp_delta = property(itemgetter(3))
    rest = property(itemgetter(4))
    key = property(itemgetter(5))
    null_value = property(itemgetter(6))


def control_key_type(key: bytes | None) -> int:
    """The type (ControlType) of a control record's key; -1 when it is not one."""
    if key is None or len(key) < _CONTROL_KEY.size:
        return -1
    return _CONTROL_KEY.unpack_from(key)[1]


def record_spans(data: bytes | memoryview, count: int) -> list[RecordSpan]:
    """The ``count`` records of decompressed records ``data`` as spans (the cleaner keeps or
    drops records without decoding headers). Raises ProtocolError on framing errors.
    The C walker (protocol/_recordwalk.c) does it when built; it leaves anything irregular
    to the Python reader, which names the error."""
    if _recordwalk is not None:
        spans = _recordwalk.spans(data, count, RecordSpan)
        if spans is not None:
            return spans
    return _record_spans_py(data, count)


def _record_spans_py(data: bytes | memoryview, count: int) -> list[RecordSpan]:
    spans = []
    n = len(data)
    pos = 0
    for index in range(count):
        start = pos
        length, pos = _read_varint(data, pos)
        if length < 0 or length > n - pos:
            raise ProtocolError(f"record {index}: length {length} exceeds the {n - pos} bytes left")
        end = pos + length
        pos += 1  # attributes
        timestamp_delta, pos = _read_varlong(data, pos)
        rest = pos
        offset_delta, pos = _read_varint(data, pos)
        key_length, pos = _read_varint(data, pos)
        key = None
        if key_length >= 0:
            key = bytes(data[pos : pos + key_length])
            pos += key_length
        value_length, pos = _read_varint(data, pos)
        if pos > end:
            raise ProtocolError(f"record {index}: fields run past its length")
        spans.append(RecordSpan((start, end, offset_delta, timestamp_delta, rest, key,
                                 value_length < 0)))
        pos = end
    if pos != n:
        raise ProtocolError(f"{n - pos} bytes remain after {count} records")
    return spans


def rebuild_batch(
    original: BatchHeader,
    data: bytes | memoryview,
    kept: list[RecordSpan],
    *,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """The batch ``original`` with only the ``kept`` records of its decompressed records
    ``data``, as Kafka's cleaner writes it (MemoryRecords.filterTo): the same base offset,
    last offset delta, producer id, epoch, base sequence, leader epoch, timestamp type and
    codec; each record keeps its offset delta. With ``delete_horizon_ms`` (or the one the
    original carries) the batch's base timestamp is that horizon and the delete-horizon flag is
    set (KIP-534); records are re-framed so their timestamps do not change. No ``kept``
    records: the empty batch Kafka keeps for a producer's last sequence (a header only)."""
    old_base = original.base_timestamp
    horizon = delete_horizon_ms
    if horizon is None and original.has_delete_horizon:
        horizon = old_base
    new_base = old_base if horizon is None else horizon
    body = bytearray()
    for span in kept:
        if new_base == old_base:
            body += data[span.start : span.end]
            continue
        record = bytearray()
        record.append(data[span.start + _varint_size(data, span.start)])  # attributes
        _write_varint(record, old_base + span.timestamp_delta - new_base)
        record += data[span.rest : span.end]
        _write_varint(body, len(record))
        body += record
    max_timestamp = original.max_timestamp
    if kept and original.timestamp_type != LOG_APPEND_TIME:
        max_timestamp = old_base + max(span.timestamp_delta for span in kept)
    codec = original.compression
    payload = body if codec == 0 or not body else compress(codec, body)
    attributes = original.attributes & ~DELETE_HORIZON_MASK
    if horizon is not None:
        attributes |= DELETE_HORIZON_MASK
    batch = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        batch, 0, original.base_offset, MIN_BATCH_LENGTH + len(payload),
        original.partition_leader_epoch, MAGIC, 0, attributes, original.last_offset_delta,
        new_base, max_timestamp, original.producer_id, original.producer_epoch,
        original.base_sequence, len(kept),
    )  # fmt: skip
    batch[HEADER_SIZE:] = payload
    _UINT32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _varint_size(data, pos: int) -> int:
    size = 1
    while data[pos] & 0x80:
        pos += 1
        size += 1
    return size


def batch_records_data(
    buf: bytes | bytearray | memoryview, header: BatchHeader,
    max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED,
) -> bytes | memoryview:
    """The batch's records, decompressed."""
    region = memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size]
    if header.compression == 0:
        return region
    return decompress(header.compression, region, max_uncompressed)
