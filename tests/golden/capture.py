"""Capture golden request frames from real Kafka clients.

    .venv/bin/python tests/golden/capture.py [--clients confluent,kafka-python,aiokafka,java]
                                             [--frames N]

recaptures everything: for each client it starts a tiny broker stand-in (asyncio, 127.0.0.1,
ephemeral port, our own codecs) in a thread, runs that client against it, and writes the
first N (default 2) request frames of every (API, version) the client sent, and every
Produce frame (a scenario writes only RECORDS records, possibly over several requests):

    tests/golden/<client>/<api>_request_v<version>_<nnn>.bin
    tests/golden/<client>/produce_request_v<version>_<codec>_<kind>_<nnn>.bin

Each file is one request frame without its 4-byte size prefix (request header + body).
``tests/golden/manifest.json`` lists, per client, the library version and every (API,
versions) it sent. A client's old files are replaced only when that client is recaptured.

What the clients do (the same scheme in every driver and in GoldenClient.java): for every
compression codec the client supports and every kind -- ``plain`` (acks=1, no idempotence),
``idem`` (enable.idempotence) and ``txn`` (transactional.id; begin, send, send offsets to
the transaction, commit) -- write RECORDS records to partition 0 of topic
``golden-<codec>-<kind>``: key ``k<i>``, value ``record_value(client, codec, kind, i)``,
one header ``("i", "<i>")``. Then a read_committed group consumer reads every record back
and commits, and an admin client creates, describes and deletes a topic.

The stand-in answers only as far as those clients need: ApiVersions (advertising
``protocol.api.SUPPORTED`` for the APIs below), Metadata (one broker, itself; a topic that is
asked for exists with PARTITIONS partitions, node 0 leads, leader epoch 0), FindCoordinator
(itself), InitProducerId (PRODUCER_ID, epoch 0), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
(appends COMMIT/ABORT markers), TxnOffsetCommit, Produce (stores the batches, increasing base
offsets), Fetch (returns them; no fetch sessions), ListOffsets, OffsetForLeaderEpoch,
OffsetCommit/OffsetFetch, a single-member classic group (JoinGroup with MEMBER_ID_REQUIRED
for v4+, SyncGroup, Heartbeat, LeaveGroup), CreateTopics, DeleteTopics, DescribeConfigs,
DescribeCluster. Any other API or version is logged and the connection closed.

Optional client-side codec libraries: kafka-python needs ``python-snappy``, ``lz4`` and
``zstandard`` for snappy/lz4/zstd; a codec whose library is missing is skipped (and said so).
The Java client needs the kafka-clients 3.9.1 jars (``.cache/java-jars/``, fetched by
``tests/tools/fetch_java_jars.py``; ``/tmp/flink/pyflink/lib/`` is used when present) and
``javac``; GoldenClient.java is compiled into ``.cache/golden-java/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from protocol.api import (
    BY_KEY,
    SUPPORTED,
    codec,
    request_header_version,
    response_header_version,
    snake,
)
from protocol.errors import Error
from protocol.frame import (
    FrameDecoder,
    encode_response_header,
    frame_response,
    parse_request_header,
    peek_api_key_version,
)
from protocol.records import (
    InvalidRecordError,
    build_control_batch,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batches,
)

GOLDEN = Path(__file__).resolve().parent
MANIFEST = GOLDEN / "manifest.json"
CLIENTS = ("confluent", "kafka-python", "aiokafka", "java")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
KINDS = ("plain", "idem", "txn")
RECORDS = 5
VALUE_SIZE = 100  # padded so that every codec shrinks the batch (librdkafka sends a batch
# uncompressed when compression does not make it smaller)
PARTITIONS = 2
PRODUCER_ID = 4242
LEADER_EPOCH = 0
CLUSTER_ID = "golden-capture-cluster"
CONSUMER_GROUP = "golden-group"
TXN_GROUP = "golden-txn-group"
ADMIN_TOPIC = "golden-admin"
FRAMES_PER_VERSION = 2
CLIENT_TIMEOUT_S = 60
HEARTBEAT_MS = 100  # short, so that every consumer sends Heartbeat while it reads


def topic_name(codec_name: str, kind: str) -> str:
    return f"golden-{codec_name}-{kind}"


def record_key(i: int) -> bytes:
    return f"k{i}".encode()


def record_value(client: str, codec_name: str, kind: str, i: int) -> bytes:
    return f"{client}-{codec_name}-{kind}-{i}".ljust(VALUE_SIZE, ".").encode()


def record_headers(i: int) -> list[tuple[str, bytes]]:
    return [("i", str(i).encode())]


def produce_variant(topic_names: list[str]) -> str:
    """``golden-zstd-txn`` -> ``zstd_txn``: the part of a Produce file name after the version."""
    variants = {name.removeprefix("golden-").replace("-", "_") for name in topic_names}
    return variants.pop() if len(variants) == 1 else "mixed"


# --- the broker stand-in -------------------------------------------------------------


@dataclass
class Partition:
    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # base, last, bytes
    next_offset: int = 0

    def append(self, batch: bytearray) -> None:
        """Append one batch: rewrite its base offset and leader epoch (outside the CRC)."""
        headers = validate_batches(batch, from_client=False)
        set_base_offset(batch, 0, self.next_offset)
        set_partition_leader_epoch(batch, 0, LEADER_EPOCH)
        last = self.next_offset + headers[0].last_offset_delta
        self.batches.append((self.next_offset, last, bytes(batch)))
        self.next_offset = last + 1

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for _, last, data in self.batches:
            if last < offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]


@dataclass
class Group:
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class Unsupported(Exception):
    """A request the stand-in does not answer: the connection is closed."""


class GoldenBroker:
    """Answers just enough of the protocol for real clients and keeps their request frames."""

    def __init__(self, frames_per_version: int = FRAMES_PER_VERSION) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.frames_per_version = frames_per_version
        self.frames: dict[str, list[bytes]] = {}  # file stem -> frames, in arrival order
        self.seen: Counter[tuple[int, int]] = Counter()
        self.unsupported: Counter[tuple[int, int]] = Counter()
        self.trailing: Counter[tuple[int, int]] = Counter()  # frames with bytes after the body
        self.errors: list[str] = []
        self.software: set[tuple[str, str]] = set()  # ApiVersions v3+ client name/version
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        self.committed: dict[tuple[str, str, int], int] = {}
        self.groups: dict[str, Group] = {}
        self.txn_partitions: dict[str, set[tuple[str, int]]] = {}
        self.txn_offsets: dict[str, list[tuple[str, str, int, int]]] = {}
        self._server: asyncio.base_events.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._handlers: dict[int, Callable[[int, Any], Awaitable[Any]]] = {
            0: self.produce,
            1: self.fetch,
            2: self.list_offsets,
            3: self.metadata,
            8: self.offset_commit,
            9: self.offset_fetch,
            10: self.find_coordinator,
            11: self.join_group,
            12: self.heartbeat,
            13: self.leave_group,
            14: self.sync_group,
            18: self.api_versions,
            19: self.create_topics,
            20: self.delete_topics,
            22: self.init_producer_id,
            23: self.offset_for_leader_epoch,
            24: self.add_partitions_to_txn,
            25: self.add_offsets_to_txn,
            26: self.end_txn,
            28: self.txn_offset_commit,
            32: self.describe_configs,
            60: self.describe_cluster,
        }

    # -- server plumbing

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._connections.values()):
            writer.transport.abort()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    response = await self._answer(bytes(frame))
                    if response is not None:
                        writer.write(response)
                await writer.drain()
        except Unsupported:
            pass
        except ConnectionError:
            pass
        except Exception:  # noqa: BLE001 - any fault is recorded and fails the capture run
            self.errors.append(traceback.format_exc())
        finally:
            self._connections.pop(task, None)
            writer.close()

    async def _answer(self, frame: bytes) -> bytes | None:
        api_key, version, correlation_id = peek_api_key_version(frame)
        self.seen[(api_key, version)] += 1
        low, high = SUPPORTED.get(api_key, (0, -1))
        if api_key == 18 and version > high:
            # KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges; the client retries
            body = codec(18, "response").encode(0, self._api_versions_body(Error.UNSUPPORTED_VERSION))
            return frame_response(encode_response_header(correlation_id, 0), body)
        handler = self._handlers.get(api_key)
        if handler is None or not low <= version <= high:
            self.unsupported[(api_key, version)] += 1
            raise Unsupported
        _, pos = parse_request_header(frame, request_header_version(api_key, version))
        request, end = codec(api_key, "request").decode(version, frame, pos)
        # Kafka ignores bytes after the body; librdkafka relies on that (Metadata v9+ "all
        # topics" carries 3 stray zero bytes). Such frames are kept under a visible name.
        self._keep(api_key, version, request, frame, len(frame) - end)
        response = await handler(version, request)
        if response is None:  # acks=0
            return None
        body = codec(api_key, "response").encode(version, response)
        head = encode_response_header(correlation_id, response_header_version(api_key, version))
        return frame_response(head, body)

    def _keep(self, api_key: int, version: int, request: Any, frame: bytes, trailing: int) -> None:
        stem = f"{snake(BY_KEY[api_key].name)}_request_v{version}"
        if api_key == 0:
            stem += "_" + produce_variant([t.name for t in request.topic_data])
        if trailing:
            stem += f"_trailing{trailing}"
            self.trailing[(api_key, version)] += 1
        if api_key == 18 and version >= 3:
            self.software.add((request.client_software_name, request.client_software_version))
        kept = self.frames.setdefault(stem, [])
        # every Produce frame of a scenario is kept (at most RECORDS), so the test sees all
        # its records even when a client splits them over several requests
        if len(kept) < (RECORDS if api_key == 0 else self.frames_per_version):
            kept.append(frame)

    def _topic(self, name: str, create: bool) -> Topic | None:
        topic = self.topics.get(name)
        if topic is None and create:
            topic = self._create(name, PARTITIONS)
        return topic

    def _create(self, name: str, partitions: int) -> Topic:
        topic = Topic(name, uuid.uuid4(), [Partition() for _ in range(partitions)])
        self.topics[name] = topic
        self.topics_by_id[topic.topic_id] = topic
        return topic

    def _partition(self, name: str, index: int) -> Partition | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    # -- ApiVersions, Metadata, FindCoordinator, DescribeCluster

    def _api_versions_body(self, error: int = 0) -> Any:
        m = codec(18, "response")
        keys = [m.ApiVersion(k, *SUPPORTED[k]) for k in sorted(self._handlers)]
        return m.ApiVersionsResponse(error_code=error, api_keys=keys)

    async def api_versions(self, version: int, req: Any) -> Any:
        return self._api_versions_body()

    async def metadata(self, version: int, req: Any) -> Any:
        m = codec(3, "response")
        if req.topics is None or (version == 0 and not req.topics):
            wanted = [(name, None) for name in self.topics]
            create = False
        else:
            wanted = [(t.name, t.topic_id) for t in req.topics]
            create = version < 4 or req.allow_auto_topic_creation
        topics = []
        for name, topic_id in wanted:
            topic = self.topics_by_id.get(topic_id) if name is None else self._topic(name, create)
            if topic is None:
                topics.append(m.MetadataResponseTopic(
                    error_code=Error.UNKNOWN_TOPIC_OR_PARTITION, name=name,
                    topic_id=topic_id or uuid.UUID(int=0)))
                continue
            partitions = [
                m.MetadataResponsePartition(0, i, 0, LEADER_EPOCH, [0], [0], [])
                for i in range(len(topic.partitions))
            ]
            topics.append(m.MetadataResponseTopic(0, topic.name, topic.topic_id, False, partitions))
        return m.MetadataResponse(
            brokers=[m.MetadataResponseBroker(0, self.host, self.port, None)],
            cluster_id=CLUSTER_ID, controller_id=0, topics=topics)

    async def find_coordinator(self, version: int, req: Any) -> Any:
        m = codec(10, "response")
        if version < 4:
            return m.FindCoordinatorResponse(
                error_message=None, node_id=0, host=self.host, port=self.port)
        return m.FindCoordinatorResponse(coordinators=[
            m.Coordinator(key, 0, self.host, self.port, 0, None) for key in req.coordinator_keys
        ])

    async def describe_cluster(self, version: int, req: Any) -> Any:
        m = codec(60, "response")
        return m.DescribeClusterResponse(
            cluster_id=CLUSTER_ID, controller_id=0,
            brokers=[m.DescribeClusterBroker(0, self.host, self.port, None, False)])

    # -- producing

    async def init_producer_id(self, version: int, req: Any) -> Any:
        epoch = req.producer_epoch + 1 if req.producer_id >= 0 else 0
        return codec(22, "response").InitProducerIdResponse(
            producer_id=PRODUCER_ID, producer_epoch=epoch)

    async def produce(self, version: int, req: Any) -> Any:
        m = codec(0, "response")
        responses = []
        for t in req.topic_data:
            results = []
            for p in t.partition_data:
                partition = self._partition(t.name, p.index)
                error, base_offset = 0, -1
                if partition is None:
                    error = Error.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    data = bytearray(p.records or b"")
                    try:
                        headers = validate_batches(data)
                    except InvalidRecordError as e:
                        error = e.error_code
                        self.errors.append(f"produce to {t.name}-{p.index}: {e}")
                    else:
                        base_offset = partition.next_offset
                        for h in headers:
                            partition.append(data[h.position:h.position + h.size])
                results.append(m.PartitionProduceResponse(
                    index=p.index, error_code=error, base_offset=base_offset,
                    log_append_time_ms=-1, log_start_offset=0, error_message=None))
            responses.append(m.TopicProduceResponse(t.name, t.topic_id, results))
        if req.acks == 0:
            return None
        return m.ProduceResponse(responses=responses)

    async def add_partitions_to_txn(self, version: int, req: Any) -> Any:
        m = codec(24, "response")

        def add(transactional_id: str, topics: list[Any]) -> list[Any]:
            added = self.txn_partitions.setdefault(transactional_id, set())
            results = []
            for t in topics:
                added.update((t.name, p) for p in t.partitions)
                results.append(m.AddPartitionsToTxnTopicResult(
                    t.name, [m.AddPartitionsToTxnPartitionResult(p, 0) for p in t.partitions]))
            return results

        if version <= 3:
            return m.AddPartitionsToTxnResponse(results_by_topic_v3_and_below=add(
                req.v3_and_below_transactional_id, req.v3_and_below_topics))
        return m.AddPartitionsToTxnResponse(results_by_transaction=[
            m.AddPartitionsToTxnResult(t.transactional_id, add(t.transactional_id, t.topics))
            for t in req.transactions
        ])

    async def add_offsets_to_txn(self, version: int, req: Any) -> Any:
        return codec(25, "response").AddOffsetsToTxnResponse()

    async def txn_offset_commit(self, version: int, req: Any) -> Any:
        m = codec(28, "response")
        pending = self.txn_offsets.setdefault(req.transactional_id, [])
        topics = []
        for t in req.topics:
            for p in t.partitions:
                pending.append((req.group_id, t.name, p.partition_index, p.committed_offset))
            topics.append(m.TxnOffsetCommitResponseTopic(t.name, [
                m.TxnOffsetCommitResponsePartition(p.partition_index, 0) for p in t.partitions
            ]))
        return m.TxnOffsetCommitResponse(topics=topics)

    async def end_txn(self, version: int, req: Any) -> Any:
        now_ms = int(time.time() * 1000)
        for name, index in sorted(self.txn_partitions.pop(req.transactional_id, ())):
            partition = self._partition(name, index)
            if partition is not None:
                partition.append(bytearray(build_control_batch(
                    commit=req.committed, producer_id=req.producer_id,
                    producer_epoch=req.producer_epoch, coordinator_epoch=0,
                    timestamp_ms=now_ms)))
        for group_id, name, index, offset in self.txn_offsets.pop(req.transactional_id, ()):
            if req.committed:
                self.committed[(group_id, name, index)] = offset
        return codec(26, "response").EndTxnResponse(
            producer_id=req.producer_id, producer_epoch=req.producer_epoch)

    # -- consuming

    async def fetch(self, version: int, req: Any) -> Any:
        if not self._fetchable(version, req):
            await asyncio.sleep(min(req.max_wait_ms, 200) / 1000)
        m = codec(1, "response")
        responses = []
        for t in req.topics:
            topic = self.topics_by_id.get(t.topic_id) if version >= 13 else self.topics.get(t.topic)
            partitions = []
            for p in t.partitions:
                if topic is None or not 0 <= p.partition < len(topic.partitions):
                    error = Error.UNKNOWN_TOPIC_ID if version >= 13 else Error.UNKNOWN_TOPIC_OR_PARTITION
                    partitions.append(m.PartitionData(p.partition, error, records=b""))
                    continue
                partition = topic.partitions[p.partition]
                end = partition.next_offset
                if p.fetch_offset > end:
                    partitions.append(m.PartitionData(
                        p.partition, Error.OFFSET_OUT_OF_RANGE, end, end, 0, records=b""))
                    continue
                partitions.append(m.PartitionData(
                    p.partition, 0, end, end, 0, aborted_transactions=[],
                    records=partition.read(p.fetch_offset, p.partition_max_bytes)))
            responses.append(m.FetchableTopicResponse(
                topic.name if topic else t.topic, t.topic_id, partitions))
        return m.FetchResponse(session_id=0, responses=responses)

    def _fetchable(self, version: int, req: Any) -> bool:
        for t in req.topics:
            topic = self.topics_by_id.get(t.topic_id) if version >= 13 else self.topics.get(t.topic)
            if topic is None:
                return True
            for p in t.partitions:
                if p.partition >= len(topic.partitions):
                    return True
                if p.fetch_offset != topic.partitions[p.partition].next_offset:
                    return True
        return False

    async def list_offsets(self, version: int, req: Any) -> Any:
        m = codec(2, "response")
        topics = []
        for t in req.topics:
            partitions = []
            for p in t.partitions:
                partition = self._partition(t.name, p.partition_index)
                if partition is None:
                    partitions.append(m.ListOffsetsPartitionResponse(
                        p.partition_index, Error.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                offset = 0 if p.timestamp == -2 else partition.next_offset
                partitions.append(m.ListOffsetsPartitionResponse(
                    p.partition_index, 0, [offset], -1, offset, LEADER_EPOCH))
            topics.append(m.ListOffsetsTopicResponse(t.name, partitions))
        return m.ListOffsetsResponse(topics=topics)

    async def offset_for_leader_epoch(self, version: int, req: Any) -> Any:
        m = codec(23, "response")
        topics = []
        for t in req.topics:
            results = []
            for p in t.partitions:
                partition = self._partition(t.topic, p.partition)
                if partition is None:
                    results.append(m.EpochEndOffset(
                        Error.UNKNOWN_TOPIC_OR_PARTITION, p.partition, -1, -1))
                else:
                    results.append(m.EpochEndOffset(
                        0, p.partition, LEADER_EPOCH, partition.next_offset))
            topics.append(m.OffsetForLeaderTopicResult(t.topic, results))
        return m.OffsetForLeaderEpochResponse(topics=topics)

    # -- groups and offsets

    async def join_group(self, version: int, req: Any) -> Any:
        m = codec(11, "response")
        no_name = None if version >= 7 else ""
        member_id = req.member_id or f"golden-member-{uuid.uuid4()}"
        if not req.member_id and version >= 4:
            return m.JoinGroupResponse(
                error_code=Error.MEMBER_ID_REQUIRED, protocol_name=no_name, member_id=member_id)
        group = self.groups.setdefault(req.group_id, Group())
        group.generation += 1
        chosen = req.protocols[0]
        group.protocol_type = req.protocol_type
        group.protocol_name = chosen.name
        return m.JoinGroupResponse(
            generation_id=group.generation, protocol_type=req.protocol_type,
            protocol_name=chosen.name, leader=member_id, member_id=member_id,
            members=[m.JoinGroupResponseMember(member_id, req.group_instance_id, chosen.metadata)])

    async def sync_group(self, version: int, req: Any) -> Any:
        group = self.groups.setdefault(req.group_id, Group())
        for a in req.assignments:
            if a.member_id == req.member_id:
                group.assignment = bytes(a.assignment)
        return codec(14, "response").SyncGroupResponse(
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            assignment=group.assignment)

    async def heartbeat(self, version: int, req: Any) -> Any:
        return codec(12, "response").HeartbeatResponse()

    async def leave_group(self, version: int, req: Any) -> Any:
        m = codec(13, "response")
        return m.LeaveGroupResponse(members=[
            m.MemberResponse(x.member_id, x.group_instance_id, 0) for x in req.members
        ])

    async def offset_commit(self, version: int, req: Any) -> Any:
        m = codec(8, "response")
        topics = []
        for t in req.topics:
            for p in t.partitions:
                self.committed[(req.group_id, t.name, p.partition_index)] = p.committed_offset
            topics.append(m.OffsetCommitResponseTopic(t.name, t.topic_id, [
                m.OffsetCommitResponsePartition(p.partition_index, 0) for p in t.partitions
            ]))
        return m.OffsetCommitResponse(topics=topics)

    def _committed(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> list:
        if topics is None:
            found: dict[str, list[int]] = {}
            for g, name, index in self.committed:
                if g == group_id:
                    found.setdefault(name, []).append(index)
            topics = sorted(found.items())
        return [
            (name, [(i, self.committed.get((group_id, name, i), -1)) for i in indexes])
            for name, indexes in topics
        ]

    async def offset_fetch(self, version: int, req: Any) -> Any:
        m = codec(9, "response")
        if version < 8:
            asked = None if req.topics is None else [
                (t.name, t.partition_indexes) for t in req.topics]
            return m.OffsetFetchResponse(topics=[
                m.OffsetFetchResponseTopic(name, [
                    m.OffsetFetchResponsePartition(i, offset, -1, "", 0) for i, offset in parts
                ])
                for name, parts in self._committed(req.group_id, asked)
            ])
        groups = []
        for g in req.groups:
            asked = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            groups.append(m.OffsetFetchResponseGroup(g.group_id, [
                m.OffsetFetchResponseTopics(name, uuid.UUID(int=0), [
                    m.OffsetFetchResponsePartitions(i, offset, -1, "", 0) for i, offset in parts
                ])
                for name, parts in self._committed(g.group_id, asked)
            ]))
        return m.OffsetFetchResponse(groups=groups)

    # -- admin

    async def create_topics(self, version: int, req: Any) -> Any:
        m = codec(19, "response")
        results = []
        for t in req.topics:
            if t.name in self.topics:
                results.append(m.CreatableTopicResult(
                    t.name, error_code=Error.TOPIC_ALREADY_EXISTS, error_message=None))
                continue
            count = t.num_partitions if t.num_partitions > 0 else PARTITIONS
            topic = self._create(t.name, count)
            results.append(m.CreatableTopicResult(
                t.name, topic.topic_id, 0, None, 0, count, 1, []))
        return m.CreateTopicsResponse(topics=results)

    async def delete_topics(self, version: int, req: Any) -> Any:
        m = codec(20, "response")
        if version >= 6:
            asked = [(t.name, t.topic_id) for t in req.topics]
        else:
            asked = [(name, uuid.UUID(int=0)) for name in req.topic_names]
        results = []
        for name, topic_id in asked:
            topic = self.topics.get(name) if name is not None else self.topics_by_id.get(topic_id)
            if topic is None:
                results.append(m.DeletableTopicResult(
                    name, topic_id, Error.UNKNOWN_TOPIC_OR_PARTITION, None))
                continue
            del self.topics[topic.name]
            del self.topics_by_id[topic.topic_id]
            results.append(m.DeletableTopicResult(topic.name, topic.topic_id, 0, None))
        return m.DeleteTopicsResponse(responses=results)

    async def describe_configs(self, version: int, req: Any) -> Any:
        m = codec(32, "response")
        defaults = (("cleanup.policy", "delete", 2), ("retention.ms", "604800000", 5))
        results = []
        for r in req.resources:
            configs = [
                m.DescribeConfigsResourceResult(
                    name=name, value=value, read_only=False, config_source=5, is_default=True,
                    is_sensitive=False, synonyms=[], config_type=config_type, documentation=None)
                for name, value, config_type in defaults
                if r.configuration_keys is None or name in r.configuration_keys
            ]
            results.append(m.DescribeConfigsResult(
                0, None, r.resource_type, r.resource_name, configs))
        return m.DescribeConfigsResponse(results=results)


class BrokerThread:
    """Runs a GoldenBroker on its own event loop in a daemon thread (a context manager)."""

    def __init__(self, broker: GoldenBroker) -> None:
        self.broker = broker
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="golden-broker", daemon=True)
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.broker.host}:{self.broker.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        await self.broker.start()
        self._started.set()
        await self._stop.wait()
        await self.broker.stop()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("capture broker did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


# --- client drivers -------------------------------------------------------------------


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(what)


def run_confluent(bootstrap: str, label: str, codecs: list[str]) -> str:
    import confluent_kafka
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    failures: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    topics = []
    for codec_name in codecs:
        for kind in KINDS:
            topic = topic_name(codec_name, kind)
            conf: dict[str, Any] = {
                "bootstrap.servers": bootstrap, "compression.type": codec_name,
                "linger.ms": 100, "client.id": f"golden-confluent-{codec_name}-{kind}",
            }
            if kind == "plain":
                conf.update({"enable.idempotence": False, "acks": 1})
            else:
                conf.update({"enable.idempotence": True})
            if kind == "txn":
                conf["transactional.id"] = f"golden-confluent-{codec_name}"
            producer = Producer(conf)
            if kind == "txn":
                producer.init_transactions(CLIENT_TIMEOUT_S)
                producer.begin_transaction()
            for i in range(RECORDS):
                producer.produce(
                    topic, record_value(label, codec_name, kind, i), record_key(i),
                    partition=0, headers=record_headers(i), on_delivery=on_delivery)
            if kind == "txn":
                group = Consumer({"bootstrap.servers": bootstrap, "group.id": TXN_GROUP})
                producer.send_offsets_to_transaction(
                    [TopicPartition(topic, 0, RECORDS)], group.consumer_group_metadata(),
                    CLIENT_TIMEOUT_S)
                group.close()
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            if producer.flush(CLIENT_TIMEOUT_S):
                raise TimeoutError(f"confluent: {topic} not flushed")
            if failures:
                raise RuntimeError(f"confluent: delivery failed: {failures}")
            topics.append(topic)

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": CONSUMER_GROUP,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed", "heartbeat.interval.ms": HEARTBEAT_MS,
    })
    consumer.subscribe(topics)
    want, got = len(topics) * RECORDS, 0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while got < want:
        _check_deadline(deadline, f"confluent consumed {got} of {want}")
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += 1
    consumer.commit(asynchronous=False)
    consumer.close()

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(ADMIN_TOPIC, 3, 1)]).values():
        future.result(CLIENT_TIMEOUT_S)
    admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    resource = ConfigResource(ConfigResource.Type.TOPIC, ADMIN_TOPIC)
    for future in admin.describe_configs([resource]).values():
        future.result(CLIENT_TIMEOUT_S)
    admin.describe_cluster().result(CLIENT_TIMEOUT_S)
    for future in admin.delete_topics([ADMIN_TOPIC]).values():
        future.result(CLIENT_TIMEOUT_S)
    version = confluent_kafka.version()
    version = version[0] if isinstance(version, tuple) else version
    return f"confluent-kafka {version}, librdkafka {confluent_kafka.libversion()[0]}"


def kafka_python_codecs() -> list[str]:
    from kafka import codec as kc

    available = {"none": True, "gzip": kc.has_gzip(), "snappy": kc.has_snappy(),
                 "lz4": kc.has_lz4(), "zstd": kc.has_zstd()}
    return [c for c in CODECS if available[c]]


def run_kafka_python(bootstrap: str, label: str, codecs: list[str]) -> str:
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
    from kafka.structs import OffsetAndMetadata

    topics = []
    for codec_name in codecs:
        for kind in KINDS:
            topic = topic_name(codec_name, kind)
            producer = KafkaProducer(
                bootstrap_servers=bootstrap, client_id=f"golden-kafka-python-{codec_name}-{kind}",
                compression_type=None if codec_name == "none" else codec_name, linger_ms=100,
                enable_idempotence=kind != "plain", acks=1 if kind == "plain" else "all",
                transactional_id=f"golden-kafka-python-{codec_name}" if kind == "txn" else None)
            if kind == "txn":
                producer.init_transactions()
                producer.begin_transaction()
            futures = [
                producer.send(topic, record_value(label, codec_name, kind, i), record_key(i),
                              headers=record_headers(i), partition=0)
                for i in range(RECORDS)
            ]
            if kind == "txn":
                producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): OffsetAndMetadata(RECORDS, "", -1)}, TXN_GROUP)
                producer.commit_transaction()
            producer.flush(CLIENT_TIMEOUT_S)
            for future in futures:
                future.get(CLIENT_TIMEOUT_S)
            producer.close(CLIENT_TIMEOUT_S)
            topics.append(topic)

    consumer = KafkaConsumer(
        *topics, bootstrap_servers=bootstrap, group_id=CONSUMER_GROUP,
        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed",
        heartbeat_interval_ms=HEARTBEAT_MS)
    want, got = len(topics) * RECORDS, 0
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while got < want:
        _check_deadline(deadline, f"kafka-python consumed {got} of {want}")
        got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
    consumer.commit()
    consumer.close()

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(ADMIN_TOPIC, num_partitions=3, replication_factor=1)])
    admin.describe_topics([ADMIN_TOPIC])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, ADMIN_TOPIC)])
    admin.describe_cluster()
    admin.delete_topics([ADMIN_TOPIC])
    admin.close()
    return f"kafka-python {kafka.__version__}"


def run_aiokafka(bootstrap: str, label: str, codecs: list[str]) -> str:
    return asyncio.run(_run_aiokafka(bootstrap, label, codecs))


async def _run_aiokafka(bootstrap: str, label: str, codecs: list[str]) -> str:
    import aiokafka
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topics = []
    for codec_name in codecs:
        for kind in KINDS:
            topic = topic_name(codec_name, kind)
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, client_id=f"golden-aiokafka-{codec_name}-{kind}",
                compression_type=None if codec_name == "none" else codec_name, linger_ms=100,
                enable_idempotence=kind != "plain", acks=1 if kind == "plain" else "all",
                transactional_id=f"golden-aiokafka-{codec_name}" if kind == "txn" else None)
            await producer.start()
            try:
                if kind == "txn":
                    await producer.begin_transaction()
                futures = [
                    await producer.send(topic, record_value(label, codec_name, kind, i),
                                        record_key(i), partition=0, headers=record_headers(i))
                    for i in range(RECORDS)
                ]
                if kind == "txn":
                    await producer.send_offsets_to_transaction(
                        {TopicPartition(topic, 0): RECORDS}, TXN_GROUP)
                    await producer.commit_transaction()
                await asyncio.wait_for(asyncio.gather(*futures), CLIENT_TIMEOUT_S)
            finally:
                await producer.stop()
            topics.append(topic)

    consumer = AIOKafkaConsumer(
        *topics, bootstrap_servers=bootstrap, group_id=CONSUMER_GROUP,
        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed",
        heartbeat_interval_ms=HEARTBEAT_MS)
    await consumer.start()
    try:
        want, got = len(topics) * RECORDS, 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while got < want:
            _check_deadline(deadline, f"aiokafka consumed {got} of {want}")
            batches = await consumer.getmany(timeout_ms=500)
            got += sum(len(v) for v in batches.values())
        await asyncio.sleep(5 * HEARTBEAT_MS / 1000)  # aiokafka reads too fast to heartbeat
        await consumer.commit()
    finally:
        await consumer.stop()

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(ADMIN_TOPIC, num_partitions=3, replication_factor=1)])
        await admin.describe_topics([ADMIN_TOPIC])
        await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, ADMIN_TOPIC)])
        await admin.describe_cluster()
        await admin.delete_topics([ADMIN_TOPIC])
    finally:
        await admin.close()
    return f"aiokafka {aiokafka.__version__}"


JAVA_JARS = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")


def java_classpath() -> list[Path]:
    """The kafka-clients 3.9.1 jars: .cache/java-jars/, else /tmp/flink/pyflink/lib/, else
    fetched into .cache/java-jars/ by tests/tools/fetch_java_jars.py."""
    for folder in (ROOT / ".cache" / "java-jars", Path("/tmp/flink/pyflink/lib")):
        jars = [folder / f"{name}.jar" for name in JAVA_JARS]
        if all(j.is_file() for j in jars):
            return jars
    from tests.tools.fetch_java_jars import ensure_jars

    return ensure_jars()


def run_java(bootstrap: str, label: str, codecs: list[str]) -> str:
    jars = java_classpath()
    source = GOLDEN / "GoldenClient.java"
    classes = ROOT / ".cache" / "golden-java"
    compiled = classes / "GoldenClient.class"
    if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
        classes.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["javac", "-d", str(classes), "-cp", os.pathsep.join(map(str, jars)), str(source)],
            check=True)
    cp = os.pathsep.join([str(classes), *map(str, jars)])
    done = subprocess.run(
        ["java", "-cp", cp, "GoldenClient", bootstrap, label, ",".join(codecs)],
        check=False, capture_output=True, text=True, timeout=5 * CLIENT_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"GoldenClient failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    version = next((line.split(" ", 1)[1] for line in done.stdout.splitlines()
                    if line.startswith("kafka-clients ")), "?")
    return f"kafka-clients {version}"


DRIVERS: dict[str, tuple[Callable[[str, str, list[str]], str], Callable[[], list[str]]]] = {
    "confluent": (run_confluent, lambda: list(CODECS)),
    "kafka-python": (run_kafka_python, kafka_python_codecs),
    "aiokafka": (run_aiokafka, lambda: list(CODECS)),
    "java": (run_java, lambda: list(CODECS)),
}


# --- output ---------------------------------------------------------------------------


def write_frames(client: str, broker: GoldenBroker) -> int:
    folder = GOLDEN / client
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    count = 0
    for stem, frames in sorted(broker.frames.items()):
        for n, frame in enumerate(frames):
            (folder / f"{stem}_{n:03d}.bin").write_bytes(frame)
            count += 1
    return count


def versions_table(counter: Counter[tuple[int, int]]) -> dict[str, list[int]]:
    table: dict[str, list[int]] = {}
    for api_key, version in sorted(counter):
        name = BY_KEY[api_key].name if api_key in BY_KEY else f"api{api_key}"
        table.setdefault(name, []).append(version)
    return table


def capture(client: str, frames_per_version: int) -> dict[str, Any]:
    driver, supported_codecs = DRIVERS[client]
    codecs = supported_codecs()
    broker = GoldenBroker(frames_per_version)
    with BrokerThread(broker) as server:
        software = driver(server.bootstrap, client, codecs)
    files = write_frames(client, broker)
    if broker.errors:
        raise RuntimeError(f"{client}: capture broker errors:\n" + "\n".join(broker.errors))
    return {
        "software": software,
        "api_versions_software": sorted(f"{n} {v}" for n, v in broker.software),
        "codecs": codecs,
        "skipped_codecs": [c for c in CODECS if c not in codecs],
        "requests": versions_table(broker.seen),
        "unsupported_requests": versions_table(broker.unsupported),
        "requests_with_trailing_bytes": versions_table(broker.trailing),
        "files": files,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--frames", type=int, default=FRAMES_PER_VERSION)
    args = parser.parse_args(argv)
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {"clients": {}}
    for client in args.clients.split(","):
        started = time.monotonic()
        entry = capture(client, args.frames)
        manifest["clients"][client] = entry
        print(f"{client}: {entry['software']}: {entry['files']} frames "
              f"in {time.monotonic() - started:.1f}s")
        for api, versions in entry["requests"].items():
            print(f"    {api}: {versions}")
        if entry["unsupported_requests"]:
            print(f"    unsupported: {entry['unsupported_requests']}")
        if entry["skipped_codecs"]:
            print(f"    skipped codecs (library missing): {entry['skipped_codecs']}")
        MANIFEST.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
