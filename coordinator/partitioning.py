"""Which partition of a coordinator topic holds a key: ``abs(java_hash(key)) % partitions``.

A group lives on ``__consumer_offsets`` partition ``Utils.abs(groupId.hashCode()) %
offsets.topic.num.partitions`` (Kafka's GroupCoordinator.partitionFor), a transactional id on
``__transaction_state`` partition ``Utils.abs(transactionalId.hashCode()) %
transaction.state.log.num.partitions`` (TransactionStateManager.partitionFor). Both
coordinators route through here; a module of its own so that the transaction coordinator
does not import the group coordinator's state to hash a string.
"""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, wrapping int32)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
