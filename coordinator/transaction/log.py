"""Record key/value schemas of ``__transaction_state`` (Kafka's TransactionLog).

One record per state change of a transactional id, keyed by the id; the topic is compacted,
so the newest record of an id is its state and a tombstone (null value) forgets it. Key and
value each start with an int16 version; big-endian; strings are int16-length UTF-8 (compact
uvarint length + 1 in the flexible value version 1), arrays int32-count (compact in v1).

  key v0     TransactionalId string
  value v0   ProducerId int64, ProducerEpoch int16, TransactionTimeoutMs int32,
             TransactionStatus int8, TransactionPartitions nullable [Topic string,
             PartitionIds [int32]], TransactionLastUpdateTimestampMs int64,
             TransactionStartTimestampMs int64
  value v1   the same fields, flexible (KIP-482: compact strings/arrays, a tagged-field
             section after each partitions entry and after the value), with tagged fields
             0 PreviousProducerId int64 (default -1), 1 NextProducerId int64 (default -1),
             2 ClientTransactionVersion int16 (default 0), each written only when it is not
             its default.

Kafka writes value v1 once ``transaction.version`` >= 1, else v0; partitions are null for
EMPTY. Kafka never writes tags 0/1; semel writes NextProducerId while a transaction version 2
epoch overflow is pending (so a restart between PREPARE_* and COMPLETE_* continues with the
same next producer id) and PreviousProducerId after a producer id rotation (KIP-360 retries);
Kafka reads both. The last producer epoch is not stored (as in Kafka).

Beyond Kafka, tag 10000 SemelPrincipal (compact string, absent = none) holds the principal
that obtained the producer id (coordinator/producer_principal.py), written only while
producer ids are bound to principals; semel then writes value v1 even at transaction
version 0. Kafka's generated reader keeps a tag it does not know as an unknown tagged field,
so the records stay readable by Kafka (the tag is far above Kafka's own, 0-3). Tags 10001
SemelOngoingTxnProducerId int64 and 10002 SemelOngoingTxnProducerEpoch int16 hold the pair a
KIP-939 transaction kept by keepPreparedTxn was written with (written only then, also at
transaction version 0; Kafka's own NextProducerEpoch, tag 3, is left to Kafka). Value versions above 1
are unknown (Kafka skips them; KIP-915 says later versions may not be readable as 1).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from semel.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_0,
    TxnMetadata,
    TxnTransit,
)
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import (
    INT16,
    INT32,
    check_end,
    decode_guarded,
    read_array_len,
    read_compact_array_len,
    read_compact_string,
    read_string,
    read_tagged_header,
    read_uvarint,
    skip_tagged_fields,
    write_compact_string,
    write_string,
    write_tagged_fields,
    write_uvarint,
)
from semel.storage.topic_partition import TopicPartition

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
KEY_VERSION = 0
LOWEST_VALUE_VERSION = 0
HIGHEST_VALUE_VERSION = 1

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2
TAG_SEMEL_PRINCIPAL = 10_000  # semel's own: the principal that obtained the producer id
TAG_SEMEL_ONGOING_PRODUCER_ID = 10_001  # semel's own: who wrote a kept KIP-939 transaction
TAG_SEMEL_ONGOING_PRODUCER_EPOCH = 10_002

_HEAD = struct.Struct(">qhib")  # producer id, epoch, timeout, status
_TIMES = struct.Struct(">qq")  # last update, start
_I64 = struct.Struct(">q")


class UnknownKeyVersion(ProtocolError):
    def __init__(self, version: int) -> None:
        super().__init__(f"unknown __transaction_state key version {version}")
        self.version = version


class UnknownValueVersion(ProtocolError):
    def __init__(self, version: int) -> None:
        super().__init__(f"unknown __transaction_state value version {version}")
        self.version = version


@dataclass(slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: list[tuple[str, list[int]]] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = TV_0
    principal: str | None = None  # TAG_SEMEL_PRINCIPAL
    ongoing_producer_id: int = NO_PRODUCER_ID  # TAG_SEMEL_ONGOING_PRODUCER_ID
    ongoing_producer_epoch: int = NO_PRODUCER_EPOCH  # TAG_SEMEL_ONGOING_PRODUCER_EPOCH
    unknown_tags: list[int] = field(default_factory=list)  # read and skipped (v1)


def value_version_for(transaction_version: int) -> int:
    """The value version Kafka writes at a ``transaction.version`` level."""
    return 1 if transaction_version >= 1 else 0


# -- key -------------------------------------------------------------------------------------

def encode_key(transactional_id: str) -> bytes:
    out = bytearray(INT16.pack(KEY_VERSION))
    write_string(out, transactional_id)
    return bytes(out)


def decode_key(data: bytes | memoryview) -> str:
    """The transactional id; UnknownKeyVersion for a key this coordinator does not own."""
    def decode(buf: memoryview, pos: int):
        (version,) = INT16.unpack_from(buf, pos)
        if version != KEY_VERSION:
            raise UnknownKeyVersion(version)
        transactional_id, pos = read_string(buf, pos + 2)
        return transactional_id, pos

    transactional_id, end = decode_guarded(decode, data, 0)
    if end != len(data):
        raise ProtocolError(f"{len(data) - end} trailing bytes in a __transaction_state key")
    return transactional_id


# -- value -----------------------------------------------------------------------------------

def encode_value(value: TxnLogValue, version: int) -> bytes:
    if not LOWEST_VALUE_VERSION <= version <= HIGHEST_VALUE_VERSION:
        raise ValueError(f"cannot write __transaction_state value version {version}")
    flexible = version >= 1
    out = bytearray(INT16.pack(version))
    out += _HEAD.pack(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                      value.transaction_status)
    partitions = value.transaction_partitions
    if flexible:
        write_uvarint(out, 0 if partitions is None else len(partitions) + 1)
    else:
        out += INT32.pack(-1 if partitions is None else len(partitions))
    for topic, ids in partitions or ():
        if flexible:
            write_compact_string(out, topic)
            write_uvarint(out, len(ids) + 1)
        else:
            write_string(out, topic)
            out += INT32.pack(len(ids))
        out += struct.pack(f">{len(ids)}i", *ids)
        if flexible:
            out.append(0)  # no tagged fields in PartitionsSchema
    out += _TIMES.pack(value.transaction_last_update_timestamp_ms,
                       value.transaction_start_timestamp_ms)
    if flexible:
        tags: list[tuple[int, bytearray]] = []
        if value.previous_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_PREVIOUS_PRODUCER_ID, bytearray(_I64.pack(value.previous_producer_id))))
        if value.next_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_NEXT_PRODUCER_ID, bytearray(_I64.pack(value.next_producer_id))))
        if value.client_transaction_version != TV_0:
            tags.append((TAG_CLIENT_TRANSACTION_VERSION,
                         bytearray(INT16.pack(value.client_transaction_version))))
        if value.principal is not None:
            principal = bytearray()
            write_compact_string(principal, value.principal)
            tags.append((TAG_SEMEL_PRINCIPAL, principal))
        if value.ongoing_producer_id != NO_PRODUCER_ID:
            tags.append((TAG_SEMEL_ONGOING_PRODUCER_ID,
                         bytearray(_I64.pack(value.ongoing_producer_id))))
            tags.append((TAG_SEMEL_ONGOING_PRODUCER_EPOCH,
                         bytearray(INT16.pack(value.ongoing_producer_epoch))))
        write_tagged_fields(out, tags)
    return bytes(out)


def decode_value(data: bytes | memoryview) -> TxnLogValue:
    value, end = decode_guarded(_decode_value, data, 0)
    if end != len(data):
        raise ProtocolError(f"{len(data) - end} trailing bytes in a __transaction_state value")
    return value


def _decode_value(buf: memoryview, pos: int) -> tuple[TxnLogValue, int]:
    (version,) = INT16.unpack_from(buf, pos)
    if not LOWEST_VALUE_VERSION <= version <= HIGHEST_VALUE_VERSION:
        raise UnknownValueVersion(version)
    flexible = version >= 1
    pos += 2
    producer_id, epoch, timeout, status = _HEAD.unpack_from(buf, pos)
    pos += _HEAD.size
    if flexible:
        n, pos = read_compact_array_len(buf, pos, True)
    else:
        n, pos = read_array_len(buf, pos, True)
    partitions: list[tuple[str, list[int]]] | None = None if n < 0 else []
    for _ in range(max(n, 0)):
        if flexible:
            topic, pos = read_compact_string(buf, pos)
            count, pos = read_compact_array_len(buf, pos, False)
        else:
            topic, pos = read_string(buf, pos)
            count, pos = read_array_len(buf, pos, False)
        if 4 * count > len(buf) - pos:
            raise ProtocolError(f"{count} partition ids in {len(buf) - pos} bytes")
        ids = list(struct.unpack_from(f">{count}i", buf, pos))
        pos += 4 * count
        if flexible:
            pos = skip_tagged_fields(buf, pos)
        partitions.append((topic, ids))
    last_update, start = _TIMES.unpack_from(buf, pos)
    pos += _TIMES.size
    value = TxnLogValue(producer_id, epoch, timeout, status, partitions, last_update, start)
    if flexible:
        count, pos = read_uvarint(buf, pos)
        for _ in range(count):
            tag, end, pos = read_tagged_header(buf, pos)
            if tag == TAG_PREVIOUS_PRODUCER_ID:
                (value.previous_producer_id,) = _I64.unpack_from(buf, pos)
                pos += 8
            elif tag == TAG_NEXT_PRODUCER_ID:
                (value.next_producer_id,) = _I64.unpack_from(buf, pos)
                pos += 8
            elif tag == TAG_CLIENT_TRANSACTION_VERSION:
                (value.client_transaction_version,) = INT16.unpack_from(buf, pos)
                pos += 2
            elif tag == TAG_SEMEL_PRINCIPAL:
                value.principal, pos = read_compact_string(buf, pos)
            elif tag == TAG_SEMEL_ONGOING_PRODUCER_ID:
                (value.ongoing_producer_id,) = _I64.unpack_from(buf, pos)
                pos += 8
            elif tag == TAG_SEMEL_ONGOING_PRODUCER_EPOCH:
                (value.ongoing_producer_epoch,) = INT16.unpack_from(buf, pos)
                pos += 2
            else:
                value.unknown_tags.append(tag)
                pos = end
            check_end(pos, end)
    return value, pos


# -- between metadata and records ------------------------------------------------------------

def value_from_transit(transit: TxnTransit) -> TxnLogValue:
    """The record a transition persists (partitions grouped by topic, sorted; null for
    EMPTY, as Kafka writes them)."""
    if transit.state == TransactionState.EMPTY and transit.topic_partitions:
        raise ValueError(f"an EMPTY transaction has no partitions: {transit}")
    partitions = None
    if transit.state != TransactionState.EMPTY:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(transit.topic_partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        partitions = list(by_topic.items())
    previous = transit.prev_producer_id
    if previous == transit.producer_id:
        previous = NO_PRODUCER_ID  # only a rotation makes it worth a tag
    return TxnLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        transaction_timeout_ms=transit.txn_timeout_ms,
        transaction_status=int(transit.state),
        transaction_partitions=partitions,
        transaction_last_update_timestamp_ms=transit.txn_last_update_timestamp,
        transaction_start_timestamp_ms=transit.txn_start_timestamp,
        previous_producer_id=previous,
        next_producer_id=transit.next_producer_id,
        client_transaction_version=transit.client_transaction_version,
        principal=transit.principal,
        ongoing_producer_id=transit.ongoing_producer_id,
        ongoing_producer_epoch=transit.ongoing_producer_epoch)


def metadata_from_value(transactional_id: str, value: TxnLogValue) -> TxnMetadata:
    """Loaded state (Kafka's TransactionLog.read): the last epoch is unknown (-1); the
    partitions of an EMPTY record are ignored. ProtocolError for an unknown status."""
    try:
        state = TransactionState(value.transaction_status)
    except ValueError:
        raise ProtocolError(f"unknown transaction state id {value.transaction_status}") from None
    partitions: list[TopicPartition] = []
    if state != TransactionState.EMPTY:
        partitions = [TopicPartition(topic, p)
                      for topic, ids in value.transaction_partitions or () for p in ids]
    return TxnMetadata(
        transactional_id, value.producer_id,
        prev_producer_id=value.previous_producer_id,
        next_producer_id=value.next_producer_id,
        producer_epoch=value.producer_epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=value.transaction_timeout_ms,
        state=state,
        topic_partitions=partitions,
        txn_start_timestamp=value.transaction_start_timestamp_ms,
        txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
        client_transaction_version=value.client_transaction_version,
        principal=value.principal,
        ongoing_producer_id=value.ongoing_producer_id if state == TransactionState.ONGOING
        else NO_PRODUCER_ID,
        ongoing_producer_epoch=value.ongoing_producer_epoch
        if state == TransactionState.ONGOING else NO_PRODUCER_EPOCH)
