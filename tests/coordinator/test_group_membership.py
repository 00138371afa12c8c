"""The classic group state machine (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) on a manual
clock: every timeout is reached by advancing time, never by sleeping."""

from __future__ import annotations

from semel.coordinator.group.classic_group import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    VALID_PREVIOUS_STATES,
    GroupState,
)
from semel.coordinator.group.records import GroupMetadataKey
from semel.protocol.errors import Error
from tests.coordinator.group_harness import RANGE, Harness


def test_state_transition_table_matches_kafka():
    assert VALID_PREVIOUS_STATES[EMPTY] == {PREPARING_REBALANCE}
    assert VALID_PREVIOUS_STATES[PREPARING_REBALANCE] == {STABLE, COMPLETING_REBALANCE, EMPTY}
    assert VALID_PREVIOUS_STATES[COMPLETING_REBALANCE] == {PREPARING_REBALANCE}
    assert VALID_PREVIOUS_STATES[STABLE] == {COMPLETING_REBALANCE}
    assert VALID_PREVIOUS_STATES[GroupState.DEAD] == set(GroupState)


def test_first_join_v4_requires_member_id_then_completes_the_rebalance():
    h = Harness()
    first = h.join("g").value
    assert first.error_code == Error.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("client-")
    assert h.group("g").is_pending_member(first.member_id)

    second = h.join("g", first.member_id)
    assert not second.done  # parked until the initial rebalance delay passes
    assert h.group("g").state is PREPARING_REBALANCE
    h.advance(0)
    response = second.value
    assert response.error_code == Error.NONE
    assert response.generation_id == 1
    assert response.leader == first.member_id
    assert response.protocol_name == "range"
    assert [m.member_id for m in response.members] == [first.member_id]
    assert h.group("g").state is COMPLETING_REBALANCE


def test_join_v3_gets_a_member_id_without_a_second_round():
    h = Harness()
    reply = h.join("g", version=3)
    h.advance(0)
    assert reply.value.error_code == Error.NONE
    assert reply.value.member_id.startswith("client-")


def test_join_validation_errors():
    h = Harness()
    assert h.join("").value.error_code == Error.INVALID_GROUP_ID
    assert h.join("g", session_ms=999).value.error_code == Error.INVALID_SESSION_TIMEOUT
    assert h.join("g", session_ms=1_800_001).value.error_code == Error.INVALID_SESSION_TIMEOUT
    assert h.join("nogroup", "some-member").value.error_code == Error.UNKNOWN_MEMBER_ID
    assert h.join("g", protocols=[]).value.error_code == Error.INCONSISTENT_GROUP_PROTOCOL
    assert h.join("g", protocol_type="").value.error_code == Error.INCONSISTENT_GROUP_PROTOCOL


def test_pending_member_that_never_rejoins_expires_after_its_session_timeout():
    h = Harness()
    member_id = h.join_new("g", session_ms=5000)
    h.advance(4999)
    assert h.group("g").is_pending_member(member_id)
    h.advance(1)
    assert not h.group("g").is_pending_member(member_id)


def test_sync_propagates_the_leader_assignment_once_persisted():
    h = Harness()
    a = h.join_new("g")
    b = h.join_new("g")
    ja, jb = h.join("g", a), h.join("g", b)
    h.advance(0)
    leader_resp, follower_resp = ja.value, jb.value
    assert leader_resp.leader == a and follower_resp.leader == a
    assert len(leader_resp.members) == 2 and follower_resp.members == []
    assert leader_resp.generation_id == follower_resp.generation_id == 1

    follower_sync = h.sync("g", b, 1)
    assert not follower_sync.done
    leader_sync = h.sync("g", a, 1, {a: b"for-a", b: b"for-b"})
    assert not leader_sync.done  # waits for the GroupMetadata record to be durable
    writes = h.flush()
    assert [type(r.key) for w in writes for r in w.records] == [GroupMetadataKey]
    assert leader_sync.value.assignment == b"for-a"
    assert follower_sync.value.assignment == b"for-b"
    assert follower_sync.value.protocol_name == "range"
    assert h.group("g").state is STABLE
    # a late SyncGroup in Stable gets the stored assignment
    assert h.sync("g", b, 1).value.assignment == b"for-b"


def test_new_member_triggers_rebalance_and_existing_members_learn_it_from_heartbeats():
    h = Harness()
    a, b = h.form_group("g", 2)
    c = h.join_new("g")
    jc = h.join("g", c)
    assert h.group("g").state is PREPARING_REBALANCE
    assert h.heartbeat("g", a, 1) == Error.REBALANCE_IN_PROGRESS
    assert h.heartbeat("g", b, 1) == Error.REBALANCE_IN_PROGRESS
    ja = h.join("g", a)
    assert not jc.done and not ja.done
    jb = h.join("g", b)  # the last known member rejoins: the join phase completes now
    for reply in (ja, jb, jc):
        assert reply.value.error_code == Error.NONE
        assert reply.value.generation_id == 2
    assert len(ja.value.members) == 3
    # the old generation is fenced
    assert h.heartbeat("g", a, 1) == Error.ILLEGAL_GENERATION
    assert h.sync("g", a, 1).value.error_code == Error.ILLEGAL_GENERATION


def test_member_that_stops_heartbeating_is_evicted_after_session_timeout():
    h = Harness()
    a, b = h.form_group("g", 2, session_ms=6000)
    for _ in range(2):
        h.advance(2000)
        assert h.heartbeat("g", a, 1) == Error.NONE  # only a heartbeats
    h.advance(1999)
    assert h.group("g").has_member(b)
    h.advance(1)
    assert h.group("g").state is PREPARING_REBALANCE
    assert not h.group("g").has_member(b)
    assert h.heartbeat("g", b, 1) == Error.UNKNOWN_MEMBER_ID
    assert h.heartbeat("g", a, 1) == Error.REBALANCE_IN_PROGRESS
    ja = h.join("g", a)
    assert ja.value.generation_id == 2
    assert [m.member_id for m in ja.value.members] == [a]


def test_member_not_rejoining_within_rebalance_timeout_is_dropped():
    h = Harness()
    a, b = h.form_group("g", 2, rebalance_ms=20_000)
    ja = h.join("g", a, rebalance_ms=20_000)  # the leader rejoins: forced rebalance
    assert h.group("g").state is PREPARING_REBALANCE
    for _ in range(9):
        h.advance(2000)
        h.heartbeat("g", b, 1)  # alive, but never rejoins
    assert not ja.done
    h.advance(2000)
    assert ja.value.generation_id == 2
    assert [m.member_id for m in ja.value.members] == [a]
    assert not h.group("g").has_member(b)


def test_member_not_syncing_within_rebalance_timeout_is_removed():
    h = Harness()
    kw = {"rebalance_ms": 10_000, "session_ms": 60_000}
    a = h.join_new("g", **kw)
    b = h.join_new("g", **kw)
    h.join("g", a, **kw)
    h.join("g", b, **kw)
    h.advance(0)
    h.sync("g", a, 1, {a: b"x", b: b"y"})
    h.flush()
    assert h.group("g").state is STABLE
    h.advance(9999)
    assert h.group("g").has_member(b)
    h.advance(1)  # b never sent SyncGroup
    assert not h.group("g").has_member(b)
    assert h.group("g").state is PREPARING_REBALANCE


def test_initial_rebalance_delay_waits_and_extends_for_new_members():
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join_new("g", rebalance_ms=10_000)
    ja = h.join("g", a, rebalance_ms=10_000)
    h.advance(2000)
    b = h.join_new("g", rebalance_ms=10_000)
    jb = h.join("g", b, rebalance_ms=10_000)
    h.advance(1000)  # first delay over, a member arrived meanwhile: wait another delay
    assert not ja.done
    h.advance(2999)
    assert not ja.done
    h.advance(1)
    assert ja.value.generation_id == jb.value.generation_id == 1
    assert len(ja.value.members) == 2


def test_joining_during_completing_rebalance_with_same_metadata_gets_same_answer():
    h = Harness()
    a = h.join_new("g")
    first = h.join("g", a)
    h.advance(0)
    again = h.join("g", a)
    assert again.value.generation_id == first.value.generation_id == 1
    assert len(again.value.members) == 1  # the leader gets the members again
    assert h.group("g").state is COMPLETING_REBALANCE
    changed = h.join("g", a, protocols=[("roundrobin", b"")] + RANGE)
    assert h.group("g").state is COMPLETING_REBALANCE  # rebalanced straight through
    assert changed.value.generation_id == 2
    assert changed.value.protocol_name == "roundrobin"


def test_commit_and_heartbeat_in_completing_rebalance():
    h = Harness()
    a = h.join_new("g")
    h.join("g", a)
    h.advance(0)
    assert h.heartbeat("g", a, 1) == Error.NONE
    result = h.commit("g", {("t", 0): 5}, generation=1, member_id=a).value
    assert result[0].partitions[0].error_code == Error.REBALANCE_IN_PROGRESS


def test_protocol_selection_by_vote_among_common_protocols():
    h = Harness()
    a = h.join_new("g", protocols=[("range", b""), ("roundrobin", b""), ("sticky", b"")])
    b = h.join_new("g", protocols=[("sticky", b""), ("roundrobin", b"")])
    c = h.join_new("g", protocols=[("roundrobin", b""), ("sticky", b"")])
    ja = h.join("g", a, protocols=[("range", b""), ("roundrobin", b""), ("sticky", b"")])
    h.join("g", b, protocols=[("sticky", b""), ("roundrobin", b"")])
    h.join("g", c, protocols=[("roundrobin", b""), ("sticky", b"")])
    h.advance(0)
    # candidates are roundrobin and sticky; a and c vote roundrobin, b sticky
    assert ja.value.protocol_name == "roundrobin"
    # a newcomer that supports none of the group's protocols is refused
    d = h.join("g", protocols=[("range", b"")])
    assert d.value.error_code == Error.INCONSISTENT_GROUP_PROTOCOL
    e = h.join("g", protocol_type="connect", protocols=[("roundrobin", b"")])
    assert e.value.error_code == Error.INCONSISTENT_GROUP_PROTOCOL


def test_sync_with_other_protocol_name_is_inconsistent():
    h = Harness()
    a = h.join_new("g")
    h.join("g", a)
    h.advance(0)
    reply = h.sync("g", a, 1, {a: b""}, protocol_name="roundrobin")
    assert reply.value.error_code == Error.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync("g", "nobody", 1).value.error_code == Error.UNKNOWN_MEMBER_ID
    assert h.sync("other", a, 1).value.error_code == Error.UNKNOWN_MEMBER_ID


def test_failed_assignment_write_answers_members_and_rebalances():
    h = Harness()
    a = h.join_new("g")
    b = h.join_new("g")
    h.join("g", a)
    h.join("g", b)
    h.advance(0)
    sb = h.sync("g", b, 1)
    sa = h.sync("g", a, 1, {a: b"x", b: b"y"})
    h.flush(error=Error.KAFKA_STORAGE_ERROR)
    assert sa.value.error_code == Error.NOT_COORDINATOR
    assert sb.value.error_code == Error.NOT_COORDINATOR
    assert sa.value.assignment == b""
    assert h.group("g").state is PREPARING_REBALANCE


def test_sync_during_preparing_rebalance_is_refused():
    h = Harness()
    a, b = h.form_group("g", 2)
    h.join("g", a)  # leader rejoin: PreparingRebalance
    assert h.sync("g", b, 1).value.error_code == Error.REBALANCE_IN_PROGRESS


def test_rebalance_interrupting_completing_rebalance_fails_parked_syncs():
    h = Harness()
    a = h.join_new("g")
    b = h.join_new("g")
    h.join("g", a)
    h.join("g", b)
    h.advance(0)
    sb = h.sync("g", b, 1)
    h.join("g", a, protocols=[("roundrobin", b"")] + RANGE)  # metadata change
    assert sb.value.error_code == Error.REBALANCE_IN_PROGRESS


def test_leave_group_removes_members_and_rebalances():
    h = Harness()
    a, b, c = h.form_group("g", 3)
    response = h.leave("g", (b, None), ("stranger", None))
    assert [(m.member_id, m.error_code) for m in response.members] == [
        (b, Error.NONE), ("stranger", Error.UNKNOWN_MEMBER_ID)]
    assert h.group("g").state is PREPARING_REBALANCE
    ja, jc = h.join("g", a), h.join("g", c)
    assert ja.value.generation_id == jc.value.generation_id == 2
    h.sync("g", a, 2, {a: b"", c: b""})
    h.flush()
    h.leave("g", (a, None))
    h.leave("g", (c, None))
    assert not h.group("g").members
    # the last members gone: an empty generation is persisted
    assert h.group("g").state is EMPTY
    assert h.group("g").generation_id == 3
    unknown = h.leave("nogroup", ("m", None))
    assert unknown.members[0].error_code == Error.UNKNOWN_MEMBER_ID


def test_leave_of_a_pending_member():
    h = Harness()
    m = h.join_new("g")
    response = h.leave("g", (m, None))
    assert response.members[0].error_code == Error.NONE
    assert not h.group("g").is_pending_member(m)


def test_static_member_joins_without_member_id_round_and_is_replaced_on_rejoin():
    h = Harness()
    first = h.join("g", instance_id="i-1")
    h.advance(0)
    old_id = first.value.member_id
    assert first.value.error_code == Error.NONE and old_id.startswith("i-1-")
    h.sync("g", old_id, 1, {old_id: b"assigned"}, instance_id="i-1")
    h.flush()
    assert h.group("g").state is STABLE

    # the same instance restarts without its member id: replaced, no rebalance
    again = h.join("g", instance_id="i-1")
    assert not again.done  # waits for the GroupMetadata record
    h.flush()
    new_id = again.value.member_id
    assert new_id != old_id and again.value.error_code == Error.NONE
    assert again.value.generation_id == 1
    assert again.value.skip_assignment  # v9: the leader keeps its assignment
    assert h.group("g").state is STABLE
    assert h.heartbeat("g", old_id, 1, "i-1") == Error.FENCED_INSTANCE_ID
    assert h.heartbeat("g", new_id, 1, "i-1") == Error.NONE
    assert h.sync("g", new_id, 1, instance_id="i-1").value.assignment == b"assigned"
    assert h.heartbeat("g", new_id, 1, "i-2") == Error.UNKNOWN_MEMBER_ID


def test_static_member_survives_session_timeout_only_until_then():
    h = Harness()
    r = h.join("g", instance_id="i-1", session_ms=5000)
    h.advance(0)
    member = r.value.member_id
    h.sync("g", member, 1, {member: b""}, instance_id="i-1")
    h.flush()
    h.advance(5000)
    assert not h.group("g").has_member(member)


def test_static_member_fencing_of_a_parked_duplicate():
    h = Harness()
    a = h.join_new("g")
    r = h.join("g", instance_id="i-1")
    h.join("g", a)
    h.advance(0)
    static_id = r.value.member_id
    h.sync("g", a, 1, {a: b"", static_id: b""})
    h.flush()
    parked = h.join("g", static_id, instance_id="i-1", protocols=[("range", b"changed")])
    assert not parked.done  # rebalancing
    h.join("g", instance_id="i-1", protocols=[("range", b"changed")])  # a duplicate instance
    assert parked.value.error_code == Error.FENCED_INSTANCE_ID


def test_admin_leave_by_instance_id():
    h = Harness()
    r = h.join("g", instance_id="i-1")
    h.advance(0)
    response = h.leave("g", ("", "i-1"), ("", "i-9"))
    assert [m.error_code for m in response.members] == [Error.NONE, Error.UNKNOWN_MEMBER_ID]
    assert not h.group("g").has_member(r.value.member_id)


def test_group_metadata_survives_restart_with_generation_and_assignments():
    h = Harness()
    a, b = h.form_group("g", 2)
    restarted = h.restarted()
    group = restarted.group("g")
    assert group.state is STABLE
    assert group.generation_id == 1
    assert group.leader_id == a
    assert set(group.members) == {a, b}
    assert restarted.heartbeat("g", a, 1) == Error.NONE
    assert restarted.sync("g", b, 1).value.assignment == b.encode()
    # members that never come back expire and the group rebalances to empty
    restarted.advance(9_999)
    assert restarted.group("g").state is STABLE
    restarted.advance(1)
    assert restarted.group("g").state is EMPTY
    assert restarted.group("g").generation_id == 2


def test_list_and_describe_groups():
    h = Harness()
    _a, _ = h.form_group("stable-group", 2)
    h.join_new("empty-group")
    listed = {g.group_id: g for g in h.shard.group_manager.list_groups([], [])}
    assert listed["stable-group"].group_state == "Stable"
    assert listed["stable-group"].protocol_type == "consumer"
    assert listed["stable-group"].group_type == "classic"
    assert listed["empty-group"].group_state == "Empty"
    only_stable = h.shard.group_manager.list_groups([" STABLE "], [])
    assert [g.group_id for g in only_stable] == ["stable-group"]
    assert h.shard.group_manager.list_groups([], ["consumer"]) == []
    assert len(h.shard.group_manager.list_groups([], ["Classic"])) == 2

    described = h.shard.group_manager.describe_group("stable-group")
    assert described.group_state == "Stable" and described.protocol_data == "range"
    assert {m.member_id for m in described.members} == set(h.group("stable-group").members)
    assert all(m.member_metadata for m in described.members)
    assert all(m.client_host == "/127.0.0.1" for m in described.members)
    missing = h.shard.group_manager.describe_group("nope")
    assert missing.group_state == "Dead" and missing.error_code == Error.NONE


def test_group_max_size():
    h = Harness(max_size=1)
    h.form_group("g", 1)
    assert h.join("g").value.error_code == Error.GROUP_MAX_SIZE_REACHED
