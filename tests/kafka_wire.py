"""A tiny blocking Kafka wire client for raw-protocol tests.

Frames are ``size int32`` + request header + body, encoded with the generated codecs
(``protocol.api.codec``); responses are matched to requests by correlation id, in order.
``send`` writes a request without reading (pipelining, acks=0), ``receive`` reads the
next response for a request sent earlier, ``request`` does both. Also builds v2 record
batches for produce requests and decodes the batches a fetch returns.
"""

from __future__ import annotations

import socket
import struct
from collections import deque
from typing import Self

from semel.protocol import api
from semel.protocol.frame import decode_response_header, encode_request_header
from semel.protocol.records import build_batch, iter_batches, iter_records

_SIZE = struct.Struct(">i")

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
DELETE_RECORDS, API_VERSIONS, CREATE_TOPICS, OFFSET_FOR_LEADER_EPOCH = 21, 18, 19, 23


def message(api_key: int, kind: str, class_name: str | None = None, /, **fields):
    """Build a generated message dataclass: ``message(FETCH, "request", max_wait_ms=10)``
    or a nested one by class name: ``message(FETCH, "request", "FetchTopic", topic="t")``."""
    module = api.codec(api_key, kind)
    if class_name is None:
        class_name = api.BY_KEY[api_key].name + kind.capitalize()
    return getattr(module, class_name)(**fields)


class KafkaWire:
    """One TCP connection to a broker, speaking raw Kafka frames."""

    def __init__(self, host: str, port: int, *, client_id: str = "kafka-wire",
                 timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0
        self.pending: deque[tuple[int, int, int]] = deque()  # (correlation id, key, version)

    @classmethod
    def connect(cls, bootstrap: str, **kw) -> KafkaWire:
        host, port = bootstrap.rsplit(":", 1)
        return cls(host, int(port), **kw)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- frames -------------------------------------------------------------------------

    def encode(self, api_key: int, version: int, body) -> tuple[int, bytes]:
        self.correlation_id += 1
        header = encode_request_header(api_key, version, self.correlation_id, self.client_id,
                                       api.request_header_version(api_key, version))
        payload = bytearray(header)
        api.codec(api_key, "request").encode(version, body, payload)
        return self.correlation_id, _SIZE.pack(len(payload)) + bytes(payload)

    def send(self, api_key: int, version: int, body, *, expect_response: bool = True) -> int:
        correlation_id, frame = self.encode(api_key, version, body)
        self.sock.sendall(frame)
        if expect_response:
            self.pending.append((correlation_id, api_key, version))
        return correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes | None:
        """The next frame's body, or None when the broker closed the connection."""
        head = self._read_exact(4)
        if head is None:
            return None
        (size,) = _SIZE.unpack(head)
        return self._read_exact(size)

    def receive(self):
        correlation_id, api_key, version = self.pending.popleft()
        frame = self.read_frame()
        if frame is None:
            raise ConnectionError("broker closed the connection")
        got, pos = decode_response_header(frame, api.response_header_version(api_key, version))
        if got != correlation_id:
            raise AssertionError(f"response for correlation id {got}, expected {correlation_id}")
        response, end = api.codec(api_key, "response").decode(version, memoryview(frame), pos)
        if end != len(frame):
            raise AssertionError(f"{len(frame) - end} trailing bytes in the response")
        return response

    def request(self, api_key: int, version: int, body):
        self.send(api_key, version, body)
        return self.receive()

    def is_closed_by_peer(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (EOF) within ``timeout`` seconds."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _read_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)


# -- helpers for common requests ----------------------------------------------------------

def records_batch(values: list[bytes], *, keys: list[bytes | None] | None = None,
                  timestamp: int = 1_700_000_000_000, compression: int = 0, **kw) -> bytes:
    """One v2 batch holding ``values`` (timestamps ``timestamp + i``)."""
    keys = keys or [None] * len(values)
    return build_batch([(k, v, [], timestamp + i) for i, (k, v) in enumerate(zip(keys, values))],
                       compression=compression, **kw)


def produce_request(topic: str, partition: int, records: bytes | None, *, acks: int = -1,
                    transactional_id: str | None = None, timeout_ms: int = 30_000):
    p = message(PRODUCE, "request", "PartitionProduceData", index=partition, records=records)
    t = message(PRODUCE, "request", "TopicProduceData", name=topic, partition_data=[p])
    return message(PRODUCE, "request", acks=acks, timeout_ms=timeout_ms,
                   transactional_id=transactional_id, topic_data=[t])


def fetch_request(partitions: list[tuple[str, int, int]], *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 50 * 1024 * 1024,
                  partition_max_bytes: int = 1024 * 1024, isolation_level: int = 0,
                  topic_ids: dict[str, object] | None = None, session_id: int = 0,
                  session_epoch: int = -1, forgotten: list[tuple[str, int]] = ()):
    """A fetch of ``(topic, partition, offset)``; with ``topic_ids`` topics go by id (v13+).
    ``forgotten`` lists ``(topic, partition)`` an incremental fetch drops from its session."""
    topics: dict[str, list] = {}
    for topic, partition, offset in partitions:
        topics.setdefault(topic, []).append(message(
            FETCH, "request", "FetchPartition", partition=partition, fetch_offset=offset,
            partition_max_bytes=partition_max_bytes))
    fetch_topics = []
    for topic, parts in topics.items():
        kw = {"topic_id": topic_ids[topic]} if topic_ids and topic in topic_ids else {}
        fetch_topics.append(message(FETCH, "request", "FetchTopic", topic=topic,
                                    partitions=parts, **kw))
    dropped: dict[str, list[int]] = {}
    for topic, partition in forgotten:
        dropped.setdefault(topic, []).append(partition)
    forgotten_topics = [
        message(FETCH, "request", "ForgottenTopic", topic=topic, partitions=parts,
                **({"topic_id": topic_ids[topic]} if topic_ids and topic in topic_ids else {}))
        for topic, parts in dropped.items()]
    return message(FETCH, "request", replica_id=-1, max_wait_ms=max_wait_ms,
                   min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=isolation_level,
                   session_id=session_id, session_epoch=session_epoch, topics=fetch_topics,
                   forgotten_topics_data=forgotten_topics)


def list_offsets_request(topic: str, partition: int, timestamp: int, *,
                         isolation_level: int = 0, current_leader_epoch: int = -1):
    p = message(LIST_OFFSETS, "request", "ListOffsetsPartition", partition_index=partition,
                timestamp=timestamp, current_leader_epoch=current_leader_epoch)
    t = message(LIST_OFFSETS, "request", "ListOffsetsTopic", name=topic, partitions=[p])
    return message(LIST_OFFSETS, "request", replica_id=-1, isolation_level=isolation_level,
                   topics=[t])


def make_topic(broker_thread, name: str, partitions: int = 1,
               configs: dict[str, str] | None = None):
    """Create a topic directly in a ``BrokerThread``'s log manager (on its event loop)."""

    async def create():
        return broker_thread.broker.log_manager.create_topic(name, partitions, configs or {})

    return broker_thread.call(create())


def create_topic(wire: KafkaWire, name: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> int:
    """CreateTopics v7 over the wire; returns the topic's error code."""
    topic = message(CREATE_TOPICS, "request", "CreatableTopic", name=name,
                    num_partitions=partitions, replication_factor=-1,
                    configs=[message(CREATE_TOPICS, "request", "CreatableTopicConfig",
                                     name=k, value=v) for k, v in (configs or {}).items()])
    resp = wire.request(CREATE_TOPICS, 7, message(CREATE_TOPICS, "request", topics=[topic]))
    return resp.topics[0].error_code


def decode_records(records) -> list:
    """Every record in a fetched ``records`` blob (whole batches only; a cut-off tail is
    skipped, as clients do)."""
    if not records:
        return []
    data = bytes(records)
    out = []
    for header in iter_batches(data):
        out.extend(iter_records(data, header))
    return out


def batch_headers(records) -> list:
    return list(iter_batches(bytes(records))) if records else []
