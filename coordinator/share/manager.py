"""Share-partitions on the broker's event loop (Kafka's SharePartitionManager plus the share
coordinator's persistence, for one node): the async shell around ``SharePartition`` and
``ShareStateStore``.

- A share-partition is made on first use: from its durable state in the store, or, for a
  group new to the partition, at the offset ``share.auto.offset.reset`` gives (latest: the
  high watermark, earliest: the log start, by_duration: the first record no older than the
  duration), persisted at once as an initial snapshot (Kafka's InitializeShareGroupState).
- ``acquire`` reads the partition log from the share-partition's next fetch offset up to
  the high watermark - the last stable offset at read_committed, with the aborted
  transactions of what was read - and acquires whole batches for the member; the caller
  sends the batches holding the acquired offsets with the acquired ranges (ShareFetch).
- Every state change a ``SharePartition`` returns is encoded (records.py) into one batch,
  appended to the ``__share_group_state`` partition of its key (Kafka's
  ``abs("group:topicId:partition".hashCode()) % partitions``) and awaited until durable
  before the caller answers. A failed write drops the store and every cached
  share-partition and reloads them from the log, so only durable state survives.
- Acquisition locks expire when the clock passes their deadline: ``expire_locks`` (run by a
  background task every ``lock_check_interval_ms``, and before every acquire/acknowledge,
  so a test that moves the clock sees expiry at once).
- The topic is created on first write (cleanup.policy=delete, retention.ms=-1); records
  older than the newest snapshot of every key of a partition are redundant and ``prune``
  (the same task, every ``share.coordinator.state.topic.prune.interval.ms``) deletes them
  (Kafka's lastRedundantOffset).

The membership side (ShareGroupHeartbeat) calls ``release_member`` when a member leaves or
is fenced, and ``delete_group`` when the group's state is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from semel.coordinator.loading import YIELD_EVERY_BATCHES, decoded_records, readable_batches
from semel.coordinator.partitioning import partition_for
from semel.coordinator.share import SHARE_GROUP_STATE_TOPIC_NAME
from semel.coordinator.share.config import ShareGroupConfig, ShareGroupSettings
from semel.coordinator.share.partition import (
    AcknowledgementBatch,
    AcquiredRecords,
    FetchedBatch,
    SharePartition,
    StateWrite,
)
from semel.coordinator.share.records import (
    SHARE_SNAPSHOT,
    SharePartitionKey,
    ShareRecord,
    UnknownRecordType,
    decode_record,
    encode_record,
)
from semel.coordinator.share.store import ShareStateStore
from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_batch, iter_batches
from semel.storage.log_manager import kafka_uuid_string

log = logging.getLogger("coordinator.share")


@dataclass(frozen=True, slots=True)
class ShareGroupOffsetInfo:
    """DescribeShareGroupOffsets' answer for one partition: the start offset (-1: not
    initialized), its leader epoch and lag (log end - start - finished records in flight,
    Kafka 4.2's formula; -1 when not known)."""
    start_offset: int
    leader_epoch: int
    lag: int


@dataclass(slots=True)
class ShareAcquireResult:
    error: Error = Error.NONE
    records: bytes = b""  # whole batches as read; the client keeps the acquired offsets
    acquired: list[AcquiredRecords] = field(default_factory=list)
    high_watermark: int = -1
    log_start_offset: int = -1


class SharePartitionManager:
    def __init__(self, log_manager, config: ShareGroupConfig | None = None, *,
                 clock: Callable[[], int],
                 group_settings: Callable[[str], ShareGroupSettings] | None = None,
                 lock_check_interval_ms: int = 1000,
                 prune_interval_ms: int = 300_000) -> None:
        self.log_manager = log_manager
        self.config = config or ShareGroupConfig()
        self.clock = clock
        self.group_settings = group_settings or (lambda _group: ShareGroupSettings())
        self.lock_check_interval_ms = lock_check_interval_ms
        self.prune_interval_ms = prune_interval_ms  # share.coordinator.state.topic.prune...
        self.store = ShareStateStore(self.config.snapshot_update_records_per_snapshot)
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self.num_partitions = self.config.state_topic_num_partitions
        self._initializing: dict[SharePartitionKey, asyncio.Future] = {}
        self._snapshot_offsets: dict[int, dict[SharePartitionKey, int]] = {}
        self._expiry_task: asyncio.Task | None = None
        self._reloading: asyncio.Task | None = None
        self.active = False
        # per group, for the metrics: records acquired (delivered) and of those the
        # redeliveries (delivery count above 1), since start
        self.acquired_records_total: dict[str, int] = {}
        self.redelivered_records_total: dict[str, int] = {}

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Load the state from ``__share_group_state`` (yielding to the loop now and then)
        and start the lock expiry task."""
        self._adopt_topic()
        await self._load()
        self._begin()

    def start_now(self) -> None:
        """``start`` without yielding, for a manager made on the event loop by the first
        share request: the load is empty unless the topic appeared since the broker
        started (created by a client)."""
        self._adopt_topic()
        for _ in self._load_steps():
            pass
        self._begin()

    def _adopt_topic(self) -> None:
        info = self.log_manager.topics.get(SHARE_GROUP_STATE_TOPIC_NAME)
        if info is not None:
            self.num_partitions = info.num_partitions

    def _begin(self) -> None:
        self.active = True
        self._expiry_task = asyncio.get_running_loop().create_task(
            self._expiry_loop(), name="semel-share-lock-expiry")

    async def stop(self) -> None:
        self.active = False
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            await asyncio.gather(self._expiry_task, return_exceptions=True)
            self._expiry_task = None

    async def _expiry_loop(self) -> None:
        pruned_at = self.clock()
        while True:
            await asyncio.sleep(self.lock_check_interval_ms / 1000)
            try:
                await self.expire_locks()
                if self.clock() - pruned_at >= self.prune_interval_ms:
                    pruned_at = self.clock()
                    self.prune()
            except Exception:
                log.exception("share lock expiry or pruning failed")

    # -- routing ------------------------------------------------------------------------

    def partition_for(self, key: SharePartitionKey) -> int:
        coordinator_key = f"{key.group_id}:{kafka_uuid_string(key.topic_id)}:{key.partition}"
        return partition_for(coordinator_key, self.num_partitions)

    def _limits(self, group_id: str) -> dict:
        settings = self.group_settings(group_id)
        return {"max_delivery_count": self.config.delivery_count_limit,
                "max_in_flight_records": self.config.partition_max_record_locks,
                "record_lock_duration_ms": settings.record_lock_duration_ms
                or self.config.record_lock_duration_ms}

    # -- operations ---------------------------------------------------------------------

    async def acquire(self, group_id: str, member_id: str, topic_id: UUID, partition: int,
                      max_records: int, max_bytes: int) -> ShareAcquireResult:
        """Acquire records of one partition for a member (the core of ShareFetch)."""
        info = self.log_manager.topic_by_id(topic_id)
        plog = None if info is None else self.log_manager.get_partition(info.name, partition)
        if plog is None:
            return ShareAcquireResult(Error.UNKNOWN_TOPIC_OR_PARTITION)
        key = SharePartitionKey(group_id, topic_id, partition)
        try:
            sp = await self._share_partition(key, plog)
            await self._expire(key, sp)
            await self._persist(key, sp.update_log_start_offset(plog.log_start_offset))
        except KafkaError as e:
            return ShareAcquireResult(e.code)
        result = ShareAcquireResult(high_watermark=plog.high_watermark,
                                    log_start_offset=plog.log_start_offset)
        if self.partitions.get(key) is not sp:
            return result  # reloaded meanwhile (a failed write): the next fetch acquires
        read_committed = self.group_settings(group_id).read_committed
        bound = plog.last_stable_offset if read_committed else plog.high_watermark
        fetch_offset = sp.next_fetch_offset()
        if fetch_offset >= bound or max_records <= 0:
            return result
        try:
            read = plog.read(fetch_offset, max_bytes, upper_bound=bound)
        except KafkaError as e:
            return ShareAcquireResult(e.code)
        data = bytes(read.records)
        headers = list(iter_batches(data))
        batches = [FetchedBatch(h.base_offset, h.last_offset, h.producer_id,
                                h.is_transactional, h.is_control) for h in headers]
        aborted = plog.aborted_transactions_in(fetch_offset, data) if read_committed else None
        acquired, write = sp.acquire(member_id, batches, max_records, self.clock(),
                                     fetch_offset=fetch_offset, aborted_transactions=aborted)
        try:
            await self._persist(key, write)
        except KafkaError as e:
            return ShareAcquireResult(e.code)
        if self.partitions.get(key) is not sp:
            return result  # reloaded meanwhile: these acquisitions are void
        result.records = _slice(data, headers, acquired)
        result.acquired = acquired
        if acquired:
            self._count_acquired(group_id, acquired)
        return result

    def _count_acquired(self, group_id: str, acquired: list[AcquiredRecords]) -> None:
        total = redelivered = 0
        for run in acquired:
            n = run.last_offset - run.first_offset + 1
            total += n
            if run.delivery_count > 1:
                redelivered += n
        self.acquired_records_total[group_id] = \
            self.acquired_records_total.get(group_id, 0) + total
        if redelivered:
            self.redelivered_records_total[group_id] = \
                self.redelivered_records_total.get(group_id, 0) + redelivered

    async def acknowledge(self, group_id: str, member_id: str, topic_id: UUID, partition: int,
                          batches: Sequence[AcknowledgementBatch]) -> tuple[Error, str | None]:
        """Apply a member's acknowledgements of one partition; answered once durable."""
        key = SharePartitionKey(group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is None:
            return Error.INVALID_RECORD_STATE, "The share partition has no acquired records"
        try:
            await self._expire(key, sp)
            if self.partitions.get(key) is not sp:
                return Error.INVALID_RECORD_STATE, "The share partition was reloaded"
            outcome = sp.acknowledge(member_id, batches)
            if outcome.error:
                return outcome.error, outcome.message
            await self._persist(key, outcome.write)
        except KafkaError as e:
            return e.code, str(e)
        return Error.NONE, None

    async def release_member(self, group_id: str, member_id: str) -> Error:
        """The member left or was fenced: release every record it holds in the group."""
        error = Error.NONE
        for key, sp in list(self.partitions.items()):
            if key.group_id != group_id or self.partitions.get(key) is not sp:
                continue  # another group's, or reloaded meanwhile (nothing acquired then)
            try:
                await self._persist(key, sp.release_acquired_records(member_id))
            except KafkaError as e:
                error = e.code
        return error

    async def expire_locks(self) -> int:
        """Expire every acquisition lock the clock has passed; how many partitions wrote."""
        count = 0
        for key, sp in list(self.partitions.items()):
            if self.partitions.get(key) is not sp:
                continue  # reloaded meanwhile
            try:
                count += await self._expire(key, sp)
            except KafkaError:
                pass
        return count

    async def delete_group(self, group_id: str) -> Error:
        """Forget the group's share-partition state (tombstones)."""
        self.acquired_records_total.pop(group_id, None)
        self.redelivered_records_total.pop(group_id, None)
        for key in list(self.partitions):
            if key.group_id == group_id:
                del self.partitions[key]
        for key in self.store.keys_of_group(group_id):
            try:
                await self._append(key, self.store.delete_state(key))
            except KafkaError as e:
                return e.code
        return Error.NONE

    # -- offsets (the admin APIs' core; the caller checks the group is empty) -----------

    def describe_offsets(self, group_id: str, topic_id: UUID,
                         partition: int) -> ShareGroupOffsetInfo:
        """The durable start offset of a share-partition and its lag."""
        key = SharePartitionKey(group_id, topic_id, partition)
        state = self.store.read_state(key)
        if state is None:
            return ShareGroupOffsetInfo(-1, -1, -1)
        info = self.log_manager.topic_by_id(topic_id)
        plog = None if info is None else self.log_manager.get_partition(info.name, partition)
        lag = -1
        if plog is not None and state.delivery_complete_count >= 0:
            lag = max(plog.high_watermark - state.start_offset - state.delivery_complete_count,
                      0)
        elif plog is not None and not state.offsets:
            lag = max(plog.high_watermark - state.start_offset, 0)
        return ShareGroupOffsetInfo(state.start_offset, state.leader_epoch, lag)

    async def alter_offsets(self, group_id: str, topic_id: UUID, partition: int,
                            start_offset: int) -> Error:
        """Start the share-partition afresh at ``start_offset`` (AlterShareGroupOffsets:
        Kafka writes a new snapshot with the state epoch bumped and no in-flight state)."""
        key = SharePartitionKey(group_id, topic_id, partition)
        self.partitions.pop(key, None)
        try:
            await self._append(key, self.store.initialize_state(key, start_offset,
                                                                self.clock()))
        except KafkaError as e:
            return e.code
        return Error.NONE

    async def delete_offsets(self, group_id: str, topic_id: UUID, partition: int) -> Error:
        """Forget the share-partition (DeleteShareGroupOffsets): a tombstone; the next
        fetch initializes it again by ``share.auto.offset.reset``."""
        key = SharePartitionKey(group_id, topic_id, partition)
        self.partitions.pop(key, None)
        if self.store.read_state(key) is None:
            return Error.NONE
        try:
            await self._append(key, self.store.delete_state(key))
        except KafkaError as e:
            return e.code
        return Error.NONE

    # -- share-partitions ---------------------------------------------------------------

    async def _share_partition(self, key: SharePartitionKey, plog) -> SharePartition:
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        pending = self._initializing.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future = asyncio.get_running_loop().create_future()
        self._initializing[key] = future
        try:
            sp = await self._initialize(key, plog)
            future.set_result(sp)
            return sp
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: waiters get it too
            raise
        finally:
            del self._initializing[key]

    async def _initialize(self, key: SharePartitionKey, plog) -> SharePartition:
        limits = self._limits(key.group_id)
        state = self.store.read_state(key)
        if state is None:
            start_offset = self._reset_offset(key.group_id, plog)
            await self._append(key, self.store.initialize_state(key, start_offset, self.clock()))
            state = self.store.read_state(key)
            if state is None:  # the store was reloaded meanwhile without it
                raise KafkaError(Error.COORDINATOR_LOAD_IN_PROGRESS,
                                 f"share-partition {key} is being reloaded")
        try:
            sp = SharePartition.from_state(key.group_id, key.topic_id, key.partition,
                                           state.start_offset, state.state_batches(), **limits)
        except ValueError as e:  # a delivery state no share-partition writes
            raise KafkaError(Error.UNKNOWN_SERVER_ERROR,
                             f"cannot initialize share-partition {key}: {e}") from None
        self.partitions[key] = sp
        return sp

    def _reset_offset(self, group_id: str, plog) -> int:
        reset = self.group_settings(group_id).auto_offset_reset
        if reset.strategy == "earliest":
            return plog.log_start_offset
        if reset.strategy == "by_duration":
            found = plog.offset_for_timestamp(self.clock() - reset.duration_ms)
            if found is not None:
                return found[0]
        return plog.high_watermark

    async def _expire(self, key: SharePartitionKey, sp: SharePartition) -> int:
        write = sp.expire_locks(self.clock())
        await self._persist(key, write)
        return int(write is not None)

    # -- writes -------------------------------------------------------------------------

    async def _persist(self, key: SharePartitionKey, write: StateWrite | None) -> None:
        if write is None:
            return
        await self._append(key, self.store.write_state(key, write, self.clock()))

    async def _append(self, key: SharePartitionKey, record: ShareRecord) -> None:
        """Append one record and wait until durable; on failure reload every state from
        the log and raise KafkaError."""
        partition = self.partition_for(key)
        try:
            plog = self._state_partition(partition)
            encoded_key, encoded_value = encode_record(record)
            batch = build_batch([(encoded_key, encoded_value, None, self.clock())])
            result = plog.append(bytearray(batch), origin="coordinator")
            await plog.wait_durable(result.next_offset)
        except KafkaError as e:
            log.warning("write to %s-%d failed, reloading share state: %s",
                        SHARE_GROUP_STATE_TOPIC_NAME, partition, e)
            await self._reload()
            raise
        if record.record_type == SHARE_SNAPSHOT:
            offsets = self._snapshot_offsets.setdefault(partition, {})
            if record.value is None:
                offsets.pop(key, None)
            else:
                offsets[key] = result.base_offset

    def _state_partition(self, partition: int):
        if SHARE_GROUP_STATE_TOPIC_NAME not in self.log_manager.topics:
            self.log_manager.create_topic(
                SHARE_GROUP_STATE_TOPIC_NAME, self.num_partitions,
                {"cleanup.policy": "delete", "retention.ms": "-1",
                 "compression.type": "producer",
                 "segment.bytes": str(self.config.state_topic_segment_bytes)})
        plog = self.log_manager.get_partition(SHARE_GROUP_STATE_TOPIC_NAME, partition)
        if plog is None:
            raise KafkaError(Error.COORDINATOR_NOT_AVAILABLE,
                             f"{SHARE_GROUP_STATE_TOPIC_NAME}-{partition} is missing")
        return plog

    def prune(self) -> int:
        """Delete records older than every key's newest snapshot; how many partitions."""
        pruned = 0
        for partition, offsets in self._snapshot_offsets.items():
            if not offsets:
                continue
            plog = self.log_manager.get_partition(SHARE_GROUP_STATE_TOPIC_NAME, partition)
            redundant = min(offsets.values())
            if plog is not None and redundant > plog.log_start_offset:
                plog.delete_records_before(redundant)
                pruned += 1
        return pruned

    # -- loading ------------------------------------------------------------------------

    async def _reload(self) -> None:
        """Drop every share-partition and the store and read the store back from the log;
        failed writes that arrive meanwhile join the reload under way."""
        if self._reloading is None or self._reloading.done():
            self.partitions.clear()
            self.store = ShareStateStore(self.config.snapshot_update_records_per_snapshot)
            self._snapshot_offsets.clear()
            self._reloading = asyncio.get_running_loop().create_task(self._load())
        await asyncio.shield(self._reloading)

    async def _load(self) -> None:
        for _ in self._load_steps():
            await asyncio.sleep(0)

    def _load_steps(self) -> Iterator[None]:
        """Replay ``__share_group_state`` into the store; yields every YIELD_EVERY_BATCHES
        batches so that ``_load`` lets other tasks run."""
        info = self.log_manager.topics.get(SHARE_GROUP_STATE_TOPIC_NAME)
        if info is None:
            return
        for partition in range(info.num_partitions):
            plog = self.log_manager.get_partition(SHARE_GROUP_STATE_TOPIC_NAME, partition)
            if plog is None:
                continue
            snapshots = self._snapshot_offsets.setdefault(partition, {})
            name = f"{SHARE_GROUP_STATE_TOPIC_NAME}-{partition}"
            for count, (_header, records) in enumerate(
                    readable_batches(plog, plog.high_watermark, name, log), 1):
                for record, parsed in decoded_records(records, decode_record,
                                                      UnknownRecordType, name, log):
                    self.store.replay(parsed)
                    if parsed.record_type == SHARE_SNAPSHOT:
                        if parsed.value is None:
                            snapshots.pop(parsed.key, None)
                        else:
                            snapshots[parsed.key] = record.offset
                if count % YIELD_EVERY_BATCHES == 0:
                    yield


def _slice(data: bytes, headers: list, acquired: list[AcquiredRecords]) -> bytes:
    """The whole batches of ``data`` that hold acquired offsets (Kafka's
    ShareFetchUtils.maybeSliceFetchRecords): nothing read past or before them is sent."""
    if not acquired:
        return b""
    first, last = acquired[0].first_offset, acquired[-1].last_offset
    start = end = None
    for h in headers:
        if h.last_offset < first:
            continue
        if h.base_offset > last:
            break
        if start is None:
            start = h.position
        end = h.position + h.size
    return data[start:end] if start is not None else b""
