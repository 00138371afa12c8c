"""The part of the embedded consumer protocol the coordinator reads: subscribed topics.

A member of a group with protocol type "consumer" sends, per assignor, a
ConsumerProtocolSubscription: int16 version, then (every version starts this way)
topics [int32 count, int16-length strings], user_data nullable bytes, and later fields the
coordinator ignores. Newer versions are parsed as v0, as Kafka does. The coordinator uses
the topics to know which offsets a stable group still needs (offset expiration, OffsetDelete).
"""

from __future__ import annotations

import struct

from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import decode_guarded, read_array_len, read_string

CONSUMER_PROTOCOL_TYPE = "consumer"
_I16 = struct.Struct(">h")


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
