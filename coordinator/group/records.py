"""Record key/value schemas of ``__consumer_offsets`` (Kafka's group coordinator records).

Every record key starts with an int16 *key version* that doubles as the record type; the
value (null = tombstone) starts with an int16 value version. Strings are int16-length UTF-8
(compact varint-length in flexible versions), bytes int32-length, all big-endian.

  key v0/v1  OffsetCommitKey     group string, topic string, partition int32
  key v2     GroupMetadataKey    group string
  key v3-8   consumer group (KIP-848) records: ``consumer_records``
  key v9     ConsumerGroupRegularExpression: not ours, skipped on load
  key v10-14 share group (KIP-932) records: ``coordinator.share.group_records``
  key v15+   share-partition metadata and streams group records: skipped on load

  OffsetCommitValue v0-4 (v4 flexible): offset int64, [v3+ leader_epoch int32],
      metadata string, commit_timestamp int64, [v1 only: expire_timestamp int64]
  GroupMetadataValue v0-4 (v4 flexible): protocol_type string, generation int32,
      protocol nullable string, leader nullable string, [v2+ current_state_timestamp int64],
      members [MemberMetadata]
  MemberMetadata: member_id string, [v3+ group_instance_id nullable string], client_id string,
      client_host string, [v1+ rebalance_timeout int32], session_timeout int32,
      subscription bytes, assignment bytes

Kafka writes offset commit values in v3 (v1 when the commit carries an expire timestamp) and
group metadata values in v3; we do the same. Versions newer than 4 are read as 4 (KIP-915:
later versions only add tagged fields).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from semel.coordinator.group import consumer_records
from semel.coordinator.group.consumer_records import ConsumerGroupKey, ConsumerGroupValue
from semel.coordinator.share import group_records as share_records
from semel.coordinator.share.group_records import ShareGroupKey, ShareGroupValue
from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    decode_guarded,
    read_array_len,
    read_bytes,
    read_compact_array_len,
    read_compact_bytes,
    read_compact_nullable_string,
    read_compact_string,
    read_nullable_string,
    read_string,
    skip_tagged_fields,
    write_bytes,
    write_nullable_string,
    write_string,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3
MAX_VALUE_VERSION = 4
FIRST_FLEXIBLE_VALUE_VERSION = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    rebalance_timeout: int = -1
    group_instance_id: str | None = None


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadata] = field(default_factory=list)


RecordKey = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey | ShareGroupKey
RecordValue = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue | ShareGroupValue


@dataclass(slots=True)
class CoordinatorRecord:
    """One record of __consumer_offsets; value None is a tombstone."""

    key: RecordKey
    value: RecordValue | None


class UnknownRecordType(ProtocolError):
    """A key version this coordinator does not handle (share/streams group records)."""

    def __init__(self, key_version: int) -> None:
        super().__init__(f"unknown record type (key version {key_version})")
        self.key_version = key_version


# ---- keys -------------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    out = bytearray()
    if isinstance(key, OffsetCommitKey):
        out += _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        write_string(out, key.group)
        write_string(out, key.topic)
        out += _I32.pack(key.partition)
    elif isinstance(key, ConsumerGroupKey):
        consumer_records.encode_key(key, out)
    elif isinstance(key, ShareGroupKey):
        share_records.encode_key(key, out)
    else:
        out += _I16.pack(GROUP_METADATA_KEY_VERSION)
        write_string(out, key.group)
    return bytes(out)


def decode_key(data: bytes) -> RecordKey:
    """Raises UnknownRecordType for other record types, ProtocolError for malformed keys."""
    return decode_guarded(_decode_key, data, 0)


def _decode_key(buf: memoryview, pos: int) -> RecordKey:
    (version,) = _I16.unpack_from(buf, pos)
    pos += 2
    if version in (0, 1):
        group, pos = read_string(buf, pos)
        topic, pos = read_string(buf, pos)
        (partition,) = _I32.unpack_from(buf, pos)
        return OffsetCommitKey(group, topic, partition)
    if version == GROUP_METADATA_KEY_VERSION:
        group, pos = read_string(buf, pos)
        return GroupMetadataKey(group)
    if version in consumer_records.KEY_VERSIONS:
        return consumer_records.decode_key(version, buf, pos)
    if version in share_records.KEY_VERSIONS:
        return share_records.decode_key(version, buf, pos)
    raise UnknownRecordType(version)


# ---- values -----------------------------------------------------------------------------


def encode_value(value: RecordValue | None) -> bytes | None:
    if value is None:
        return None
    out = bytearray()
    if isinstance(value, OffsetCommitValue):
        _encode_offset_commit_value(value, out)
    elif isinstance(value, GroupMetadataValue):
        _encode_group_metadata_value(value, out)
    elif isinstance(value, share_records.SHARE_VALUE_TYPES):
        share_records.encode_value(value, out)
    else:
        consumer_records.encode_value(value, out)
    return bytes(out)


def _encode_offset_commit_value(value: OffsetCommitValue, out: bytearray) -> None:
    if value.expire_timestamp >= 0:
        out += _I16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE)
        out += _I64.pack(value.offset)
        write_string(out, value.metadata)
        out += _I64.pack(value.commit_timestamp)
        out += _I64.pack(value.expire_timestamp)
        return
    out += _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
    out += _I64.pack(value.offset)
    out += _I32.pack(value.leader_epoch)
    write_string(out, value.metadata)
    out += _I64.pack(value.commit_timestamp)


def _encode_group_metadata_value(value: GroupMetadataValue, out: bytearray) -> None:
    out += _I16.pack(GROUP_METADATA_VALUE_VERSION)
    write_string(out, value.protocol_type)
    out += _I32.pack(value.generation)
    write_nullable_string(out, value.protocol)
    write_nullable_string(out, value.leader)
    out += _I64.pack(value.current_state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        write_string(out, m.member_id)
        write_nullable_string(out, m.group_instance_id)
        write_string(out, m.client_id)
        write_string(out, m.client_host)
        out += _I32.pack(m.rebalance_timeout)
        out += _I32.pack(m.session_timeout)
        write_bytes(out, m.subscription)
        write_bytes(out, m.assignment)


def decode_value(key: RecordKey, data: bytes | None) -> RecordValue | None:
    """The value for ``key`` (None for a tombstone); ProtocolError when malformed."""
    if data is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return decode_guarded(_decode_offset_commit_value, data, 0)
    if isinstance(key, ConsumerGroupKey):
        return decode_guarded(
            lambda buf, pos: consumer_records.decode_value(key.record_type, buf, pos), data, 0)
    if isinstance(key, ShareGroupKey):
        return decode_guarded(
            lambda buf, pos: share_records.decode_value(key.record_type, buf, pos), data, 0)
    return decode_guarded(_decode_group_metadata_value, data, 0)


def _version(buf: memoryview, pos: int) -> tuple[int, int]:
    (version,) = _I16.unpack_from(buf, pos)
    if version < 0:
        raise ProtocolError(f"invalid value version {version}")
    return min(version, MAX_VALUE_VERSION), pos + 2


def _decode_offset_commit_value(buf: memoryview, pos: int) -> OffsetCommitValue:
    version, pos = _version(buf, pos)
    flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    (offset,) = _I64.unpack_from(buf, pos)
    pos += 8
    leader_epoch = -1
    if version >= 3:
        (leader_epoch,) = _I32.unpack_from(buf, pos)
        pos += 4
    metadata, pos = (read_compact_string if flexible else read_string)(buf, pos)
    (commit_timestamp,) = _I64.unpack_from(buf, pos)
    pos += 8
    expire_timestamp = -1
    if version == 1:
        (expire_timestamp,) = _I64.unpack_from(buf, pos)
        pos += 8
    if flexible:
        pos = skip_tagged_fields(buf, pos)
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def _decode_group_metadata_value(buf: memoryview, pos: int) -> GroupMetadataValue:
    version, pos = _version(buf, pos)
    flexible = version >= FIRST_FLEXIBLE_VALUE_VERSION
    rs = read_compact_string if flexible else read_string
    rns = read_compact_nullable_string if flexible else read_nullable_string
    rb = read_compact_bytes if flexible else read_bytes
    protocol_type, pos = rs(buf, pos)
    (generation,) = _I32.unpack_from(buf, pos)
    pos += 4
    protocol, pos = rns(buf, pos)
    leader, pos = rns(buf, pos)
    current_state_timestamp = -1
    if version >= 2:
        (current_state_timestamp,) = _I64.unpack_from(buf, pos)
        pos += 8
    if flexible:
        count, pos = read_compact_array_len(buf, pos, False)
    else:
        count, pos = read_array_len(buf, pos, False)
    members = []
    for _ in range(count):
        member_id, pos = rs(buf, pos)
        group_instance_id = None
        if version >= 3:
            group_instance_id, pos = rns(buf, pos)
        client_id, pos = rs(buf, pos)
        client_host, pos = rs(buf, pos)
        rebalance_timeout = -1
        if version >= 1:
            (rebalance_timeout,) = _I32.unpack_from(buf, pos)
            pos += 4
        (session_timeout,) = _I32.unpack_from(buf, pos)
        pos += 4
        subscription, pos = rb(buf, pos)
        assignment, pos = rb(buf, pos)
        if flexible:
            pos = skip_tagged_fields(buf, pos)
        members.append(MemberMetadata(
            member_id, client_id, client_host, session_timeout, bytes(subscription),
            bytes(assignment), rebalance_timeout, group_instance_id))
    if flexible:
        pos = skip_tagged_fields(buf, pos)
    return GroupMetadataValue(protocol_type, generation, protocol, leader,
                              current_state_timestamp, members)


def encode_record(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record.key), encode_value(record.value)


def decode_record(key: bytes | None, value: bytes | None) -> CoordinatorRecord:
    if key is None:
        raise ProtocolError("coordinator record without a key")
    parsed = decode_key(key)
    return CoordinatorRecord(parsed, decode_value(parsed, value))
