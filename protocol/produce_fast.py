"""Produce (v3-12) read and answered without the generated message classes.

Most Produce requests have one shape: no tagged fields, a record batch per partition, and
an answer of offsets. For that shape ``parse`` reads the few fields the broker needs
straight from the frame - the records stay views into it, as the generated codec leaves
them - and ``encode_response`` writes the answer into one buffer, size prefix included.
Anything else (a tagged field, null records, a length that runs past the frame, trailing
bytes) makes ``parse`` return None, and the request goes through the generated codec,
which reports the problem; ``parse`` never raises. Both are checked against the
generated codec, field by field and byte for byte (tests/protocol/test_produce_fast.py).

``parse`` is the optional C accelerator's ``produce_parse`` (protocol/_recordwalk.c) when it
is built, else the pure-Python ``_parse``, the reference; both give the same answer for any
bytes (tests/protocol/test_produce_fast_differential.py).
"""

from __future__ import annotations

import struct
from functools import partial
from typing import NamedTuple

try:  # built from protocol/_recordwalk.c at install when a C compiler is there
    from semel.protocol import _recordwalk  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - the pure-Python parser is used
    _recordwalk = None

FIRST_FLEXIBLE = 9  # compact strings and arrays, tagged fields, request header v2
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HI = struct.Struct(">hi")
_CORRELATION = struct.Struct(">i")
_SIZE = struct.Struct(">i")
_SIZE_CORRELATION = struct.Struct(">ii")
_PARTITION_V2 = struct.Struct(">ihqq")  # v3-4: no log start offset
_PARTITION_V5 = struct.Struct(">ihqqq")
_EMPTY_V8 = b"\x00\x00\x00\x00\xff\xff"  # no record errors, null error message
_EMPTY_V9 = b"\x01\x00\x00"  # the same, compact, and no tagged fields


class Partition(NamedTuple):
    index: int
    records: memoryview


class Topic(NamedTuple):
    name: str
    partitions: list[Partition]


class ParsedProduce(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topics: list[Topic]


class PartitionResult(NamedTuple):
    """One partition's answer (record_errors are never set on this path)."""

    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint too long")


def parse(frame: memoryview, version: int) -> ParsedProduce | None:
    """The request in ``frame`` (header included, size prefix not), or None when it is not
    of the common shape or does not parse."""
    try:
        return _parse(frame, version)
    except (IndexError, ValueError, struct.error, UnicodeDecodeError):
        return None


_parse_py = parse
_parse_c = (None if _recordwalk is None
            else partial(_recordwalk.produce_parse, ParsedProduce, Topic, Partition))


def _use_accelerator(enabled: bool) -> None:
    """Tests and benchmarks: switch ``parse`` between C (when built) and pure Python."""
    global parse
    parse = _parse_c if enabled and _parse_c is not None else _parse_py


_use_accelerator(True)


def _parse(frame: memoryview, version: int) -> ParsedProduce | None:
    end = len(frame)
    (client_id_length,) = _I16.unpack_from(frame, 8)
    pos = 10 + max(client_id_length, 0)
    flexible = version >= FIRST_FLEXIBLE
    if flexible:
        if frame[pos] != 0:  # header tagged fields
            return None
        pos += 1
        length, pos = _uvarint(frame, pos)
        length -= 1
    else:
        (length,) = _I16.unpack_from(frame, pos)
        pos += 2
    if length >= 0:
        if pos + length > end:
            return None
        transactional_id = bytes(frame[pos:pos + length]).decode()
        pos += length
    else:
        transactional_id = None
    acks, timeout_ms = _HI.unpack_from(frame, pos)
    pos += 6
    if flexible:
        count, pos = _uvarint(frame, pos)
        count -= 1
    else:
        (count,) = _I32.unpack_from(frame, pos)
        pos += 4
    if count < 0:
        return None
    topics = []
    for _ in range(count):
        if flexible:
            length, pos = _uvarint(frame, pos)
            length -= 1
        else:
            (length,) = _I16.unpack_from(frame, pos)
            pos += 2
        if length < 0 or pos + length > end:
            return None
        name = bytes(frame[pos:pos + length]).decode()
        pos += length
        if flexible:
            partition_count, pos = _uvarint(frame, pos)
            partition_count -= 1
        else:
            (partition_count,) = _I32.unpack_from(frame, pos)
            pos += 4
        if partition_count < 0:
            return None
        partitions = []
        for _ in range(partition_count):
            (index,) = _I32.unpack_from(frame, pos)
            pos += 4
            if flexible:
                length, pos = _uvarint(frame, pos)
                length -= 1
            else:
                (length,) = _I32.unpack_from(frame, pos)
                pos += 4
            if length < 0 or pos + length > end:
                return None
            partitions.append(Partition(index, frame[pos:pos + length]))
            pos += length
            if flexible:
                if frame[pos] != 0:  # partition tagged fields
                    return None
                pos += 1
        if flexible:
            if frame[pos] != 0:  # topic tagged fields
                return None
            pos += 1
        topics.append(Topic(name, partitions))
    if flexible:
        if frame[pos] != 0:  # request tagged fields
            return None
        pos += 1
    if pos != end:
        return None
    return ParsedProduce(transactional_id, acks, timeout_ms, topics)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    data = value.encode()
    if flexible:
        _write_uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


def _write_uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


# the common answer, v9+ (Java's): one topic, one partition without an error message. Per
# topic name (a bounded cache: names come from existing topics) the whole frame as a
# template - size prefix, a correlation id to fill in, no header tagged fields, topic count,
# name, partition count, the partition's fields to fill in at ``offset``, a fixed tail -
# which each answer copies and fills with two pack_into calls
_ONE_FRAMES: dict[str, tuple[bytes, int]] = {}
_ONE_FRAMES_MAX = 1024
_ONE_TAIL = _EMPTY_V9 + b"\x00" + b"\x00\x00\x00\x00" + b"\x00"  # topic tags, throttle, tags


def _one_frame(name: str) -> tuple[bytes, int]:
    out = bytearray(9)  # size, correlation id, no header tagged fields
    out.append(2)  # one topic
    _string(out, name, True)
    out.append(2)  # one partition
    offset = len(out)
    out += bytes(_PARTITION_V5.size)
    out += _ONE_TAIL
    _SIZE.pack_into(out, 0, len(out) - 4)
    if len(_ONE_FRAMES) >= _ONE_FRAMES_MAX:
        _ONE_FRAMES.clear()
    frame = _ONE_FRAMES[name] = (bytes(out), offset)
    return frame


def encode_response(version: int, correlation_id: int,
                    topics: list[tuple[str, list[PartitionResult]]]) -> bytearray:
    """The response frame, size prefix included; throttle_time_ms 0."""
    flexible = version >= FIRST_FLEXIBLE
    if flexible and len(topics) == 1:
        name, partitions = topics[0]
        if len(partitions) == 1 and partitions[0].error_message is None:
            frame = _ONE_FRAMES.get(name)
            if frame is None:
                frame = _one_frame(name)
            template, offset = frame
            out = bytearray(template)
            _CORRELATION.pack_into(out, 4, correlation_id)
            _PARTITION_V5.pack_into(out, offset, *partitions[0][:5])
            return out
    out = bytearray(8)
    if flexible:
        out.append(0)  # response header tagged fields
        _write_uvarint(out, len(topics) + 1)
    else:
        out += _I32.pack(len(topics))
    partition_struct = _PARTITION_V5 if version >= 5 else _PARTITION_V2
    for name, partitions in topics:
        _string(out, name, flexible)
        if flexible:
            _write_uvarint(out, len(partitions) + 1)
        else:
            out += _I32.pack(len(partitions))
        for p in partitions:
            if version >= 5:
                out += partition_struct.pack(p.index, p.error_code, p.base_offset,
                                             p.log_append_time_ms, p.log_start_offset)
            else:
                out += partition_struct.pack(p.index, p.error_code, p.base_offset,
                                             p.log_append_time_ms)
            if version >= 8:
                if p.error_message is None:
                    out += _EMPTY_V9 if flexible else _EMPTY_V8
                else:
                    out += b"\x01" if flexible else b"\x00\x00\x00\x00"
                    _string(out, p.error_message, flexible)
                    if flexible:
                        out.append(0)
        if flexible:
            out.append(0)  # topic tagged fields
    out += b"\x00\x00\x00\x00"  # throttle_time_ms
    if flexible:
        out.append(0)
    _SIZE_CORRELATION.pack_into(out, 0, len(out) - 4, correlation_id)
    return out
