"""Writing from Spark to Kafka exactly once: one Kafka transaction per task, fenced and
deduplicated by a transactional id and a committed offset the sink owns.

Task ``p`` of a query writes with transactional id ``<prefix>-<p>``. ``init_transactions``
fences every earlier attempt of the same task (a retried task, a speculative copy, a zombie of
a restarted query) and ends the transaction it left open. Inside its transaction the task
commits, with ``send_offsets_to_transaction``, an offset of the group ``<prefix>-<p>`` on
partition 0 of the output topic: the batch id + 1 for a stream, the job's token for a batch
write. The records and that offset become visible together or not at all. Before writing, a
task reads the group's committed offset: when its batch is already there, an earlier attempt
committed the same records, and the task writes nothing. So a retried task, a re-executed
micro-batch (Spark replays a batch with the same id and offsets after a restart) and a broker
restart never write a batch twice.

A task commits only when its input ended as Spark ends it: when an upstream stage of the same
task fails, Spark closes the task's row stream early, and to the Python writer that looks like
the last row, so before committing the task checks what follows the rows on its worker's input
(``input_ended_normally``) and aborts on a cut-off stream.

What the user keeps deterministic: the rows a batch's task ``p`` writes must be the same
when Spark replays the batch (a replayed batch reads the same source offsets; the
transformation between source and sink must not depend on time or randomness, and must
partition the same way).

Per-task mode: the tasks of one micro-batch commit one by one, so a read_committed reader may
see some tasks' records of a batch before the others' (never a task's records in part, never
twice).

Two-phase commit mode (streaming writes, where the broker offers KIP-939; option
``twoPhaseCommit``, default ``auto``): a task writes as above but does not commit; it flushes,
adds its offset, and *prepares* (``pipelines.twophase``: the transaction becomes a two-phase
one that never times out, the producer is fenced) and sends its transaction's producer id and
epoch to the driver. The driver's commit of the micro-batch first records its decision (the
group ``<prefix>-decided`` commits batch id + 1, with the query id as metadata, on partition 0
of every topic written), then completes every task's transaction. A read_committed reader
sees the whole micro-batch at once, or none of it. Recovery: a micro-batch Spark re-executes
after a crash rolls forward when the decision was recorded (each task first commits the
prepared transaction it finds under its id, then finds its offset and writes nothing) and
is aborted and rewritten when it was not (``init_transactions`` aborts what a task left
prepared). Either way no batch is lost or written twice; only a driver crash in the middle
of the completions lets a reader see part of a batch before the restart completes the rest.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from semel.pipelines.spark.options import OptionError, SinkOptions, stream_prefix

if TYPE_CHECKING:
    from semel.pipelines.twophase import TwoPhaseCommitClient

log = logging.getLogger("semel.spark.sink")

TXN_TIMEOUT_S = 60.0  # for the calls that take one round trip (init, offsets, committed)
# a task's transaction stays open while it writes all its rows: librdkafka's 60 s default
# would let the coordinator abort a large task's transaction midway (Kafka's brokers allow up
# to transaction.max.timeout.ms, 15 minutes by default)
TRANSACTION_TIMEOUT_MS = "600000"
QUEUE_POLL_S = 0.05


@dataclass
class TaskResult(WriterCommitMessage):
    """What one task attempt did, sent to the driver's commit."""

    name: str  # the task's transactional id
    partition: int
    attempt: int
    records: int
    skipped: bool  # an earlier attempt had committed this task's records
    topics: tuple[str, ...] = ()  # where the task wrote (and its offset is)
    # two-phase commit mode: the prepared transaction's (producer id, epoch), for the driver
    prepared: tuple[int, int] | None = None
    prefix: str = ""
    owner: str = ""  # the query id (the decision's metadata)


def decision_group(prefix: str) -> str:
    """The group whose committed offset records the driver's decision to commit a batch."""
    return f"{prefix}-decided"


def two_phase_client(options: SinkOptions, timeout_s: float = TXN_TIMEOUT_S):
    """A ``pipelines.twophase`` client for the sink's brokers: plaintext or TLS (from the
    librdkafka ``ssl.*`` settings); None where it cannot speak the listener's protocol
    (SASL), or semel's codecs are not installed."""
    try:
        from semel.pipelines.twophase import TwoPhaseCommitClient
    except ImportError:
        return None
    client = options.client
    protocol = client.get("security.protocol", "plaintext").lower()
    ssl_context = None
    if protocol == "ssl":
        import ssl

        ssl_context = ssl.create_default_context(cafile=client.get("ssl.ca.location"))
        if client.get("ssl.certificate.location"):
            ssl_context.load_cert_chain(client["ssl.certificate.location"],
                                        client.get("ssl.key.location"),
                                        client.get("ssl.key.password"))
    elif protocol != "plaintext":
        return None
    return TwoPhaseCommitClient(client["bootstrap.servers"], ssl_context=ssl_context,
                                client_id="semel-spark-2pc", timeout_s=timeout_s)


def check_input_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's Kafka sink rules for the DataFrame's columns; extra columns are ignored."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    text_or_bytes = (StringType(), BinaryType())
    if "value" not in fields:
        raise OptionError("required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and fields[name] not in text_or_bytes:
            raise OptionError(f"{name} attribute type must be a string or binary, not "
                              f"{fields[name].simpleString()}")
    if topic_option is None and "topic" not in fields:
        raise OptionError("topic option required when no 'topic' attribute is present. "
                          "Use the 'topic' option for setting a topic.")
    if "topic" in fields and fields["topic"] != StringType():
        raise OptionError("topic attribute type must be a string")
    if "partition" in fields and fields["partition"] != IntegerType():
        raise OptionError("partition attribute type must be an int")
    if "headers" in fields:
        headers = fields["headers"]
        ok = (isinstance(headers, ArrayType) and isinstance(headers.elementType, StructType)
              and [(f.name, f.dataType) for f in headers.elementType.fields]
              == [("key", StringType()), ("value", BinaryType())])
        if not ok:
            raise OptionError("headers attribute type must be array<struct<key:string,"
                              "value:binary>>")


def _columns(batch) -> dict:
    return {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}


def _produce_batch(producer: Producer, batch, topic_option: str | None) -> set[str]:
    """Queue the rows of one Arrow batch: (topic, key, value, partition, headers) per row,
    or, the common case, key and value to the ``topic`` option's topic. Returns the topics
    written to."""
    columns = _columns(batch)
    n = batch.num_rows
    absent = [None] * n
    keys = columns["key"].to_pylist() if "key" in columns else absent
    values = columns["value"].to_pylist()
    produce = producer.produce
    if topic_option is not None and "partition" not in columns and "headers" not in columns:
        for key, value in zip(keys, values, strict=True):
            try:
                produce(topic_option, value, key)
            except BufferError:
                _wait_for_room(producer, topic_option, value, key)
        producer.poll(0)
        return {topic_option}
    topics = [topic_option] * n if topic_option is not None else columns["topic"].to_pylist()
    if None in topics:
        raise ValueError("null topic present in the data. Use the 'topic' option for setting "
                         "a topic.")
    partitions = columns["partition"].to_pylist() if "partition" in columns else absent
    headers = columns["headers"].to_pylist() if "headers" in columns else absent
    for topic, key, value, partition, header in zip(topics, keys, values, partitions, headers,
                                                    strict=True):
        kwargs = {"key": key, "value": value}
        if partition is not None:
            kwargs["partition"] = partition
        if header:
            kwargs["headers"] = [(e["key"], e["value"]) for e in header]
        try:
            produce(topic, **kwargs)
        except BufferError:
            _wait_for_room(producer, topic, **kwargs)
    producer.poll(0)
    return set(topics)


def _wait_for_room(producer: Producer, topic: str, *args, **kwargs) -> None:
    """produce() again once the local queue has room (it is full while records are sent)."""
    while True:
        producer.poll(QUEUE_POLL_S)
        try:
            producer.produce(topic, *args, **kwargs)
            return
        except BufferError:
            continue


def _first_topic(batch, topic_option: str | None) -> str:
    if topic_option is not None:
        return topic_option
    topic = _columns(batch)["topic"][0].as_py()
    if topic is None:
        raise ValueError("null topic present in the data. Use the 'topic' option for setting "
                         "a topic.")
    return topic


class TaskWriter:
    """One task attempt's transaction, and the sink-owned committed offset that says this task's
    records of this batch are in Kafka: the group ``<transactional id>`` commits, on partition 0
    of every topic the task wrote to, the offset batch id + 1 with the query's (or batch job's)
    id as metadata. A replay finds it through whichever of those topics its first row names."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, batches: Iterator, prefix: str, batch_id: int, owner: str,
              two_phase: bool = False) -> TaskResult:
        """Write a task's rows as batch ``batch_id`` of ``owner`` (a streaming query's id; a
        batch job's token, with batch id 0). ``two_phase``: prepare instead of committing
        (the driver completes the transaction), after rolling forward a prepared transaction
        of a batch the driver decided to commit."""
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context else 0
        attempt = context.attemptNumber() if context else 0
        name = f"{prefix}-{partition}"
        first = next((b for b in batches if b.num_rows), None)
        if first is None:
            return TaskResult(name, partition, attempt, 0, skipped=False)
        refused = DeliveryErrors()
        producer = Producer({
            # Java's partitioner (murmur2 of the key), as Spark's sink partitions
            "partitioner": "murmur2_random",
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            **self.options.client,
            "transactional.id": name,
            "delivery.report.only.error": True,
            "on_delivery": refused,
        })
        consumer = Consumer({
            **self.options.client,
            "group.id": name,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        })
        twopc = two_phase_client(self.options) if two_phase else None
        if two_phase and twopc is None:
            raise RuntimeError("two-phase commit mode needs semel's protocol codecs and a "
                               "plaintext or TLS listener")
        try:
            marker = TopicPartition(_first_topic(first, self.options.topic), 0)
            if twopc is not None:
                self._roll_forward(twopc, marker.topic, name, prefix, batch_id, owner)
            # fences every earlier attempt of this task and ends what it left open
            producer.init_transactions(TXN_TIMEOUT_S)
            if self._is_done(consumer, marker, batch_id, owner):
                log.info("%s: batch %d already committed by an earlier attempt", name, batch_id)
                return TaskResult(name, partition, attempt, 0, skipped=True, prefix=prefix,
                                  owner=owner)
            producer.begin_transaction()
            try:
                count = 0
                topics: set[str] = set()
                for batch in itertools.chain([first], batches):
                    topics |= _produce_batch(producer, batch, self.options.topic)
                    count += batch.num_rows
                if context is not None and not input_ended_normally():
                    raise InputCutOff(f"{name}: the task's input ended early (an upstream "
                                      f"failure); its transaction is aborted")
                if twopc is not None:
                    # every record delivered; a failed one leaves the transaction in an
                    # abortable state, which the next transactional call reports
                    producer.flush()
                producer.send_offsets_to_transaction(
                    [TopicPartition(t, 0, batch_id + 1, metadata=owner) for t in sorted(topics)],
                    consumer.consumer_group_metadata(), TXN_TIMEOUT_S)
                if twopc is None:
                    # no timeout: the commit first delivers every queued record
                    producer.commit_transaction()
            except KafkaException as exc:
                # a refused record makes the next transactional call fail with a generic
                # "erroneous state": report the broker's reason for the record instead
                producer.poll(0)
                _abort(producer, name)
                if refused.first is not None:
                    raise KafkaException(refused.first) from exc
                raise
            except BaseException:
                _abort(producer, name)
                raise
            prepared = None
            if twopc is not None:
                # from here on the transaction is the driver's to complete (or a re-executed
                # batch's to roll forward or abort); this producer is fenced
                txn = twopc.prepare(name)
                prepared = (txn.producer_id, txn.producer_epoch)
            return TaskResult(name, partition, attempt, count, skipped=False,
                              topics=tuple(sorted(topics)), prepared=prepared, prefix=prefix,
                              owner=owner)
        finally:
            consumer.close()
            if twopc is not None:
                twopc.close()

    def _roll_forward(self, twopc: TwoPhaseCommitClient, topic: str, name: str, prefix: str,
                      batch_id: int, owner: str) -> None:
        """If the driver decided to commit this batch (a re-execution after a crash during
        the completions), commit the transaction this task left prepared under ``name``. A
        prepared transaction is two-phase (an unprepared one - an attempt still writing,
        never the case once the driver decided - keeps its ordinary timeout)."""
        decided = Consumer({**self.options.client, "group.id": decision_group(prefix),
                            "enable.auto.commit": False})
        try:
            if not self._is_done(decided, TopicPartition(topic, 0), batch_id, owner,
                                 exactly=True):
                return
        finally:
            decided.close()
        from semel.pipelines.twophase import TWO_PHASE_TXN_TIMEOUT_MS

        state = twopc.describe(name)
        if state.state != "Ongoing" or state.transaction_timeout_ms != TWO_PHASE_TXN_TIMEOUT_MS:
            return
        txn = twopc.prepare(name)
        outcome = twopc.complete(txn)
        log.info("%s: batch %d was decided: its prepared transaction (producer id %d epoch "
                 "%d) rolled forward: %s", name, batch_id, txn.producer_id, txn.producer_epoch,
                 outcome.value)

    @staticmethod
    def _is_done(consumer: Consumer, marker: TopicPartition, batch_id: int, owner: str, *,
                 exactly: bool = False) -> bool:
        """Whether this batch (or a later one; ``exactly``: this one) of the same query or job
        is committed. A marker another query or job left under the same ids does not count:
        its batch numbers are not this one's."""
        [committed] = consumer.committed([marker], timeout=TXN_TIMEOUT_S)
        if committed.error is not None:
            raise KafkaException(committed.error)
        if committed.metadata != owner:
            return False
        return committed.offset == batch_id + 1 if exactly else committed.offset > batch_id


class InputCutOff(RuntimeError):
    """Spark closed a task's input before its end: the task is failing upstream."""


def input_ended_normally() -> bool:
    """Whether the rows Spark streamed to this Python worker ended normally.

    Spark's worker protocol follows a task's last Arrow batch with END_OF_STREAM at once; a
    stream cut off by an upstream failure ends at end-of-file instead, which the Arrow reader
    takes for the end too. The worker's input stream is found on the call stack (``infile``
    of ``pyspark.worker``'s main); when it cannot be found (another PySpark layout), the sink
    refuses to commit rather than risk committing a partial task.
    """
    import struct
    import sys

    from pyspark.serializers import SpecialLengths

    frame = sys._getframe(1)
    stream = None
    while frame is not None:
        candidate = frame.f_locals.get("infile")
        if candidate is not None and hasattr(candidate, "peek"):
            stream = candidate
        frame = frame.f_back
    if stream is None:
        raise RuntimeError("cannot check that the task's input ended normally on this PySpark "
                           "version (no worker input stream found); refusing to commit")
    # peek reads nothing away from the worker; it waits for the next bytes or end-of-file
    head = stream.peek(4)[:4]
    expected = struct.pack(">i", SpecialLengths.END_OF_STREAM)
    return bool(head) and expected.startswith(head)


class DeliveryErrors:
    """The producer's delivery callback (errors only): keeps the first record's error."""

    __slots__ = ("first",)

    def __init__(self) -> None:
        self.first = None

    def __call__(self, error, message) -> None:
        if error is not None and self.first is None:
            self.first = error


def _abort(producer: Producer, name: str) -> None:
    try:
        producer.abort_transaction(TXN_TIMEOUT_S)
    except KafkaException as e:  # fenced or fatal: the next attempt's init ends it
        log.warning("%s: abort failed: %s", name, e)


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format(...)``: every task of the job writes in its own transaction; retried
    attempts of a task write nothing once one attempt committed (the job's token)."""

    def __init__(self, options: SinkOptions) -> None:
        self.token = str(uuid.uuid4())
        self.prefix = options.transactional_id_prefix or f"semel-spark-batch-{self.token[:13]}"
        self.task = TaskWriter(options)

    def write(self, iterator: Iterator) -> TaskResult:
        return self.task.write(iterator, self.prefix, 0, self.token)

    def commit(self, messages: list) -> None:
        _log_batch(None, messages)

    def abort(self, messages: list) -> None:
        log.warning("%s: write job failed; tasks that committed keep their records",
                    self.prefix)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format(...)``: the transactional ids come from the query's checkpoint
    and its id (kept in the checkpoint), so a restarted query fences and deduplicates the
    tasks of the run before it, and a new query at the same path starts afresh. The mode
    (two-phase commit or per task) is chosen once, when the query starts, and logged."""

    def __init__(self, options: SinkOptions) -> None:
        if options.transactional_id_prefix is None and not options.checkpoint_location:
            raise OptionError("the exactly-once sink needs the query's 'checkpointLocation' "
                              "option (or 'transactionalIdPrefix')")
        self.options = options
        self.task = TaskWriter(options)
        self.two_phase = choose_two_phase_commit(options)

    def write(self, iterator: Iterator) -> TaskResult:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch_id = int(context.getLocalProperty("streaming.sql.batchId"))
        query_id = context.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            raise RuntimeError("Spark gave the task no streaming query id "
                               "(sql.streaming.queryId); refusing to write without it")
        prefix = self.options.transactional_id_prefix or stream_prefix(
            self.options.checkpoint_location, query_id)
        return self.task.write(iterator, prefix, batch_id, query_id, self.two_phase)

    def commit(self, messages: list, batchId: int) -> None:
        if self.two_phase:
            complete_batch(self.options, batchId, messages)
        _log_batch(batchId, messages, self.two_phase)

    def abort(self, messages: list, batchId: int) -> None:
        if self.two_phase:
            abort_batch(self.options, batchId, messages)
            return
        log.warning("batch %s failed; tasks that committed keep their records (a replay of "
                    "the batch skips them)", batchId)


def choose_two_phase_commit(options: SinkOptions) -> bool:
    """The mode of a streaming query's sink: two-phase commit when the option allows it and
    the broker accepts KIP-939's enable2Pc with keepPreparedTxn (probed on a transactional
    id of its own: no transaction is ongoing there, so the broker answers that, and
    nothing else happens but an epoch bump), else per task."""
    if options.two_phase_commit == "false":
        log.info("exactly-once sink: per-task transactions (twoPhaseCommit=false)")
        return False
    client = two_phase_client(options, timeout_s=15.0)
    reason = "semel's protocol codecs are missing or the listener is SASL"
    if client is not None:
        from semel.pipelines.twophase import NoOngoingTransaction, TwoPhaseCommitError

        probe = f"{options.transactional_id_prefix or 'semel-spark'}-2pc-probe"
        try:
            client.prepare(probe)
            reason = f"{probe} unexpectedly has an ongoing transaction"
        except NoOngoingTransaction:
            log.info("exactly-once sink: two-phase commit (KIP-939): each micro-batch becomes "
                     "visible to read_committed readers at once")
            return True
        except (TwoPhaseCommitError, OSError) as e:
            reason = f"the broker refused two-phase commit: {e}"
        finally:
            client.close()
    if options.two_phase_commit == "true":
        raise OptionError(f"twoPhaseCommit=true, but {reason}")
    log.info("exactly-once sink: per-task transactions (%s); a micro-batch's tasks become "
             "visible one by one", reason)
    return False


def complete_batch(options: SinkOptions, batch_id: int, messages: list) -> None:
    """The driver's commit of a two-phase micro-batch: record the decision, then commit
    every task's prepared transaction. Raises when one cannot be committed (the query
    stops; its restart re-executes the batch, which rolls forward what is still prepared and
    rewrites what is not)."""
    results = [m for m in messages if isinstance(m, TaskResult) and m.prepared is not None]
    if not results:
        return
    prefix, owner = results[0].prefix, results[0].owner
    topics = sorted({t for r in results for t in r.topics})
    decided = Consumer({**options.client, "group.id": decision_group(prefix),
                        "enable.auto.commit": False})
    try:
        decided.commit(offsets=[TopicPartition(t, 0, batch_id + 1, metadata=owner)
                                for t in topics], asynchronous=False)
    finally:
        decided.close()
    from semel.pipelines.twophase import Outcome, PreparedTxn

    failed = []
    client = two_phase_client(options)
    try:
        partitions = _partitions_of(options, topics)
        starts = client.open_transaction_starts(partitions) if partitions else {}
        order, atomic = completion_order(results, starts)
        if not atomic:
            log.warning("batch %d: its transactions cannot be completed in an order that shows "
                        "the batch at once on every partition; a reader may see part of it for "
                        "the moment the completions take", batch_id)
        for r in order:
            outcome = client.complete(PreparedTxn(r.name, *r.prepared))
            if outcome != Outcome.COMMITTED:
                failed.append(f"{r.name}: {outcome.value}")
    finally:
        client.close()
    if failed:
        raise RuntimeError(f"batch {batch_id}: prepared transactions not committed "
                           f"({'; '.join(failed)}); restart the query to rewrite them")


def _partitions_of(options: SinkOptions, topics: list[str]) -> list[tuple[str, int]]:
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient(options.client).list_topics(timeout=TXN_TIMEOUT_S)
    return [(t, p) for t in topics if t in metadata.topics
            for p in metadata.topics[t].partitions]


def completion_order(results: list[TaskResult], starts: dict[tuple[str, int], dict[int, int]]
                     ) -> tuple[list[TaskResult], bool]:
    """The order to commit a batch's transactions in so that each partition shows the whole
    batch at once: a partition's last stable offset stays at the first offset of its
    earliest open transaction, so while that one (the partition's holder) is open, every later
    record there is hidden. Committing each partition's holder after the batch's other
    transactions on that partition makes the batch appear there in one step. Returns the
    order and whether it satisfies every partition (it cannot when holders depend on each
    other in a cycle; then the order is the best effort: holders of more partitions last)."""
    by_producer = {r.prepared[0]: r for r in results}
    before: dict[int, set[int]] = {pid: set() for pid in by_producer}  # pid -> completes first
    holds: dict[int, int] = dict.fromkeys(by_producer, 0)
    for open_txns in starts.values():
        ours = {pid: offset for pid, offset in open_txns.items() if pid in by_producer}
        if len(ours) < 2:
            continue
        holder = min(ours, key=ours.__getitem__)
        holds[holder] += 1
        before[holder] |= set(ours) - {holder}
    order: list[int] = []
    ready = sorted((pid for pid, deps in before.items() if not deps), key=holds.__getitem__)
    waiting = {pid: set(deps) for pid, deps in before.items() if deps}
    while ready:
        pid = ready.pop(0)
        order.append(pid)
        for other, deps in list(waiting.items()):
            deps.discard(pid)
            if not deps:
                del waiting[other]
                ready.append(other)
    atomic = not waiting
    order += sorted(waiting, key=holds.__getitem__)
    return [by_producer[pid] for pid in order], atomic


def abort_batch(options: SinkOptions, batch_id: int, messages: list) -> None:
    """A failed two-phase micro-batch: abort the transactions its tasks prepared (those
    that did not get that far were aborted by the task or are by its next attempt)."""
    results = [m for m in messages if isinstance(m, TaskResult) and m.prepared is not None]
    from semel.pipelines.twophase import PreparedTxn, TwoPhaseCommitError

    client = two_phase_client(options) if results else None
    try:
        for r in results:
            try:
                client.complete(PreparedTxn(r.name, *r.prepared), commit=False)
            except (TwoPhaseCommitError, OSError) as e:  # the re-execution aborts it
                log.warning("%s: abort of its prepared transaction failed: %s", r.name, e)
    finally:
        if client is not None:
            client.close()
    log.warning("batch %s failed; its prepared transactions are aborted (nothing of it is "
                "visible)", batch_id)


def _log_batch(batch_id: int | None, messages: list, two_phase: bool = False) -> None:
    results = [m for m in messages if isinstance(m, TaskResult)]
    log.info("batch %s committed (%s): %d records from %d tasks (%d already committed): %s",
             batch_id, "two-phase commit" if two_phase else "per-task transactions",
             sum(r.records for r in results), len(results), sum(r.skipped for r in results),
             ", ".join(r.name for r in results))
