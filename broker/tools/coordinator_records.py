"""``__consumer_offsets`` and ``__transaction_state`` records as Kafka's JSON (the shape of
Kafka's CoordinatorRecordJsonConverters), decoded with semel's coordinator record codecs:
``semel dump-log --offsets-decoder`` / ``--transaction-log-decoder``."""

from __future__ import annotations

import base64
import struct
from typing import Any

_VERSION = struct.Struct(">h")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


class UnknownRecordType(Exception):
    def __init__(self, record_type: int) -> None:
        super().__init__(record_type)
        self.record_type = record_type


def _value_version(value: bytes) -> int:
    return _VERSION.unpack_from(value)[0]


def decode_offsets_record(key: bytes, value: bytes | None) -> tuple[Any, Any]:
    from semel.coordinator.group import records

    try:
        parsed = records.decode_key(key)
    except records.UnknownRecordType as exc:
        raise UnknownRecordType(exc.key_version) from None
    data = records.decode_value(parsed, value)
    if isinstance(parsed, records.OffsetCommitKey):
        key_json = {"type": "1", "data": {"group": parsed.group, "topic": parsed.topic,
                                          "partition": parsed.partition}}
    else:
        key_json = {"type": "2", "data": {"group": parsed.group}}
    if data is None or value is None:
        return key_json, None
    version = _value_version(value)
    fields: dict[str, Any]
    if isinstance(data, records.OffsetCommitValue):
        fields = {"offset": data.offset}
        if version >= 3:
            fields["leaderEpoch"] = data.leader_epoch
        fields["metadata"] = data.metadata
        fields["commitTimestamp"] = data.commit_timestamp
        if version == 1:
            fields["expireTimestamp"] = data.expire_timestamp
    else:
        fields = {"protocolType": data.protocol_type, "generation": data.generation,
                  "protocol": data.protocol, "leader": data.leader}
        if version >= 2:
            fields["currentStateTimestamp"] = data.current_state_timestamp
        members = []
        for m in data.members:
            member: dict[str, Any] = {"memberId": m.member_id}
            if version >= 3:
                member["groupInstanceId"] = m.group_instance_id
            member.update({"clientId": m.client_id, "clientHost": m.client_host})
            if version >= 1:
                member["rebalanceTimeout"] = m.rebalance_timeout
            member.update({"sessionTimeout": m.session_timeout,
                           "subscription": _b64(m.subscription),
                           "assignment": _b64(m.assignment)})
            members.append(member)
        fields["members"] = members
    return key_json, {"version": str(version), "data": fields}


def decode_txn_log_record(key: bytes, value: bytes | None) -> tuple[Any, Any]:
    from semel.coordinator.transaction import log

    try:
        transactional_id = log.decode_key(key)
    except log.UnknownKeyVersion as exc:
        raise UnknownRecordType(exc.version) from None
    key_json = {"type": "0", "data": {"transactionalId": transactional_id}}
    if value is None:
        return key_json, None
    v = log.decode_value(value)
    version = _value_version(value)
    partitions = None if v.transaction_partitions is None else [
        {"topic": topic, "partitionIds": ids} for topic, ids in v.transaction_partitions]
    fields: dict[str, Any] = {
        "producerId": v.producer_id, "producerEpoch": v.producer_epoch,
        "transactionTimeoutMs": v.transaction_timeout_ms,
        "transactionStatus": v.transaction_status,
        "transactionPartitions": partitions,
        "transactionLastUpdateTimestampMs": v.transaction_last_update_timestamp_ms,
        "transactionStartTimestampMs": v.transaction_start_timestamp_ms,
    }
    if version >= 1:
        fields["previousProducerId"] = v.previous_producer_id
        fields["nextProducerId"] = v.next_producer_id
        fields["clientTransactionVersion"] = v.client_transaction_version
        if v.principal is not None:
            fields["semelPrincipal"] = v.principal
        if v.ongoing_producer_id >= 0:
            fields["semelOngoingProducerId"] = v.ongoing_producer_id
            fields["semelOngoingProducerEpoch"] = v.ongoing_producer_epoch
        if v.unknown_tags:
            fields["unknownTaggedFields"] = list(v.unknown_tags)
    return key_json, {"version": str(version), "data": fields}

