"""Online migration between classic and consumer groups (KIP-848, Kafka 4.x's
``group.consumer.migration.policy``) on the pure shard with an injected clock: upgrade of a
non-empty classic group, classic members served by the consumer group (JoinGroup, SyncGroup,
Heartbeat, session timeout), downgrade when the last consumer-protocol member leaves, the
policy ``disabled``, and the ClassicMemberMetadata records replayed into a fresh shard."""

from __future__ import annotations

from semel.coordinator.group.classic_group import PREPARING_REBALANCE
from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.consumer_group import MemberState
from semel.coordinator.group.consumer_protocol import (
    encode_assignment,
    encode_subscription,
    parse_assignment,
)
from semel.coordinator.group.group_manager import RequestInfo
from semel.coordinator.group.records import decode_record, encode_record
from semel.coordinator.group.shard import GroupCoordinatorShard
from semel.protocol.errors import Error
from semel.protocol.messages.heartbeat_request import HeartbeatRequest
from semel.protocol.messages.join_group_request import JoinGroupRequest, JoinGroupRequestProtocol
from semel.protocol.messages.sync_group_request import SyncGroupRequest, SyncGroupRequestAssignment
from tests.coordinator.test_consumer_group import T1, G, Harness, assigned

INFO = RequestInfo("classic-client", "/127.0.0.1", 5)
SESSION_MS = 10000


def classic_join(h: Harness, member_id: str = ""):
    out = []
    req = JoinGroupRequest(group_id=G, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=30000,
                           member_id=member_id, protocol_type="consumer",
                           protocols=[JoinGroupRequestProtocol(
                               "range", encode_subscription(["t1"]))])
    h.shard.group_manager.join_group(INFO, req, out.append)
    h.drain()
    return out


def classic_sync(h: Harness, member_id: str, generation: int, assignments=()):
    out = []
    req = SyncGroupRequest(group_id=G, generation_id=generation, member_id=member_id,
                           protocol_type="consumer", protocol_name="range",
                           assignments=[SyncGroupRequestAssignment(m, a) for m, a in assignments])
    h.shard.group_manager.sync_group(INFO, req, out.append)
    h.drain()
    return out[0]


def classic_heartbeat(h: Harness, member_id: str, generation: int) -> Error:
    return h.shard.group_manager.heartbeat(INFO, HeartbeatRequest(
        group_id=G, generation_id=generation, member_id=member_id))


def classic_group_with_member(h: Harness) -> tuple[str, int]:
    """One classic member owning all of t1's 6 partitions (generation 1)."""
    member_id = classic_join(h)[0].member_id
    out = classic_join(h, member_id)
    h.timer.advance(3000)  # group.initial.rebalance.delay.ms
    h.drain()
    join = out[0]
    assert join.error_code == Error.NONE and join.leader == member_id
    sync = classic_sync(h, member_id, join.generation_id,
                        [(member_id, encode_assignment([("t1", list(range(6)))]))])
    assert sync.error_code == Error.NONE
    return member_id, join.generation_id


def test_upgrade_keeps_the_classic_member_and_shares_partitions():
    h = Harness()
    classic_id, generation = classic_group_with_member(h)
    first = h.join("m1")
    assert first.error_code == Error.NONE
    group = h.group  # now a consumer group
    assert G not in h.shard.group_manager.groups
    member = group.members[classic_id]
    assert member.classic is not None and member.classic.session_timeout_ms == SESSION_MS
    assert member.assigned == {T1: frozenset(range(6))}
    # the new member waits for partitions the classic member still owns
    assert assigned(first) == {}
    assert classic_heartbeat(h, classic_id, generation) == Error.REBALANCE_IN_PROGRESS
    # an eager classic member revoked everything before rejoining (v0: nothing owned)
    rejoin = classic_join(h, classic_id)[0]
    assert rejoin.error_code == Error.NONE and rejoin.generation_id == group.group_epoch
    sync = classic_sync(h, classic_id, rejoin.generation_id)
    mine = set(parse_assignment(bytes(sync.assignment))[0][0][1])
    assert len(mine) == 3
    second = h.hb("m1", first.member_epoch)
    assert assigned(second) == {T1: set(range(6)) - mine}
    assert classic_heartbeat(h, classic_id, rejoin.generation_id) == Error.NONE


def test_downgrade_when_the_last_consumer_member_leaves():
    h = Harness()
    classic_id, _ = classic_group_with_member(h)
    first = h.join("m1")
    rejoin = classic_join(h, classic_id)[0]
    classic_sync(h, classic_id, rejoin.generation_id)
    h.hb("m1", first.member_epoch)
    left = h.hb("m1", -1)
    assert left.error_code == Error.NONE
    assert G not in h.shard.consumer_manager.groups
    classic = h.shard.group_manager.groups[G]
    assert classic.is_in(PREPARING_REBALANCE) and set(classic.members) == {classic_id}
    assert classic_heartbeat(h, classic_id, classic.generation_id) == \
        Error.REBALANCE_IN_PROGRESS
    out = classic_join(h, classic_id)
    assert out and out[0].error_code == Error.NONE
    sync = classic_sync(h, classic_id, out[0].generation_id,
                        [(classic_id, encode_assignment([("t1", list(range(6)))]))])
    assert sync.error_code == Error.NONE


def test_classic_member_session_timeout_is_its_own():
    h = Harness()
    classic_id, _ = classic_group_with_member(h)
    h.join("m1")
    h.timer.advance(SESSION_MS + 1)
    h.drain()
    assert classic_id not in h.group.members
    assert set(h.group.members) == {"m1"}


def test_policy_disabled_refuses_the_upgrade_and_keeps_consumer_groups():
    h = Harness()
    h.shard = GroupCoordinatorShard(
        GroupConfig(offsets_topic_num_partitions=4, consumer_migration_policy="disabled"),
        h.clock, h.timer, 4, h.metadata)
    classic_group_with_member(h)
    refused = h.join("m1")
    assert refused.error_code == Error.GROUP_ID_NOT_FOUND
    assert "online upgrade is disabled" in refused.error_message
    assert G in h.shard.group_manager.groups


def test_downgrade_disabled_keeps_a_consumer_group_of_classic_members():
    h = Harness()
    h.shard = GroupCoordinatorShard(
        GroupConfig(offsets_topic_num_partitions=4, consumer_migration_policy="upgrade"),
        h.clock, h.timer, 4, h.metadata)
    classic_id, _ = classic_group_with_member(h)
    h.join("m1")
    h.hb("m1", -1)
    assert set(h.group.members) == {classic_id}
    assert G not in h.shard.group_manager.groups


def test_classic_join_with_another_protocol_type_is_inconsistent():
    h = Harness()
    h.join("m1")
    out = []
    h.shard.group_manager.join_group(INFO, JoinGroupRequest(
        group_id=G, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=30000,
        member_id="", protocol_type="connect",
        protocols=[JoinGroupRequestProtocol("x", b"")]), out.append)
    assert out[0].error_code == Error.INCONSISTENT_GROUP_PROTOCOL


def test_mixed_group_survives_a_replay():
    h = Harness()
    classic_id, _ = classic_group_with_member(h)
    h.join("m1")
    rejoin = classic_join(h, classic_id)[0]
    classic_sync(h, classic_id, rejoin.generation_id)
    fresh = GroupCoordinatorShard(GroupConfig(offsets_topic_num_partitions=4), h.clock,
                                  h.timer, 4, h.metadata)
    for offset, record in enumerate(h.log):
        fresh.replay(decode_record(*encode_record(record)), offset)
    group = fresh.consumer_manager.groups[G]
    assert G not in fresh.group_manager.groups
    restored = group.members[classic_id]
    original = h.group.members[classic_id]
    assert restored.classic == original.classic
    assert restored.assigned == original.assigned and restored.state is MemberState.STABLE
    assert group.members["m1"].classic is None
