"""The part of the embedded consumer protocol the coordinator reads: subscribed topics.

A member of a group with protocol type "consumer" sends, per assignor, a
ConsumerProtocolSubscription: int16 version, then (every version starts this way)
topics [int32 count, int16-length strings], user_data nullable bytes, and later fields the
coordinator ignores. Newer versions are parsed as v0, as Kafka does. The coordinator uses
the topics to know which offsets a stable group still needs (offset expiration, OffsetDelete).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    decode_guarded,
    read_array_len,
    read_nullable_bytes,
    read_nullable_string,
    read_string,
)

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
ASSIGNMENT_HIGHEST_VERSION = 3

TopicPartitionList = list[tuple[str, list[int]]]


@dataclass(slots=True)
class Subscription:
    version: int
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: TopicPartitionList = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None


def subscribed_topics(subscription: bytes) -> set[str]:
    """The topics of a ConsumerProtocolSubscription; ProtocolError when malformed."""
    return decode_guarded(_topics, subscription, 0)


def _topics(buf: memoryview, pos: int) -> set[str]:
    (version,) = _I16.unpack_from(buf, pos)
    if version < 0:
        raise ProtocolError(f"invalid consumer protocol version {version}")
    count, pos = read_array_len(buf, pos + 2, False)
    topics = set()
    for _ in range(count):
        topic, pos = read_string(buf, pos)
        topics.add(topic)
    return topics


def encode_subscription(topics: list[str], version: int = 0) -> bytes:
    """A v0-shaped subscription (tests and tools)."""
    out = bytearray(_I16.pack(version))
    out += struct.pack(">i", len(topics))
    for t in topics:
        raw = t.encode()
        out += _I16.pack(len(raw)) + raw
    out += struct.pack(">i", -1)  # user_data: null
    return bytes(out)


def parse_subscription(subscription: bytes) -> Subscription:
    """The whole ConsumerProtocolSubscription; ProtocolError when malformed."""
    return decode_guarded(_subscription, subscription, 0)


def _subscription(buf: memoryview, pos: int) -> Subscription:
    (version,) = _I16.unpack_from(buf, pos)
    if version < 0:
        raise ProtocolError(f"invalid consumer protocol version {version}")
    pos += 2
    count, pos = read_array_len(buf, pos, False)
    topics = []
    for _ in range(count):
        topic, pos = read_string(buf, pos)
        topics.append(topic)
    user_data, pos = read_nullable_bytes(buf, pos)
    sub = Subscription(version, topics, user_data)
    if version >= 1:
        sub.owned_partitions, pos = _read_topic_partitions(buf, pos)
    if version >= 2:
        (sub.generation_id,) = _I32.unpack_from(buf, pos)
        pos += 4
    if version >= 3:
        sub.rack_id, pos = read_nullable_string(buf, pos)
    return sub


def _read_topic_partitions(buf: memoryview, pos: int) -> tuple[TopicPartitionList, int]:
    count, pos = read_array_len(buf, pos, False)
    out: TopicPartitionList = []
    for _ in range(count):
        topic, pos = read_string(buf, pos)
        n, pos = read_array_len(buf, pos, False)
        partitions = list(struct.unpack_from(f">{n}i", buf, pos))
        pos += 4 * n
        out.append((topic, partitions))
    return out, pos


def protocol_version(metadata: bytes) -> int:
    """The version a member's subscription is written at (Kafka's deserializeVersion)."""
    if len(metadata) < 2:
        raise ProtocolError("consumer protocol metadata without a version")
    (version,) = _I16.unpack_from(metadata, 0)
    if version < 0:
        raise ProtocolError(f"invalid consumer protocol version {version}")
    return version


def encode_assignment(partitions: TopicPartitionList, version: int = 0) -> bytes:
    """A ConsumerProtocolAssignment without user data."""
    out = bytearray(_I16.pack(min(max(version, 0), ASSIGNMENT_HIGHEST_VERSION)))
    out += _I32.pack(len(partitions))
    for topic, ps in partitions:
        raw = topic.encode()
        out += _I16.pack(len(raw)) + raw
        out += _I32.pack(len(ps))
        for p in ps:
            out += _I32.pack(p)
    out += _I32.pack(-1)
    return bytes(out)


def parse_assignment(assignment: bytes) -> tuple[TopicPartitionList, bytes | None]:
    """Assigned partitions and user data of a ConsumerProtocolAssignment."""
    return decode_guarded(_assignment, assignment, 0)


def _assignment(buf: memoryview, pos: int) -> tuple[TopicPartitionList, bytes | None]:
    (version,) = _I16.unpack_from(buf, pos)
    if version < 0:
        raise ProtocolError(f"invalid consumer protocol version {version}")
    partitions, pos = _read_topic_partitions(buf, pos + 2)
    user_data, _ = read_nullable_bytes(buf, pos)
    return partitions, user_data
