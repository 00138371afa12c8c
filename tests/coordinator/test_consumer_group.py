"""Consumer groups (KIP-848) on the pure shard with an injected clock: joins, reconciliation
(revocation before reassignment), fencing by leave / session / rebalance timeout, static
members, regex subscriptions and new topics, offset validation by member epoch, the
assignors, and the records replayed into a fresh shard."""

from __future__ import annotations

import uuid

import pytest

from semel.coordinator.group.assignors import MemberSpec, range_assign, uniform_assign
from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.consumer_group import MemberState, TopicMetadata
from semel.coordinator.group.group_manager import RequestInfo
from semel.coordinator.group.records import decode_record, encode_record
from semel.coordinator.group.shard import GroupCoordinatorShard
from semel.coordinator.group.timer import ManualClock, ManualTimer
from semel.protocol.errors import Error
from semel.protocol.messages.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from semel.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from semel.protocol.messages.offset_fetch_request import OffsetFetchRequestGroup
from semel.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
G = "g"


class Harness:
    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]] | None = None) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.topics = dict(topics or {"t1": (T1, 6)})
        self.shard = GroupCoordinatorShard(GroupConfig(offsets_topic_num_partitions=4),
                                           self.clock, self.timer, 4, self.metadata)
        self.log: list = []  # every record written, in order

    def metadata(self) -> dict[str, TopicMetadata]:
        return {n: TopicMetadata(t, n, c) for n, (t, c) in self.topics.items()}

    def drain(self) -> None:
        for write in self.shard.take_writes():
            self.log.extend(write.records)
            write.complete(Error.NONE, 0)

    def hb(self, member_id: str, epoch: int, owned=None, *, names=None, regex=None,
           instance=None, assignor=None, rebalance_timeout=-1):
        out = []
        req = ConsumerGroupHeartbeatRequest(
            group_id=G, member_id=member_id, member_epoch=epoch, instance_id=instance,
            rebalance_timeout_ms=rebalance_timeout, subscribed_topic_names=names,
            subscribed_topic_regex=regex, server_assignor=assignor,
            topic_partitions=None if owned is None else [
                TopicPartitions(t, sorted(ps)) for t, ps in owned.items()])
        self.shard.consumer_manager.heartbeat("c", "/127.0.0.1", 1, req, out.append)
        self.drain()
        return out[0]

    def join(self, member_id: str, names=("t1",), **kw):
        return self.hb(member_id, 0, {}, names=list(names) if names is not None else None,
                       rebalance_timeout=kw.pop("rebalance_timeout", 30000), **kw)

    @property
    def group(self):
        return self.shard.consumer_manager.groups[G]


def assigned(response) -> dict[uuid.UUID, set[int]]:
    return {tp.topic_id: set(tp.partitions) for tp in response.assignment.topic_partitions}


def test_revocation_comes_before_reassignment():
    h = Harness()
    a = h.join("a")
    assert (a.error_code, a.member_epoch) == (Error.NONE, 1)
    assert assigned(a) == {T1: set(range(6))}
    b = h.join("b")
    # b's target partitions are still owned by a: b moves to epoch 2 with nothing yet
    assert b.member_epoch == 2 and assigned(b) == {}
    assert h.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    a = h.hb("a", 1, {T1: set(range(6))})
    # a keeps its epoch until it has revoked what b gets
    kept = assigned(a)[T1]
    assert a.member_epoch == 1 and len(kept) == 3
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert str(h.group.state) == "Reconciling"
    # b still waits: a has not confirmed the revocation
    assert h.hb("b", 2, {}).assignment is None
    a = h.hb("a", 1, {T1: kept})  # revoked
    assert a.member_epoch == 2 and h.group.members["a"].state is MemberState.STABLE
    b = h.hb("b", 2, {})
    assert assigned(b) == {T1: set(range(6)) - kept}
    assert str(h.group.state) == "Stable"


def test_leave_and_session_timeout_fence_members():
    h = Harness()
    h.join("a")
    h.join("b")
    kept = assigned(h.hb("a", 1, {T1: set(range(6))}))[T1]
    h.hb("a", 1, {T1: kept})
    h.hb("b", 2, {})
    # b leaves: group epoch 3, a gets everything at its next heartbeat
    left = h.hb("b", -1)
    assert (left.error_code, left.member_epoch) == (Error.NONE, -1)
    assert h.group.group_epoch == 3 and "b" not in h.group.members
    a = h.hb("a", 2, {T1: kept})
    assert a.member_epoch == 3 and assigned(a) == {T1: set(range(6))}
    # c joins, then a stops heartbeating: its session expires and c gets all
    h.join("c")
    h.timer.advance(GroupConfig().consumer_session_timeout_ms - 1)
    c = h.hb("c", h.group.members["c"].member_epoch, {})
    h.drain()
    h.timer.advance(1)
    h.drain()
    assert "a" not in h.group.members
    c = h.hb("c", c.member_epoch, {})
    assert assigned(c) == {T1: set(range(6))}


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    h = Harness()
    h.join("a", rebalance_timeout=1000)
    h.join("b")
    h.hb("a", 1, {T1: set(range(6))})  # must revoke 3
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    h.timer.advance(999)
    h.drain()
    assert "a" in h.group.members
    h.timer.advance(1)
    h.drain()
    assert "a" not in h.group.members
    b = h.hb("b", 2, {})
    assert assigned(b) == {T1: set(range(6))}


def test_member_epoch_errors():
    h = Harness()
    h.join("a")
    assert h.hb("a", 5, {}).error_code == Error.FENCED_MEMBER_EPOCH
    assert h.hb("x", 1, {}).error_code == Error.UNKNOWN_MEMBER_ID
    assert h.hb("", 1).error_code == Error.INVALID_REQUEST  # v1: member id required
    assert h.hb("b", 0, {}, names=None).error_code == Error.INVALID_REQUEST
    assert h.join("b", assignor="sticky").error_code == Error.UNSUPPORTED_ASSIGNOR
    assert h.join("b", regex="(").error_code == Error.INVALID_REGULAR_EXPRESSION


def test_static_member_leaves_temporarily_and_rejoins_with_its_assignment():
    h = Harness()
    a = h.join("a1", instance="i-a")
    epoch = h.group.group_epoch
    left = h.hb("a1", -2, instance="i-a")
    assert left.member_epoch == -2 and h.group.members["a1"].member_epoch == -2
    # the instance id is taken until released: a second incarnation is refused meanwhile
    rejoined = h.join("a2", instance="i-a")
    assert rejoined.error_code == Error.NONE and assigned(rejoined) == assigned(a)
    assert "a1" not in h.group.members and h.group.group_epoch == epoch  # no rebalance
    assert h.join("a3", instance="i-a").error_code == Error.UNRELEASED_INSTANCE_ID
    assert h.hb("a1", 1, {}, instance="i-a").error_code == Error.FENCED_INSTANCE_ID


def test_regex_subscription_and_new_topics_bump_the_group_epoch():
    h = Harness({"p-1": (T1, 2), "other": (uuid.UUID(int=9), 2)})
    a = h.join("a", names=None, regex="p-.*")
    assert assigned(a) == {T1: {0, 1}}
    h.topics["p-2"] = (T2, 3)  # created later
    epoch = h.group.group_epoch
    a = h.hb("a", a.member_epoch, {T1: {0, 1}})
    assert h.group.group_epoch == epoch + 1
    assert assigned(a) == {T1: {0, 1}, T2: {0, 1, 2}}
    h.topics["p-2"] = (T2, 4)  # partitions added
    a = h.hb("a", a.member_epoch, {T1: {0, 1}, T2: {0, 1, 2}})
    assert assigned(a)[T2] == {0, 1, 2, 3}


def _commit(h, member_id, epoch, version=9):
    out = []
    req = OffsetCommitRequest(group_id=G, generation_id_or_member_epoch=epoch,
                              member_id=member_id, topics=[OffsetCommitRequestTopic(
                                  name="t1", partitions=[OffsetCommitRequestPartition(0, 5)])])
    h.shard.offset_manager.commit_offsets(RequestInfo(api_version=version), req, out.append)
    h.drain()
    return out[0][0].partitions[0].error_code


def test_offsets_are_validated_by_member_epoch():
    h = Harness()
    h.join("a")
    assert _commit(h, "a", 1) == Error.NONE
    assert _commit(h, "a", 0) == Error.STALE_MEMBER_EPOCH
    assert _commit(h, "zz", 1) == Error.UNKNOWN_MEMBER_ID
    assert _commit(h, "a", 1, version=8) == Error.UNSUPPORTED_VERSION
    fetch = h.shard.offset_manager.fetch_offsets
    assert fetch(OffsetFetchRequestGroup(G, "a", 0, None), False).error_code == \
        Error.STALE_MEMBER_EPOCH
    ok = fetch(OffsetFetchRequestGroup(G, "a", 1, None), False)
    assert ok.error_code == Error.NONE and ok.topics[0].partitions[0].committed_offset == 5
    assert fetch(OffsetFetchRequestGroup(G, None, -1, None), False).error_code == Error.NONE

    def txn(member_id, epoch):
        out = []
        req = TxnOffsetCommitRequest(
            transactional_id="x", group_id=G, producer_id=7, producer_epoch=0,
            generation_id=epoch, member_id=member_id, topics=[TxnOffsetCommitRequestTopic(
                name="t1", partitions=[TxnOffsetCommitRequestPartition(0, 6)])])
        h.shard.offset_manager.commit_transactional_offsets(RequestInfo(api_version=4), req,
                                                            out.append)
        h.drain()
        return out[0][0].partitions[0].error_code

    assert txn("a", 0) == Error.ILLEGAL_GENERATION  # Kafka maps a stale epoch so
    assert txn("b", 1) == Error.UNKNOWN_MEMBER_ID
    assert txn("a", 1) == Error.NONE


def test_records_replay_into_the_same_state():
    h = Harness()
    h.join("a", instance="i-a")
    h.join("b")
    h.hb("a", 1, {T1: set(range(6))})
    fresh = GroupCoordinatorShard(GroupConfig(), ManualClock(), ManualTimer(ManualClock()), 4,
                                  h.metadata)
    for record in h.log:
        fresh.replay(decode_record(*encode_record(record)), 0)
    got, want = fresh.consumer_manager.groups[G], h.group
    assert (got.group_epoch, got.assignment_epoch) == (want.group_epoch, want.assignment_epoch)
    assert got.members == want.members and got.target_assignment == want.target_assignment
    assert got.partition_epochs == want.partition_epochs
    assert got.subscription_metadata == want.subscription_metadata
    assert got.static_members == {"i-a": "a"}


def test_list_and_describe():
    h = Harness()
    h.join("a")
    listed = h.shard.consumer_manager.list_groups(set(), {"consumer"})
    assert [(g.group_id, g.group_type, g.protocol_type) for g in listed] == \
        [(G, "consumer", "consumer")]
    assert h.shard.consumer_manager.list_groups(set(), {"classic"}) == []
    d = h.shard.consumer_manager.describe(G)
    assert (d.group_state, d.group_epoch, d.assignor_name) == ("Stable", 1, "uniform")
    assert d.members[0].assignment.topic_partitions[0].topic_name == "t1"
    assert h.shard.consumer_manager.describe("nope").error_code == Error.GROUP_ID_NOT_FOUND


# -- assignors ------------------------------------------------------------------------------


def _counts(result):
    return sorted(sum(len(ps) for ps in a.values()) for a in result.values())


@pytest.mark.parametrize("members", range(1, 8))
@pytest.mark.parametrize("partitions", [1, 6, 7, 13])
def test_uniform_is_balanced_complete_and_sticky(members, partitions):
    specs = {f"m{i}": MemberSpec({T1}, {}) for i in range(members)}
    first = uniform_assign(specs, {T1: partitions})
    owned = [p for a in first.values() for p in a.get(T1, ())]
    assert sorted(owned) == list(range(partitions))
    counts = _counts(first)
    assert counts[-1] - counts[0] <= 1
    # a new member: the others keep what they can
    specs = {m: MemberSpec({T1}, a) for m, a in first.items()}
    specs["new"] = MemberSpec({T1}, {})
    second = uniform_assign(specs, {T1: partitions})
    moved = sum(len(first[m].get(T1, set()) - second[m].get(T1, set())) for m in first)
    assert moved == sum(len(a.get(T1, ())) for a in second.values()) - \
        sum(len(first[m].get(T1, set()) & second[m].get(T1, set())) for m in first)
    counts = _counts(second)
    assert counts[-1] - counts[0] <= 1
    assert moved <= -(-partitions // (members + 1))


def test_uniform_with_different_subscriptions():
    specs = {"a": MemberSpec({T1}, {}), "b": MemberSpec({T1, T2}, {}),
             "c": MemberSpec({T2}, {})}
    result = uniform_assign(specs, {T1: 4, T2: 4})
    assert T2 not in result["a"] and T1 not in result["c"]
    assert sum(_counts(result)) == 8 and max(_counts(result)) - min(_counts(result)) <= 1


def test_range_gives_contiguous_co_partitioned_ranges():
    specs = {"b": MemberSpec({T1, T2}, {}), "a": MemberSpec({T1, T2}, {})}
    result = range_assign(specs, {T1: 5, T2: 5})
    assert result["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0, 1, 2})}
    assert result["b"] == {T1: frozenset({3, 4}), T2: frozenset({3, 4})}


def test_member_may_choose_the_range_assignor():
    h = Harness({"t1": (T1, 4), "t2": (T2, 4)})
    h.join("a", names=("t1", "t2"), assignor="range")
    h.join("b", names=("t1", "t2"), assignor="range")
    assert h.group.target_assignment["a"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
