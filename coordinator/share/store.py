"""The durable state of share-partitions as ``__share_group_state`` holds it (Kafka's
ShareCoordinatorShard): pure, no I/O.

Per (group, topic id, partition) the store keeps what replaying the topic gives: the start
offset, the snapshot/state/leader epochs and, per offset at or above the start offset, its
persisted (delivery state, delivery count). ``write_state`` turns one ``StateWrite`` of a
share-partition into the record Kafka would write - a ShareSnapshot for a partition without
state or once ``share.coordinator.snapshot.update.records.per.snapshot`` updates followed
the last snapshot (the snapshot then holds the whole merged state, with the snapshot epoch
bumped), else a ShareUpdate holding only the changed runs - and applies it at once, as
Kafka's coordinator runtime applies a record when it is appended. ``replay`` applies a
record read back at load. Newer runs replace older ones offset by offset and everything
below the start offset is dropped (Kafka's PersisterStateBatchCombiner).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from semel.coordinator.share.partition import StateBatch, StateWrite, _append_run
from semel.coordinator.share.records import (
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    SharePartitionKey,
    ShareRecord,
    ShareSnapshotValue,
    ShareUpdateValue,
)


@dataclass(slots=True)
class ShareGroupOffset:
    """The merged durable state of one share-partition."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> (state, count)
    delivery_complete_count: int = -1  # as last written (KIP-1226; -1 unknown)

    def state_batches(self) -> list[StateBatch]:
        runs: list[StateBatch] = []
        for offset in sorted(self.offsets):
            state, count = self.offsets[offset]
            _append_run(runs, offset, state, count)
        return runs

    def apply(self, start_offset: int, batches: list[StateBatch]) -> None:
        """Newer runs over older ones; then drop what is below the start offset."""
        offsets = self.offsets
        for b in batches:
            for offset in range(b.first_offset, b.last_offset + 1):
                offsets[offset] = (b.delivery_state, b.delivery_count)
        if start_offset != -1:
            self.start_offset = start_offset
        below = [o for o in offsets if o < self.start_offset]
        for offset in below:
            del offsets[offset]


# The leader epoch of every share-partition's records: a single node's partitions never
# change leader (their leader epoch is 0).
LEADER_EPOCH = 0


class ShareStateStore:
    def __init__(self, snapshot_update_records_per_snapshot: int = 500) -> None:
        self.snapshot_update_records_per_snapshot = snapshot_update_records_per_snapshot
        self.states: dict[SharePartitionKey, ShareGroupOffset] = {}
        self.update_counts: dict[SharePartitionKey, int] = {}

    def read_state(self, key: SharePartitionKey) -> ShareGroupOffset | None:
        return self.states.get(key)

    def keys_of_group(self, group_id: str) -> list[SharePartitionKey]:
        return [k for k in self.states if k.group_id == group_id]

    # -- writing ------------------------------------------------------------------------

    def write_state(self, key: SharePartitionKey, write: StateWrite,
                    now_ms: int) -> ShareRecord:
        current = self.states.get(key)
        if current is None or (self.update_counts.get(key, 0)
                               >= self.snapshot_update_records_per_snapshot):
            merged = ShareGroupOffset(
                snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
                state_epoch=0 if current is None else current.state_epoch,
                leader_epoch=LEADER_EPOCH,
                start_offset=write.start_offset,
                create_timestamp=now_ms, write_timestamp=now_ms,
                offsets={} if current is None else dict(current.offsets))
            merged.apply(write.start_offset, write.state_batches)
            record = ShareRecord(SHARE_SNAPSHOT, key, ShareSnapshotValue(
                merged.snapshot_epoch, merged.state_epoch, merged.leader_epoch,
                merged.start_offset, now_ms, now_ms, merged.state_batches(),
                write.delivery_complete_count))
        else:
            record = ShareRecord(SHARE_UPDATE, key, ShareUpdateValue(
                current.snapshot_epoch, LEADER_EPOCH, write.start_offset,
                list(write.state_batches), write.delivery_complete_count))
        self.replay(record)
        return record

    def initialize_state(self, key: SharePartitionKey, start_offset: int,
                         now_ms: int) -> ShareRecord:
        """A fresh snapshot at ``start_offset`` (Kafka's InitializeShareGroupState), as the
        share-partition's first durable state."""
        current = self.states.get(key)
        epoch = 0 if current is None else current.snapshot_epoch + 1
        state_epoch = 0 if current is None else current.state_epoch + 1
        record = ShareRecord(SHARE_SNAPSHOT, key, ShareSnapshotValue(
            epoch, state_epoch, LEADER_EPOCH, start_offset, now_ms, now_ms, []))
        self.replay(record)
        return record

    def delete_state(self, key: SharePartitionKey) -> ShareRecord:
        """A tombstone (the group's offsets were deleted)."""
        record = ShareRecord(SHARE_SNAPSHOT, key, None)
        self.replay(record)
        return record

    # -- loading ------------------------------------------------------------------------

    def replay(self, record: ShareRecord) -> None:
        key, value = record.key, record.value
        if value is None:
            self.states.pop(key, None)
            self.update_counts.pop(key, None)
            return
        if isinstance(value, ShareSnapshotValue):
            state = ShareGroupOffset(value.snapshot_epoch, value.state_epoch, value.leader_epoch,
                                     value.start_offset, value.create_timestamp,
                                     value.write_timestamp)
            state.apply(value.start_offset, value.state_batches)
            state.delivery_complete_count = value.delivery_complete_count
            self.states[key] = state
            self.update_counts[key] = 0
            return
        state = self.states.get(key)
        if state is None:  # an update without its snapshot (Kafka starts from it alone)
            state = self.states[key] = ShareGroupOffset(
                value.snapshot_epoch, 0, value.leader_epoch,
                max(value.start_offset, 0), 0, 0)
        if value.leader_epoch != -1:
            state.leader_epoch = max(state.leader_epoch, value.leader_epoch)
        state.apply(value.start_offset, value.state_batches)
        state.delivery_complete_count = value.delivery_complete_count
        self.update_counts[key] = self.update_counts.get(key, 0) + 1


def partition_key(group_id: str, topic_id: UUID, partition: int) -> SharePartitionKey:
    return SharePartitionKey(group_id, topic_id, partition)
