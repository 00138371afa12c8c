"""Primitive readers and writers for Kafka's message encoding, used by the generated codecs.

Classic (non-flexible) versions: int16-length strings (-1 = null), int32-length bytes and
arrays (-1 = null). Flexible versions (KIP-482): unsigned-varint "compact" lengths stored as
length + 1 (0 = null) and a tagged-field section after every struct. Unsigned varints are
at most 5 bytes here; anything longer is malformed.

Every reader takes ``(buf: memoryview, pos: int)`` and returns ``(value, new_pos)``; every
length is checked against the remaining bytes before anything is sliced or allocated, and a
violation raises :class:`protocol.errors.ProtocolError`. Writers append to a bytearray.
"""

from __future__ import annotations

import struct
from uuid import UUID

from semel.protocol.errors import ProtocolError

INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
ZERO_UUID = UUID(int=0)


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned varint, at most 5 bytes (Kafka's ByteUtils.readUnsignedVarint)."""
    b = buf[pos]  # IndexError past the end: decode_guarded reports it
    if b < 0x80:
        return b, pos + 1
    return _read_uvarint_long(buf, pos)


def _read_uvarint_long(buf: memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for _ in range(5):
        if pos >= len(buf):
            raise ProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                raise ProtocolError("varint out of range")
            return value, pos
        shift += 7
    raise ProtocolError("varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ProtocolError(f"negative unsigned varint {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _take(buf: memoryview, pos: int, n: int) -> int:
    end = pos + n
    if end > len(buf):
        raise ProtocolError(f"length {n} exceeds the {len(buf) - pos} remaining bytes")
    return end


def _utf8(buf: memoryview, pos: int, end: int) -> str:
    try:
        return buf[pos:end].tobytes().decode()
    except UnicodeDecodeError as e:
        raise ProtocolError(f"invalid UTF-8 in string: {e.reason}") from None


# ---- strings ---------------------------------------------------------------------------

def read_string(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        raise ProtocolError("null in a non-nullable string")
    end = _take(buf, pos, n)
    return _utf8(buf, pos, end), end


def read_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    (n,) = INT16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid string length {n}")
        return None, pos
    end = _take(buf, pos, n)
    return _utf8(buf, pos, end), end


def read_compact_string(buf: memoryview, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _read_uvarint_long(buf, pos)
    if n == 0:
        raise ProtocolError("null in a non-nullable compact string")
    end = pos + n - 1
    if end > len(buf):
        raise ProtocolError(f"length {n - 1} exceeds the {len(buf) - pos} remaining bytes")
    return _utf8(buf, pos, end), end


def read_compact_nullable_string(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _read_uvarint_long(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise ProtocolError(f"length {n - 1} exceeds the {len(buf) - pos} remaining bytes")
    return _utf8(buf, pos, end), end


def write_string(out: bytearray, s: str) -> None:
    if s is None:
        raise ProtocolError("null in a non-nullable string")
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ProtocolError("string longer than 32767 bytes")
    out += INT16.pack(len(b))
    out += b


def write_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out += b"\xff\xff"
    else:
        write_string(out, s)


def write_compact_string(out: bytearray, s: str) -> None:
    if s is None:
        raise ProtocolError("null in a non-nullable compact string")
    b = s.encode()
    write_uvarint(out, len(b) + 1)
    out += b


def write_compact_nullable_string(out: bytearray, s: str | None) -> None:
    if s is None:
        out.append(0)
    else:
        write_compact_string(out, s)


# ---- bytes and records -----------------------------------------------------------------
# bytes fields are copied (they are small: SASL tokens, group metadata); records fields are
# zero-copy memoryview slices of the request buffer.

def read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        raise ProtocolError("null in non-nullable bytes")
    end = _take(buf, pos, n)
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid bytes length {n}")
        return None, pos
    end = _take(buf, pos, n)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        raise ProtocolError("null in non-nullable compact bytes")
    end = _take(buf, pos, n - 1)
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1)
    return bytes(buf[pos:end]), end


def read_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid records length {n}")
        return None, pos
    end = _take(buf, pos, n)
    return buf[pos:end], end


def read_compact_records(buf: memoryview, pos: int) -> tuple[memoryview | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = _take(buf, pos, n - 1)
    return buf[pos:end], end


def write_bytes(out: bytearray, b: bytes) -> None:
    if b is None:
        raise ProtocolError("null in non-nullable bytes")
    out += INT32.pack(len(b))
    out += b


def write_nullable_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out += b"\xff\xff\xff\xff"
    else:
        out += INT32.pack(len(b))
        if len(b) >= ATTACH_MIN and out.__class__ is FrameBuilder:
            out.attach(b)
        else:
            out += b


def write_compact_bytes(out: bytearray, b: bytes) -> None:
    if b is None:
        raise ProtocolError("null in non-nullable compact bytes")
    write_uvarint(out, len(b) + 1)
    out += b


def write_compact_nullable_bytes(out: bytearray, b: bytes | None) -> None:
    if b is None:
        out.append(0)
    else:
        write_uvarint(out, len(b) + 1)
        if len(b) >= ATTACH_MIN and out.__class__ is FrameBuilder:
            out.attach(b)
        else:
            out += b


# Records values at least this large are attached to a FrameBuilder by reference.
ATTACH_MIN = 32768


class FrameBuilder(bytearray):
    """An outgoing frame being encoded, for ``transport.writelines``.

    Small fields are appended in place like any bytearray; large records values (fetched
    log data) are attached by reference as separate chunks, so they are never copied into
    the frame. ``chunks()`` closes the frame: the pieces in order, their total length, and
    the int32 size prefix (the builder's first 4 bytes, reserved by the caller) filled in.
    """

    __slots__ = ("_chunks",)

    def attach(self, data) -> None:
        try:
            chunks = self._chunks
        except AttributeError:
            self._chunks = chunks = []
        chunks.append(bytes(self))
        chunks.append(data)
        del self[:]

    def chunks(self) -> list:
        pieces = getattr(self, "_chunks", None)
        if pieces is None:
            INT32.pack_into(self, 0, len(self) - 4)
            return [self]
        pieces.append(bytes(self))
        head = bytearray(pieces[0])
        INT32.pack_into(head, 0, sum(len(p) for p in pieces) - 4)
        pieces[0] = head
        return pieces


# ---- arrays ----------------------------------------------------------------------------

def read_array_len(buf: memoryview, pos: int, nullable: bool) -> tuple[int, int]:
    """Element count of a classic array; -1 means null. Bounded by the remaining bytes."""
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n != -1 or not nullable:
            raise ProtocolError(f"invalid array length {n}")
        return -1, pos
    if n > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements in {len(buf) - pos} remaining bytes")
    return n, pos


def read_compact_array_len(buf: memoryview, pos: int, nullable: bool) -> tuple[int, int]:
    n = buf[pos]
    if n < 0x80:
        pos += 1
    else:
        n, pos = _read_uvarint_long(buf, pos)
    if n == 0:
        if not nullable:
            raise ProtocolError("null in a non-nullable array")
        return -1, pos
    n -= 1
    if n > len(buf) - pos:
        raise ProtocolError(f"array of {n} elements in {len(buf) - pos} remaining bytes")
    return n, pos


def read_tagged_header(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """One tagged field's (tag, end position, start position)."""
    tag, pos = _read_uvarint_long(buf, pos)
    size, pos = _read_uvarint_long(buf, pos)
    return tag, _take(buf, pos, size), pos


def skip_tagged_fields(buf: memoryview, pos: int) -> int:
    """Skip a tagged-field section (count, then tag/size/bytes per field)."""
    if pos < len(buf) and buf[pos] == 0:  # almost always: no tagged fields
        return pos + 1
    n, pos = _read_uvarint_long(buf, pos)
    if n > len(buf) - pos:  # every field takes at least 2 bytes
        raise ProtocolError(f"{n} tagged fields cannot fit in {len(buf) - pos} bytes")
    for _ in range(n):
        _tag, end, pos = read_tagged_header(buf, pos)
        pos = end
    return pos


def write_tagged_fields(out: bytearray, fields: list[tuple[int, bytearray]]) -> None:
    write_uvarint(out, len(fields))
    for tag, data in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def check_end(pos: int, end: int) -> None:
    if pos != end:
        raise ProtocolError(f"tagged field size mismatch: consumed to {pos}, declared end {end}")


_LOW_LEVEL = (struct.error, IndexError, ValueError, OverflowError, TypeError)


def decode_guarded(decoder, buf, pos: int):
    """Run a generated decoder; any low-level failure becomes ProtocolError."""
    if not isinstance(buf, memoryview):
        buf = memoryview(buf)
    try:
        return decoder(buf, pos)
    except ProtocolError:
        raise
    except _LOW_LEVEL as e:
        raise ProtocolError(f"malformed message: {e}") from None
