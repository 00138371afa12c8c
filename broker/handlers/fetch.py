"""Fetch (key 1), v4-17.

Reads whole record batches, exactly as stored, from each partition, starting at the batch
that holds ``fetch_offset`` and ending before the high watermark (read_uncommitted).
Successful partitions carry high_watermark, last_stable_offset and log_start_offset;
errors carry -1 there, as Kafka's do.

- Isolation: read_committed (isolation_level 1) reads up to the log's last stable offset
  (``_upper_bound``) and returns the aborted transactions (producer id, first offset) whose
  data meets the range returned - last offset >= fetch offset, first offset < the end of
  the returned batches - from the segments' ``.txnindex`` files (an empty list when none
  or when no data is returned); the client drops their batches. The end of the returned
  data is exact (Kafka estimates it from the offset index and may also name a transaction
  starting just after it, which clients ignore). read_uncommitted reads up to the high
  watermark and returns null there, as Kafka does.
- Sizes (KIP-74): each partition gets at most partition_max_bytes and the response at most
  max_bytes, except that until some partition has returned data, the first batch found is
  returned whole even if larger, so a consumer always makes progress.
- Long poll: with fewer than min_bytes found, no read error and max_wait_ms > 0, the fetch
  parks on ``broker.fetch_waiters`` (woken when a fetched partition's high watermark moves,
  which is also when its last stable offset can move: a marker becoming durable) and reads
  again, until min_bytes are there or max_wait_ms has passed. While parked it lets the
  connection's next request run (its response still follows this one's).
- Fetch sessions (KIP-227, v7+, ``broker.fetch_session``): epoch 0 opens a session and
  answers its id (0 when the cache is full); epochs 1, 2, ... read every partition of the
  session and answer only the changed ones; epoch -1 is a sessionless full fetch. Unknown
  session: FETCH_SESSION_ID_NOT_FOUND; wrong epoch (also a session whose epoch moved while
  this fetch waited): INVALID_FETCH_SESSION_EPOCH; topic ids used or not unlike the
  session's: FETCH_SESSION_TOPIC_ID_ERROR.
- Authorization (authorizer on): consumers need Read on each topic, follower fetches
  (replica id >= 0) ClusterAction on the cluster; otherwise TOPIC_AUTHORIZATION_FAILED,
  checked after UNKNOWN_TOPIC_ID and before the topic's existence, as KafkaApis does.
- Errors per partition: UNKNOWN_TOPIC_OR_PARTITION (also a topic deleted while the fetch
  waited); UNKNOWN_TOPIC_ID (v13+, topics by id); OFFSET_OUT_OF_RANGE outside
  [log_start_offset, log_end_offset]; FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH for a
  current_leader_epoch other than 0; NOT_LEADER_OR_FOLLOWER for follower fetches (replica
  id >= 0: this node has no followers); KAFKA_STORAGE_ERROR (NOT_LEADER_OR_FOLLOWER before
  v6, as Kafka down-converts it).
- Zero copy: with ``socket.sendfile.enable`` (default) on a listener without TLS, a
  partition's records of at least ATTACH_MIN bytes are a FileRegion (storage/file_region.py)
  rather than bytes: the connection sends them from the segment's file with os.sendfile
  after the response's preceding bytes. MessagesOut is then counted from the batch headers
  (``FileRegion.data_records``), not from the bytes, which the broker never reads.
- Client quotas (consumer_byte_rate, broker/quotas/): the response's size counts against
  the client's fetch quota; over it, or over the client's request_percentage quota, the
  response is empty (no partitions, no session
  created, an incremental session's cached state untouched) and carries the throttle time
  (dispatch mutes the connection), and the bytes are taken back, as Kafka's KafkaApis.
  max_bytes (and min_bytes) are capped at what the quota allows over its window, so a
  consumer is never throttled for certain. Follower fetches are not client-quota'd.
- preferred_read_replica is always -1; diverging_epoch, current_leader, snapshot_id and
  node_endpoints are never set.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from semel.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    PartitionKey,
    next_epoch,
    sessions_of,
)
from semel.broker.handlers._authz import NOTHING, cluster_allows, denied_topics
from semel.broker.handlers._partitions import check_leader_epoch
from semel.broker.security import AclOperation
from semel.protocol import api
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.fetch_request import FetchRequest
from semel.protocol.messages.fetch_response import (
    AbortedTransaction,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from semel.protocol.primitives import ATTACH_MIN, FrameBuilder
from semel.protocol.records import data_records
from semel.storage.file_region import FileRegion

API_KEY = 1
READ_COMMITTED = 1
TOPIC_IDS_VERSION = 13
ALL = object()  # a follower fetch without ClusterAction: every partition is denied
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})


class _Read:
    """One partition the fetch answers: what to read, its log (None after a lookup error)
    and its answer."""

    __slots__ = ("current_leader_epoch", "fetch_offset", "key", "log", "max_bytes",
                 "response", "topic", "topic_id")

    def __init__(self, key: PartitionKey, topic: str | None, topic_id: UUID, partition: int,
                 fetch_offset: int, max_bytes: int, current_leader_epoch: int) -> None:
        self.key = key
        self.topic = topic
        self.topic_id = topic_id
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.log = None
        self.response = PartitionData(partition_index=partition)


async def handle(ctx, req: FetchRequest) -> FetchResponse:
    by_id = ctx.api_version >= TOPIC_IDS_VERSION
    cache = sessions_of(ctx.broker)
    epoch = req.session_epoch
    session: FetchSession | None = None
    if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        if req.session_id != INVALID_SESSION_ID:
            cache.remove(req.session_id)  # a full fetch closes the session it names
        reads = _requested(req, by_id)
    else:
        session = cache.get(req.session_id)
        if session is None:
            return FetchResponse(error_code=Error.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchResponse(error_code=Error.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != by_id:
            return FetchResponse(error_code=Error.FETCH_SESSION_TOPIC_ID_ERROR)
        reads = _requested(req, by_id)
        session.update([(r.key, _cached(r, sent=False)) for r in reads], _forgotten(req, by_id))
        if not session.partitions:
            cache.remove(session.id)
            session = None
        else:
            cache.touch(session, ctx.broker.monotonic_ms())
            session.epoch = next_epoch(epoch)
            reads = [_Read(key, cp.topic, cp.topic_id, cp.partition, cp.fetch_offset,
                           cp.max_bytes, cp.current_leader_epoch)
                     for key, cp in session.partitions.items()]
    expected_epoch = session.epoch if session is not None else None

    quota = _quota(ctx, req)
    _resolve(ctx, reads, req)
    await _read_until_ready(ctx, reads, req)

    if session is not None:  # incremental
        if cache.get(session.id) is not session or session.epoch != expected_epoch:
            return FetchResponse(error_code=Error.INVALID_FETCH_SESSION_EPOCH,
                                 session_id=session.id)
        if quota is not None and (throttled := _throttled(ctx, quota, reads, by_id, session.id)):
            return throttled
        _count_bytes_out(ctx, reads)
        return FetchResponse(session_id=session.id,
                             responses=_grouped(_changed(session, reads), by_id))
    session_id = INVALID_SESSION_ID
    if quota is not None and (throttled := _throttled(ctx, quota, reads, by_id, session_id)):
        return throttled
    if epoch == INITIAL_EPOCH:
        session_id = cache.create({r.key: _cached(r) for r in reads}, by_id,
                                  ctx.broker.monotonic_ms())
    _count_bytes_out(ctx, reads)
    return FetchResponse(session_id=session_id, responses=_grouped(reads, by_id))


def _quota(ctx, req: FetchRequest):
    """The fetch quota manager when a consumer_byte_rate quota exists (None otherwise, and
    for follower fetches); caps the request's sizes at what the client's quota allows over
    its window (Kafka's maxValueInQuotaWindow)."""
    quotas = ctx.broker.quotas
    quota = quotas.fetch
    if not (quota.enabled or quotas.request.enabled) or req.replica_id >= 0 \
            or req.replica_state.replica_id >= 0:
        return None
    most = quota.max_value_in_window(ctx.principal.name, ctx.header.client_id or "")
    if most is not None:
        req.max_bytes = min(req.max_bytes, int(most))
        req.min_bytes = min(req.min_bytes, req.max_bytes)
    return quota


def _throttled(ctx, quota, reads: list[_Read], by_id: bool, session_id: int
               ) -> FetchResponse | None:
    """Record this response's size against the client's fetch quota; over it, or over the
    client's request quota, take the bytes back and answer the empty throttled response
    instead (its regions released), as Kafka's handleFetchRequest does. Dispatch records
    the request's own time afterwards."""
    user, client_id = ctx.principal.name, ctx.header.client_id or ""
    now = ctx.broker.monotonic_ms()
    size = _response_size(ctx.api_version, reads, by_id)
    throttle_ms = quota.record(user, client_id, size, now)
    requests = ctx.broker.quotas.request
    if requests.enabled:  # recording nothing: the throttle the client's rate calls for now
        throttle_ms = max(throttle_ms, requests.record(user, client_id, 0, now))
    if throttle_ms <= 0:
        return None
    quota.unrecord(user, client_id, size, now)
    for read in reads:
        _release(read.response)
    return FetchResponse(throttle_time_ms=throttle_ms, session_id=session_id)


def _response_size(version: int, reads: list[_Read], by_id: bool) -> int:
    """The bytes of the response (size prefix and header included) answering every read:
    encoded with records attached by reference, so never copied."""
    out = FrameBuilder(4)
    api.codec(API_KEY, "response").encode(
        version, FetchResponse(responses=_grouped(reads, by_id)), out)
    header = 5 if version >= api.codec(API_KEY, "request").FIRST_FLEXIBLE else 4
    return sum(len(chunk) for chunk in out.chunks()) + header


def _requested(req: FetchRequest, by_id: bool) -> list[_Read]:
    reads = []
    for topic in req.topics:
        name = None if by_id else topic.topic
        for fp in topic.partitions:
            key = (topic.topic_id if by_id else topic.topic, fp.partition)
            reads.append(_Read(key, name, topic.topic_id, fp.partition, fp.fetch_offset,
                               fp.partition_max_bytes, fp.current_leader_epoch))
    return reads


def _forgotten(req: FetchRequest, by_id: bool) -> list[PartitionKey]:
    return [(t.topic_id if by_id else t.topic, p)
            for t in req.forgotten_topics_data for p in t.partitions]


def _cached(read: _Read, *, sent: bool = True) -> CachedPartition:
    """The session entry for ``read``; with ``sent``, remembering the answer sent for it."""
    cached = CachedPartition(read.topic, read.topic_id, read.response.partition_index,
                             read.fetch_offset, read.max_bytes, read.current_leader_epoch)
    if sent:
        cached.high_watermark = read.response.high_watermark
        cached.log_start_offset = read.response.log_start_offset
    return cached


def _resolve(ctx, reads: list[_Read], req: FetchRequest) -> None:
    """Find each partition's log; the ones that do not exist or may not be read get their
    error now (Kafka's order: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED, then
    UNKNOWN_TOPIC_OR_PARTITION)."""
    log_manager = ctx.log_manager
    follower = req.replica_id >= 0 or req.replica_state.replica_id >= 0
    for read in reads:
        if read.topic is None:  # by id
            info = log_manager.topic_by_id(read.topic_id)
            if info is None:
                _fail(read.response, Error.UNKNOWN_TOPIC_ID)
                continue
            read.topic = info.name
    if ctx.broker.authorizer is not None:
        if follower:
            denied = NOTHING if cluster_allows(ctx, AclOperation.CLUSTER_ACTION) else ALL
        else:
            denied = denied_topics(ctx, AclOperation.READ,
                                   (r.topic for r in reads if r.topic is not None))
    else:
        denied = NOTHING
    for read in reads:
        if read.topic is None:
            continue
        if denied is ALL or (denied and read.topic in denied):
            _fail(read.response, Error.TOPIC_AUTHORIZATION_FAILED)
            continue
        plog = log_manager.get_partition(read.topic, read.response.partition_index)
        if plog is None:
            _fail(read.response, Error.UNKNOWN_TOPIC_OR_PARTITION)
        elif follower:
            _fail(read.response, Error.NOT_LEADER_OR_FOLLOWER)
        else:
            read.log = plog


async def _read_until_ready(ctx, reads: list[_Read], req: FetchRequest) -> None:
    """Read, and while fewer than min_bytes came back, wait for new data (max_wait_ms)."""
    readable = [r for r in reads if r.log is not None]
    if not readable:
        return
    version = ctx.api_version
    loop = asyncio.get_running_loop()
    deadline = loop.time() + req.max_wait_ms / 1000
    keys = [(r.log.topic_partition.topic, r.log.topic_partition.partition) for r in readable]
    waiters = ctx.broker.fetch_waiters
    region_min = _region_min(ctx)
    while True:
        size, read_error = _read_all(readable, req, version, region_min)
        remaining = deadline - loop.time()
        if size >= req.min_bytes or read_error or remaining <= 0:
            return
        woken = waiters.register(keys)
        ctx.release_connection()  # parked, not runnable: the connection's next request may run
        try:
            await asyncio.wait_for(woken, remaining)
        except TimeoutError:
            pass


def _region_min(ctx) -> int | None:
    """The smallest records read as a FileRegion (sent with sendfile), None for none: the
    response frame attaches records of ATTACH_MIN bytes and more by reference, so a region
    is never smaller; TLS needs the bytes."""
    if not ctx.config.socket_sendfile_enable or ctx.session.protocol in TLS_PROTOCOLS:
        return None
    return ATTACH_MIN


def _read_all(reads: list[_Read], req: FetchRequest, version: int,
              region_min: int | None = None) -> tuple[int, bool]:
    """Read every partition in order within the size limits; returns the record bytes read
    and whether any partition failed. A read again (a long poll woken) releases the file
    regions of the one before."""
    limit = req.max_bytes
    min_one_batch = True
    total = 0
    read_error = False
    read_committed = req.isolation_level == READ_COMMITTED
    for read in reads:
        plog, response = read.log, read.response
        if plog.closed:  # its topic was deleted while the fetch waited
            _fail(response, Error.UNKNOWN_TOPIC_OR_PARTITION)
            read_error = True
            continue
        error = check_leader_epoch(read.current_leader_epoch, plog.leader_epoch)
        if error:
            _fail(response, error)
            read_error = True
            continue
        try:
            _release(response)
            result = plog.read(read.fetch_offset, max(0, min(read.max_bytes, limit)),
                               upper_bound=_upper_bound(plog, read_committed),
                               min_one_batch=min_one_batch, region_min=region_min)
            aborted = None
            if read_committed:
                aborted = [AbortedTransaction(producer_id=pid, first_offset=first) for pid, first
                           in plog.aborted_transactions_in(read.fetch_offset, result.records)]
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
        response.aborted_transactions = aborted
        response.records = records
    return total, read_error


def _count_bytes_out(ctx, reads: list[_Read]) -> None:
    """Add the record bytes and the records (of data batches, from their headers) this
    response returns to the per-topic counts (BytesOut, MessagesOut; an incremental response
    leaves out only partitions without records)."""
    counts = ctx.broker.metrics.topic_out
    for read in reads:
        records = read.response.records
        if records:
            topic = counts.get(read.topic)
            if topic is None:
                topic = counts[read.topic] = [0, 0]
            topic[0] += len(records)
            topic[1] += (records.data_records() if records.__class__ is FileRegion
                         else data_records(records))


def _upper_bound(plog, read_committed: bool) -> int:
    """Where reading stops: the last stable offset for read_committed, else the high
    watermark."""
    return plog.last_stable_offset if read_committed else plog.high_watermark


def _changed(session: FetchSession, reads: list[_Read]) -> list[_Read]:
    """The partitions an incremental response must carry; those with records move to the
    end of the session order."""
    changed = []
    for read in reads:
        cached = session.partitions[read.key]
        if read.topic is not None:
            cached.topic = read.topic
        r = read.response
        size = len(r.records) if r.records else 0
        if cached.must_respond(r.error_code, size, r.high_watermark, r.log_start_offset):
            changed.append(read)
            if size:
                session.rotate_to_end(read.key)
    return changed


def _grouped(reads: list[_Read], by_id: bool) -> list[FetchableTopicResponse]:
    """Consecutive partitions of one topic share a topic entry, as in Kafka's responses."""
    topics: list[FetchableTopicResponse] = []
    last = None
    for read in reads:
        ident = read.topic_id if by_id else read.topic
        if not topics or ident != last:
            topics.append(FetchableTopicResponse(topic=read.topic or "", topic_id=read.topic_id))
            last = ident
        topics[-1].partitions.append(read.response)
    return topics


def _release(response: PartitionData) -> None:
    """Unpin the file region the partition's answer holds, if any (it is being replaced)."""
    records = response.records
    if records.__class__ is FileRegion:
        records.release()


def _fail(response: PartitionData, code: Error) -> None:
    _release(response)
    response.error_code = code
    response.high_watermark = -1
    response.last_stable_offset = -1
    response.log_start_offset = -1
    response.aborted_transactions = None
    response.records = b""


def error_response(req: FetchRequest, code: Error) -> FetchResponse:
    return FetchResponse(error_code=code, session_id=INVALID_SESSION_ID)
