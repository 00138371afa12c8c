"""Share group membership (coordinator/share/membership.py): joins, epochs, the simple
assignor, leaves, session expiry on an injected clock, the group id namespace."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from uuid import UUID

import pytest

from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.records import CoordinatorRecord, decode_record, encode_record
from semel.coordinator.group.shard import GroupCoordinatorShard
from semel.coordinator.group.timer import ManualClock, ManualTimer
from semel.coordinator.share.membership import (
    ShareGroupMembership,
    ShareMembershipConfig,
    simple_assignment,
)
from semel.protocol.errors import Error
from semel.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest

T1, T2 = UUID(int=1), UUID(int=2)


class FakeService:
    """Records member_left calls (the share-partition side is tested on its own)."""

    def __init__(self) -> None:
        self.left: list[tuple[str, str]] = []

    async def member_left(self, group_id: str, member_id: str) -> Error:
        self.left.append((group_id, member_id))
        return Error.NONE


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def make(topics: dict[str, tuple[UUID, int]], other=frozenset(), **config):
    log_manager = SimpleNamespace(topics={
        name: SimpleNamespace(name=name, topic_id=tid, num_partitions=n)
        for name, (tid, n) in topics.items()})
    service, clock = FakeService(), Clock()
    membership = ShareGroupMembership(service, log_manager, clock=clock,
                                      config=ShareMembershipConfig(**config),
                                      other_group=lambda g: g in other)
    return membership, service, clock, log_manager


def hb(m: ShareGroupMembership, member: str, epoch: int, topics=None, group: str = "g"):
    req = ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                     subscribed_topic_names=topics)
    return asyncio.run(m.heartbeat("client", "/127.0.0.1", req))


def assigned(resp) -> dict[UUID, list[int]]:
    return {tp.topic_id: tp.partitions for tp in resp.assignment.topic_partitions}


def test_simple_assignor_shares_partitions():
    # one partition, three members: every member gets it
    got = simple_assignment({m: ("a",) for m in "xyz"}, {"a": (T1, 1)})
    assert got == {m: {T1: [0]} for m in "xyz"}
    # three partitions, two members: balanced, every partition once
    got = simple_assignment({"x": ("a",), "y": ("a",)}, {"a": (T1, 3)})
    assert sorted(got["x"][T1] + got["y"][T1]) == [0, 1, 2]
    assert {len(got["x"][T1]), len(got["y"][T1])} == {1, 2}
    # three members, two partitions: each partition twice, counts differ by at most one
    got = simple_assignment({m: ("a",) for m in "xyz"}, {"a": (T1, 2)})
    counts = [len(a.get(T1, [])) for a in got.values()]
    assert sum(counts) == 4 and max(counts) - min(counts) <= 1
    # different subscriptions: a topic goes only to its subscribers
    got = simple_assignment({"x": ("a",), "y": ("a", "b")}, {"a": (T1, 1), "b": (T2, 2)})
    assert got["x"] == {T1: [0]} and got["y"] == {T1: [0], T2: [0, 1]}


def test_join_heartbeat_epochs_and_leave():
    m, service, _clock, _lm = make({"a": (T1, 1)})
    r = hb(m, "m1", 0, ["a"])
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (0, 1, 5000)
    assert assigned(r) == {T1: [0]}
    r = hb(m, "m1", 1)
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 1, None)
    r2 = hb(m, "m2", 0, ["a"])
    assert (r2.member_epoch, assigned(r2)) == (2, {T1: [0]})
    r = hb(m, "m1", 1)  # behind: moved to the new epoch, same partitions (no assignment)
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 2, None)
    assert hb(m, "m1", 1).error_code == 0  # the previous epoch is still accepted
    assert hb(m, "m1", 5).error_code == Error.FENCED_MEMBER_EPOCH
    assert hb(m, "nobody", 3).error_code == Error.UNKNOWN_MEMBER_ID
    r = hb(m, "m1", -1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert service.left == [("g", "m1")]
    group = m.describe("g")
    assert (group.group_state, group.group_epoch, [x.member_id for x in group.members]) == \
        ("Stable", 3, ["m2"])
    assert [(tp.topic_name, tp.partitions) for tp in group.members[0].assignment
            .topic_partitions] == [("a", [0])]


def test_assignment_follows_partitions_and_subscriptions():
    m, _service, _clock, lm = make({"a": (T1, 1)})
    r = hb(m, "m1", 0, ["a", "b"])
    assert assigned(r) == {T1: [0]}
    lm.topics["b"] = SimpleNamespace(name="b", topic_id=T2, num_partitions=2)
    r = hb(m, "m1", 1)  # topic b created: a new epoch and the new assignment
    assert r.member_epoch == 2 and assigned(r) == {T1: [0], T2: [0, 1]}
    r = hb(m, "m1", 2, ["b"])
    assert r.member_epoch == 3 and assigned(r) == {T2: [0, 1]}


def test_session_timeout_expires_member():
    m, service, clock, _lm = make({"a": (T1, 1)}, session_timeout_ms=45_000)
    hb(m, "m1", 0, ["a"])
    hb(m, "m2", 0, ["a"])
    clock.now += 30_000
    hb(m, "m2", 2)
    clock.now += 20_000  # m1 silent for 50 s, m2 for 20 s
    assert asyncio.run(m.expire_members()) == 1
    assert service.left == [("g", "m1")]
    assert hb(m, "m1", 2).error_code == Error.UNKNOWN_MEMBER_ID
    r = hb(m, "m1", 0, ["a"])  # rejoins
    assert r.error_code == 0 and assigned(r) == {T1: [0]}


def test_errors():
    m, _service, _clock, _lm = make({"a": (T1, 1)}, other={"classic"}, max_size=1)
    assert hb(m, "m1", 0, None).error_code == Error.INVALID_REQUEST
    assert hb(m, "", 0, ["a"]).error_code == Error.INVALID_REQUEST
    assert hb(m, "m1", -2).error_code == Error.INVALID_REQUEST
    r = hb(m, "m1", 0, ["a"], group="classic")
    assert r.error_code == Error.GROUP_ID_NOT_FOUND
    assert r.error_message == "Group classic is not a share group."
    # a share group unknown here (a restart forgot it): the member rejoins
    assert hb(m, "m1", 1, group="new").error_code == Error.UNKNOWN_MEMBER_ID
    assert hb(m, "m1", 0, ["a"]).error_code == 0
    assert hb(m, "m2", 0, ["a"]).error_code == Error.GROUP_MAX_SIZE_REACHED
    assert m.describe("classic").error_code == Error.GROUP_ID_NOT_FOUND
    assert m.describe("none").error_code == Error.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("bad", [{"session_timeout_ms": 0}, {"max_size": -1}])
def test_config_validation(bad):
    with pytest.raises(ValueError):
        ShareMembershipConfig(**bad)


# -- persistence in __consumer_offsets (Kafka's share group records) ---------------------


def _persisted(topics: dict[str, tuple[UUID, int]], shard: GroupCoordinatorShard):
    """Membership that writes its records into ``shard`` (each write completed at once)."""
    membership, _service, clock, _log_manager = make(topics)
    written: list[CoordinatorRecord] = []

    async def write(group_id: str, records: list[CoordinatorRecord]) -> Error:
        done: list[Error] = []
        shard.write_share(group_id, records, lambda error, _base: done.append(error))
        for pending in shard.take_writes():
            written.extend(pending.records)
            pending.complete()
        return done[0]

    membership.write = write
    return membership, clock, written


def _replayed(written: list[CoordinatorRecord]) -> GroupCoordinatorShard:
    """A fresh shard that loaded ``written`` from its encoded bytes."""
    fresh = GroupCoordinatorShard(GroupConfig(), ManualClock(), ManualTimer(ManualClock()), 4)
    for offset, record in enumerate(written):
        key, value = encode_record(record)
        fresh.replay(decode_record(key, value), offset)
    return fresh


def test_records_replay_into_a_fresh_membership():
    topics = {"t": (T1, 2)}
    shard = GroupCoordinatorShard(GroupConfig(), ManualClock(), ManualTimer(ManualClock()), 4)
    m, clock, written = _persisted(topics, shard)
    a = hb(m, "a", 0, ["t"])
    b = hb(m, "b", 0, ["t"])
    assert hb(m, "a", a.member_epoch).member_epoch == b.member_epoch == 2
    types = {r.key.record_type for r in written}
    assert types == set(range(10, 15))  # every share group record type is written

    restarted, _service, clock2, _log = make(topics)
    clock2.now = clock.now + 10_000
    restarted.records = lambda: _replayed(written).share_records
    restarted._loaded = False
    assert restarted.ensure_loaded()
    group, before = restarted.groups["g"], m.groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (2, 2)
    assert group.topics == before.topics and group.target == before.target
    for member_id in ("a", "b"):
        loaded, kept = group.members[member_id], before.members[member_id]
        assert (loaded.member_epoch, loaded.previous_member_epoch, loaded.assignment,
                loaded.subscribed, loaded.client_id) == (
            kept.member_epoch, kept.previous_member_epoch, kept.assignment, kept.subscribed,
            kept.client_id)
        # a fresh session from the load, as Kafka
        assert loaded.deadline_ms == clock2.now + ShareMembershipConfig().session_timeout_ms
    # the member continues at its epoch: no new epoch, no error
    resp = hb(restarted, "a", 2)
    assert resp.error_code == 0 and resp.member_epoch == 2
    assert restarted.groups["g"].group_epoch == 2


def test_leave_and_delete_write_tombstones():
    topics = {"t": (T1, 1)}
    shard = GroupCoordinatorShard(GroupConfig(), ManualClock(), ManualTimer(ManualClock()), 4)
    m, _clock, written = _persisted(topics, shard)
    a = hb(m, "a", 0, ["t"])
    hb(m, "b", 0, ["t"])
    assert hb(m, "a", -1, group="g").member_epoch == -1 and a.member_epoch == 1
    image = _replayed(written).share_records
    members = {k.member for k in image.groups["g"] if k.member is not None}
    assert members == {"b"}
    hb(m, "b", -1)
    assert asyncio.run(m.delete_group("g")) == Error.NONE
    assert _replayed(written).share_records.groups == {}


def test_loading_answers_load_in_progress():
    m, *_ = make({"t": (T1, 1)})
    m.records = lambda: None
    m._loaded = False
    assert hb(m, "a", 0, ["t"]).error_code == Error.COORDINATOR_LOAD_IN_PROGRESS
    assert m.describe("g").error_code == Error.COORDINATOR_LOAD_IN_PROGRESS


def test_durable_writes_keep_the_shard_image_and_a_failed_write_is_retried():
    topics = {"t": (T1, 1)}
    shard = GroupCoordinatorShard(GroupConfig(), ManualClock(), ManualTimer(ManualClock()), 4)
    m, _clock, written = _persisted(topics, shard)
    a = hb(m, "a", 0, ["t"])
    assert shard.share_records.group_ids() == {"g"}  # the shard's image follows the writes
    failing = m.write

    async def fail(group_id, records):
        return Error.NOT_ENOUGH_REPLICAS

    m.write = fail
    resp = hb(m, "b", 0, ["t"])
    assert resp.error_code == Error.COORDINATOR_NOT_AVAILABLE  # Kafka's append error mapping
    m.write = failing
    hb(m, "a", a.member_epoch)  # the next write carries what the failed one missed
    members = {k.member for k in _replayed(written).share_records.groups["g"] if k.member}
    assert members == {"a", "b"}
    hb(m, "a", -1)
    hb(m, "b", -1)
    assert asyncio.run(m.delete_group("g")) == Error.NONE
    assert shard.share_records.group_ids() == set()
