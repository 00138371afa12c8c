"""Committed offsets: OffsetCommit, TxnOffsetCommit, OffsetFetch, OffsetDelete, expiration.

A pure state machine (Kafka's OffsetMetadataManager) over an ``OffsetStore``. A commit
validates the member and generation (for a consumer group: the member epoch, answering
STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID as Kafka's ConsumerGroup.validateOffsetCommit) against
the group (a commit with generation -1 and no
member id creates a "simple" group when none exists), writes one OffsetCommit record per
partition and makes the offsets visible once the write is durable (``on_done``).
Transactional commits are written in a transactional batch of the producer and stay pending
until ``complete_transaction`` applies the COMMIT/ABORT marker; OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT for partitions with pending offsets (KIP-447).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from semel.coordinator.group.classic_group import DEAD, PREPARING_REBALANCE, STABLE
from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.consumer_group import ConsumerGroup
from semel.coordinator.group.group_manager import (
    GroupMetadataManager,
    RequestInfo,
    append_error_to_response_error,
)
from semel.coordinator.group.offsets import OffsetAndMetadata, OffsetStore
from semel.coordinator.group.records import CoordinatorRecord, OffsetCommitKey, OffsetCommitValue
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.offset_commit_request import OffsetCommitRequest
from semel.protocol.messages.offset_commit_response import (
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from semel.protocol.messages.offset_delete_request import OffsetDeleteRequest
from semel.protocol.messages.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from semel.protocol.messages.offset_fetch_request import OffsetFetchRequestGroup
from semel.protocol.messages.offset_fetch_response import (
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopics,
)
from semel.protocol.messages.txn_offset_commit_request import TxnOffsetCommitRequest
from semel.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

log = logging.getLogger("coordinator.group")

INVALID_OFFSET = -1
DEFAULT_RETENTION_TIME = -1


def offset_commit_record(group_id: str, topic: str, partition: int,
                         value: OffsetAndMetadata) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), OffsetCommitValue(
        offset=value.committed_offset, metadata=value.metadata,
        commit_timestamp=value.commit_timestamp_ms, leader_epoch=value.leader_epoch,
        expire_timestamp=value.expire_timestamp_ms))


def offset_tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(OffsetCommitKey(group_id, topic, partition), None)


class OffsetMetadataManager:
    def __init__(self, config: GroupConfig, clock: Callable[[], int],
                 groups: GroupMetadataManager, write) -> None:
        self.config = config
        self.clock = clock
        self.groups = groups
        self.write = write  # write(group_id, records, on_done, txn=(producer_id, epoch))
        self.store = OffsetStore()

    def _metadata_too_large(self, metadata: str | None) -> bool:
        return metadata is not None and len(metadata) > self.config.offset_metadata_max_bytes

    # -- OffsetCommit -------------------------------------------------------------------

    def commit_offsets(self, ctx: RequestInfo, req: OffsetCommitRequest,
                       respond: Callable[[list[OffsetCommitResponseTopic]], None]) -> None:
        """Validate and write; ``respond`` gets the per-partition results once durable.

        Errors that concern the whole request are given to every partition, as Kafka's
        OffsetCommitRequest.getErrorResponse does."""
        try:
            group = self.groups.find(req.group_id)
            if group is None:
                if req.generation_id_or_member_epoch >= 0:
                    raise KafkaError(Error.GROUP_ID_NOT_FOUND if ctx.api_version >= 9
                                     else Error.ILLEGAL_GENERATION)
                log.info("group %s: created as a simple group by an offset commit",
                         req.group_id)
                group = self.groups.get_or_create_group(req.group_id, True)
            if isinstance(group, ConsumerGroup):
                group.validate_offset_commit(req.member_id, req.group_instance_id,
                                             req.generation_id_or_member_epoch, False,
                                             ctx.api_version)
            else:
                group.validate_offset_commit(req.member_id, req.group_instance_id,
                                             req.generation_id_or_member_epoch, False)
        except KafkaError as e:
            respond(_commit_error_response(req, e.code))
            return
        if group.is_in(STABLE, PREPARING_REBALANCE):
            # classic members keep their session alive by committing
            self.groups.reschedule_heartbeat(group, group.member(req.member_id))
        now = self.clock()
        expire = -1 if req.retention_time_ms == DEFAULT_RETENTION_TIME \
            else now + req.retention_time_ms
        topics: list[OffsetCommitResponseTopic] = []
        records: list[CoordinatorRecord] = []
        committed: list[tuple[str, int, OffsetAndMetadata]] = []
        for topic in req.topics:
            out = OffsetCommitResponseTopic(name=topic.name, topic_id=topic.topic_id)
            topics.append(out)
            for p in topic.partitions:
                if self._metadata_too_large(p.committed_metadata):
                    out.partitions.append(OffsetCommitResponsePartition(
                        p.partition_index, Error.OFFSET_METADATA_TOO_LARGE))
                    continue
                out.partitions.append(OffsetCommitResponsePartition(p.partition_index,
                                                                    Error.NONE))
                value = OffsetAndMetadata(
                    committed_offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if p.committed_leader_epoch >= 0
                    else -1,
                    metadata=p.committed_metadata or "",
                    commit_timestamp_ms=now if p.commit_timestamp == -1 else p.commit_timestamp,
                    expire_timestamp_ms=expire)
                records.append(offset_commit_record(req.group_id, topic.name,
                                                    p.partition_index, value))
                committed.append((topic.name, p.partition_index, value))
        if not records:
            respond(topics)
            return
        group_id = req.group_id

        def done(error: Error, base_offset: int) -> None:
            if error:
                respond(_commit_error_response(req, _operation_error(error)))
                return
            for i, (topic, partition, value) in enumerate(committed):
                value.record_offset = base_offset + i
                self.store.put(group_id, topic, partition, value)
            respond(topics)

        self.write(group_id, records, done)

    def commit_transactional_offsets(
            self, ctx: RequestInfo, req: TxnOffsetCommitRequest,
            respond: Callable[[list[TxnOffsetCommitResponseTopic]], None]) -> None:
        """TxnOffsetCommit: written in a transactional batch of ``req.producer_id``; the
        offsets stay pending until ``complete_transaction``."""
        try:
            if not req.group_id:
                raise KafkaError(Error.INVALID_GROUP_ID)
            group = self.groups.find(req.group_id)
            if group is None:
                if req.generation_id >= 0:
                    raise KafkaError(Error.ILLEGAL_GENERATION)
                group = self.groups.get_or_create_group(req.group_id, True)
            group.validate_offset_commit(req.member_id, req.group_instance_id,
                                         req.generation_id, True)
        except KafkaError as e:
            # Kafka: a stale member epoch is ILLEGAL_GENERATION to TxnOffsetCommit
            code = Error.ILLEGAL_GENERATION if e.code == Error.STALE_MEMBER_EPOCH else e.code
            respond(_txn_commit_error_response(req, code))
            return
        now = self.clock()
        topics: list[TxnOffsetCommitResponseTopic] = []
        records: list[CoordinatorRecord] = []
        staged: list[tuple[str, int, OffsetAndMetadata]] = []
        for topic in req.topics:
            out = TxnOffsetCommitResponseTopic(name=topic.name)
            topics.append(out)
            for p in topic.partitions:
                if self._metadata_too_large(p.committed_metadata):
                    out.partitions.append(TxnOffsetCommitResponsePartition(
                        p.partition_index, Error.OFFSET_METADATA_TOO_LARGE))
                    continue
                out.partitions.append(TxnOffsetCommitResponsePartition(p.partition_index,
                                                                       Error.NONE))
                value = OffsetAndMetadata(
                    committed_offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if p.committed_leader_epoch >= 0
                    else -1,
                    metadata=p.committed_metadata or "", commit_timestamp_ms=now)
                records.append(offset_commit_record(req.group_id, topic.name,
                                                    p.partition_index, value))
                staged.append((topic.name, p.partition_index, value))
        if not records:
            respond(topics)
            return
        group_id, producer_id = req.group_id, req.producer_id

        def done(error: Error, base_offset: int) -> None:
            if error:
                respond(_txn_commit_error_response(req, _operation_error(error)))
                return
            for i, (topic, partition, value) in enumerate(staged):
                value.record_offset = base_offset + i
                self.store.put_pending(producer_id, group_id, topic, partition, value)
            respond(topics)

        self.write(group_id, records, done, (req.producer_id, req.producer_epoch))

    def complete_transaction(self, producer_id: int, group_ids: set[str] | None,
                             committed: bool) -> None:
        """A COMMIT/ABORT marker of ``producer_id`` landed on the partition of ``group_ids``."""
        applied = self.store.complete_transaction(producer_id, group_ids, committed)
        log.debug("producer %d: %s, %d offsets materialized", producer_id,
                  "commit" if committed else "abort", applied)

    # -- OffsetFetch --------------------------------------------------------------------

    def fetch_offsets(self, req: OffsetFetchRequestGroup,
                      require_stable: bool) -> OffsetFetchResponseGroup:
        group_id = req.group_id
        group = self.groups.find(group_id)
        if isinstance(group, ConsumerGroup):
            try:  # Kafka's ConsumerGroup.validateOffsetFetch (v9: member id and epoch)
                group.validate_offset_fetch(req.member_id, req.member_epoch)
            except KafkaError as e:
                return OffsetFetchResponseGroup(group_id=group_id, error_code=e.code)
        known = group is not None and not group.is_in(DEAD)
        store = self.store
        topics: list[OffsetFetchResponseTopics] = []
        if req.topics is None:  # every partition with a committed offset
            if not known:
                return OffsetFetchResponseGroup(group_id=group_id, topics=[])
            by_topic: dict[str, OffsetFetchResponseTopics] = {}
            for (topic, partition), value in store.group_offsets(group_id).items():
                out = by_topic.get(topic)
                if out is None:
                    out = by_topic[topic] = OffsetFetchResponseTopics(name=topic)
                    topics.append(out)
                if require_stable and store.has_pending(group_id, topic, partition):
                    out.partitions.append(_unstable(partition))
                else:
                    out.partitions.append(_fetched(partition, value))
            return OffsetFetchResponseGroup(group_id=group_id, topics=topics)
        for topic in req.topics:
            out = OffsetFetchResponseTopics(name=topic.name)
            topics.append(out)
            for partition in topic.partition_indexes:
                value = store.get(group_id, topic.name, partition) if known else None
                if require_stable and store.has_pending(group_id, topic.name, partition):
                    out.partitions.append(_unstable(partition))
                else:
                    out.partitions.append(_fetched(partition, value))
        return OffsetFetchResponseGroup(group_id=group_id, topics=topics)

    # -- OffsetDelete -------------------------------------------------------------------

    def delete_offsets(self, req: OffsetDeleteRequest,
                       respond: Callable[[OffsetDeleteResponse], None]) -> None:
        try:
            if not req.group_id:
                raise KafkaError(Error.INVALID_GROUP_ID)
            group = self.groups.find(req.group_id)
            if group is None:
                raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
            group.validate_offset_delete()
        except KafkaError as e:
            respond(OffsetDeleteResponse(error_code=e.code))
            return
        group_id = req.group_id
        topics: list[OffsetDeleteResponseTopic] = []
        records: list[CoordinatorRecord] = []
        deleted: list[tuple[str, int]] = []
        for topic in req.topics:
            out = OffsetDeleteResponseTopic(name=topic.name)
            topics.append(out)
            subscribed = group.is_subscribed_to_topic(topic.name)
            for p in topic.partitions:
                if subscribed:
                    out.partitions.append(OffsetDeleteResponsePartition(
                        p.partition_index, Error.GROUP_SUBSCRIBED_TO_TOPIC))
                    continue
                out.partitions.append(OffsetDeleteResponsePartition(p.partition_index))
                if self.store.get(group_id, topic.name, p.partition_index) is not None or \
                        self.store.has_pending(group_id, topic.name, p.partition_index):
                    records.append(offset_tombstone(group_id, topic.name, p.partition_index))
                    deleted.append((topic.name, p.partition_index))
        response = OffsetDeleteResponse(topics=topics)
        if not records:
            respond(response)
            return

        def done(error: Error, _base_offset: int) -> None:
            if error:
                respond(OffsetDeleteResponse(error_code=_operation_error(error)))
                return
            for topic, partition in deleted:
                self.remove_offset(group_id, topic, partition)
            respond(response)

        self.write(group_id, records, done)

    def remove_offset(self, group_id: str, topic: str, partition: int) -> None:
        """What an offset tombstone does: drop the committed and pending offsets."""
        self.store.remove(group_id, topic, partition)
        self.store.remove_pending(group_id, topic, partition)

    def delete_all_offsets(self, group_id: str, records: list[CoordinatorRecord]) -> int:
        """Tombstones for every committed and pending offset of the group (DeleteGroups)."""
        committed = self.store.group_offsets(group_id)
        for topic, partition in committed:
            records.append(offset_tombstone(group_id, topic, partition))
        pending_only = self.store.pending_partitions(group_id) - committed.keys()
        for topic, partition in sorted(pending_only):
            records.append(offset_tombstone(group_id, topic, partition))
        return len(committed) + len(pending_only)

    def on_topics_deleted(self, topics: set[str]) -> int:
        """Kafka's onPartitionsDeleted for whole topics: tombstones for every committed or
        pending offset of those topics, in every group. Returns how many."""
        store = self.store
        by_group: dict[str, set[tuple[str, int]]] = {}
        for group_id, offsets in store.committed.items():
            for key in offsets:
                if key[0] in topics:
                    by_group.setdefault(group_id, set()).add(key)
        for by_producer in store.pending.values():
            for group_id, offsets in by_producer.items():
                for key in offsets:
                    if key[0] in topics:
                        by_group.setdefault(group_id, set()).add(key)
        count = 0
        for group_id, keys in by_group.items():
            records = [offset_tombstone(group_id, t, p) for t, p in sorted(keys)]
            for t, p in keys:
                self.remove_offset(group_id, t, p)
            self.write(group_id, records, None)
            count += len(records)
        return count

    # -- expiration ---------------------------------------------------------------------

    def cleanup_expired_offsets(self, group_id: str, records: list[CoordinatorRecord]) -> bool:
        """Tombstones for expired offsets (removed from memory now); True when the group
        has no offsets left and no open transaction, so an empty group may go."""
        offsets = self.store.group_offsets(group_id)
        if not offsets:
            return group_id not in self.store.open_transactions
        group = self.groups.find(group_id)
        if group is None:
            return False
        base = group.offset_expiration_base()
        if base is None:
            return False
        now = self.clock()
        retention = self.config.offsets_retention_ms
        all_expired = True
        expired = []
        for (topic, partition), value in offsets.items():
            if group.is_subscribed_to_topic(topic):
                all_expired = False
                continue
            if value.expire_timestamp_ms >= 0:
                is_expired = now >= value.expire_timestamp_ms
            else:
                is_expired = now - base(value) >= retention
            if is_expired and not self.store.has_pending(group_id, topic, partition):
                expired.append((topic, partition))
            else:
                all_expired = False
        for topic, partition in expired:
            records.append(offset_tombstone(group_id, topic, partition))
            self.store.remove(group_id, topic, partition)
            log.debug("group %s: offset of %s-%d expired", group_id, topic, partition)
        return all_expired and group_id not in self.store.open_transactions

    # -- loading ------------------------------------------------------------------------

    def replay_offset_commit(self, key: OffsetCommitKey, value: OffsetCommitValue | None,
                             record_offset: int, producer_id: int) -> None:
        """Apply one OffsetCommit record read from the log; ``producer_id`` -1 unless the
        record is in a transactional batch."""
        group_id = key.group
        if value is None:
            self.remove_offset(group_id, key.topic, key.partition)
            return
        if self.groups.find(group_id) is None:
            self.groups.get_or_create_group(group_id, True)  # simple group if none
        offset = OffsetAndMetadata(
            committed_offset=value.offset, leader_epoch=max(value.leader_epoch, -1),
            metadata=value.metadata, commit_timestamp_ms=value.commit_timestamp,
            expire_timestamp_ms=max(value.expire_timestamp, -1), record_offset=record_offset)
        if producer_id < 0:
            self.store.put(group_id, key.topic, key.partition, offset)
        else:
            self.store.put_pending(producer_id, group_id, key.topic, key.partition, offset)


def _operation_error(error: Error) -> Error:
    """Kafka's CoordinatorOperationExceptionHelper mapping of a failed write."""
    return append_error_to_response_error(error)


def _commit_error_response(req: OffsetCommitRequest,
                           error: Error) -> list[OffsetCommitResponseTopic]:
    return [OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
        OffsetCommitResponsePartition(p.partition_index, error) for p in t.partitions])
        for t in req.topics]


def _txn_commit_error_response(req: TxnOffsetCommitRequest,
                               error: Error) -> list[TxnOffsetCommitResponseTopic]:
    return [TxnOffsetCommitResponseTopic(name=t.name, partitions=[
        TxnOffsetCommitResponsePartition(p.partition_index, error) for p in t.partitions])
        for t in req.topics]


def _fetched(partition: int, value: OffsetAndMetadata | None) -> OffsetFetchResponsePartitions:
    if value is None:
        return OffsetFetchResponsePartitions(partition_index=partition,
                                             committed_offset=INVALID_OFFSET,
                                             committed_leader_epoch=-1, metadata="")
    return OffsetFetchResponsePartitions(partition_index=partition,
                                         committed_offset=value.committed_offset,
                                         committed_leader_epoch=value.leader_epoch,
                                         metadata=value.metadata)


def _unstable(partition: int) -> OffsetFetchResponsePartitions:
    return OffsetFetchResponsePartitions(partition_index=partition,
                                         committed_offset=INVALID_OFFSET,
                                         committed_leader_epoch=-1, metadata="",
                                         error_code=Error.UNSTABLE_OFFSET_COMMIT)

