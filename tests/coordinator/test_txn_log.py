"""``__transaction_state`` record codecs: byte-exact records built from Kafka's
TransactionLogKey/TransactionLogValue schemas, round trips, malformed input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semel.coordinator.transaction.log import (
    TxnLogValue,
    UnknownKeyVersion,
    UnknownValueVersion,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    metadata_from_value,
    value_from_transit,
    value_version_for,
)
from semel.coordinator.transaction.metadata import TV_0, TV_2, TxnMetadata
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import ProtocolError
from semel.storage.topic_partition import TopicPartition

S = TransactionState


def test_key_bytes():
    # int16 key version 0, then TransactionalId: int16 length + UTF-8
    assert encode_key("my-txn") == b"\x00\x00" + b"\x00\x06my-txn"
    assert encode_key("é") == b"\x00\x00\x00\x02\xc3\xa9"
    assert decode_key(b"\x00\x00\x00\x06my-txn") == "my-txn"


def test_unknown_key_version_and_trailing_bytes():
    with pytest.raises(UnknownKeyVersion):
        decode_key(b"\x00\x01\x00\x01a")
    with pytest.raises(ProtocolError):
        decode_key(b"\x00\x00\x00\x01ab")
    with pytest.raises(ProtocolError):
        decode_key(b"\x00\x00\x00\x05ab")


# Value v0, field by field as TransactionLogValue.json lays it out (non-flexible):
# ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32, TransactionStatus int8,
# TransactionPartitions nullable array (int32 count) of {Topic string, PartitionIds [int32]},
# TransactionLastUpdateTimestampMs int64, TransactionStartTimestampMs int64.
ONGOING_V0 = (
    b"\x00\x00"                                   # value version 0
    + struct.pack(">q", 1234)                     # ProducerId
    + struct.pack(">h", 7)                        # ProducerEpoch
    + struct.pack(">i", 60000)                    # TransactionTimeoutMs
    + b"\x01"                                     # TransactionStatus = Ongoing
    + struct.pack(">i", 2)                        # 2 topics
    + b"\x00\x01a" + struct.pack(">i", 2) + struct.pack(">ii", 0, 3)
    + b"\x00\x01b" + struct.pack(">i", 1) + struct.pack(">i", 1)
    + struct.pack(">q", 1_700_000_000_500)        # TransactionLastUpdateTimestampMs
    + struct.pack(">q", 1_700_000_000_000)        # TransactionStartTimestampMs
)

# Value v1 (flexible): compact array/string lengths are N+1 uvarints, every struct ends with
# a tagged-field section; top-level tags in order: 0 PreviousProducerId int64,
# 1 NextProducerId int64, 2 ClientTransactionVersion int16 (each only when not default).
PREPARE_COMMIT_V1 = (
    b"\x00\x01"                                   # value version 1
    + struct.pack(">q", 1234)
    + struct.pack(">h", 8)
    + struct.pack(">i", 60000)
    + b"\x02"                                     # PrepareCommit
    + b"\x02"                                     # compact array: 1 topic
    + b"\x02a" + b"\x03" + struct.pack(">ii", 0, 3) + b"\x00"  # topic, 2 ids, no tags
    + struct.pack(">q", 1_700_000_000_900)
    + struct.pack(">q", 1_700_000_000_000)
    + b"\x02"                                     # 2 tagged fields
    + b"\x01\x08" + struct.pack(">q", 4321)       # tag 1 NextProducerId, 8 bytes
    + b"\x02\x02" + struct.pack(">h", 2)          # tag 2 ClientTransactionVersion = 2
)

EMPTY_V0 = (b"\x00\x00" + struct.pack(">qhib", 55, 0, 30000, 0) + struct.pack(">i", -1)
            + struct.pack(">qq", 1_700_000_001_000, -1))
EMPTY_V1 = (b"\x00\x01" + struct.pack(">qhib", 55, 0, 30000, 0) + b"\x00"
            + struct.pack(">qq", 1_700_000_001_000, -1) + b"\x00")


def test_value_v0_bytes_of_an_ongoing_transaction():
    md = TxnMetadata("x", 1234, prev_producer_id=1234, producer_epoch=7, txn_timeout_ms=60000,
                     state=S.ONGOING,
                     topic_partitions=[TopicPartition("b", 1), TopicPartition("a", 3),
                                       TopicPartition("a", 0)],
                     txn_start_timestamp=1_700_000_000_000,
                     txn_last_update_timestamp=1_700_000_000_500)
    assert encode_value(value_from_transit(md.snapshot()), 0) == ONGOING_V0
    loaded = metadata_from_value("x", decode_value(ONGOING_V0))
    assert loaded.snapshot() == md.snapshot().__class__(
        **{**_fields(md.snapshot()), "prev_producer_id": -1})  # prev == current: not stored
    assert (loaded.producer_id, loaded.producer_epoch, loaded.state) == (1234, 7, S.ONGOING)
    assert loaded.topic_partitions == set(md.topic_partitions)
    assert loaded.last_producer_epoch == -1  # never stored


def test_value_v1_bytes_with_tags():
    md = TxnMetadata("x", 1234, prev_producer_id=1234, next_producer_id=4321, producer_epoch=8,
                     txn_timeout_ms=60000, state=S.PREPARE_COMMIT,
                     topic_partitions=[TopicPartition("a", 3), TopicPartition("a", 0)],
                     txn_start_timestamp=1_700_000_000_000,
                     txn_last_update_timestamp=1_700_000_000_900,
                     client_transaction_version=TV_2)
    assert encode_value(value_from_transit(md.snapshot()), 1) == PREPARE_COMMIT_V1
    value = decode_value(PREPARE_COMMIT_V1)
    assert (value.next_producer_id, value.previous_producer_id,
            value.client_transaction_version) == (4321, -1, 2)
    assert value.transaction_partitions == [("a", [0, 3])]


def test_empty_state_writes_null_partitions():
    md = TxnMetadata("x", 55, producer_epoch=0, txn_timeout_ms=30000, state=S.EMPTY,
                     txn_last_update_timestamp=1_700_000_001_000)
    value = value_from_transit(md.snapshot())
    assert value.transaction_partitions is None
    assert encode_value(value, 0) == EMPTY_V0
    assert encode_value(value, 1) == EMPTY_V1
    # partitions in an EMPTY record are ignored on load, as Kafka does
    value.transaction_partitions = [("t", [1])]
    assert not metadata_from_value("x", decode_value(encode_value(value, 0))).topic_partitions


def test_rotation_writes_previous_producer_id():
    md = TxnMetadata("x", 10, producer_epoch=32766, state=S.COMPLETE_COMMIT,
                     txn_start_timestamp=1, txn_last_update_timestamp=2)
    transit = md.prepare_producer_id_rotation(11, 1000, 3, True)
    value = value_from_transit(transit)
    assert (value.producer_id, value.previous_producer_id) == (11, 10)
    data = encode_value(value, 1)
    assert b"\x00\x08" + struct.pack(">q", 10) in data  # tag 0, 8 bytes
    assert metadata_from_value("x", decode_value(data)).prev_producer_id == 10
    # version 0 has no tags: the previous id is lost, as in Kafka
    assert decode_value(encode_value(value, 0)).previous_producer_id == -1


def test_kept_two_phase_commit_transaction_round_trips():
    """KIP-939 keepPreparedTxn: the pair the transaction was written with survives a reload
    in semel's tags 10001/10002 (a varint tag number of two bytes), the 2PC timeout in the
    timeout field; once the transaction is no longer ONGOING the pair is not loaded."""
    md = TxnMetadata("x", 77, producer_epoch=3, txn_timeout_ms=2**31 - 1, state=S.ONGOING,
                     topic_partitions=[TopicPartition("t", 0)], txn_start_timestamp=5,
                     txn_last_update_timestamp=6)
    transit = md.prepare_keep_prepared(2**31 - 1, 9)
    assert (transit.producer_epoch, transit.ongoing_producer_id,
            transit.ongoing_producer_epoch) == (4, 77, 3)
    data = encode_value(value_from_transit(transit), 1)
    assert b"\x91\x4e\x08" + struct.pack(">q", 77) in data  # tag 10001 (uvarint), 8 bytes
    assert b"\x92\x4e\x02" + struct.pack(">h", 3) in data
    loaded = metadata_from_value("x", decode_value(data))
    assert (loaded.producer_epoch, loaded.ongoing_transaction, loaded.is_two_phase_commit) == (
        4, (77, 3), True)
    md.complete(transit)
    assert md.ongoing_transaction == (77, 3)
    # the commit ends it: the next records carry no pair
    prepare = md.prepare_abort_or_commit(S.PREPARE_COMMIT, TV_0, -1, 10, False)
    assert prepare.ongoing_producer_id == -1
    value = value_from_transit(prepare)
    value.ongoing_producer_id, value.ongoing_producer_epoch = 77, 3
    assert metadata_from_value("x", decode_value(encode_value(value, 1))).ongoing_producer_id \
        == -1


def test_value_version_follows_transaction_version():
    assert [value_version_for(tv) for tv in (0, 1, 2)] == [0, 1, 1]


def test_unknown_tags_are_skipped_and_unknown_versions_refused():
    data = PREPARE_COMMIT_V1[:-15] + b"\x01" + b"\x07\x03abc"  # one unknown tag instead
    value = decode_value(data)
    assert value.unknown_tags == [7] and value.client_transaction_version == 0
    with pytest.raises(UnknownValueVersion):
        decode_value(b"\x00\x02" + PREPARE_COMMIT_V1[2:])
    with pytest.raises(ProtocolError):
        decode_value(PREPARE_COMMIT_V1 + b"\x00")
    # a known tag whose declared size is wrong
    bad = PREPARE_COMMIT_V1[:-4] + b"\x02\x01\x02"
    with pytest.raises(ProtocolError):
        decode_value(bad)


def test_unknown_state_id_is_refused_on_load():
    value = decode_value(EMPTY_V0)
    value.transaction_status = 9
    with pytest.raises(ProtocolError):
        metadata_from_value("x", value)


@given(st.binary(max_size=80))
def test_decoding_garbage_only_raises_protocol_errors(data):
    for decode in (decode_key, decode_value):
        try:
            decode(data)
        except ProtocolError:
            pass


def test_every_truncation_of_a_value_is_rejected():
    for data in (ONGOING_V0, PREPARE_COMMIT_V1, EMPTY_V1):
        for cut in range(len(data)):
            with pytest.raises(ProtocolError):
                decode_value(data[:cut])


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
partition_sets = st.frozensets(st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)),
                               max_size=20)


@given(producer_id=st.integers(0, 2**63 - 1), previous=st.integers(-1, 2**63 - 1),
       next_id=st.integers(-1, 2**63 - 1), epoch=st.integers(0, 32767),
       timeout=st.integers(1, 2**31 - 1), state=st.sampled_from(list(S)),
       partitions=partition_sets, start=st.integers(-1, 2**62), update=st.integers(-1, 2**62),
       tv=st.integers(0, 2), version=st.integers(0, 1))
def test_round_trip(producer_id, previous, next_id, epoch, timeout, state, partitions, start,
                    update, tv, version):
    if state == S.EMPTY:
        partitions = frozenset()
    value = TxnLogValue(producer_id, epoch, timeout, int(state),
                        None if state == S.EMPTY else _group(partitions), update, start,
                        previous, next_id, tv)
    decoded = decode_value(encode_value(value, version))
    if version == 0:  # the tagged fields do not exist in v0
        value.previous_producer_id = value.next_producer_id = -1
        value.client_transaction_version = TV_0
    assert decoded == value
    loaded = metadata_from_value("id", decoded)
    assert loaded.topic_partitions == set(partitions) and loaded.state == state


def _fields(transit) -> dict:
    return {name: getattr(transit, name) for name in transit.__slots__}


def _group(partitions):
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return list(by_topic.items())


@given(names)
def test_key_round_trip(transactional_id):
    assert decode_key(encode_key(transactional_id)) == transactional_id
