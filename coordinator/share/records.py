"""Record key/value schemas of ``__share_group_state`` (Kafka's share coordinator records).

Kafka writes coordinator records type-prefixed: the key starts with an int16 that is the
record type (ShareSnapshotKey apiKey 0, ShareUpdateKey apiKey 1), followed by the key in
version 0 (not flexible); the value starts with its int16 version (0, flexible: compact
arrays, tagged fields), a null value is a tombstone. Big-endian throughout.

  key        GroupId string (int16 length), TopicId uuid (16 bytes), Partition int32
  ShareSnapshotValue v0  SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
             StartOffset int64, CreateTimestamp int64, WriteTimestamp int64,
             StateBatches compact [StateBatch], tags: 0 DeliveryCompleteCount int32 (-1)
  ShareUpdateValue v0    SnapshotEpoch int32, LeaderEpoch int32, StartOffset int64 (-1: not
             changed), StateBatches compact [StateBatch], tags: 0 DeliveryCompleteCount
  StateBatch FirstOffset int64, LastOffset int64, DeliveryState int8 (0 available,
             2 acknowledged, 4 archived), DeliveryCount int16, tagged fields

DeliveryCompleteCount (Kafka 4.2, KIP-1226) is read and kept; semel writes it only when
known (not -1). Unknown tags are skipped; value versions above 0 are unknown (skipped on
load, as Kafka's serde does with versions it cannot read).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from uuid import UUID

from semel.coordinator.share import SHARE_GROUP_STATE_TOPIC_NAME  # noqa: F401 - re-exported
from semel.coordinator.share.partition import StateBatch
from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    INT16,
    check_end,
    decode_guarded,
    read_compact_array_len,
    read_string,
    read_tagged_header,
    read_uvarint,
    skip_tagged_fields,
    write_string,
    write_tagged_fields,
    write_uvarint,
)

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1
VALUE_VERSION = 0
TAG_DELIVERY_COMPLETE_COUNT = 0

_KEY_TAIL = struct.Struct(">16si")  # topic id, partition
_SNAPSHOT_HEAD = struct.Struct(">iiiqqq")  # snapshot/state/leader epoch, start, create, write
_UPDATE_HEAD = struct.Struct(">iiq")  # snapshot epoch, leader epoch, start offset
_BATCH = struct.Struct(">qqbh")
_I32 = struct.Struct(">i")


class UnknownRecordType(ProtocolError):
    """A key whose type is not a share coordinator record."""


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    group_id: str
    topic_id: UUID
    partition: int


@dataclass(slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


@dataclass(slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1


@dataclass(slots=True)
class ShareRecord:
    """One record: its type, key and value (None: tombstone)."""
    record_type: int
    key: SharePartitionKey
    value: ShareSnapshotValue | ShareUpdateValue | None


def encode_key(record_type: int, key: SharePartitionKey) -> bytes:
    out = bytearray(INT16.pack(record_type))
    write_string(out, key.group_id)
    out += _KEY_TAIL.pack(key.topic_id.bytes, key.partition)
    return bytes(out)


def encode_value(value: ShareSnapshotValue | ShareUpdateValue | None) -> bytes | None:
    if value is None:
        return None
    out = bytearray(INT16.pack(VALUE_VERSION))
    if isinstance(value, ShareSnapshotValue):
        out += _SNAPSHOT_HEAD.pack(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                   value.start_offset, value.create_timestamp,
                                   value.write_timestamp)
    else:
        out += _UPDATE_HEAD.pack(value.snapshot_epoch, value.leader_epoch, value.start_offset)
    write_uvarint(out, len(value.state_batches) + 1)
    for b in value.state_batches:
        out += _BATCH.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        out.append(0)  # no tagged fields
    tags = []
    if value.delivery_complete_count != -1:
        tags.append((TAG_DELIVERY_COMPLETE_COUNT,
                     bytearray(_I32.pack(value.delivery_complete_count))))
    write_tagged_fields(out, tags)
    return bytes(out)


def encode_record(record: ShareRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.record_type, record.key), encode_value(record.value)


def decode_record(key: bytes | memoryview | None,
                  value: bytes | memoryview | None) -> ShareRecord:
    """UnknownRecordType for another type or an unknown value version; ProtocolError for
    malformed bytes."""
    if key is None:
        raise ProtocolError("a __share_group_state record without a key")
    (record_type, parsed), end = decode_guarded(_decode_key, key, 0)
    if end != len(key):
        raise ProtocolError(f"{len(key) - end} trailing bytes in a __share_group_state key")
    if value is None:
        return ShareRecord(record_type, parsed, None)
    decoded, end = decode_guarded(
        lambda buf, pos: _decode_value(buf, pos, record_type), value, 0)
    if end != len(value):
        raise ProtocolError(f"{len(value) - end} trailing bytes in a __share_group_state value")
    return ShareRecord(record_type, parsed, decoded)


def _decode_key(buf: memoryview, pos: int):
    (record_type,) = INT16.unpack_from(buf, pos)
    if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        raise UnknownRecordType(f"unknown __share_group_state record type {record_type}")
    group_id, pos = read_string(buf, pos + 2)
    topic_id, partition = _KEY_TAIL.unpack_from(buf, pos)
    return (record_type, SharePartitionKey(group_id, UUID(bytes=topic_id), partition)), \
        pos + _KEY_TAIL.size


def _decode_value(buf: memoryview, pos: int, record_type: int):
    (version,) = INT16.unpack_from(buf, pos)
    if version != VALUE_VERSION:
        raise UnknownRecordType(f"unknown __share_group_state value version {version}")
    pos += 2
    if record_type == SHARE_SNAPSHOT:
        value = ShareSnapshotValue(*_SNAPSHOT_HEAD.unpack_from(buf, pos))
        pos += _SNAPSHOT_HEAD.size
    else:
        value = ShareUpdateValue(*_UPDATE_HEAD.unpack_from(buf, pos))
        pos += _UPDATE_HEAD.size
    n, pos = read_compact_array_len(buf, pos, False)
    if n * (_BATCH.size + 1) > len(buf) - pos:
        raise ProtocolError(f"{n} state batches in {len(buf) - pos} bytes")
    for _ in range(n):
        value.state_batches.append(StateBatch(*_BATCH.unpack_from(buf, pos)))
        pos = skip_tagged_fields(buf, pos + _BATCH.size)
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        tag, end, pos = read_tagged_header(buf, pos)
        if tag == TAG_DELIVERY_COMPLETE_COUNT:
            (value.delivery_complete_count,) = _I32.unpack_from(buf, pos)
            pos += 4
        else:
            pos = end
        check_end(pos, end)
    return value, pos
