"""Hand-built v2 records and batches for the record-walk tests: every field can lie."""

from __future__ import annotations

import struct

from crc32c import crc32c

from semel.protocol.compression import compress
from semel.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
)

T0 = 1_700_000_000_000
_UINT32 = struct.Struct(">I")


def varint(value: int) -> bytes:
    """Zigzag varint/varlong."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def body(
    index: int,
    *,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: list[tuple[bytes | None, bytes | None]] | None = None,
    ts_delta: int = 0,
    offset_delta: int | None = None,
    attributes: int = 0,
) -> bytes:
    out = bytearray([attributes])
    out += varint(ts_delta)
    out += varint(index if offset_delta is None else offset_delta)
    out += field(key) + field(value)
    headers = headers or []
    out += varint(len(headers))
    for hkey, hvalue in headers:
        out += field(hkey) + field(hvalue)
    return bytes(out)


def record(index: int, *, length: int | None = None, **kw) -> bytes:
    """One record; ``length`` overrides the declared length."""
    b = body(index, **kw)
    return varint(len(b) if length is None else length) + b


def records(n: int, **kw) -> bytes:
    return b"".join(record(i, **kw) for i in range(n))


def batch(
    data: bytes,
    count: int,
    *,
    compression: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = T0,
    max_timestamp: int | None = None,
    log_append_time: bool = False,
    producer_id: int = -1,
    base_offset: int = 0,
) -> bytes:
    """A batch around ``data`` (records as they are, compressed if asked) with a valid CRC."""
    payload = data if compression == 0 else compress(compression, data)
    attributes = compression | (TIMESTAMP_TYPE_MASK if log_append_time else 0)
    out = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(
        out,
        0,
        base_offset,
        MIN_BATCH_LENGTH + len(payload),
        -1,
        MAGIC,
        0,
        attributes,
        count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp,
        base_timestamp if max_timestamp is None else max_timestamp,
        producer_id,
        -1,
        -1,
        count,
    )
    out[HEADER_SIZE:] = payload
    _UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
