"""The API table: which Kafka APIs and versions semel has codecs for.

``SUPPORTED[api_key] = (min_version, max_version)`` feeds both ApiVersions and dispatch (the
broker advertises the subset it has handlers for). Floors are Apache Kafka 4.0's (KIP-896
removed the older versions from the specs); ceilings are at least what Java kafka-clients 3.9
and librdkafka 2.x send, and for the exactly-once APIs the newest in Kafka 4.x specs
(Produce stops at 12: v13 addresses topics by id only).

Codecs are generated into ``protocol/messages/<name>_{request,response}.py`` by
``python -m semel.protocol.codegen`` and imported lazily on first use.
"""

from __future__ import annotations

import importlib
import re
import struct
from types import ModuleType
from typing import Any, NamedTuple

from semel.protocol.frame import decode_response_header, encode_request_header


class Api(NamedTuple):
    key: int
    name: str
    min_version: int
    max_version: int


APIS: tuple[Api, ...] = (
    Api(0, "Produce", 3, 12),
    Api(1, "Fetch", 4, 17),
    Api(2, "ListOffsets", 1, 10),
    Api(3, "Metadata", 0, 13),
    Api(8, "OffsetCommit", 2, 9),
    Api(9, "OffsetFetch", 1, 9),
    Api(10, "FindCoordinator", 0, 6),
    Api(11, "JoinGroup", 0, 9),
    Api(12, "Heartbeat", 0, 4),
    Api(13, "LeaveGroup", 0, 5),
    Api(14, "SyncGroup", 0, 5),
    Api(15, "DescribeGroups", 0, 6),
    Api(16, "ListGroups", 0, 5),
    Api(17, "SaslHandshake", 0, 1),
    Api(18, "ApiVersions", 0, 4),
    Api(19, "CreateTopics", 2, 7),
    Api(20, "DeleteTopics", 1, 6),
    Api(21, "DeleteRecords", 0, 2),
    Api(22, "InitProducerId", 0, 6),
    Api(23, "OffsetForLeaderEpoch", 2, 4),
    Api(24, "AddPartitionsToTxn", 0, 5),
    Api(25, "AddOffsetsToTxn", 0, 4),
    Api(26, "EndTxn", 0, 5),
    Api(27, "WriteTxnMarkers", 1, 2),
    Api(28, "TxnOffsetCommit", 0, 5),
    Api(29, "DescribeAcls", 1, 3),
    Api(30, "CreateAcls", 1, 3),
    Api(31, "DeleteAcls", 1, 3),
    Api(32, "DescribeConfigs", 1, 4),
    Api(33, "AlterConfigs", 0, 2),
    Api(34, "AlterReplicaLogDirs", 1, 2),
    Api(35, "DescribeLogDirs", 1, 4),
    Api(36, "SaslAuthenticate", 0, 2),
    Api(37, "CreatePartitions", 0, 3),
    Api(38, "CreateDelegationToken", 1, 3),
    Api(39, "RenewDelegationToken", 1, 2),
    Api(40, "ExpireDelegationToken", 1, 2),
    Api(41, "DescribeDelegationToken", 1, 3),
    Api(42, "DeleteGroups", 0, 2),
    Api(43, "ElectLeaders", 0, 2),
    Api(44, "IncrementalAlterConfigs", 0, 1),
    Api(45, "AlterPartitionReassignments", 0, 1),
    Api(46, "ListPartitionReassignments", 0, 0),
    Api(47, "OffsetDelete", 0, 0),
    Api(48, "DescribeClientQuotas", 0, 1),
    Api(49, "AlterClientQuotas", 0, 1),
    Api(50, "DescribeUserScramCredentials", 0, 0),
    Api(51, "AlterUserScramCredentials", 0, 0),
    Api(57, "UpdateFeatures", 0, 2),
    Api(60, "DescribeCluster", 0, 2),
    Api(61, "DescribeProducers", 0, 0),
    Api(65, "DescribeTransactions", 0, 0),
    Api(66, "ListTransactions", 0, 2),
    Api(68, "ConsumerGroupHeartbeat", 0, 1),
    Api(69, "ConsumerGroupDescribe", 0, 1),
    Api(71, "GetTelemetrySubscriptions", 0, 0),
    Api(74, "ListClientMetricsResources", 0, 0),
    Api(75, "DescribeTopicPartitions", 0, 0),
    # share groups (KIP-932), v1: what librdkafka 2.16 and Kafka 4.1 speak
    Api(76, "ShareGroupHeartbeat", 1, 1),
    Api(77, "ShareGroupDescribe", 1, 1),
    Api(78, "ShareFetch", 1, 1),
    Api(79, "ShareAcknowledge", 1, 1),
    # share group offsets admin (KIP-932): Kafka 4.1's versions; v1 of Describe adds the lag
    Api(90, "DescribeShareGroupOffsets", 0, 1),
    Api(91, "AlterShareGroupOffsets", 0, 0),
    Api(92, "DeleteShareGroupOffsets", 0, 0),
)

# The share group APIs (in APIS above), for the code that treats them as a set.
SHARE_GROUP_APIS: tuple[Api, ...] = tuple(a for a in APIS if 76 <= a.key <= 79)

SUPPORTED: dict[int, tuple[int, int]] = {a.key: (a.min_version, a.max_version) for a in APIS}
BY_KEY: dict[int, Api] = {a.key: a for a in APIS}
BY_NAME: dict[str, Api] = {a.name: a for a in APIS}


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def module_name(api_name: str, kind: str) -> str:
    """``("EndTxn", "request")`` -> ``"protocol.messages.end_txn_request"``."""
    return f"semel.protocol.messages.{snake(api_name)}_{kind}"


_modules: dict[tuple[int, str], ModuleType] = {}


def codec(api_key: int, kind: str) -> ModuleType:
    """The generated module for an API's request or response (imported on first use).

    Each module has ``DECODERS``/``ENCODERS`` keyed by version, ``FIRST_FLEXIBLE`` and the
    message dataclass named like the spec (``EndTxnRequest``).
    """
    mod = _modules.get((api_key, kind))
    if mod is None:
        mod = importlib.import_module(module_name(BY_KEY[api_key].name, kind))
        _modules[(api_key, kind)] = mod
    return mod


def is_flexible(api_key: int, version: int) -> bool:
    first = codec(api_key, "request").FIRST_FLEXIBLE
    return first is not None and version >= first


def request_header_version(api_key: int, version: int) -> int:
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    # ApiVersions answers with response header v0 even in flexible versions (KIP-511).
    if api_key == 18:
        return 0
    return 1 if is_flexible(api_key, version) else 0


_SIZE = struct.Struct(">i")


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   body: Any) -> bytearray:
    """A client's request frame: the size, the request header, the body (its codec)."""
    frame = bytearray(4)
    frame += encode_request_header(api_key, version, correlation_id, client_id,
                                   request_header_version(api_key, version))
    codec(api_key, "request").encode(version, body, frame)
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return frame


def decode_response(api_key: int, version: int, data: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame read without its size."""
    correlation_id, pos = decode_response_header(data, response_header_version(api_key, version))
    return correlation_id, codec(api_key, "response").decode(version, memoryview(data), pos)[0]
