"""The group coordinator on the broker's event loop: the async shell around the pure state.

Owns ``__consumer_offsets`` (created on first use with ``offsets.topic.num.partitions``
partitions, cleanup.policy=compact) and drives ``GroupCoordinatorShard``:

- every call into the shard is followed by ``_drain``: queued records are encoded (Kafka's
  key/value schemas, ``records.py``) into one v2 batch per write - transactional, with the
  producer's id and epoch, for TxnOffsetCommit - appended to the group's partition with
  origin "coordinator", and completed once durable (``PartitionLog.wait_durable``) in a task
  of our own, so a client that disconnects cannot lose the completion;
- timers (session/rebalance/join/sync timeouts, initial rebalance delay, offsets
  retention check) run on ``loop.call_later``;
- at start every existing partition is loaded in the background; requests for groups on a
  partition still loading get COORDINATOR_LOAD_IN_PROGRESS, after ``stop`` they get
  COORDINATOR_NOT_AVAILABLE (parked JoinGroup/SyncGroup requests get NOT_COORDINATOR);
- the shard is made on first use (a group request, the load, the first offsets retention
  check), so the state's modules and the codecs they answer with are not imported at
  broker start (issue 18); until then ``shard`` is None, which readers take as no groups.

Transactions (issue 6): TxnOffsetCommit goes through ``commit_transactional_offsets``; the
transaction coordinator completes the transaction on an offsets partition with
``complete_transaction`` (writes the COMMIT/ABORT marker there, then makes the pending
offsets visible or drops them), the way Kafka's WriteTxnMarkers hands
``__consumer_offsets`` partitions to its group coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.timer import CLEANUP_KEY
from semel.coordinator.loading import batches_to_load, decoded_records
from semel.coordinator.partitioning import partition_for
from semel.protocol.errors import Error, KafkaError, ProtocolError
from semel.protocol.records import ControlType, build_batch, build_control_batch
from semel.protocol.records import parse_control_record as parse_control

if TYPE_CHECKING:
    from semel.coordinator.group.group_manager import RequestInfo
    from semel.coordinator.group.shard import GroupCoordinatorShard, PendingWrite

log = logging.getLogger("coordinator.group")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"


class LoopTimer:
    """Keyed timers on the event loop; ``after_fire`` runs after each callback.

    Each timer also keeps its deadline on the coordinator's clock: when a test moves that
    clock ahead (virtual time), ``fire_due`` runs the timers it made due at once, in deadline
    order, instead of waiting for the loop's own (real-time) timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after_fire: Callable[[], None],
                 clock: Callable[[], int]) -> None:
        self.loop = loop
        self.after_fire = after_fire
        self.clock = clock
        self.handles: dict[str, tuple[int, asyncio.TimerHandle, Callable[[], None]]] = {}

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        self.cancel(key)
        delay_ms = max(delay_ms, 0)
        handle = self.loop.call_later(delay_ms / 1000, self._fire, key, fn)
        self.handles[key] = (self.clock() + delay_ms, handle, fn)

    def cancel(self, key: str) -> None:
        entry = self.handles.pop(key, None)
        if entry is not None:
            entry[1].cancel()

    def cancel_all(self) -> None:
        for _, handle, _ in self.handles.values():
            handle.cancel()
        self.handles.clear()

    def fire_due(self) -> int:
        """Fire the timers whose deadline the clock has reached; how many fired. A fired
        timer may schedule others: those that are due fire too."""
        fired = 0
        while True:
            now = self.clock()
            due = [(deadline, key) for key, (deadline, _, _) in self.handles.items()
                   if deadline <= now]
            if not due:
                return fired
            _, key = min(due)
            _, handle, fn = self.handles[key]
            handle.cancel()
            self._fire(key, fn)
            fired += 1

    def _fire(self, key: str, fn: Callable[[], None]) -> None:
        self.handles.pop(key, None)
        try:
            fn()
        except Exception:
            log.exception("group coordinator timer %s failed", key)
        self.after_fire()


class GroupCoordinator:
    def __init__(self, log_manager, config: GroupConfig, *,
                 clock: Callable[[], int],
                 group_configs: Callable[[str], dict[str, str]] | None = None) -> None:
        self.log_manager = log_manager
        self.config = config
        self.clock = clock
        # a group's GROUP config overrides (consumer.session.timeout.ms, ...) by group id
        self.group_configs = group_configs
        # whether a group id is a share group's (KIP-932, coordinator/share/; set by the
        # broker): one namespace, so classic and consumer group requests refuse it
        self.share_group: Callable[[str], bool] = lambda _group_id: False
        self.num_partitions = config.offsets_topic_num_partitions
        self.shard: GroupCoordinatorShard | None = None  # made by _state() on first use
        self.timer: LoopTimer | None = None
        self.active = False
        self.loading: set[int] = set()
        self._inflight: dict[int, set[asyncio.Future]] = {}
        self._load_task: asyncio.Task | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.timer = LoopTimer(loop, self._drain, self.clock)
        info = self.log_manager.topics.get(GROUP_METADATA_TOPIC_NAME)
        self.num_partitions = info.num_partitions if info is not None \
            else self.config.offsets_topic_num_partitions
        self.shard = None  # a fresh one on first use
        self.active = True
        if info is not None:
            self.loading = set(range(self.num_partitions))
            self._load_task = loop.create_task(self._load_all(), name="semel-group-load")
        else:  # the shard's schedule_cleanup, before there is a shard
            self.timer.schedule(CLEANUP_KEY, self.config.offsets_retention_check_interval_ms,
                                self._cleanup_group_metadata)

    async def stop(self) -> None:
        """Stop serving: parked joins/syncs get NOT_COORDINATOR; writes in flight finish."""
        if not self.active:
            return
        self.active = False
        if self._load_task is not None:
            self._load_task.cancel()
            await asyncio.gather(self._load_task, return_exceptions=True)
        if self.shard is not None:
            self.shard.unload_all()
        self.timer.cancel_all()
        pending = [f for futures in self._inflight.values() for f in futures]
        if pending:
            await asyncio.wait(pending, timeout=5)

    async def wait_loaded(self) -> None:
        if self._load_task is not None:
            await asyncio.shield(self._load_task)

    def _state(self) -> GroupCoordinatorShard:
        """The shard, made on first use: the group and offset managers, the record codecs
        and the response types they build load then rather than at broker start."""
        if self.shard is None:
            from semel.coordinator.group.shard import GroupCoordinatorShard

            self.shard = GroupCoordinatorShard(self.config, self.clock, self.timer,
                                               self.num_partitions, self._topic_metadata)
            if self.group_configs is not None:
                self.shard.consumer_manager.group_configs = self.group_configs
        return self.shard

    def _topic_metadata(self) -> dict:
        """Every topic now: name -> TopicMetadata (consumer groups' subscriptions)."""
        from semel.coordinator.group.consumer_group import TopicMetadata

        return {name: TopicMetadata(info.topic_id, name, info.num_partitions)
                for name, info in self.log_manager.topics.items()}

    def _cleanup_group_metadata(self) -> None:
        """The first offsets retention check of a coordinator that started without
        ``__consumer_offsets``: the shard's own, which schedules the next."""
        self._state().cleanup_group_metadata()

    # -- routing ------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def check_available(self, group_id: str | None) -> Error:
        """NONE, or the error every operation on this group answers right now."""
        if not self.active:
            return Error.COORDINATOR_NOT_AVAILABLE
        if self.loading and group_id is not None and self.partition_for(group_id) in self.loading:
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        return Error.NONE

    def ensure_topic(self) -> Error:
        """Create __consumer_offsets if needed (FindCoordinator and the first write)."""
        if GROUP_METADATA_TOPIC_NAME in self.log_manager.topics:
            return Error.NONE
        try:
            self.log_manager.create_topic(
                GROUP_METADATA_TOPIC_NAME, self.num_partitions,
                {"cleanup.policy": "compact", "compression.type": "producer",
                 "segment.bytes": str(self.config.offsets_topic_segment_bytes)})
        except KafkaError as e:
            log.error("cannot create %s: %s", GROUP_METADATA_TOPIC_NAME, e)
            return Error.COORDINATOR_NOT_AVAILABLE
        return Error.NONE

    def fire_due_timers(self) -> int:
        """Fire the timers the clock has made due (a test moved it ahead); how many."""
        return self.timer.fire_due() if self.active and self.timer is not None else 0

    async def wait_writes(self) -> None:
        """Until the writes in flight now (offsets, group metadata) are durable."""
        pending = [f for futures in self._inflight.values() for f in futures]
        if pending:
            await asyncio.wait(pending)

    def _call(self, fn: Callable[..., Any], *args) -> Any:
        try:
            return fn(*args)
        finally:
            self._drain()

    def _future(self) -> tuple[asyncio.Future, Callable[[Any], None]]:
        fut = asyncio.get_running_loop().create_future()

        def respond(value: Any) -> None:
            if not fut.done():
                fut.set_result(value)

        return fut, respond

    # -- operations (the handlers' API) -------------------------------------------------

    async def join_group(self, info: RequestInfo, req):
        if self.share_group(req.group_id):  # Kafka's classicGroupJoin on a share group
            from semel.coordinator.group.group_manager import _join_error

            return _join_error("", Error.INCONSISTENT_GROUP_PROTOCOL)
        fut, respond = self._future()
        self._call(self._state().group_manager.join_group, info, req, respond)
        return await fut

    async def sync_group(self, info: RequestInfo, req):
        fut, respond = self._future()
        self._call(self._state().group_manager.sync_group, info, req, respond)
        return await fut

    def heartbeat(self, info: RequestInfo, req) -> Error:
        return self._call(self._state().group_manager.heartbeat, info, req)

    def leave_group(self, info: RequestInfo, req):
        return self._call(self._state().group_manager.leave_group, info, req)

    async def consumer_group_heartbeat(self, info: RequestInfo, req):
        """ConsumerGroupHeartbeat (KIP-848): the response once its records are durable."""
        if self.share_group(req.group_id):
            from semel.coordinator.group.consumer_group_manager import _error

            return _error(Error.GROUP_ID_NOT_FOUND,
                          f"Group {req.group_id} is not a consumer group.")
        fut, respond = self._future()
        self._call(self._state().consumer_manager.heartbeat, info.client_id, info.client_host,
                   info.api_version, req, respond)
        return await fut

    def consumer_group_describe(self, group_id: str, include_operations: bool):
        return self._state().consumer_manager.describe(group_id, include_operations)

    async def commit_offsets(self, info: RequestInfo, req):
        """Per-topic results (OffsetCommitResponseTopic) once the commit is durable."""
        if self.share_group(req.group_id):  # a share group commits no offsets (Kafka)
            from semel.coordinator.group.offset_manager import _commit_error_response

            return _commit_error_response(req, Error.GROUP_ID_NOT_FOUND)
        fut, respond = self._future()
        self._call(self._state().offset_manager.commit_offsets, info, req, respond)
        return await fut

    async def commit_transactional_offsets(self, info: RequestInfo, req):
        """TxnOffsetCommit: per-topic results once the pending offsets are durable."""
        fut, respond = self._future()
        self._call(self._state().offset_manager.commit_transactional_offsets, info, req, respond)
        return await fut

    async def fetch_offsets(self, group_request, require_stable: bool):
        """One OffsetFetchResponseGroup. With require_stable, commits still being written to
        the group's partition are waited for first (Kafka runs such fetches as writes)."""
        if require_stable:
            partition = self.partition_for(group_request.group_id)
            inflight = list(self._inflight.get(partition, ()))
            if inflight:
                await asyncio.wait(inflight)
        return self._state().offset_manager.fetch_offsets(group_request, require_stable)

    async def delete_offsets(self, req):
        fut, respond = self._future()
        self._call(self._state().offset_manager.delete_offsets, req, respond)
        return await fut

    def list_groups(self, states_filter: list[str], types_filter: list[str]):
        shard = self._state()
        return shard.group_manager.list_groups(states_filter, types_filter) + \
            shard.consumer_manager.list_groups({s.strip().lower() for s in states_filter},
                                               {t.strip().lower() for t in types_filter})

    def describe_group(self, group_id: str, api_version: int = 5):
        """DescribeGroups of one group. A consumer group is not a classic group: Kafka answers
        GROUP_ID_NOT_FOUND in v6+ (Dead without an error before)."""
        shard = self._state()
        if group_id in shard.consumer_manager.groups:
            from semel.protocol.messages.describe_groups_response import DescribedGroup

            if api_version >= 6:
                return DescribedGroup(group_id=group_id, group_state="Dead",
                                      error_code=Error.GROUP_ID_NOT_FOUND,
                                      error_message=f"Group {group_id} is not a classic group.")
            return DescribedGroup(group_id=group_id, group_state="Dead")
        return shard.group_manager.describe_group(group_id, api_version)

    async def delete_groups(self, group_ids: list[str]):
        fut, respond = self._future()
        self._call(self._state().delete_groups, group_ids, respond)
        return await fut

    def on_topics_deleted(self, topics: list[str]) -> None:
        """Drop the committed offsets of deleted topics (DeleteTopics calls this)."""
        if self.active:
            self._call(self._state().offset_manager.on_topics_deleted, set(topics))

    async def complete_transaction(self, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, partition: int,
                                   committed: bool) -> Error:
        """Write the COMMIT/ABORT marker of ``producer_id`` to offsets partition ``partition``
        and apply it once durable: pending offsets of that partition's groups become
        visible (COMMIT) or are dropped (ABORT)."""
        if not self.active:
            return Error.COORDINATOR_NOT_AVAILABLE
        if partition in self.loading:
            return Error.COORDINATOR_LOAD_IN_PROGRESS
        plog = self.log_manager.get_partition(GROUP_METADATA_TOPIC_NAME, partition)
        if plog is None:
            return Error.NOT_COORDINATOR
        batch = build_control_batch(commit=committed, producer_id=producer_id,
                                    producer_epoch=producer_epoch,
                                    coordinator_epoch=coordinator_epoch,
                                    timestamp_ms=self.clock())
        try:
            result = plog.append(bytearray(batch), origin="coordinator")
        except KafkaError as e:
            return e.code
        fut, respond = self._future()

        def done(error: Error, _base: int) -> None:
            if not error:
                self._state().complete_transaction(producer_id, partition, committed)
            respond(error)

        self._track(partition, plog, result.next_offset, result.base_offset, done)
        return await asyncio.shield(fut)

    # -- writes -------------------------------------------------------------------------

    def _drain(self) -> None:
        if self.shard is None:
            return
        for write in self.shard.take_writes():
            self._append(write)

    def _append(self, write: PendingWrite) -> None:
        from semel.coordinator.group.records import encode_record

        error = self.ensure_topic()
        plog = self.log_manager.get_partition(GROUP_METADATA_TOPIC_NAME, write.partition)
        if error or plog is None:
            write.complete(error or Error.NOT_COORDINATOR)
            return
        now = self.clock()
        records = [(*encode_record(r), None, now) for r in write.records]
        batch = build_batch(records, producer_id=write.producer_id,
                            producer_epoch=write.producer_epoch,
                            is_transactional=write.transactional)
        try:
            result = plog.append(bytearray(batch), origin="coordinator")
        except KafkaError as e:
            log.warning("append to %s-%d failed: %s", GROUP_METADATA_TOPIC_NAME,
                        write.partition, e)
            write.complete(e.code)
            return
        self._track(write.partition, plog, result.next_offset, result.base_offset,
                    write.complete)

    def _track(self, partition: int, plog, next_offset: int, base_offset: int,
               complete: Callable[[Error, int], None]) -> None:
        task = asyncio.get_running_loop().create_task(
            self._complete_when_durable(plog, next_offset, base_offset, complete))
        inflight = self._inflight.setdefault(partition, set())
        inflight.add(task)
        task.add_done_callback(inflight.discard)

    async def _complete_when_durable(self, plog, next_offset: int, base_offset: int,
                                     complete: Callable[[Error, int], None]) -> None:
        error = Error.NONE
        try:
            await plog.wait_durable(next_offset)
        except KafkaError as e:
            error = e.code
        try:
            complete(error, base_offset)
        except Exception:
            log.exception("group coordinator write completion failed")
        self._drain()

    # -- share group membership records (KIP-932, coordinator/share/membership.py) --------

    async def write_share_records(self, group_id: str, records: list) -> Error:
        """Append a share group's membership records; NONE once durable, else the error."""
        error = self.check_available(group_id) or self.ensure_topic()
        if error:
            return error
        fut, respond = self._future()
        self._call(self._state().write_share, group_id, records,
                   lambda error, _base: respond(error))
        return await fut

    def share_records(self):
        """The share group records loaded from the log (``ShareGroupRecords``), or None
        while the coordinator is not active or still loading."""
        if not self.active or self.loading:
            return None
        return self._state().share_records

    def has_share_groups(self) -> bool:
        """Whether the log holds any share group (none before the shard is made)."""
        return self.shard is not None and bool(self.shard.share_records.groups)

    def knows_share_group(self, group_id: str) -> bool:
        """Whether the log holds share group ``group_id``."""
        return self.shard is not None and self.shard.share_records.knows(group_id)

    # -- loading ------------------------------------------------------------------------

    async def _load_all(self) -> None:
        started = self.clock()
        for partition in sorted(self.loading):
            plog = self.log_manager.get_partition(GROUP_METADATA_TOPIC_NAME, partition)
            try:
                if plog is not None:
                    await self._load_partition(partition, plog)
            except (OSError, KafkaError, ProtocolError) as e:
                log.error("loading %s-%d failed, serving what was read: %s",
                          GROUP_METADATA_TOPIC_NAME, partition, e)
            self.loading.discard(partition)
            self._call(self._state().on_loaded, partition)
        state = self._state()
        log.info("loaded %d classic and %d consumer groups from %s in %d ms",
                 len(state.group_manager.groups), len(state.consumer_manager.groups),
                 GROUP_METADATA_TOPIC_NAME, self.clock() - started)
        self._state().schedule_cleanup()

    async def _load_partition(self, partition: int, plog) -> None:
        from semel.coordinator.group.records import UnknownRecordType, decode_record

        shard = self._state()
        name = f"{GROUP_METADATA_TOPIC_NAME}-{partition}"
        async for header, records in batches_to_load(plog, plog.high_watermark, name, log,
                                                      control=True):
            if header.is_control:
                for record in records:
                    try:
                        control_type, _epoch = parse_control(record)
                    except ProtocolError:
                        continue
                    if control_type in (ControlType.COMMIT, ControlType.ABORT):
                        shard.complete_transaction(header.producer_id, partition,
                                                   control_type == ControlType.COMMIT)
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            for record, parsed in decoded_records(records, decode_record, UnknownRecordType,
                                                  name, log):
                try:
                    shard.replay(parsed, record.offset, producer_id)
                except (AssertionError, ValueError) as e:
                    log.error("%s: record at %d not applied: %s", name, record.offset, e)


__all__ = ["GROUP_METADATA_TOPIC_NAME", "GroupCoordinator", "LoopTimer"]
