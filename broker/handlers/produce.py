"""Produce (key 0), v3-12.

Appends each partition's record batch to its log as Kafka's leader does and answers per
partition with the base offset, the log append time (-1 unless the topic uses
LogAppendTime) and the log start offset. The handler peeks at the first batch header, then
has the log validate the batch (``PartitionLog.validate_client_append``: header, CRC, sizes
and the record walk of protocol/validator.py, which decodes no record objects); a
compressed batch whose walk passes ``_LOOP_BUDGET`` decompressed bytes is finished in a
worker thread, so one decompression bomb does not stall the event loop; the validated
batch is then appended (and rewritten in place) without being walked again. A validation
failure is reported where the append would have failed, after the checks Kafka makes
before appending (internal topic, transaction verification).

- acks 0: no response; if any partition fails the connection is closed (Kafka does this so
  the producer notices and refreshes metadata). acks 1: answer after the append. acks -1
  ("all"): answer once the data is fsynced (group commit, ``PartitionLog.durable_future``;
  immediate with log.flush.mode=none), bounded by ``timeout_ms`` when it is positive
  (REQUEST_TIMED_OUT after it, the data stays appended, as in Kafka). Other values:
  INVALID_REQUIRED_ACKS.
- The appends of a request all happen together, synchronously, after its validations (the
  only await before them is a large batch's walk in a worker thread, or the coordinator for
  v12); the connection runs one request at a time until the handler calls
  ``ctx.release_connection()``, right after the appends and before waiting for the disk,
  so requests on one connection reach the log in order.
- Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION (as in Kafka 4, produce never creates a
  topic; clients create them through Metadata), INVALID_TOPIC_EXCEPTION for internal topics,
  INVALID_RECORD (no batch, not magic 2, more than one batch - v3+ carries exactly one per
  partition -, bad counts, control batches from clients, malformed records, bad offset
  deltas, corrupt compressed data or more than message.max.uncompressed.bytes of it, and,
  with record_errors, records without a key on a compacted topic),
  UNSUPPORTED_COMPRESSION_TYPE (zstd before v7), CORRUPT_MESSAGE (CRC, impossible
  lengths), MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_TIMESTAMP (with
  record_errors), KAFKA_STORAGE_ERROR. v8+ carries error_message and record_errors.
- Authorization (with the authorizer on, as KafkaApis): a request with a transactional
  batch needs Write on its transactional id, else the whole request fails with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then each topic needs Write, else its partitions
  get TOPIC_AUTHORIZATION_FAILED before any other check. Internal topics also need the
  admin client id and, beyond Kafka, ClusterAction on the cluster. One cached decision per
  topic per request; nothing at all while the authorizer is off.
- Transactional batches: without a transactional_id the whole request fails with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED; transactional batches from more than one producer
  id fail it with INVALID_PRODUCER_ID_MAPPING. A partition where the producer has no
  transaction open yet (in its epoch) is first checked with the transaction coordinator
  (``_verify_transaction``, KIP-890 part 1, Kafka's hanging-transaction fix; skipped when
  transaction.partition.verification.enable is false): not in the producer's transaction
  -> INVALID_TXN_STATE ("Partition was not added to the transaction"; TRANSACTION_ABORTABLE
  from v11), fenced -> INVALID_PRODUCER_EPOCH, unknown id -> INVALID_PRODUCER_ID_MAPPING,
  a coordinator that is busy or not ready -> NOT_ENOUGH_REPLICAS (retried by every client).
  v12 (transaction version 2, KIP-890 part 2): such partitions are added to the transaction
  implicitly instead (always, as Kafka does), awaiting the coordinator; the request's
  appends still all happen after that, synchronously, and the requests of one producer id
  reach the log in arrival order (``_ORDER``: a request waits for the one before it).
- Beyond Kafka, with the authorizer on (coordinator/producer_principal.py): a batch whose
  producer id InitProducerId issued to another principal fails its partition, before any
  transaction check, with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (transactional batch) or
  CLUSTER_AUTHORIZATION_FAILED (idempotent batch) and a message saying why; both are fatal
  to Java's and librdkafka's producers. One dict lookup per batch with a producer id.
- v10+: current_leader and node_endpoints only accompany NOT_LEADER_OR_FOLLOWER, which a
  single node never returns.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

from semel.broker.handlers._authz import (
    NOTHING,
    cluster_allows,
    denied_topics,
    foreign_producer_id,
    foreign_producer_message,
)
from semel.broker.handlers._txn import txn_coordinator, txn_coordinator_of, verification_error
from semel.broker.handlers.metadata import INTERNAL_TOPICS
from semel.broker.security import AclOperation, ResourceType
from semel.protocol import produce_fast
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.produce_request import ProduceRequest
from semel.protocol.messages.produce_response import (
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from semel.protocol.records import HEADER_SIZE, MAGIC, BatchHeader, read_header
from semel.storage.partition_log import RecordValidationError
from semel.storage.topic_partition import TopicPartition

API_KEY = 0
GENERIC_ERRORS_VERSION = 11  # TRANSACTION_ABORTABLE understood (KIP-890 part 1)
IMPLICIT_ADD_VERSION = 12  # transaction version 2 (KIP-890 part 2)
ADMIN_CLIENT_ID = "__admin_client"  # Kafka lets only its admin client write internal topics
ZSTD = 4
VALID_ACKS = (-1, 0, 1)
_FAST_ACKS = (-1, 1)
# the resolution of acks=all request timeouts while the disk is awaited (Timeouts)
TIMEOUT_TICK_MS = 10
# compressed batches up to this size are validated on the fast path (decompressed, well
# within _LOOP_BUDGET at any usual ratio); larger ones go the full way
_FAST_COMPRESSED = 64 * 1024
# decompressed bytes a batch's walk may take on the event loop before it moves to a worker
# thread (about a millisecond of zstd/lz4 and walking; see bench/bench_protocol_records.py)
_LOOP_BUDGET = 1 << 20
# coordinator answers older clients may not retry: NOT_ENOUGH_REPLICAS makes all of them
# retry without refreshing metadata (Kafka's ReplicaManager translation)
_NOT_VERIFIED = dict.fromkeys((Error.CONCURRENT_TRANSACTIONS, Error.NETWORK_EXCEPTION,
                               Error.COORDINATOR_LOAD_IN_PROGRESS, Error.COORDINATOR_NOT_AVAILABLE,
                               Error.NOT_COORDINATOR), Error.NOT_ENOUGH_REPLICAS)
# per producer id, the v12 request adding partitions right now (later ones wait for it)
_ORDER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PartitionResult = produce_fast.PartitionResult
_tuple_new = tuple.__new__  # what the named tuple's __new__ calls, without its frame
# errors after which Kafka reports log_start_offset -1 (UNKNOWN_LOG_APPEND_INFO)
_NO_LOG_START = frozenset({Error.UNKNOWN_TOPIC_OR_PARTITION, Error.NOT_LEADER_OR_FOLLOWER,
                           Error.MESSAGE_TOO_LARGE, Error.RECORD_LIST_TOO_LARGE,
                           Error.CORRUPT_MESSAGE, Error.KAFKA_STORAGE_ERROR})


class _Entry:
    """One partition of the request on its way to the log."""

    __slots__ = ("error", "header", "plog", "records", "response", "topic", "validated")

    def __init__(self, topic: str, response: PartitionProduceResponse, plog, records,
                 header: BatchHeader) -> None:
        self.topic = topic
        self.response = response
        self.plog = plog
        self.records = records
        self.header = header
        self.validated = None  # storage.partition_log.ClientAppend, once run
        self.error: KafkaError | None = None  # why validation refused the batch


async def handle(ctx, req: ProduceRequest) -> ProduceResponse | None:
    version = ctx.api_version
    logs = ctx.log_manager
    topics: list[TopicProduceResponse] = []
    entries: list[_Entry] = []
    failed = False
    denied = NOTHING
    principals = None
    if ctx.broker.authorizer is not None:
        principals = ctx.broker.producer_principals
        error = _authorize(ctx, req)
        if error:
            return _whole_request_error(req, error)
        denied = denied_topics(ctx, AclOperation.WRITE, (t.name for t in req.topic_data))
    for topic in req.topic_data:
        partitions: list[PartitionProduceResponse] = []
        topics.append(TopicProduceResponse(name=topic.name, partition_responses=partitions))
        topic_denied = topic.name in denied
        for data in topic.partition_data:
            response = PartitionProduceResponse(index=data.index, base_offset=-1)
            partitions.append(response)
            if topic_denied:
                _fail(response, Error.TOPIC_AUTHORIZATION_FAILED, None)
                failed = True
                continue
            plog = logs.get_partition(topic.name, data.index)
            if plog is None:
                _fail(response, Error.UNKNOWN_TOPIC_OR_PARTITION, None)
                failed = True
                continue
            header, error, message = _first_batch(data.records, version)
            if error:
                _fail(response, error, message)
                failed = True
                continue
            if (principals is not None and header.producer_id >= 0
                    and foreign_producer_id(ctx, header.producer_id)):
                _fail(response, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                      if header.is_transactional else Error.CLUSTER_AUTHORIZATION_FAILED,
                      foreign_producer_message(ctx, header.producer_id))
                failed = True
                continue
            entries.append(_Entry(topic.name, response, plog, data.records, header))

    transactional = [e for e in entries if e.header.is_transactional]
    if transactional:
        if req.transactional_id is None:
            return _whole_request_error(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if len({(e.header.producer_id, e.header.producer_epoch) for e in transactional}) > 1:
            return _whole_request_error(req, Error.INVALID_PRODUCER_ID_MAPPING)

    acks = req.acks
    if acks not in VALID_ACKS:
        for entry in entries:
            _fail(entry.response, Error.INVALID_REQUIRED_ACKS, None)
        return ProduceResponse(responses=topics)

    internal_allowed = _internal_allowed(ctx)
    if not internal_allowed:  # internal topics fail at the append
        transactional = [e for e in transactional if e.topic not in INTERNAL_TOPICS]
    await _validate_all(ctx, [e for e in entries
                              if internal_allowed or e.topic not in INTERNAL_TOPICS])
    if version >= IMPLICIT_ADD_VERSION and transactional:
        waits, append_failed = await _ordered_append(ctx, req, entries, transactional, version)
    else:
        rejected = {}
        if transactional and ctx.config.transaction_partition_verification_enable:
            rejected = _verify_transaction(ctx, req.transactional_id, transactional, version)
        waits, append_failed = _append_all(ctx, req, entries, rejected)
    failed = failed or append_failed
    ctx.release_connection()  # the connection's next request may start; answers stay in order

    if acks == 0:
        if failed:
            _close_connection(_summary(topics))
        return None
    if waits:
        ctx.release_connection()  # appended: the connection's next request may start
        await _wait_durable(waits, req.timeout_ms)
    return ProduceResponse(responses=topics)


async def _ordered_append(ctx, req: ProduceRequest, entries: list[_Entry],
                          transactional: list[_Entry], version: int):
    """Produce v12: add the partitions without an open transaction implicitly, then append
    everything; behind any earlier request of the same producer id still doing so."""
    order = _ORDER.setdefault(ctx.broker, {})
    producer_id = transactional[0].header.producer_id
    previous = order.get(producer_id)
    done = asyncio.get_running_loop().create_future()
    order[producer_id] = done
    try:
        if previous is not None and not previous.done():
            await asyncio.shield(previous)
        rejected = await _add_implicitly(ctx, req.transactional_id, transactional, version)
        return _append_all(ctx, req, entries, rejected)
    finally:
        done.set_result(None)
        if order.get(producer_id) is done:
            del order[producer_id]


def _append_all(ctx, req: ProduceRequest, entries: list[_Entry],
                rejected: dict[_Entry, Error]) -> tuple[list[tuple[_Entry, int]], bool]:
    """Append every entry not rejected, synchronously; returns the acks=all waits and
    whether any partition failed."""
    acks = req.acks
    failed = False
    internal_allowed = _internal_allowed(ctx)
    waits: list[tuple[_Entry, int]] = []
    topic_in = ctx.broker.metrics.topic_in  # topic -> [bytes, records] (broker/metrics.py)
    for entry in entries:
        response = entry.response
        if entry.topic in INTERNAL_TOPICS and not internal_allowed:
            _fail(response, Error.INVALID_TOPIC_EXCEPTION,
                  f"Cannot append to internal topic {entry.topic}")
            failed = True
            continue
        if entry in rejected:
            code = rejected[entry]
            _fail(response, code, _verification_message(code))
            failed = True
            continue
        plog = entry.plog
        if entry.error is not None:
            _refused(response, plog, entry.error)
            failed = True
            continue
        try:
            result = plog.append(entry.records, origin="client", validated=entry.validated)
        except KafkaError as e:
            _refused(response, plog, e)
            failed = True
            continue
        response.base_offset = result.base_offset
        response.log_append_time_ms = result.log_append_time
        response.log_start_offset = result.log_start_offset
        if not result.duplicate:
            counts = topic_in.get(entry.topic)
            if counts is None:
                counts = topic_in[entry.topic] = [0, 0]
            counts[0] += len(entry.records)
            counts[1] += entry.header.record_count
        if acks == -1 and plog.high_watermark < result.next_offset:
            waits.append((entry, result.next_offset))
    return waits, failed


class FastProduce:
    """A Produce request of the common shape, appended (``fast_path``); ``wait`` (acks=all
    with data not yet durable) and ``encode`` finish it."""

    __slots__ = ("any_failed", "results", "timeout_ms", "version", "waits")

    def __init__(self, version: int, timeout_ms: int, results: list, waits: list) -> None:
        self.version = version
        self.timeout_ms = timeout_ms
        self.results = results  # [(topic, [PartitionResult])]
        self.waits = waits  # [(plog, next offset, topic position, partition position)]
        self.any_failed = False  # some partition's answer has an error code

    def answer_when_durable(self, loop: asyncio.AbstractEventLoop,
                            answer: Callable[[], list],
                            timeouts: Timeouts | None = None) -> asyncio.Future:
        """``wait`` without a coroutine, for the connection (no task per request waiting for
        the disk): a future of ``loop`` that gets ``answer()`` once every waited partition is
        durable or failed, as ``wait`` would have left the results (the same futures, the
        same timeout). Cancelling it (the connection closed) stops the waits. A request
        for one partition waits as the log's own waiter (``_OneWait``), its timeout kept in
        ``timeouts`` (of ``loop``) if given, else by a timer of its own."""
        result = loop.create_future()
        waits = self.waits
        if len(waits) == 1:  # the common case: the log calls the waiter itself (_OneWait)
            waiter = _OneWait(self, result, answer)
            try:
                waiting = waits[0][0].add_durable_waiter(waits[0][1], waiter)
            except KafkaError as e:
                self._wait_failed(0, (e.code, e.message))
                waiting = False
            if not waiting:
                _set_answer(result, answer)
            elif self.timeout_ms > 0:
                if timeouts is None:
                    timeouts = Timeouts(loop)
                waiter.timeout = timeouts.add(waiter, self.timeout_ms)
            return result
        pending = []
        for i, (plog, offset, _, _) in enumerate(waits):
            try:
                future = plog.durable_future(offset, loop)
            except KafkaError as e:
                self._wait_failed(i, (e.code, e.message))
            else:
                if future is not None:
                    pending.append((i, future))
        if not pending:
            _set_answer(result, answer)
            return result
        countdown = _Countdown(self, pending, result, answer)
        for _, future in pending:
            future.add_done_callback(countdown.one_done)
        result.add_done_callback(countdown.finished)
        if self.timeout_ms > 0:
            countdown.timer = loop.call_later(self.timeout_ms / 1000, _time_out, pending)
        return result

    def _wait_failed(self, i: int, failure: tuple[Error, str | None]) -> None:
        _, _, t, p = self.waits[i]
        partitions = self.results[t][1]
        partitions[p] = _failed(partitions[p].index, *failure)
        self.any_failed = True

    def appended(self, broker, position: int, topic: str, index: int, plog, records,
                 header: BatchHeader, result, acks_all: bool) -> None:
        partitions = self.results[position][1]
        partitions.append(_tuple_new(_PartitionResult, (  # PartitionResult(...), no frame
            index, 0, result.base_offset, result.log_append_time, result.log_start_offset, None)))
        if not result.duplicate:
            topic_in = broker.metrics.topic_in  # topic -> [bytes, records]
            counts = topic_in.get(topic)
            if counts is None:
                counts = topic_in[topic] = [0, 0]
            counts[0] += len(records)
            counts[1] += header.record_count
        if acks_all and plog.high_watermark < result.last_offset + 1:
            self.waits.append((plog, result.last_offset + 1, position, len(partitions) - 1))

    def failed(self, position: int, index: int, plog, e: KafkaError) -> None:
        self.any_failed = True
        self.results[position][1].append(_failed(
            index, e.code, e.message, -1 if e.code in _NO_LOG_START else plog.log_start_offset))

    def encode(self, correlation_id: int) -> bytearray:
        return produce_fast.encode_response(self.version, correlation_id, self.results)

    def error_codes(self):
        """The non-zero error codes of the answer (for the error metric)."""
        return [p.error_code for _, partitions in self.results for p in partitions
                if p.error_code]


class _Countdown:
    """The durable futures of one ``FastProduce.answer_when_durable``: each one done counts
    down; the last one sets the answer (``_durable_failures``' outcomes, in the results)."""

    __slots__ = ("answer", "fast", "left", "pending", "result", "timer")

    def __init__(self, fast: FastProduce, pending: list[tuple[int, asyncio.Future]],
                 result: asyncio.Future, answer: Callable[[], list]) -> None:
        self.fast = fast
        self.pending = pending
        self.left = len(pending)
        self.result = result
        self.answer = answer
        self.timer: asyncio.TimerHandle | None = None

    def one_done(self, _future: asyncio.Future) -> None:
        self.left -= 1
        if self.left or self.result.done():
            return
        fast = self.fast
        for i, future in self.pending:
            if future.cancelled():  # not by us (the result is not done): as a failure
                fast._wait_failed(i, (Error.KAFKA_STORAGE_ERROR, "cancelled"))
                continue
            exc = future.exception()
            if exc is None:
                continue
            if isinstance(exc, _TimedOut):
                plog, offset, _, _ = fast.waits[i]
                if plog.high_watermark >= offset:
                    continue
                exc = KafkaError(Error.REQUEST_TIMED_OUT)
            fast._wait_failed(i, _failure(exc))
        _set_answer(self.result, self.answer)

    def finished(self, result: asyncio.Future) -> None:
        """Answered, or cancelled (then the waits stop: nobody reads a failure set later,
        none is logged)."""
        if self.timer is not None:
            self.timer.cancel()
        if result.cancelled():
            for _, future in self.pending:
                if not future.cancel() and not future.cancelled():
                    future.exception()


class _OneWait:
    """The wait of a ``FastProduce`` for one partition, without a future of its own: the log
    keeps this among its durable waiters and calls ``set_result``/``set_exception`` as it would
    a future's (``PartitionLog.add_durable_waiter``), and the answer is set at once - one hop
    of the loop (the answer future's callback) instead of three, no countdown. The outcomes
    are ``_Countdown``'s for one future: durable, the fsync's failure, or REQUEST_TIMED_OUT
    after the request's timeout unless the data became durable meanwhile. The answer
    cancelled (the connection closed): the timeout is dropped when the log resolves the
    wait. ``timeout``: the waiter's bucket in ``Timeouts`` while it counts."""

    __slots__ = ("answer", "fast", "result", "timeout")

    def __init__(self, fast: FastProduce, result: asyncio.Future,
                 answer: Callable[[], list]) -> None:
        self.fast = fast
        self.result = result
        self.answer = answer
        self.timeout: dict | None = None

    def done(self) -> bool:
        # answered, timed out or cancelled; but not while a cancelled one's timeout counts:
        # the log then calls set_result or set_exception, which drops it
        return self.timeout is None and self.result.done()

    def set_result(self, _value: None) -> None:
        """The log is durable up to the request's records."""
        timeout = self.timeout
        if timeout is not None:
            self.timeout = None
            del timeout[self]
        result = self.result
        if not result.done():
            try:  # _set_answer, inline
                result.set_result(self.answer())
            except Exception as e:  # noqa: BLE001 - a fault of ours, for the connection
                result.set_exception(e)

    def set_exception(self, exc: BaseException) -> None:
        """The fsync covering the records failed (or the log was truncated or closed)."""
        timeout = self.timeout
        if timeout is not None:
            self.timeout = None
            del timeout[self]
        if not self.result.done():
            self.fast._wait_failed(0, _failure(exc))
            _set_answer(self.result, self.answer)

    def timed_out(self) -> None:
        """The request's timeout passed while it waited for the disk (the data stays)."""
        self.timeout = None
        if not self.result.done():
            plog, offset, _, _ = self.fast.waits[0]
            if plog.high_watermark < offset:
                self.fast._wait_failed(0, _failure(KafkaError(Error.REQUEST_TIMED_OUT)))
            _set_answer(self.result, self.answer)


class Timeouts:
    """The timeouts of one loop's ``_OneWait``s, in buckets of ``TIMEOUT_TICK_MS`` by when
    they expire: one timer of the loop per bucket, not one per request (a timer costs the
    loop more than the rest of a wait's bookkeeping). A waiter answered leaves its bucket;
    the bucket's timer times out those still in it, at most a tick after their timeout.
    The dispatcher keeps one for its loop."""

    __slots__ = ("buckets", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.buckets: dict[int, dict[_OneWait, None]] = {}  # tick -> waiters

    def add(self, waiter: _OneWait, timeout_ms: int) -> dict[_OneWait, None]:
        """Count ``timeout_ms`` for ``waiter`` from now; its bucket (it deletes itself from
        it when answered)."""
        tick = int((self.loop.time() * 1000 + timeout_ms) // TIMEOUT_TICK_MS) + 1
        buckets = self.buckets
        bucket = buckets.get(tick)
        if bucket is None:
            bucket = buckets[tick] = {}
            self.loop.call_at(tick * TIMEOUT_TICK_MS / 1000, self._expire, tick)
        bucket[waiter] = None
        return bucket

    def _expire(self, tick: int) -> None:
        for waiter in list(self.buckets.pop(tick, ())):
            waiter.timed_out()


def _set_answer(result: asyncio.Future, answer: Callable[[], list]) -> None:
    try:
        result.set_result(answer())
    except Exception as e:  # noqa: BLE001 - a fault of ours, for the connection to report
        result.set_exception(e)


def _failure(exc: BaseException) -> tuple[Error, str | None]:
    """The error and message a durable wait's failure answers."""
    if isinstance(exc, KafkaError):
        return exc.code, exc.message
    return Error.KAFKA_STORAGE_ERROR, repr(exc)


def fast_path(broker, frame: memoryview, version: int) -> FastProduce | None:
    """The common Produce request, validated and appended without the generated message
    classes (protocol/produce_fast.py), with the same outcome as ``handle``; None, with
    nothing done, for anything else - the caller then runs ``handle``. The common shape:
    acks 1 or all, one batch per partition, no internal topic, the authorizer off, and
    either no transactional batch or, for transactional ones, a transaction already open
    on every partition (no coordinator check needed). Validation errors also take the
    full path, which reports them. A request for one partition first tries the log's
    fused check-and-append (``PartitionLog.append_client_batch``)."""
    parsed = produce_fast.parse(frame, version)
    if parsed is None or parsed.acks not in _FAST_ACKS:
        return None
    logs = broker.log_manager
    txn_id = parsed.transactional_id
    plan = []
    producer = None  # (producer id, epoch) of the request's transactional batches
    for position, topic in enumerate(parsed.topics):
        name = topic.name
        if name in INTERNAL_TOPICS:
            return None
        for partition in topic.partitions:
            plog = logs.get_partition(name, partition.index)
            records = partition.records
            if plog is None:
                return None
            # _first_batch's checks, inline (parse never gives null records); any error
            # takes the full path, which reports it
            size = len(records)
            if size < HEADER_SIZE:
                return None
            header = read_header(records, 0)
            if (header.magic != MAGIC or 0 < header.size < size
                    or (header.compression and (header.size > _FAST_COMPRESSED
                                                or (version < 7 and header.compression == ZSTD)))):
                return None  # (a large compressed batch may need a worker thread)
            if header.is_transactional:
                key = (header.producer_id, header.producer_epoch)
                if txn_id is None or (producer is not None and producer != key):
                    return None
                if (not plog.has_ongoing_transaction(*key)
                        and not _verified(broker, txn_id, key, name, partition.index, version)):
                    return None
                producer = key
            plan.append([position, name, partition.index, plog, records, header, None])
    if (producer is not None and version >= IMPLICIT_ADD_VERSION
            and producer[0] in _ORDER.get(broker, ())):
        return None  # behind a request of the producer still adding partitions
    topics = parsed.topics
    results = ([(topics[0].name, [])] if len(topics) == 1  # (no comprehension's frame)
               else [(topic.name, []) for topic in topics])
    fast = FastProduce(version, parsed.timeout_ms, results, [])
    cap = broker.config.message_max_uncompressed_bytes
    acks_all = parsed.acks == -1
    if len(plan) == 1:
        position, name, index, plog, records, header, _ = plan[0]
        try:
            result = plog.append_client_batch(records, header, cap)
        except KafkaError as e:
            fast.failed(position, index, plog, e)
            return fast
        if result is not None:
            fast.appended(broker, position, name, index, plog, records, header, result,
                          acks_all)
            return fast
    for step in plan:  # every batch valid before anything is appended
        try:
            validated = step[3].validate_client_append(step[4], max_uncompressed=cap)
            if not validated.run(_LOOP_BUDGET):
                return None
        except KafkaError:
            return None
        step[6] = validated
    for position, name, index, plog, records, header, validated in plan:
        try:
            result = plog.append(records, origin="client", validated=validated)
        except KafkaError as e:
            fast.failed(position, index, plog, e)
            continue
        fast.appended(broker, position, name, index, plog, records, header, result, acks_all)
    return fast


def _verified(broker, transactional_id: str, producer: tuple[int, int], topic: str,
              index: int, version: int) -> bool:
    """For the fast path, a transaction's first batch on a partition (no transaction open
    there yet): True if ``handle`` would append it too - before transaction version 2, the
    partition passes the coordinator's verification (``_verify_transaction``, synchronous as
    there: nothing comes between it and the append), or verification is off. False: the
    full path runs (it reports the error, or adds the partition implicitly)."""
    if version >= IMPLICIT_ADD_VERSION:
        return False
    if not broker.config.transaction_partition_verification_enable:
        return True
    tc = txn_coordinator_of(broker)
    if tc is None:
        return False
    tp = TopicPartition(topic, index)
    return tc.verify_partitions(transactional_id, *producer, (tp,)).get(tp) == Error.NONE


def _failed(index: int, code: Error, message: str | None,
            log_start_offset: int = -1) -> produce_fast.PartitionResult:
    return produce_fast.PartitionResult(index, code, -1, -1, log_start_offset, message)


def _authorize(ctx, req: ProduceRequest) -> Error:
    """Kafka's whole-request check, before any topic's: a request carrying a transactional
    batch needs Write on its transactional id (a missing id fails too)."""
    if not any(_is_transactional(data.records)
               for topic in req.topic_data for data in topic.partition_data):
        return Error.NONE
    if req.transactional_id is None or not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return Error.NONE


def _is_transactional(records) -> bool:
    if records is None or len(records) < HEADER_SIZE:
        return False
    header = BatchHeader(records, 0)
    return header.magic == MAGIC and header.is_transactional


def _internal_allowed(ctx) -> bool:
    """Kafka lets only its admin client write internal topics; with the authorizer on, the
    principal must also have ClusterAction on the cluster (issue 13: internal topics are
    the coordinators' to write)."""
    return ctx.header.client_id == ADMIN_CLIENT_ID and cluster_allows(
        ctx, AclOperation.CLUSTER_ACTION)


def _refused(response: PartitionProduceResponse, plog, e: KafkaError) -> None:
    _fail(response, e.code, e.message)
    if isinstance(e, RecordValidationError):
        response.record_errors = [BatchIndexAndErrorMessage(i, message)
                                  for i, message in e.record_errors]
    if e.code not in _NO_LOG_START:
        response.log_start_offset = plog.log_start_offset


def _first_batch(records, version: int) -> tuple[BatchHeader | None, Error, str | None]:
    """Kafka's ProduceRequest.validateRecords on the first batch header (no decoding)."""
    if records is None or len(records) < HEADER_SIZE:
        return None, Error.INVALID_RECORD, (
            f"Produce requests with version {version} must have at least one record batch "
            "per partition")
    header = read_header(records, 0)
    if header.magic != MAGIC:
        return None, Error.INVALID_RECORD, (
            f"Produce requests with version {version} are only allowed to contain record "
            "batches with magic version 2")
    if version < 7 and header.compression == ZSTD:
        return None, Error.UNSUPPORTED_COMPRESSION_TYPE, (
            f"Produce requests with version {version} are not allowed to use ZStandard "
            "compression")
    if 0 < header.size < len(records):
        return None, Error.INVALID_RECORD, (
            f"Produce requests with version {version} are only allowed to contain exactly "
            "one record batch per partition")
    return header, Error.NONE, None


async def _validate_all(ctx, entries: list[_Entry]) -> None:
    """Validate each batch before anything is appended (Kafka's LogValidator, run by the
    log): on the loop up to _LOOP_BUDGET decompressed bytes, the rest of a large walk in a
    worker thread (zlib, lz4, zstd and the C walker release the GIL). Sets entry.validated,
    or entry.error for the append step to report."""
    cap = ctx.config.message_max_uncompressed_bytes
    for entry in entries:
        try:
            validated = entry.plog.validate_client_append(entry.records, max_uncompressed=cap)
            if not validated.run(_LOOP_BUDGET):
                await asyncio.get_running_loop().run_in_executor(None, validated.run)
        except KafkaError as e:
            # kept until the append step: without its traceback and context, which would
            # tie the request's buffers to a reference cycle through this frame
            entry.error = e.with_traceback(None)
            entry.error.__context__ = entry.error.__cause__ = None
        else:
            entry.validated = validated


def _unverified(entries: list[_Entry]) -> tuple[list[_Entry], list[TopicPartition]]:
    """The partitions where the producer has no transaction open in its epoch (Kafka's
    hasOngoingTransaction): only those need the coordinator."""
    header = entries[0].header
    pending = [e for e in entries
               if not e.plog.has_ongoing_transaction(header.producer_id, header.producer_epoch)]
    return pending, [TopicPartition(e.topic, e.response.index) for e in pending]


def _verify_transaction(ctx, transactional_id: str, entries: list[_Entry],
                        version: int) -> dict[_Entry, Error]:
    """Kafka's pre-append check that each transactional partition was added to the ongoing
    transaction of ``transactional_id`` (the coordinator's verifyOnly AddPartitionsToTxn,
    answered synchronously: nothing can come between it and the append)."""
    pending, partitions = _unverified(entries)
    if not pending:
        return {}
    tc = txn_coordinator(ctx)
    header = entries[0].header
    if tc is None:
        errors = dict.fromkeys(partitions, Error.COORDINATOR_NOT_AVAILABLE)
    else:
        errors = tc.verify_partitions(transactional_id, header.producer_id,
                                      header.producer_epoch, partitions)
    return _rejected(pending, partitions, errors, version)


async def _add_implicitly(ctx, transactional_id: str, entries: list[_Entry],
                          version: int) -> dict[_Entry, Error]:
    """Transaction version 2: add the partitions without an open transaction (Kafka's
    AddPartitionsToTxn v5 on the producer's behalf)."""
    pending, partitions = _unverified(entries)
    if not pending:
        return {}
    tc = txn_coordinator(ctx)
    header = entries[0].header
    error = Error.COORDINATOR_NOT_AVAILABLE
    if tc is not None:
        error = await tc.add_partitions(transactional_id, header.producer_id,
                                        header.producer_epoch, partitions,
                                        client_transaction_version=2)
    return _rejected(pending, partitions, dict.fromkeys(partitions, error), version)


def _rejected(pending: list[_Entry], partitions: list[TopicPartition],
              errors: dict[TopicPartition, Error], version: int) -> dict[_Entry, Error]:
    rejected = {}
    for entry, tp in zip(pending, partitions, strict=True):
        code = verification_error(errors.get(tp, Error.UNKNOWN_SERVER_ERROR),
                                  generic_errors=version >= GENERIC_ERRORS_VERSION)
        if code:
            rejected[entry] = _NOT_VERIFIED.get(code, code)
    return rejected


def _verification_message(code: Error) -> str | None:
    if code == Error.INVALID_TXN_STATE:
        return "Partition was not added to the transaction"
    if code == Error.NOT_ENOUGH_REPLICAS:
        return "Unable to verify the partition has been added to the transaction"
    return None


async def _wait_durable(waits: list[tuple[_Entry, int]], timeout_ms: int) -> None:
    """Wait until every appended partition is fsynced up to its batch (one group commit
    usually covers them all); failures and timeouts become the partition's error."""
    failures = await _durable_failures([(e.plog, offset) for e, offset in waits], timeout_ms)
    for (entry, _), failure in zip(waits, failures, strict=True):
        if failure is not None:
            _fail(entry.response, *failure)


async def _durable_failures(waits: list[tuple[object, int]],
                            timeout_ms: int) -> list[tuple[Error, str | None] | None]:
    """Per (log, offset): None once the log is durable up to the offset, else the error and
    message to answer (REQUEST_TIMED_OUT after ``timeout_ms`` when positive, the data staying
    appended as in Kafka; KAFKA_STORAGE_ERROR for a failed fsync). The request's task waits
    on the logs' futures itself, under one timer: no task, gather or wait_for per request."""
    loop = asyncio.get_running_loop()
    results: list = [None] * len(waits)
    pending = []
    for i, (plog, offset) in enumerate(waits):
        try:
            future = plog.durable_future(offset, loop)
        except KafkaError as e:
            results[i] = e
        else:
            if future is not None:
                pending.append((i, future))
    if pending:
        timer = (loop.call_later(timeout_ms / 1000, _time_out, pending) if timeout_ms > 0
                 else None)
        try:
            for i, future in pending:
                try:
                    await future
                except _TimedOut:
                    plog, offset = waits[i]
                    if plog.high_watermark < offset:
                        results[i] = KafkaError(Error.REQUEST_TIMED_OUT)
                except Exception as e:  # noqa: BLE001 - the fsync's failure is the answer
                    results[i] = e
        finally:  # also when the request is cancelled (its connection closed)
            if timer is not None:
                timer.cancel()
            for _, future in pending:  # nobody reads a failure set later: none is logged
                if not future.cancel() and not future.cancelled():
                    future.exception()
    return [None if result is None else _failure(result) for result in results]


class _TimedOut(Exception):
    """The produce request's timeout passed while it waited for the disk."""


def _time_out(pending: list[tuple[int, asyncio.Future]]) -> None:
    for _, future in pending:
        if not future.done():
            future.set_exception(_TimedOut())


def _fail(response: PartitionProduceResponse, code: Error, message: str | None) -> None:
    """Mark the partition failed (record_errors, if any, are set by the check that failed)."""
    response.error_code = code
    response.base_offset = -1
    response.log_append_time_ms = -1
    response.log_start_offset = -1
    response.error_message = message


def _summary(topics: list[TopicProduceResponse]) -> str:
    return ", ".join(f"{t.name}-{p.index}: {Error(p.error_code).name}"
                     for t in topics for p in t.partition_responses if p.error_code)


def _whole_request_error(req: ProduceRequest, code: Error) -> ProduceResponse:
    if req.acks == 0:
        _close_connection(code.name)
    return error_response(req, code)


def _close_connection(reason: str) -> None:
    """acks=0 and something failed: Kafka closes the connection instead of answering."""
    from semel.broker.dispatch import CloseConnection  # here: broker.dispatch imports the handlers

    raise CloseConnection(f"produce with acks=0 failed: {reason}", "acks0_produce_failed")


def error_response(req: ProduceRequest, code: Error) -> ProduceResponse:
    return ProduceResponse(responses=[
        TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=[
            PartitionProduceResponse(index=p.index, error_code=code, base_offset=-1)
            for p in t.partition_data])
        for t in req.topic_data])
