"""``__share_group_state`` record codecs and the durable store: byte-exact records laid out
as Kafka's ShareSnapshotKey/Value and ShareUpdateKey/Value schemas, round trips, malformed
input, snapshot/update choice and merging."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semel.coordinator.share.partition import StateBatch, StateWrite
from semel.coordinator.share.records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    SharePartitionKey,
    ShareRecord,
    ShareSnapshotValue,
    ShareUpdateValue,
    UnknownRecordType,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)
from semel.coordinator.share.store import ShareStateStore
from semel.protocol.errors import ProtocolError

TOPIC = uuid.UUID("0123456789abcdef0123456789abcdef")
KEY = SharePartitionKey("grp", TOPIC, 3)


def test_key_bytes():
    # int16 record type (the key's apiKey), GroupId int16-length string, TopicId 16 bytes,
    # Partition int32
    tail = b"\x00\x03grp" + TOPIC.bytes + b"\x00\x00\x00\x03"
    assert encode_key(SHARE_SNAPSHOT, KEY) == b"\x00\x00" + tail
    assert encode_key(SHARE_UPDATE, KEY) == b"\x00\x01" + tail


SNAPSHOT_BYTES = (
    b"\x00\x00"                                   # value version 0
    + struct.pack(">iii", 2, 1, 0)                # SnapshotEpoch, StateEpoch, LeaderEpoch
    + struct.pack(">q", 100)                      # StartOffset
    + struct.pack(">qq", 1111, 2222)              # CreateTimestamp, WriteTimestamp
    + b"\x03"                                     # compact array: 2 StateBatches
    + struct.pack(">qqbh", 100, 104, 2, 1) + b"\x00"
    + struct.pack(">qqbh", 105, 105, 0, 3) + b"\x00"
    + b"\x00"                                     # no tagged fields
)

UPDATE_BYTES = (
    b"\x00\x00"
    + struct.pack(">ii", 2, 0)                    # SnapshotEpoch, LeaderEpoch
    + struct.pack(">q", -1)                       # StartOffset: not changed
    + b"\x02" + struct.pack(">qqbh", 106, 107, 4, 5) + b"\x00"
    + b"\x01\x00\x04" + struct.pack(">i", 9)      # tag 0 DeliveryCompleteCount = 9
)


def test_value_bytes():
    snapshot = ShareSnapshotValue(2, 1, 0, 100, 1111, 2222,
                                  [StateBatch(100, 104, 2, 1), StateBatch(105, 105, 0, 3)])
    assert encode_value(snapshot) == SNAPSHOT_BYTES
    update = ShareUpdateValue(2, 0, -1, [StateBatch(106, 107, 4, 5)], 9)
    assert encode_value(update) == UPDATE_BYTES
    key = encode_key(SHARE_SNAPSHOT, KEY)
    assert decode_record(key, SNAPSHOT_BYTES) == ShareRecord(SHARE_SNAPSHOT, KEY, snapshot)
    key = encode_key(SHARE_UPDATE, KEY)
    assert decode_record(key, UPDATE_BYTES) == ShareRecord(SHARE_UPDATE, KEY, update)
    assert decode_record(key, None) == ShareRecord(SHARE_UPDATE, KEY, None)


def test_unknown_and_malformed():
    with pytest.raises(UnknownRecordType):  # a record type of another coordinator
        decode_record(b"\x00\x05" + encode_key(SHARE_SNAPSHOT, KEY)[2:], None)
    with pytest.raises(UnknownRecordType):  # a value version this broker cannot read
        decode_record(encode_key(SHARE_SNAPSHOT, KEY), b"\x00\x01" + SNAPSHOT_BYTES[2:])
    with pytest.raises(ProtocolError):
        decode_record(encode_key(SHARE_SNAPSHOT, KEY), SNAPSHOT_BYTES[:-3])
    with pytest.raises(ProtocolError):
        decode_record(encode_key(SHARE_SNAPSHOT, KEY), SNAPSHOT_BYTES + b"\x00")
    with pytest.raises(ProtocolError):
        decode_record(encode_key(SHARE_SNAPSHOT, KEY)[:-1], None)
    with pytest.raises(ProtocolError):
        decode_record(None, None)


batch_st = st.builds(StateBatch, st.integers(0, 2**40), st.integers(0, 2**40),
                     st.sampled_from([0, 2, 4]), st.integers(0, 32767))


@given(st.one_of(
    st.builds(ShareSnapshotValue, st.integers(-1, 2**31 - 1), st.integers(0, 99),
              st.integers(-1, 99), st.integers(-1, 2**62), st.integers(0, 2**50),
              st.integers(0, 2**50), st.lists(batch_st, max_size=5), st.integers(-1, 99)),
    st.builds(ShareUpdateValue, st.integers(-1, 2**31 - 1), st.integers(-1, 99),
              st.integers(-1, 2**62), st.lists(batch_st, max_size=5), st.integers(-1, 99))),
    st.text(max_size=20), st.integers(0, 2**31 - 1))
def test_round_trip(value, group, partition):
    record_type = SHARE_SNAPSHOT if isinstance(value, ShareSnapshotValue) else SHARE_UPDATE
    record = ShareRecord(record_type, SharePartitionKey(group, uuid.uuid4(), partition), value)
    assert decode_record(*encode_record(record)) == record


@given(st.binary(max_size=80))
def test_garbage_raises_protocol_error_only(data):
    for key in (encode_key(SHARE_SNAPSHOT, KEY), encode_key(SHARE_UPDATE, KEY)):
        try:
            decode_record(key, data)
        except ProtocolError:
            pass
    try:
        decode_record(data, None)
    except ProtocolError:
        pass


# -- the store --------------------------------------------------------------------------

def test_first_write_is_a_snapshot_then_updates_then_a_new_snapshot():
    store = ShareStateStore(snapshot_update_records_per_snapshot=2)
    kinds = []
    for i in range(6):
        record = store.write_state(KEY, StateWrite(i, [StateBatch(i, i, 2, 1),
                                                       StateBatch(i + 5, i + 5, 4, 1)]), i)
        kinds.append(record.record_type)
    assert kinds == [SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE, SHARE_SNAPSHOT, SHARE_UPDATE,
                     SHARE_UPDATE]
    state = store.read_state(KEY)
    assert state.snapshot_epoch == 1 and state.start_offset == 5
    # offsets below the start are dropped; newer runs replace older ones (5 was archived
    # by the first write, acknowledged by the last)
    assert state.state_batches() == [StateBatch(5, 5, 2, 1), StateBatch(6, 10, 4, 1)]


def test_replay_gives_the_written_state():
    writer = ShareStateStore(snapshot_update_records_per_snapshot=3)
    written = []
    written.append(writer.initialize_state(KEY, 10, 0))
    for i in range(8):
        write = StateWrite(10 + i // 2, [StateBatch(10 + i, 11 + i, i % 3 * 2, i % 4)], i)
        written.append(writer.write_state(KEY, write, i))
    reader = ShareStateStore(snapshot_update_records_per_snapshot=3)
    for record in written:
        reader.replay(decode_record(*encode_record(record)))
    assert reader.read_state(KEY).offsets == writer.read_state(KEY).offsets
    assert reader.read_state(KEY).start_offset == writer.read_state(KEY).start_offset == 13
    assert reader.update_counts == writer.update_counts
    assert reader.read_state(KEY).delivery_complete_count == 7  # as last written
    reader.replay(reader.delete_state(KEY))
    assert reader.read_state(KEY) is None


def test_delivery_complete_count_written_from_the_share_partition():
    from semel.coordinator.share.partition import AcknowledgementBatch, FetchedBatch, SharePartition

    sp = SharePartition("grp", TOPIC, 3, 0)
    sp.acquire("m", [FetchedBatch(0, 4)], 10, 0)
    write = sp.acknowledge("m", [AcknowledgementBatch(1, 3, [1])]).write
    assert (write.start_offset, write.delivery_complete_count) == (0, 3)
    store = ShareStateStore()
    store.initialize_state(KEY, 0, 0)
    record = store.write_state(KEY, write, 5)
    assert record.value.delivery_complete_count == 3
    write = sp.acknowledge("m", [AcknowledgementBatch(0, 0, [3])]).write
    assert (write.start_offset, write.delivery_complete_count) == (4, 0)
