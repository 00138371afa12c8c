"""__consumer_offsets record schemas, group -> partition hashing, consumer protocol parsing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semel.coordinator.group.consumer_protocol import encode_subscription, subscribed_topics
from semel.coordinator.group.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownRecordType,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_record,
    encode_value,
)
from semel.coordinator.group.shard import java_string_hash, partition_for
from semel.coordinator.share.group_records import ShareGroupKey, ShareGroupMetadataValue
from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    write_compact_bytes,
    write_compact_nullable_string,
    write_compact_string,
    write_uvarint,
)


def s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def test_offset_commit_key_bytes():
    assert encode_key(OffsetCommitKey("g", "t", 3)) == (
        b"\x00\x01" + s16("g") + s16("t") + b"\x00\x00\x00\x03")
    # key version 0 reads the same way
    assert decode_key(b"\x00\x00" + s16("g") + s16("t") + b"\x00\x00\x00\x03") == \
        OffsetCommitKey("g", "t", 3)


def test_group_metadata_key_bytes_and_unknown_types():
    assert encode_key(GroupMetadataKey("grp")) == b"\x00\x02" + s16("grp")
    with pytest.raises(UnknownRecordType):
        decode_key(b"\x00\x0f" + s16("share-group"))  # ShareGroupStatePartitionMetadataKey
    # share group membership records (10-14) are ours: coordinator/share/group_records.py
    member = ShareGroupKey(10, "sg", "m")
    assert encode_key(member) == b"\x00\x0a" + s16("sg") + s16("m")
    assert decode_key(encode_key(member)) == member
    metadata = ShareGroupMetadataValue(epoch=7, metadata_hash=-5)
    assert encode_value(metadata) == b"\x00\x00" + struct.pack(">iq", 7, -5) + b"\x00"
    assert decode_value(ShareGroupKey(11, "sg"), encode_value(metadata)) == metadata
    with pytest.raises(ProtocolError):
        decode_key(b"\x00\x01" + s16("g"))  # truncated


def test_offset_commit_value_v3_bytes():
    value = OffsetCommitValue(offset=42, metadata="m", commit_timestamp=1000, leader_epoch=5)
    assert encode_value(value) == (b"\x00\x03" + struct.pack(">qi", 42, 5) + s16("m")
                                   + struct.pack(">q", 1000))
    with_expiry = OffsetCommitValue(offset=42, metadata="", commit_timestamp=1000,
                                    expire_timestamp=2000)
    assert encode_value(with_expiry) == (b"\x00\x01" + struct.pack(">q", 42) + s16("")
                                         + struct.pack(">qq", 1000, 2000))
    key = OffsetCommitKey("g", "t", 0)
    assert decode_value(key, encode_value(value)) == value
    assert decode_value(key, encode_value(with_expiry)) == with_expiry


def test_offset_commit_value_old_and_flexible_versions():
    key = OffsetCommitKey("g", "t", 0)
    v0 = b"\x00\x00" + struct.pack(">q", 7) + s16("md") + struct.pack(">q", 99)
    assert decode_value(key, v0) == OffsetCommitValue(7, "md", 99)
    v2 = b"\x00\x02" + struct.pack(">q", 7) + s16("md") + struct.pack(">q", 99)
    assert decode_value(key, v2) == OffsetCommitValue(7, "md", 99)
    # v4: compact string, tagged fields (one unknown tag is skipped)
    v4 = (b"\x00\x04" + struct.pack(">qi", 7, 2) + b"\x03md" + struct.pack(">q", 99)
          + b"\x01\x00\x02ab")
    assert decode_value(key, v4) == OffsetCommitValue(7, "md", 99, leader_epoch=2)
    v9 = b"\x00\x09" + v4[2:]  # a future version is read as the newest known one
    assert decode_value(key, v9) == OffsetCommitValue(7, "md", 99, leader_epoch=2)
    assert decode_value(key, None) is None
    with pytest.raises(ProtocolError):
        decode_value(key, v0[:-3])


def group_value(**kw) -> GroupMetadataValue:
    members = [MemberMetadata("m-1", "client", "/127.0.0.1", 10000, b"sub", b"asg",
                              rebalance_timeout=30000, group_instance_id="i-1"),
               MemberMetadata("m-2", "client", "/10.0.0.1", 6000, b"", b"",
                              rebalance_timeout=5000)]
    fields = {"protocol_type": "consumer", "generation": 4, "protocol": "range",
              "leader": "m-1", "current_state_timestamp": 123, "members": members}
    return GroupMetadataValue(**{**fields, **kw})


def encode_group_metadata_value_v4(value: GroupMetadataValue) -> bytes:
    """GroupMetadataValue v4, the flexible version (we only read it in the broker)."""
    out = bytearray(struct.pack(">h", 4))
    write_compact_string(out, value.protocol_type)
    out += struct.pack(">i", value.generation)
    write_compact_nullable_string(out, value.protocol)
    write_compact_nullable_string(out, value.leader)
    out += struct.pack(">q", value.current_state_timestamp)
    write_uvarint(out, len(value.members) + 1)
    for m in value.members:
        write_compact_string(out, m.member_id)
        write_compact_nullable_string(out, m.group_instance_id)
        write_compact_string(out, m.client_id)
        write_compact_string(out, m.client_host)
        out += struct.pack(">i", m.rebalance_timeout)
        out += struct.pack(">i", m.session_timeout)
        write_compact_bytes(out, m.subscription)
        write_compact_bytes(out, m.assignment)
        out.append(0)
    out.append(0)
    return bytes(out)



def test_group_metadata_value_roundtrip_v3_and_v4():
    value = group_value()
    key = GroupMetadataKey("g")
    data = encode_value(value)
    assert data[:2] == b"\x00\x03"
    assert decode_value(key, data) == value
    assert decode_value(key, encode_group_metadata_value_v4(value)) == value
    empty = group_value(protocol=None, leader=None, members=[], generation=0)
    assert decode_value(key, encode_value(empty)) == empty


def test_group_metadata_value_v0_reads_defaults():
    member = (s16("m-1") + s16("client") + s16("/h") + struct.pack(">i", 10000)
              + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 0))
    v0 = (b"\x00\x00" + s16("consumer") + struct.pack(">i", 2) + s16("range") + s16("m-1")
          + struct.pack(">i", 1) + member)
    value = decode_value(GroupMetadataKey("g"), v0)
    assert value == GroupMetadataValue(
        "consumer", 2, "range", "m-1", -1,
        [MemberMetadata("m-1", "client", "/h", 10000, b"sub", b"", -1, None)])


@given(group=st.text(max_size=20), topic=st.text(max_size=20),
       partition=st.integers(-2**31, 2**31 - 1), offset=st.integers(-1, 2**63 - 1),
       metadata=st.text(max_size=50), ts=st.integers(-1, 2**62),
       epoch=st.integers(-1, 2**31 - 1))
def test_offset_commit_record_roundtrip(group, topic, partition, offset, metadata, ts, epoch):
    record = CoordinatorRecord(OffsetCommitKey(group, topic, partition),
                               OffsetCommitValue(offset, metadata, ts, epoch))
    assert decode_record(*encode_record(record)) == record


@given(st.binary(max_size=64))
def test_decoding_garbage_raises_protocol_error_only(data):
    for key in (OffsetCommitKey("g", "t", 0), GroupMetadataKey("g")):
        try:
            decode_value(key, data)
        except ProtocolError:
            pass
    try:
        decode_key(data)
    except ProtocolError:
        pass


# values computed with Java's String.hashCode and Kafka's Utils.abs(...) % 50
JAVA_HASHES = [("", 0, 0), ("abc", 96354, 4), ("test-group", 627841412, 12),
               ("my-group", -1906497762, 12), ("g\u00e9", 3426, 26),
               ("\U0001F600x", 54959989, 39), ("polygenelubricants", -2**31, 0),
               ("console-consumer-12345", 158455506, 6)]


@pytest.mark.parametrize(("group", "java_hash", "partition"), JAVA_HASHES)
def test_group_partition_matches_kafka(group, java_hash, partition):
    assert java_string_hash(group) == java_hash
    assert partition_for(group, 50) == partition


def test_consumer_protocol_subscription_topics():
    assert subscribed_topics(encode_subscription(["a", "b"])) == {"a", "b"}
    # later versions keep the v0 prefix
    v3 = encode_subscription(["x"], version=3) + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"
    assert subscribed_topics(v3) == {"x"}
    with pytest.raises(ProtocolError):
        subscribed_topics(b"\x00")
