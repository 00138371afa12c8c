"""Fetch (key 1), v4-17.

Reads whole record batches, exactly as stored, from each requested partition, starting at
the batch that holds ``fetch_offset`` and ending before the upper bound: the high watermark
(read_uncommitted). Every partition answer carries high_watermark, last_stable_offset and
log_start_offset; errors carry -1 there, as Kafka's do.

- Isolation: read_committed (isolation_level 1) reads up to the log's last stable offset
  (``_upper_bound``) and returns the aborted transactions overlapping the data, or an
  empty list; read_uncommitted returns null there, as Kafka does. Until producer state and
  the transaction index arrive with transactions, the last stable offset equals the high
  watermark and no transaction is ever aborted, so read_committed behaves like
  read_uncommitted (hook for the aborted list: ``_read_all``).
- Sizes (KIP-74): each partition gets at most partition_max_bytes and the response at most
  max_bytes, except that until some partition has returned data, the first batch found is
  returned whole even if larger, so a consumer always makes progress.
- Long poll: with fewer than min_bytes found, no read error and max_wait_ms > 0, the fetch
  parks on ``broker.fetch_waiters`` (woken when a fetched partition's high watermark moves)
  and reads again, until min_bytes are there or max_wait_ms has passed.
- Errors per partition: UNKNOWN_TOPIC_OR_PARTITION; UNKNOWN_TOPIC_ID (v13+, topics by id);
  OFFSET_OUT_OF_RANGE outside [log_start_offset, log_end_offset]; FENCED_LEADER_EPOCH /
  UNKNOWN_LEADER_EPOCH for a current_leader_epoch other than 0; NOT_LEADER_OR_FOLLOWER for
  follower fetches (replica id >= 0: this node has no followers); KAFKA_STORAGE_ERROR
  (NOT_LEADER_OR_FOLLOWER before v6, as Kafka down-converts it).
- Fetch sessions (KIP-227): every full fetch (session epoch -1 or 0) is served sessionless
  and answered with session_id 0, which tells clients no session was created (Kafka does
  the same when its session cache is full); clients then keep sending full fetches. An
  incremental fetch (epoch > 0) names a session this broker never created:
  FETCH_SESSION_ID_NOT_FOUND.
- preferred_read_replica is always -1; diverging_epoch, current_leader, snapshot_id and
  node_endpoints are never set.
"""

from __future__ import annotations

import asyncio

from broker.handlers._partitions import check_leader_epoch
from protocol.errors import Error, KafkaError
from protocol.messages.fetch_request import FetchPartition, FetchRequest
from protocol.messages.fetch_response import (
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)

API_KEY = 1
READ_COMMITTED = 1
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
TOPIC_IDS_VERSION = 13


class _Read:
    """A partition the fetch reads: its request entry, log and (re)built answer."""

    __slots__ = ("log", "request", "response")

    def __init__(self, request: FetchPartition, log, response: PartitionData) -> None:
        self.request = request
        self.log = log
        self.response = response


async def handle(ctx, req: FetchRequest) -> FetchResponse:
    if req.session_epoch not in (FINAL_EPOCH, INITIAL_EPOCH):
        return FetchResponse(error_code=Error.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    version = ctx.api_version
    topics, reads = _resolve(ctx.log_manager, req, version)
    if not reads:
        return FetchResponse(responses=topics)

    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.max_wait_ms / 1000
    keys = [(r.log.topic_partition.topic, r.log.topic_partition.partition) for r in reads]
    waiters = ctx.broker.fetch_waiters
    while True:
        size, read_error = _read_all(reads, req, version)
        remaining = deadline - loop.time()
        if size >= req.min_bytes or read_error or remaining <= 0:
            return FetchResponse(responses=topics)
        woken = waiters.register(keys)
        try:
            await asyncio.wait_for(woken, remaining)
        except TimeoutError:
            pass


def _resolve(log_manager, req: FetchRequest, version: int):
    """The response skeleton, and the partitions that exist (the others get their error)."""
    by_id = version >= TOPIC_IDS_VERSION
    follower = req.replica_id >= 0 or req.replica_state.replica_id >= 0
    topics: list[FetchableTopicResponse] = []
    reads: list[_Read] = []
    for topic in req.topics:
        name = topic.topic
        missing = Error.NONE
        if by_id:
            info = log_manager.topic_by_id(topic.topic_id)
            if info is None:
                missing = Error.UNKNOWN_TOPIC_ID
            else:
                name = info.name
        partitions: list[PartitionData] = []
        topics.append(FetchableTopicResponse(topic=name, topic_id=topic.topic_id,
                                             partitions=partitions))
        for fp in topic.partitions:
            response = PartitionData(partition_index=fp.partition)
            partitions.append(response)
            if missing:
                _fail(response, missing)
                continue
            plog = log_manager.get_partition(name, fp.partition)
            if plog is None:
                _fail(response, Error.UNKNOWN_TOPIC_OR_PARTITION)
            elif follower:
                _fail(response, Error.NOT_LEADER_OR_FOLLOWER)
            else:
                reads.append(_Read(fp, plog, response))
    return topics, reads


def _read_all(reads: list[_Read], req: FetchRequest, version: int) -> tuple[int, bool]:
    """Read every partition in request order within the size limits; returns the record
    bytes read and whether any partition failed."""
    limit = req.max_bytes
    min_one_batch = True
    total = 0
    read_error = False
    read_committed = req.isolation_level == READ_COMMITTED
    for read in reads:
        fp, plog, response = read.request, read.log, read.response
        if plog.closed:  # its topic was deleted while the fetch waited
            _fail(response, Error.UNKNOWN_TOPIC_OR_PARTITION)
            read_error = True
            continue
        error = check_leader_epoch(fp.current_leader_epoch, plog.leader_epoch)
        if error:
            _fail(response, error)
            read_error = True
            continue
        try:
            result = plog.read(fp.fetch_offset, max(0, min(fp.partition_max_bytes, limit)),
                               upper_bound=_upper_bound(plog, read_committed),
                               min_one_batch=min_one_batch)
        except KafkaError as e:
            code = e.code
            if code == Error.KAFKA_STORAGE_ERROR and version <= 5:
                code = Error.NOT_LEADER_OR_FOLLOWER
            _fail(response, code)
            read_error = True
            continue
        records = result.records
        size = len(records)
        if size:
            min_one_batch = False
            limit = max(0, limit - size)
            total += size
        response.error_code = Error.NONE
        response.high_watermark = result.high_watermark
        response.last_stable_offset = result.last_stable_offset
        response.log_start_offset = result.log_start_offset
        # read_committed: the aborted transactions overlapping the data come from the
        # transaction index, which the log does not keep yet (no transactions are written)
        response.aborted_transactions = [] if read_committed else None
        response.records = records
    return total, read_error


def _upper_bound(plog, read_committed: bool) -> int:
    """Where reading stops: the last stable offset for read_committed, else the high
    watermark."""
    return plog.last_stable_offset if read_committed else plog.high_watermark


def _fail(response: PartitionData, code: Error) -> None:
    response.error_code = code
    response.high_watermark = -1
    response.last_stable_offset = -1
    response.log_start_offset = -1
    response.aborted_transactions = None
    response.records = b""


def error_response(req: FetchRequest, code: Error) -> FetchResponse:
    return FetchResponse(error_code=code, session_id=0)
