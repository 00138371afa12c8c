"""Drive the group coordinator state (GroupCoordinatorShard) without an event loop.

Time is a ManualClock moved by ``advance``; records the state writes are "appended" by
``flush`` to an in-memory list with increasing offsets (or failed with an error), which
also lets tests replay them into a fresh shard as a broker restart would.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.consumer_protocol import encode_subscription
from semel.coordinator.group.group_manager import RequestInfo
from semel.coordinator.group.records import CoordinatorRecord, decode_record, encode_record
from semel.coordinator.group.shard import GroupCoordinatorShard, PendingWrite
from semel.coordinator.group.timer import ManualClock, ManualTimer
from semel.protocol.errors import Error
from semel.protocol.messages.heartbeat_request import HeartbeatRequest
from semel.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from semel.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from semel.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from semel.protocol.messages.offset_fetch_request import (
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from semel.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from semel.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

CONFIG = GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000,
                     offsets_topic_num_partitions=4)
SUBSCRIPTION = encode_subscription(["t"])
RANGE = [("range", SUBSCRIPTION)]


class Reply:
    """Collects what a ``respond`` callback receives."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> None:
        self.values.append(value)

    @property
    def done(self) -> bool:
        return bool(self.values)

    @property
    def value(self) -> Any:
        assert len(self.values) == 1, f"expected one response, got {self.values}"
        return self.values[0]


class Harness:
    def __init__(self, config: GroupConfig = CONFIG, **overrides) -> None:
        self.config = replace(config, **overrides)
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.shard = GroupCoordinatorShard(self.config, self.clock, self.timer)
        # (partition, offset, key, value, producer id, marker: None or committed)
        self.log: list[tuple[int, int, bytes | None, bytes | None, int, bool | None]] = []
        self.next_offset: dict[int, int] = {}

    @property
    def groups(self):
        return self.shard.group_manager.groups

    def group(self, group_id: str):
        return self.shard.group_manager.groups[group_id]

    # -- writes -------------------------------------------------------------------------

    def pending_writes(self) -> list[PendingWrite]:
        return list(self.shard.writes)

    def flush(self, error: Error = Error.NONE) -> list[PendingWrite]:
        """Complete every queued write (again until none is left): append them to the fake
        log, or fail them with ``error``."""
        done = []
        while self.shard.writes:
            for write in self.shard.take_writes():
                base = self.next_offset.get(write.partition, 0)
                if not error:
                    for i, record in enumerate(write.records):
                        key, value = encode_record(record)
                        self.log.append((write.partition, base + i, key, value,
                                         write.producer_id, None))
                    self.next_offset[write.partition] = base + len(write.records)
                write.complete(error, base if not error else -1)
                done.append(write)
        return done

    def records(self) -> list[CoordinatorRecord]:
        return [decode_record(k, v) for _, _, k, v, _, marker in self.log if marker is None]

    def marker(self, producer_id: int, partition: int, committed: bool) -> None:
        """A COMMIT/ABORT marker lands on ``partition`` (what the shell does once durable)."""
        offset = self.next_offset.get(partition, 0)
        self.next_offset[partition] = offset + 1
        self.log.append((partition, offset, None, None, producer_id, committed))
        self.shard.complete_transaction(producer_id, partition, committed)

    def restarted(self) -> Harness:
        """A new harness whose shard loaded this one's log (same clock time)."""
        other = Harness(self.config)
        other.clock.now_ms = self.clock.now_ms
        for partition, offset, key, value, producer_id, marker in self.log:
            if marker is None:
                other.shard.replay(decode_record(key, value), offset, producer_id)
            else:
                other.shard.complete_transaction(producer_id, partition, marker)
        other.log = list(self.log)
        other.next_offset = dict(self.next_offset)
        for p in range(other.shard.num_partitions):
            other.shard.on_loaded(p)
        return other

    def advance(self, ms: int) -> None:
        self.timer.advance(ms)

    # -- requests -----------------------------------------------------------------------

    def join(self, group_id: str, member_id: str = "", *, protocols=RANGE,
             protocol_type: str = "consumer", instance_id: str | None = None,
             session_ms: int = 10_000, rebalance_ms: int = 30_000, version: int = 9,
             client_id: str = "client") -> Reply:
        reply = Reply()
        req = JoinGroupRequest(
            group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[JoinGroupRequestProtocol(n, m) for n, m in protocols])
        self.shard.group_manager.join_group(RequestInfo(client_id, "/127.0.0.1", version),
                                            req, reply)
        return reply

    def join_new(self, group_id: str, **kw) -> str:
        """Join with v4+'s two steps; returns the member id (the second join is parked)."""
        first = self.join(group_id, **kw).value
        assert first.error_code == Error.MEMBER_ID_REQUIRED, first
        return first.member_id

    def sync(self, group_id: str, member_id: str, generation: int,
             assignments: dict[str, bytes] | None = None, *, instance_id: str | None = None,
             protocol_type: str | None = "consumer", protocol_name: str | None = None,
             version: int = 5) -> Reply:
        reply = Reply()
        req = SyncGroupRequest(
            group_id=group_id, generation_id=generation, member_id=member_id,
            group_instance_id=instance_id, protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[SyncGroupRequestAssignment(m, a)
                         for m, a in (assignments or {}).items()])
        self.shard.group_manager.sync_group(RequestInfo("client", "/127.0.0.1", version),
                                            req, reply)
        return reply

    def heartbeat(self, group_id: str, member_id: str, generation: int,
                  instance_id: str | None = None) -> Error:
        return self.shard.group_manager.heartbeat(
            RequestInfo(), HeartbeatRequest(group_id, generation, member_id, instance_id))

    def leave(self, group_id: str, *members: tuple[str, str | None]):
        return self.shard.group_manager.leave_group(RequestInfo(), LeaveGroupRequest(
            group_id=group_id, members=[MemberIdentity(m, i) for m, i in members]))

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int], *,
               generation: int = -1, member_id: str = "", instance_id: str | None = None,
               metadata: str = "", retention_ms: int = -1, version: int = 9) -> Reply:
        reply = Reply()
        topics: dict[str, OffsetCommitRequestTopic] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, OffsetCommitRequestTopic(name=topic)).partitions.append(
                OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset,
                                             committed_metadata=metadata))
        req = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=generation,
                                  member_id=member_id, group_instance_id=instance_id,
                                  retention_time_ms=retention_ms, topics=list(topics.values()))
        self.shard.offset_manager.commit_offsets(RequestInfo("client", "/127.0.0.1", version),
                                                 req, reply)
        return reply

    def txn_commit(self, group_id: str, producer_id: int, offsets: dict[tuple[str, int], int],
                   *, producer_epoch: int = 0, generation: int = -1,
                   member_id: str = "") -> Reply:
        reply = Reply()
        topics: dict[str, TxnOffsetCommitRequestTopic] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, TxnOffsetCommitRequestTopic(name=topic)).partitions.append(
                TxnOffsetCommitRequestPartition(partition_index=partition,
                                                committed_offset=offset))
        req = TxnOffsetCommitRequest(transactional_id="tx", group_id=group_id,
                                     producer_id=producer_id, producer_epoch=producer_epoch,
                                     generation_id=generation, member_id=member_id,
                                     topics=list(topics.values()))
        self.shard.offset_manager.commit_transactional_offsets(RequestInfo(), req, reply)
        return reply

    def fetch(self, group_id: str, partitions: list[tuple[str, int]] | None = None, *,
              require_stable: bool = False) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (committed offset, error code)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in partitions:
                by_topic.setdefault(topic, []).append(partition)
            topics = [OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                      for t, ps in by_topic.items()]
        response = self.shard.offset_manager.fetch_offsets(
            OffsetFetchRequestGroup(group_id=group_id, topics=topics), require_stable)
        return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                for t in response.topics for p in t.partitions}

    # -- composite steps ----------------------------------------------------------------

    def form_group(self, group_id: str, n: int, **kw) -> list[str]:
        """``n`` dynamic members joined and synced into a Stable group; the leader first."""
        ids = [self.join_new(group_id, **kw) for _ in range(n)]
        replies = [self.join(group_id, m, **kw) for m in ids]
        self.advance(0)  # the initial rebalance delay (0 here) elapses
        responses = [r.value for r in replies]
        assert all(r.error_code == Error.NONE for r in responses), responses
        generation = responses[0].generation_id
        leader = responses[0].leader
        syncs = [self.sync(group_id, m, generation,
                           {x: x.encode() for x in ids} if m == leader else None) for m in ids]
        self.flush()
        assert all(s.value.error_code == Error.NONE for s in syncs), [s.values for s in syncs]
        return [leader] + [m for m in ids if m != leader]
