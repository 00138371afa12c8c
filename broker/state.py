"""A running broker's state as plain Python objects, for tests (``BrokerThread.partitions()``
and friends): partitions' offsets, producer state, transactions, groups and their committed
offsets. Each function reads the broker's structures and must run on its event loop
(``BrokerThread`` does that), so a snapshot is consistent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from semel.broker.handlers.metadata import INTERNAL_TOPICS

if TYPE_CHECKING:
    from semel.broker.server import Broker


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int
    size_bytes: int


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: none kept
    last_timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int | None  # the open transaction's first offset here


@dataclass(frozen=True)
class TransactionState:
    transactional_id: str
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, CompleteAbort, ...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_timestamp_ms: int  # -1 outside a transaction
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class MemberState:
    member_id: str
    client_id: str
    client_host: str
    group_instance_id: str | None


@dataclass(frozen=True)
class GroupState:
    group_id: str
    state: str  # Kafka's names: Empty, Stable, PreparingRebalance, ...; "Dead" when unknown
    protocol_type: str
    protocol: str
    generation_id: int
    members: tuple[MemberState, ...]
    offsets: dict[tuple[str, int], int]  # committed offsets by (topic, partition)


def partitions(broker: Broker, topic: str | None = None,
               internal: bool = False) -> list[PartitionState]:
    out = []
    for tp, plog in sorted(broker.log_manager.logs.items()):
        if topic is not None and tp.topic != topic:
            continue
        if topic is None and not internal and tp.topic in INTERNAL_TOPICS:
            continue
        out.append(PartitionState(
            tp.topic, tp.partition, plog.log_start_offset, plog.high_watermark,
            plog.last_stable_offset, plog.log_end_offset, plog.size_in_bytes))
    return out


def producers(broker: Broker, topic: str, partition: int) -> list[ProducerState]:
    plog = broker.log_manager.get_partition(topic, partition)
    if plog is None:
        raise KeyError(f"no partition {topic}-{partition}")
    out = []
    for pid, entry in sorted(plog.producer_state.producers.items()):
        first = entry.current_txn_first_offset
        out.append(ProducerState(pid, entry.producer_epoch, entry.last_seq,
                                 entry.last_timestamp, entry.coordinator_epoch,
                                 None if first < 0 else first))
    return out


def transactions(broker: Broker) -> list[TransactionState]:
    out = []
    for tid, md in sorted(broker.txn_coordinator.txns.items()):
        out.append(TransactionState(
            tid, md.state.state_name,
            md.producer_id, md.producer_epoch, md.txn_timeout_ms, md.txn_start_timestamp,
            tuple(sorted((tp.topic, tp.partition) for tp in md.topic_partitions))))
    return out


def groups(broker: Broker) -> list[GroupState]:
    shard = broker.group_coordinator.shard
    if shard is None:
        return []
    manager, store = shard.group_manager, shard.offset_manager.store
    out = []
    for group_id in sorted(set(manager.groups) | set(store.committed)):
        group = manager.groups.get(group_id)
        offsets = {key: value.committed_offset
                   for key, value in sorted(store.group_offsets(group_id).items())}
        if group is None:
            out.append(GroupState(group_id, "Empty", "", "", 0, (), offsets))
            continue
        members = tuple(MemberState(m.member_id, m.client_id, m.client_host,
                                    m.group_instance_id) for m in group.members.values())
        out.append(GroupState(group_id, str(group.state), group.protocol_type or "",
                              group.protocol_name or "", group.generation_id, members,
                              offsets))
    return out
