"""The group coordinator's state: groups and offsets of every ``__consumer_offsets`` partition.

Pure (Kafka's GroupCoordinatorShard, for all partitions at once): the classic group, consumer
group (KIP-848) and offset managers share one group id namespace, one clock, one keyed timer and one outbox. Every record the state wants in
``__consumer_offsets`` is queued in ``writes`` as a ``PendingWrite`` (partition, records,
producer id/epoch for transactional offset commits, ``on_done(error, base_offset)``); the
async shell drains the outbox after each call, appends, waits for durability and completes
the write. Tests drain it by hand, so success and failure paths run without a log.

A group lives on partition ``abs(java_hash(group_id)) % partitions`` (Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, coordinator.partitioning).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.consumer_group import TopicMetadata
from semel.coordinator.group.consumer_group_manager import ConsumerGroupManager
from semel.coordinator.group.consumer_records import ConsumerGroupKey
from semel.coordinator.group.group_manager import (
    GroupMetadataManager,
    WriteDone,
    append_error_to_response_error,
)
from semel.coordinator.group.offset_manager import OffsetMetadataManager
from semel.coordinator.group.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    OffsetCommitKey,
)
from semel.coordinator.group.timer import CLEANUP_KEY, Timer
from semel.coordinator.partitioning import java_string_hash, partition_for
from semel.coordinator.share.group_records import ShareGroupKey, ShareGroupRecords
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.delete_groups_response import DeletableGroupResult

log = logging.getLogger("coordinator.group")

__all__ = ["CLEANUP_KEY", "GroupCoordinatorShard", "PendingWrite", "java_string_hash",
           "partition_for"]


@dataclass(slots=True)
class PendingWrite:
    partition: int
    records: list[CoordinatorRecord]
    on_done: WriteDone | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    group_id: str = ""
    result: tuple[Error, int] | None = field(default=None)

    @property
    def transactional(self) -> bool:
        return self.producer_id >= 0

    def complete(self, error: Error = Error.NONE, base_offset: int = -1) -> None:
        if self.result is not None:
            raise AssertionError("write completed twice")
        self.result = (error, base_offset)
        if self.on_done is not None:
            self.on_done(error, base_offset)


class GroupCoordinatorShard:
    def __init__(self, config: GroupConfig, clock: Callable[[], int], timer: Timer,
                 num_partitions: int | None = None,
                 metadata: Callable[[], dict[str, TopicMetadata]] | None = None) -> None:
        """``metadata()``: the topics that exist now (name -> id and partition count), which
        consumer groups subscribe to and assign."""
        self.config = config
        self.clock = clock
        self.timer = timer
        self.num_partitions = num_partitions or config.offsets_topic_num_partitions
        self.writes: list[PendingWrite] = []
        self.group_manager = GroupMetadataManager(config, clock, timer, self._write)
        self.consumer_manager = ConsumerGroupManager(
            config, clock, timer, self._write, metadata or dict, self.group_manager.groups)
        self.group_manager.consumer_groups = self.consumer_manager.groups
        self.group_manager.consumer_manager = self.consumer_manager
        self.consumer_manager.classic_manager = self.group_manager
        self.offset_manager = OffsetMetadataManager(config, clock, self.group_manager,
                                                    self._write)
        # share group (KIP-932) records as the log holds them (loaded, then each durable
        # write): share membership (coordinator/share/) builds its groups from them on
        # start and writes through ``write_share``
        self.share_records = ShareGroupRecords()

    # -- plumbing -----------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _write(self, group_id: str, records: list[CoordinatorRecord],
               on_done: WriteDone | None, txn: tuple[int, int] | None = None) -> None:
        producer_id, producer_epoch = txn if txn is not None else (-1, -1)
        self.writes.append(PendingWrite(self.partition_for(group_id), records, on_done,
                                        producer_id, producer_epoch, group_id))

    def write_share(self, group_id: str, records: list[CoordinatorRecord],
                    on_done: WriteDone | None) -> None:
        """Queue share group membership records (the membership's own state); once durable
        they are applied to ``share_records`` too, which so stays what the log holds."""

        def done(error: Error, base_offset: int) -> None:
            if not error:
                for record in records:
                    self.share_records.replay(record.key, record.value)
            if on_done is not None:
                on_done(error, base_offset)

        self._write(group_id, records, done)

    def take_writes(self) -> list[PendingWrite]:
        writes, self.writes = self.writes, []
        return writes

    def group_ids_in(self, partition: int) -> list[str]:
        return [g for g in (*self.group_manager.groups, *self.consumer_manager.groups)
                if self.partition_for(g) == partition]

    # -- DeleteGroups -------------------------------------------------------------------

    def delete_groups(self, group_ids: list[str],
                      respond: Callable[[list[DeletableGroupResult]], None]) -> None:
        results: dict[str, DeletableGroupResult] = {}
        waiting: set[str] = set()

        def finish() -> None:
            respond(list(results.values()))

        for group_id in group_ids:
            if group_id in results:
                continue
            consumer_group = self.consumer_manager.groups.get(group_id)
            try:
                if consumer_group is not None:
                    consumer_group.validate_delete_group()
                else:
                    self.group_manager.validate_delete_group(group_id)
            except KafkaError as e:
                results[group_id] = DeletableGroupResult(group_id, e.code)
                continue
            records: list[CoordinatorRecord] = []
            deleted = self.offset_manager.delete_all_offsets(group_id, records)
            self.offset_manager.store.delete_group(group_id)
            if consumer_group is not None:
                records.extend(self.consumer_manager.delete_group_records(group_id))
                self.consumer_manager.remove_group(group_id)
            else:
                records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
                self.group_manager.remove_group(group_id)
            log.info("group %s deleted with %d offsets", group_id, deleted)
            result = results[group_id] = DeletableGroupResult(group_id, Error.NONE)
            waiting.add(group_id)

            def done(error: Error, _base: int, result=result, group_id=group_id) -> None:
                if error:
                    result.error_code = append_error_to_response_error(error)
                waiting.discard(group_id)
                if not waiting:
                    finish()

            self._write(group_id, records, done)
        if not waiting:
            finish()

    # -- offsets retention --------------------------------------------------------------

    def schedule_cleanup(self) -> None:
        self.timer.schedule(CLEANUP_KEY, self.config.offsets_retention_check_interval_ms,
                            self.cleanup_group_metadata)

    def cleanup_group_metadata(self) -> int:
        """Expire offsets and drop empty groups without offsets; reschedules itself.
        Returns the number of tombstones written."""
        by_group: dict[str, list[CoordinatorRecord]] = {}
        for group_id in [*self.group_manager.groups, *self.consumer_manager.groups]:
            records: list[CoordinatorRecord] = []
            if self.offset_manager.cleanup_expired_offsets(group_id, records):
                consumer_group = self.consumer_manager.groups.get(group_id)
                if consumer_group is not None:
                    if consumer_group.is_empty:
                        records.extend(self.consumer_manager.delete_group_records(group_id))
                        self.consumer_manager.remove_group(group_id)
                elif self.group_manager.groups[group_id].is_empty:
                    records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
                    self.group_manager.remove_group(group_id)
            if records:
                by_group[group_id] = records
        count = 0
        for group_id, records in by_group.items():
            count += len(records)
            self._write(group_id, records, None)
        if count:
            log.info("offsets cleanup wrote %d tombstones", count)
        self.schedule_cleanup()
        return count

    # -- loading and transaction markers ------------------------------------------------

    def replay(self, record: CoordinatorRecord, record_offset: int,
               producer_id: int = -1) -> None:
        if isinstance(record.key, OffsetCommitKey):
            self.offset_manager.replay_offset_commit(record.key, record.value, record_offset,
                                                     producer_id)
        elif isinstance(record.key, ConsumerGroupKey):
            self.consumer_manager.replay(record.key, record.value)
        elif isinstance(record.key, ShareGroupKey):
            self.share_records.replay(record.key, record.value)
        else:
            self.group_manager.replay_group_metadata(record.key, record.value)

    def complete_transaction(self, producer_id: int, partition: int, committed: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` is durable on ``partition``."""
        groups = {g for g in self.offset_manager.store.pending.get(producer_id, {})
                  if self.partition_for(g) == partition}
        self.offset_manager.complete_transaction(producer_id, groups, committed)

    def on_loaded(self, partition: int) -> None:
        group_ids = self.group_ids_in(partition)
        self.group_manager.on_loaded([g for g in group_ids if g in self.group_manager.groups])
        self.consumer_manager.on_loaded(group_ids)

    def unload_all(self) -> None:
        self.group_manager.unload(list(self.group_manager.groups))
        self.consumer_manager.unload()
        self.timer.cancel(CLEANUP_KEY)
