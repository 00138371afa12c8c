"""Reading Kafka into Spark: planning offset ranges and reading one range into Arrow batches.

Planning (``Planner``) runs where Spark asks for partitions and offsets: on the driver for
batch reads, in the long-lived Python process Spark keeps per streaming query for the stream
reader's offset calls. It asks the brokers for topic metadata and for offsets with
ListOffsets at the reader's isolation level, so at read_committed the latest offset is the
last stable offset (LSO): a batch never reaches into an open transaction.

Reading (``read_range``) runs in an executor's Python worker, one call per task attempt. It
assigns one topic-partition to a librdkafka consumer (no group membership, nothing committed:
offsets live in Spark's checkpoint) and reads [start, end). Offsets are not dense: markers,
aborted records (read_committed) and compaction leave gaps, so the end is recognised by a
record at or past it, or by librdkafka's end-of-partition event at or past it.
"""

from __future__ import annotations

import gc
import math
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from pyspark.sql.datasource import InputPartition

from semel.pipelines.spark.options import EARLIEST, LATEST, SourceOptions
from semel.pipelines.spark.options import OffsetSpec as Offsets
from semel.pipelines.spark.schema import RecordColumns

TopicPartitionKey = tuple[str, int]

BATCH_RECORDS = 8192  # records per Arrow batch handed to Spark
BATCH_BYTES = 8 << 20  # or fewer when they are large
CONSUME_MAX = 10_000  # records per librdkafka consume call
# consume() waits until it has as many records as asked or this long: it is asked for no more
# than the range still holds, so it waits only where offsets have gaps (markers, aborted
# records, compaction) or the range's end is not there yet
CONSUME_WAIT_S = 0.1
METADATA_TIMEOUT_S = 30.0


class OffsetsError(ValueError):
    """Offsets the options name do not fit the topics' partitions or their offsets."""


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic); raised only with
    failOnDataLoss=true, as Spark's source does."""


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One task's slice of one topic-partition: offsets [start, end)."""

    topic: str
    partition: int
    start: int
    end: int


def _offsets_to_json(offsets: dict[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark's KafkaSourceOffset shape: {"topic": {"0": 23}}."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _offsets_from_json(value: dict) -> dict[TopicPartitionKey, int]:
    return {(topic, int(p)): int(o) for topic, parts in value.items() for p, o in parts.items()}


class Planner:
    """Partitions and offsets of the subscribed topics, asked of the brokers."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(dict(self.options.client))
        return self._admin

    def partitions(self) -> list[TopicPartitionKey]:
        sub = self.options.subscription
        topics = self.admin.list_topics(timeout=METADATA_TIMEOUT_S).topics
        if sub.assigned:
            missing = [tp for tp in sub.assigned
                       if tp[0] not in topics or tp[1] not in topics[tp[0]].partitions]
            if missing and self.options.fail_on_data_loss:
                raise DataLossError(f"assigned partitions do not exist: {missing}")
            return sorted(set(sub.assigned) - set(missing))
        if sub.pattern is not None:
            regex = re.compile(sub.pattern)
            # as the Java consumer's pattern subscription: whole-name match, internal topics
            # excluded
            names = [t for t in topics if regex.fullmatch(t) and not t.startswith("__")]
        else:
            names = [t for t in sub.topics if t in topics]
        return sorted((t, p) for t in names for p in topics[t].partitions
                      if topics[t].error is None)

    def offsets(self, partitions, which: int) -> dict[TopicPartitionKey, int]:
        """Earliest or latest (the LSO at read_committed) offsets of ``partitions``."""
        if not partitions:
            return {}
        spec = OffsetSpec.earliest() if which == EARLIEST else OffsetSpec.latest()
        isolation = (IsolationLevel.READ_COMMITTED
                     if self.options.isolation_level == "read_committed"
                     else IsolationLevel.READ_UNCOMMITTED)
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions}, isolation_level=isolation,
            request_timeout=METADATA_TIMEOUT_S)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    def resolve(self, spec: Offsets, partitions) -> dict[TopicPartitionKey, int]:
        """A starting or ending option turned into numbers for ``partitions``; per-partition
        JSON must name exactly those partitions, as Spark requires."""
        if spec.specific and spec.partitions != set(partitions):
            missing = sorted(set(partitions) - spec.partitions)
            unknown = sorted(spec.partitions - set(partitions))
            raise OffsetsError(
                "If startingOffsets or endingOffsets contains specific offsets, you must "
                "specify all TopicPartitions (use -1 for latest, -2 for earliest): "
                f"missing {missing}, not found {unknown}")
        wanted = {tp: spec.for_partition(*tp) for tp in partitions}
        earliest = self.offsets([tp for tp, o in wanted.items() if o == EARLIEST], EARLIEST)
        latest = self.offsets([tp for tp, o in wanted.items() if o == LATEST], LATEST)
        return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in wanted.items()}

    def split(self, ranges: list[KafkaRange]) -> list[KafkaRange]:
        """One task per topic-partition, large ranges split: at most maxRecordsPerPartition
        offsets each, and at least minPartitions tasks when there are that many offsets."""
        ranges = [r for r in ranges if r.end > r.start]
        limit = self.options.max_records_per_partition
        out = []
        for r in ranges:
            pieces = math.ceil((r.end - r.start) / limit)
            step = math.ceil((r.end - r.start) / pieces)
            out += [KafkaRange(r.topic, r.partition, s, min(s + step, r.end))
                    for s in range(r.start, r.end, step)]
        # minPartitions: halve the largest range until there are enough (deterministic: a
        # replayed batch gets the same tasks)
        while self.options.min_partitions and len(out) < self.options.min_partitions:
            largest = max(out, key=lambda r: (r.end - r.start, -out.index(r)), default=None)
            if largest is None or largest.end - largest.start < 2:
                break
            middle = largest.start + (largest.end - largest.start) // 2
            i = out.index(largest)
            out[i:i + 1] = [KafkaRange(largest.topic, largest.partition, largest.start, middle),
                            KafkaRange(largest.topic, largest.partition, middle, largest.end)]
        return out

    def close(self) -> None:
        self._admin = None


def read_range(options: SourceOptions, part: KafkaRange) -> Iterator:
    """The records of ``part`` as Arrow record batches (read_committed: committed and
    non-transactional records only; librdkafka drops aborted and control records)."""
    if not isinstance(part, KafkaRange):  # Spark's stand-in when nothing was planned
        return
    columns = RecordColumns(part.topic, part.partition, options.include_headers)
    consumer = Consumer({
        # librdkafka pauses fetching for this long whenever its queue is full, that is
        # whenever the reader is the slower side: its 1 s default halved a Spark read
        "fetch.queue.backoff.ms": 10,
        **options.client,
        "group.id": f"{options.group_id_prefix}-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "isolation.level": options.isolation_level,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    # the records read are all freed by the end: the garbage collector's passes over them
    # (one Message object per record) are wasted work
    gc.freeze()
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        size = 0
        quiet_since = time.monotonic()
        position = part.start  # the next offset the range still needs
        done = False
        while not done:
            messages = consumer.consume(min(CONSUME_MAX, part.end - position), CONSUME_WAIT_S)
            if not messages:
                if time.monotonic() - quiet_since > options.poll_timeout_ms / 1000:
                    raise TimeoutError(
                        f"no records from {part.topic}-{part.partition} at offsets "
                        f"[{part.start}, {part.end}) within kafkaConsumer.pollTimeoutMs "
                        f"({options.poll_timeout_ms} ms)")
                continue
            quiet_since = time.monotonic()
            for m in messages:
                error = m.error()
                if error is not None:
                    done = _on_error(consumer, options, part, m, error)
                    if done:
                        break
                    continue
                offset = m.offset()
                if offset >= part.end:
                    done = True
                    break
                ts_type, ts = m.timestamp()
                value = m.value()
                columns.add(m.key(), value, offset, ts, ts_type - 1,
                            m.headers() if options.include_headers else None)
                size += len(value) if value else 0
                position = offset + 1
            done = done or position >= part.end
            if len(columns) >= BATCH_RECORDS or size >= BATCH_BYTES:
                yield columns.take()
                size = 0
        if len(columns):
            yield columns.take()
    finally:
        gc.unfreeze()
        consumer.close()


def _on_error(consumer, options: SourceOptions, part: KafkaRange, m, error) -> bool:
    """Handle an event of the consumer; True when the range is finished."""
    code = error.code()
    if code == KafkaError._PARTITION_EOF:
        if m.offset() >= part.end:
            return True
        # the log ends below an end the brokers once gave: it was truncated or recreated
        _data_loss(options, f"{part.topic}-{part.partition} ends at {m.offset()}, before "
                            f"the planned end offset {part.end}")
        return True
    if code == KafkaError._AUTO_OFFSET_RESET or code == KafkaError.OFFSET_OUT_OF_RANGE:
        _data_loss(options, f"offset {part.start} of {part.topic}-{part.partition} is no "
                            f"longer available ({error.str()})")
        # from the earliest offset still there, but never below this task's own range
        consumer.assign([TopicPartition(part.topic, part.partition,
                                        max(part.start, _earliest_offset(options, part)))])
        return False
    raise KafkaException(error)


def _earliest_offset(options: SourceOptions, part: KafkaRange) -> int:
    planner = Planner(options)
    return planner.offsets([(part.topic, part.partition)], EARLIEST)[(part.topic,
                                                                     part.partition)]


def _data_loss(options: SourceOptions, what: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{what}. Some data may have been lost because it is no longer available in "
            f"Kafka (retention, or a deleted topic). If you want the query to go on, set "
            f"the option 'failOnDataLoss' to 'false'.")


def plan_batch(options: SourceOptions) -> list[KafkaRange]:
    planner = Planner(options)
    try:
        partitions = planner.partitions()
        starting = planner.resolve(options.starting, partitions)
        ending = planner.resolve(options.ending, partitions)
        explicit = [tp for tp in partitions if options.ending.for_partition(*tp) >= 0]
        latest = planner.offsets(explicit, LATEST)
        beyond = {tp: (ending[tp], latest[tp]) for tp in explicit if ending[tp] > latest[tp]}
        if beyond:
            what = "last stable" if options.isolation_level == "read_committed" else "latest"
            raise OffsetsError(
                "endingOffsets beyond the partitions' " + what + " offsets (the end, an open "
                "transaction or no such offset yet): " + ", ".join(
                    f"{t}-{p} {end} > {last}" for (t, p), (end, last) in sorted(beyond.items())))
        ranges = []
        for tp in partitions:
            start, end = starting[tp], ending[tp]
            if end < start:
                _data_loss(options, f"{tp[0]}-{tp[1]}: ending offset {end} is before "
                                    f"starting offset {start}")
                continue
            ranges.append(KafkaRange(tp[0], tp[1], start, end))
        return planner.split(ranges)
    finally:
        planner.close()


class StreamPlanner(Planner):
    """The offsets of a streaming query: Spark keeps them in its checkpoint as
    {"topic": {"partition": offset}} and gives them back on restart."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self.target: dict[TopicPartitionKey, int] | None = None  # Trigger.AvailableNow's
        self.last_latest: dict | None = None  # the latest offsets the last call saw

    def initial(self) -> dict:
        partitions = self.partitions()
        return _offsets_to_json(self.resolve(self.options.starting, partitions))

    def prepare_available_now(self) -> None:
        partitions = self.partitions()
        self.target = self.offsets(partitions, LATEST)

    def latest(self, start: dict, max_offsets: int | None) -> dict:
        begin = _offsets_from_json(start)
        partitions = self.partitions()
        latest = self.offsets(partitions, LATEST)
        self.last_latest = _offsets_to_json(latest)
        end: dict[TopicPartitionKey, int] = {}
        for tp in begin:
            if tp not in latest:
                _data_loss(self.options, f"partition {tp[0]}-{tp[1]} is gone")
        new = [tp for tp in partitions if tp not in begin]
        # a partition that appeared since the last batch joins at its earliest offset with an
        # empty range, so that every batch's ranges come from its own start and end offsets
        # (a replayed batch reads exactly what it read the first time)
        end.update(self.offsets(new, EARLIEST))
        for tp, offset in begin.items():
            if tp not in latest:
                continue
            if latest[tp] < offset:
                _data_loss(self.options, f"{tp[0]}-{tp[1]}: the latest offset {latest[tp]} "
                                         f"is before the query's offset {offset}")
                end[tp] = latest[tp]
                continue
            end[tp] = latest[tp]
            if self.target is not None:
                end[tp] = max(offset, min(end[tp], self.target.get(tp, offset)))
        if max_offsets is not None:
            end = _rate_limit(begin, end, max_offsets)
        return _offsets_to_json(end)

    def ranges(self, start: dict, end: dict) -> list[KafkaRange]:
        begin = _offsets_from_json(start)
        ranges = []
        for tp, stop in _offsets_from_json(end).items():
            # after data loss with failOnDataLoss=false the end may be below the start
            first = min(begin.get(tp, stop), stop)
            ranges.append(KafkaRange(tp[0], tp[1], first, stop))
        return self.split(ranges)


def _rate_limit(begin: dict, end: dict, limit: int) -> dict:
    """maxOffsetsPerTrigger as Spark spreads it: each partition gets a share of the limit in
    proportion to its backlog."""
    lag = {tp: end[tp] - begin.get(tp, end[tp]) for tp in end}
    total = sum(v for v in lag.values() if v > 0)
    if total <= limit:
        return end
    limited = dict(end)
    for tp, size in lag.items():
        if size <= 0:
            continue
        share = limit * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = begin[tp] + min(size, step)
    return limited
