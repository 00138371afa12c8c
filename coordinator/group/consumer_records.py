"""Record key/value schemas of consumer groups (KIP-848) in ``__consumer_offsets``.

Keys are not flexible: int16 key version (the record type), then int16-length strings.
Values are flexible from v0: int16 value version, compact strings/arrays (varint length + 1),
uuids as 16 bytes, a tagged-field section at the end of every struct.

  3  ConsumerGroupMetadataKey(group)                   epoch int32 [tag 0: metadata hash]
  4  ConsumerGroupPartitionMetadataKey(group)          topics [topic_id uuid, name string,
                                                       num_partitions int32, partition
                                                       metadata [partition int32, racks
                                                       [string]]]
  5  ConsumerGroupMemberMetadataKey(group, member)     instance_id string?, rack_id string?,
                                                       client_id, client_host, subscribed
                                                       topic names [string], regex string?,
                                                       rebalance_timeout int32, server
                                                       assignor string? [tag 0: classic]
  6  ConsumerGroupTargetAssignmentMetadataKey(group)   assignment_epoch int32
  7  ConsumerGroupTargetAssignmentMemberKey(g, m)      topic partitions [topic_id, [int32]]
  8  ConsumerGroupCurrentMemberAssignmentKey(g, m)     member_epoch int32, previous_epoch
                                                       int32, state int8, assigned [...],
                                                       pending revocation [...]

Field order and versions are Kafka's (group-coordinator/src/main/resources/common/message).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    _read_uvarint_long,
    read_compact_array_len,
    read_compact_bytes,
    read_compact_nullable_string,
    read_compact_string,
    read_string,
    read_tagged_header,
    skip_tagged_fields,
    write_compact_bytes,
    write_compact_nullable_string,
    write_compact_string,
    write_string,
    write_tagged_fields,
    write_uvarint,
)

CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
KEY_VERSIONS = frozenset(range(3, 9))

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I8 = struct.Struct(">b")

TopicPartitions = list[tuple[uuid.UUID, list[int]]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """Key of record type ``record_type``; ``member`` only for member records (5, 7, 8)."""

    record_type: int
    group: str
    member: str | None = None


@dataclass(slots=True)
class ConsumerGroupMetadataValue:
    epoch: int


@dataclass(slots=True)
class PartitionMetadataValue:
    topics: list[tuple[uuid.UUID, str, int]] = field(default_factory=list)


@dataclass(slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(slots=True)
class ClassicMemberMetadata:
    """Tag 0 of MemberMetadata: a member using the classic protocol (KIP-848 migration)
    keeps its JoinGroup session timeout and protocols (name, subscription metadata)."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]


@dataclass(slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(slots=True)
class TargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(slots=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions
    pending_revocation: TopicPartitions


ConsumerGroupValue = (ConsumerGroupMetadataValue | PartitionMetadataValue | MemberMetadataValue
                      | TargetAssignmentMetadataValue | TargetAssignmentMemberValue
                      | CurrentMemberAssignmentValue)

_MEMBER_TYPES = frozenset({CONSUMER_GROUP_MEMBER_METADATA, CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                           CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT})


# ---- keys -------------------------------------------------------------------------------


def encode_key(key: ConsumerGroupKey, out: bytearray) -> None:
    out += _I16.pack(key.record_type)
    write_string(out, key.group)
    if key.record_type in _MEMBER_TYPES:
        write_string(out, key.member or "")


def decode_key(version: int, buf: memoryview, pos: int) -> ConsumerGroupKey:
    group, pos = read_string(buf, pos)
    member = None
    if version in _MEMBER_TYPES:
        member, pos = read_string(buf, pos)
    return ConsumerGroupKey(version, group, member)


# ---- values -----------------------------------------------------------------------------


def _write_array_len(out: bytearray, n: int) -> None:
    write_uvarint(out, n + 1)


def _write_topic_partitions(out: bytearray, tps: TopicPartitions) -> None:
    _write_array_len(out, len(tps))
    for topic_id, partitions in tps:
        out += topic_id.bytes
        _write_array_len(out, len(partitions))
        for p in partitions:
            out += _I32.pack(p)
        out.append(0)  # tagged fields


def _read_topic_partitions(buf: memoryview, pos: int) -> tuple[TopicPartitions, int]:
    n, pos = read_compact_array_len(buf, pos, False)
    tps: TopicPartitions = []
    for _ in range(n):
        topic_id, pos = _read_uuid(buf, pos)
        count, pos = read_compact_array_len(buf, pos, False)
        if pos + 4 * count > len(buf):
            raise ProtocolError("partition array beyond the record")
        partitions = list(struct.unpack_from(f">{count}i", buf, pos))
        pos += 4 * count
        pos = skip_tagged_fields(buf, pos)
        tps.append((topic_id, partitions))
    return tps, pos


def _read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    if pos + 16 > len(buf):
        raise ProtocolError("uuid beyond the record")
    return uuid.UUID(bytes=bytes(buf[pos:pos + 16])), pos + 16


def _read_i32(buf: memoryview, pos: int) -> tuple[int, int]:
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _read_member_tags(buf: memoryview, pos: int
                      ) -> tuple[ClassicMemberMetadata | None, int]:
    """MemberMetadata's tagged fields: tag 0 is ClassicMemberMetadata, others skipped."""
    if pos < len(buf) and buf[pos] == 0:
        return None, pos + 1
    classic = None
    n, pos = _read_uvarint_long(buf, pos)
    for _ in range(n):
        tag, end, start = read_tagged_header(buf, pos)
        if tag == 0 and end > start and buf[start] == 1:
            at = start + 1
            session_timeout, at = _read_i32(buf, at)
            count, at = read_compact_array_len(buf, at, False)
            protocols = []
            for _ in range(count):
                name, at = read_compact_string(buf, at)
                metadata, at = read_compact_bytes(buf, at)
                at = skip_tagged_fields(buf, at)
                protocols.append((name, metadata))
            classic = ClassicMemberMetadata(session_timeout, protocols)
        pos = end
    return classic, pos


def encode_value(value: ConsumerGroupValue, out: bytearray) -> None:
    out += _I16.pack(0)
    if isinstance(value, ConsumerGroupMetadataValue):
        out += _I32.pack(value.epoch)
    elif isinstance(value, PartitionMetadataValue):
        _write_array_len(out, len(value.topics))
        for topic_id, name, num_partitions in value.topics:
            out += topic_id.bytes
            write_compact_string(out, name)
            out += _I32.pack(num_partitions)
            _write_array_len(out, 0)  # no rack-aware partition metadata
            out.append(0)
    elif isinstance(value, MemberMetadataValue):
        write_compact_nullable_string(out, value.instance_id)
        write_compact_nullable_string(out, value.rack_id)
        write_compact_string(out, value.client_id)
        write_compact_string(out, value.client_host)
        _write_array_len(out, len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            write_compact_string(out, name)
        write_compact_nullable_string(out, value.subscribed_topic_regex)
        out += _I32.pack(value.rebalance_timeout_ms)
        write_compact_nullable_string(out, value.server_assignor)
        if value.classic is not None:
            # a nullable struct: presence byte, then the struct (Kafka's generated layout)
            data = bytearray(b"\x01")
            data += _I32.pack(value.classic.session_timeout_ms)
            _write_array_len(data, len(value.classic.protocols))
            for name, metadata in value.classic.protocols:
                write_compact_string(data, name)
                write_compact_bytes(data, metadata)
                data.append(0)
            data.append(0)
            write_tagged_fields(out, [(0, data)])
            return  # the tagged section is written
    elif isinstance(value, TargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        _write_topic_partitions(out, value.topic_partitions)
    else:
        out += _I32.pack(value.member_epoch)
        out += _I32.pack(value.previous_member_epoch)
        out += _I8.pack(value.state)
        _write_topic_partitions(out, value.assigned)
        _write_topic_partitions(out, value.pending_revocation)
    out.append(0)  # tagged fields


def decode_value(record_type: int, buf: memoryview, pos: int) -> ConsumerGroupValue:
    (version,) = _I16.unpack_from(buf, pos)
    if version < 0:
        raise ProtocolError(f"invalid value version {version}")
    pos += 2
    value: ConsumerGroupValue
    if record_type == CONSUMER_GROUP_METADATA:
        epoch, pos = _read_i32(buf, pos)
        value = ConsumerGroupMetadataValue(epoch)
    elif record_type == CONSUMER_GROUP_PARTITION_METADATA:
        n, pos = read_compact_array_len(buf, pos, False)
        topics = []
        for _ in range(n):
            topic_id, pos = _read_uuid(buf, pos)
            name, pos = read_compact_string(buf, pos)
            num_partitions, pos = _read_i32(buf, pos)
            racks, pos = read_compact_array_len(buf, pos, False)
            for _ in range(racks):
                _partition, pos = _read_i32(buf, pos)
                rack_count, pos = read_compact_array_len(buf, pos, False)
                for _ in range(rack_count):
                    _rack, pos = read_compact_string(buf, pos)
                pos = skip_tagged_fields(buf, pos)
            pos = skip_tagged_fields(buf, pos)
            topics.append((topic_id, name, num_partitions))
        value = PartitionMetadataValue(topics)
    elif record_type == CONSUMER_GROUP_MEMBER_METADATA:
        instance_id, pos = read_compact_nullable_string(buf, pos)
        rack_id, pos = read_compact_nullable_string(buf, pos)
        client_id, pos = read_compact_string(buf, pos)
        client_host, pos = read_compact_string(buf, pos)
        n, pos = read_compact_array_len(buf, pos, False)
        names = []
        for _ in range(n):
            name, pos = read_compact_string(buf, pos)
            names.append(name)
        regex, pos = read_compact_nullable_string(buf, pos)
        rebalance_timeout, pos = _read_i32(buf, pos)
        assignor, pos = read_compact_nullable_string(buf, pos)
        value = MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                    rebalance_timeout, assignor)
        value.classic, pos = _read_member_tags(buf, pos)
        return value  # its tagged section is read
    elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        epoch, pos = _read_i32(buf, pos)
        value = TargetAssignmentMetadataValue(epoch)
    elif record_type == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        tps, pos = _read_topic_partitions(buf, pos)
        value = TargetAssignmentMemberValue(tps)
    else:
        epoch, pos = _read_i32(buf, pos)
        previous, pos = _read_i32(buf, pos)
        (state,) = _I8.unpack_from(buf, pos)
        pos += 1
        assigned, pos = _read_topic_partitions(buf, pos)
        pending, pos = _read_topic_partitions(buf, pos)
        value = CurrentMemberAssignmentValue(epoch, previous, state, assigned, pending)
    skip_tagged_fields(buf, pos)
    return value
