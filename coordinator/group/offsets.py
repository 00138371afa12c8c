"""Committed offsets and pending transactional offsets, in memory.

``committed[group][(topic, partition)]`` holds what OffsetFetch returns. Transactional
offset commits (TxnOffsetCommit, KIP-98/447) are kept per producer id in ``pending`` until
the transaction's COMMIT marker lands on the group's ``__consumer_offsets`` partition
(they move to ``committed``, unless a later regular commit - by record offset - already
replaced them) or its ABORT marker does (they are dropped). ``open_transactions[group]``
lists the producer ids with pending offsets for a group (require_stable, expiration).
"""

from __future__ import annotations

from dataclasses import dataclass

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int = -1  # -1: none
    metadata: str = ""
    commit_timestamp_ms: int = -1
    expire_timestamp_ms: int = -1  # -1: none (only OffsetCommit v2-v4 retention_time_ms)
    record_offset: int = -1  # offset of the record in __consumer_offsets


class OffsetStore:
    def __init__(self) -> None:
        self.committed: dict[str, dict[TopicPartitionKey, OffsetAndMetadata]] = {}
        self.pending: dict[int, dict[str, dict[TopicPartitionKey, OffsetAndMetadata]]] = {}
        self.open_transactions: dict[str, set[int]] = {}

    # -- committed ----------------------------------------------------------------------

    def get(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        offsets = self.committed.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def put(self, group: str, topic: str, partition: int, value: OffsetAndMetadata) -> None:
        self.committed.setdefault(group, {})[(topic, partition)] = value

    def remove(self, group: str, topic: str, partition: int) -> OffsetAndMetadata | None:
        offsets = self.committed.get(group)
        if offsets is None:
            return None
        removed = offsets.pop((topic, partition), None)
        if not offsets:
            del self.committed[group]
        return removed

    def group_offsets(self, group: str) -> dict[TopicPartitionKey, OffsetAndMetadata]:
        return self.committed.get(group, {})

    # -- pending transactional offsets --------------------------------------------------

    def put_pending(self, producer_id: int, group: str, topic: str, partition: int,
                    value: OffsetAndMetadata) -> None:
        self.pending.setdefault(producer_id, {}).setdefault(group, {})[(topic, partition)] = value
        self.open_transactions.setdefault(group, set()).add(producer_id)

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        for producer_id in self.open_transactions.get(group, ()):
            offsets = self.pending.get(producer_id, {}).get(group)
            if offsets is not None and (topic, partition) in offsets:
                return True
        return False

    def pending_partitions(self, group: str) -> set[TopicPartitionKey]:
        keys: set[TopicPartitionKey] = set()
        for producer_id in self.open_transactions.get(group, ()):
            keys |= self.pending.get(producer_id, {}).get(group, {}).keys()
        return keys

    def remove_pending(self, group: str, topic: str, partition: int) -> None:
        """A tombstone for (group, topic, partition) also drops pending offsets for it."""
        for producer_id in self.open_transactions.get(group, ()):
            offsets = self.pending.get(producer_id, {}).get(group)
            if offsets is not None:
                offsets.pop((topic, partition), None)

    def complete_transaction(self, producer_id: int, groups: set[str] | None,
                             committed: bool) -> int:
        """Apply a COMMIT (``committed``) or ABORT marker for ``producer_id`` to ``groups``
        (None: all); returns how many offsets became visible."""
        by_group = self.pending.get(producer_id)
        if by_group is None:
            return 0
        applied = 0
        for group in [g for g in by_group if groups is None or g in groups]:
            offsets = by_group.pop(group)
            open_txns = self.open_transactions.get(group)
            if open_txns is not None:
                open_txns.discard(producer_id)
                if not open_txns:
                    del self.open_transactions[group]
            if not committed:
                continue
            for (topic, partition), value in offsets.items():
                existing = self.get(group, topic, partition)
                # keep the latest commit by position in the log, whichever kind it was
                if existing is None or value.record_offset > existing.record_offset:
                    self.put(group, topic, partition, value)
                    applied += 1
        if not by_group:
            del self.pending[producer_id]
        return applied

    def delete_group(self, group: str) -> None:
        self.committed.pop(group, None)
        for producer_id in self.open_transactions.pop(group, ()):
            by_group = self.pending.get(producer_id)
            if by_group is not None:
                by_group.pop(group, None)
                if not by_group:
                    del self.pending[producer_id]
