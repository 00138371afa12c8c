"""Record key/value schemas of share groups (KIP-932) in ``__consumer_offsets``, and the
loaded image of them.

As consumer group records (``coordinator.group.consumer_records``): keys are not flexible
(int16 key version = the record type, int16-length strings); values are flexible from v0
(int16 value version, compact strings/arrays, uuids as 16 bytes, tagged fields at the end).

  10  ShareGroupMemberMetadataKey(group, member)          rack_id string?, client_id,
                                                          client_host, subscribed topic
                                                          names [string]
  11  ShareGroupMetadataKey(group)                        epoch int32, metadata_hash int64
  12  ShareGroupTargetAssignmentMetadataKey(group)        assignment_epoch int32
  13  ShareGroupTargetAssignmentMemberKey(group, member)  topic partitions [topic_id,
                                                          [int32]]
  14  ShareGroupCurrentMemberAssignmentKey(group, member) member_epoch int32,
                                                          previous_member_epoch int32,
                                                          state int8, assigned [...]

Field order and versions are Kafka's (group-coordinator/src/main/resources/common/message).
Type 15 (ShareGroupStatePartitionMetadata) is not written: share-partition state is kept in
``__share_group_state`` by ``coordinator.share.store``; it is skipped on load.

``ShareGroupRecords`` is what loading ``__consumer_offsets`` leaves: per group, the latest
value of every share group key (a tombstone removes the key). Share group membership builds
its groups from it (``ShareGroupMembership``).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from semel.coordinator.group.consumer_records import (
    TopicPartitions,
    _read_topic_partitions,
    _write_array_len,
    _write_topic_partitions,
)
from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    read_compact_array_len,
    read_compact_nullable_string,
    read_compact_string,
    read_string,
    skip_tagged_fields,
    write_compact_nullable_string,
    write_compact_string,
    write_string,
)

SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
KEY_VERSIONS = frozenset(range(10, 15))
MEMBER_STATE_STABLE = 0  # Kafka's MemberState.STABLE: share members have no other state

_MEMBER_TYPES = frozenset({SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                           SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT})
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I8 = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class ShareGroupKey:
    """Key of record type ``record_type``; ``member`` only for member records (10, 13, 14)."""

    record_type: int
    group: str
    member: str | None = None


@dataclass(slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int


@dataclass(slots=True)
class ShareMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]


@dataclass(slots=True)
class ShareTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(slots=True)
class ShareTargetAssignmentMemberValue:
    topic_partitions: TopicPartitions


@dataclass(slots=True)
class ShareCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicPartitions


ShareGroupValue = (ShareGroupMetadataValue | ShareMemberMetadataValue
                   | ShareTargetAssignmentMetadataValue | ShareTargetAssignmentMemberValue
                   | ShareCurrentMemberAssignmentValue)
SHARE_VALUE_TYPES = (ShareGroupMetadataValue, ShareMemberMetadataValue,
                     ShareTargetAssignmentMetadataValue, ShareTargetAssignmentMemberValue,
                     ShareCurrentMemberAssignmentValue)


# ---- keys -------------------------------------------------------------------------------


def encode_key(key: ShareGroupKey, out: bytearray) -> None:
    out += _I16.pack(key.record_type)
    write_string(out, key.group)
    if key.record_type in _MEMBER_TYPES:
        write_string(out, key.member or "")


def decode_key(version: int, buf: memoryview, pos: int) -> ShareGroupKey:
    group, pos = read_string(buf, pos)
    member = None
    if version in _MEMBER_TYPES:
        member, pos = read_string(buf, pos)
    return ShareGroupKey(version, group, member)


# ---- values -----------------------------------------------------------------------------


def encode_value(value: ShareGroupValue, out: bytearray) -> None:
    out += _I16.pack(0)
    if isinstance(value, ShareGroupMetadataValue):
        out += _I32.pack(value.epoch)
        out += _I64.pack(value.metadata_hash)
    elif isinstance(value, ShareMemberMetadataValue):
        write_compact_nullable_string(out, value.rack_id)
        write_compact_string(out, value.client_id)
        write_compact_string(out, value.client_host)
        _write_array_len(out, len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            write_compact_string(out, name)
    elif isinstance(value, ShareTargetAssignmentMetadataValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, ShareTargetAssignmentMemberValue):
        _write_topic_partitions(out, value.topic_partitions)
    elif isinstance(value, ShareCurrentMemberAssignmentValue):
        out += _I32.pack(value.member_epoch)
        out += _I32.pack(value.previous_member_epoch)
        out += _I8.pack(value.state)
        _write_topic_partitions(out, value.assigned)
    else:
        raise TypeError(f"not a share group record value: {type(value).__name__}")
    out.append(0)  # tagged fields


def decode_value(record_type: int, buf: memoryview, pos: int) -> ShareGroupValue:
    (version,) = _I16.unpack_from(buf, pos)
    if version < 0:
        raise ProtocolError(f"invalid value version {version}")
    pos += 2
    value: ShareGroupValue
    if record_type == SHARE_GROUP_METADATA:
        (epoch,) = _I32.unpack_from(buf, pos)
        (metadata_hash,) = _I64.unpack_from(buf, pos + 4)
        value, pos = ShareGroupMetadataValue(epoch, metadata_hash), pos + 12
    elif record_type == SHARE_GROUP_MEMBER_METADATA:
        rack_id, pos = read_compact_nullable_string(buf, pos)
        client_id, pos = read_compact_string(buf, pos)
        client_host, pos = read_compact_string(buf, pos)
        n, pos = read_compact_array_len(buf, pos, False)
        names = []
        for _ in range(n):
            name, pos = read_compact_string(buf, pos)
            names.append(name)
        value = ShareMemberMetadataValue(rack_id, client_id, client_host, names)
    elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        value, pos = ShareTargetAssignmentMetadataValue(_I32.unpack_from(buf, pos)[0]), pos + 4
    elif record_type == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        tps, pos = _read_topic_partitions(buf, pos)
        value = ShareTargetAssignmentMemberValue(tps)
    elif record_type == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        member_epoch, previous = struct.unpack_from(">ii", buf, pos)
        (state,) = _I8.unpack_from(buf, pos + 8)
        assigned, pos = _read_topic_partitions(buf, pos + 9)
        value = ShareCurrentMemberAssignmentValue(member_epoch, previous, state, assigned)
    else:
        raise ProtocolError(f"not a share group record type: {record_type}")
    skip_tagged_fields(buf, pos)
    return value


# ---- the loaded image -------------------------------------------------------------------


class ShareGroupRecords:
    """Per group id, the latest value of each share group key replayed from the log."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[ShareGroupKey, ShareGroupValue]] = {}

    def replay(self, key: ShareGroupKey, value: ShareGroupValue | None) -> None:
        if value is not None:
            self.groups.setdefault(key.group, {})[key] = value
            return
        records = self.groups.get(key.group)
        if records is not None:
            records.pop(key, None)
            if not records:
                del self.groups[key.group]

    def knows(self, group_id: str) -> bool:
        """Whether ``group_id`` is a share group of the log."""
        records = self.groups.get(group_id)
        return records is not None and ShareGroupKey(SHARE_GROUP_METADATA, group_id) in records

    def group_ids(self) -> set[str]:
        """The share groups the log knows (those with a ShareGroupMetadata record)."""
        return {group_id for group_id, records in self.groups.items()
                if ShareGroupKey(SHARE_GROUP_METADATA, group_id) in records}


def topic_partitions(assignment: dict[uuid.UUID, list[int]]) -> TopicPartitions:
    """A member's assignment as record topic partitions, in topic id order."""
    return [(topic_id, list(assignment[topic_id])) for topic_id in sorted(assignment)]
