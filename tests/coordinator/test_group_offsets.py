"""Committed offsets: commit validation, visibility after the write, transactional offsets,
require_stable, deletion, retention and reloading - on a manual clock."""

from __future__ import annotations

from semel.coordinator.group.classic_group import EMPTY
from semel.coordinator.group.records import GroupMetadataKey, OffsetCommitKey
from semel.protocol.errors import Error
from semel.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from tests.coordinator.group_harness import Harness, Reply

T0 = ("t", 0)
T1 = ("t", 1)


def errors(reply: Reply) -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): p.error_code for t in reply.value for p in t.partitions}


def test_simple_commit_creates_a_group_and_is_visible_once_durable():
    h = Harness()
    reply = h.commit("simple", {T0: 10, T1: 20}, metadata="meta")
    assert not reply.done
    assert h.fetch("simple", [T0]) == {T0: (-1, Error.NONE)}  # not yet durable
    writes = h.flush()
    assert errors(reply) == {T0: Error.NONE, T1: Error.NONE}
    assert [r.key for r in writes[0].records] == [OffsetCommitKey("simple", "t", 0),
                                                  OffsetCommitKey("simple", "t", 1)]
    assert writes[0].records[0].value.commit_timestamp == h.clock.now_ms
    assert writes[0].partition == h.shard.partition_for("simple")
    assert h.fetch("simple", [T0, T1, ("t", 2)]) == {
        T0: (10, Error.NONE), T1: (20, Error.NONE), ("t", 2): (-1, Error.NONE)}
    assert h.fetch("simple") == {T0: (10, Error.NONE), T1: (20, Error.NONE)}
    group = h.group("simple")
    assert group.state is EMPTY and group.protocol_type is None
    stored = h.shard.offset_manager.store.get("simple", "t", 0)
    assert stored.metadata == "meta" and stored.record_offset == 0


def test_failed_commit_write_reports_the_mapped_error_and_commits_nothing():
    h = Harness()
    reply = h.commit("g", {T0: 10})
    h.flush(error=Error.KAFKA_STORAGE_ERROR)
    assert errors(reply) == {T0: Error.NOT_COORDINATOR}
    assert h.fetch("g", [T0]) == {T0: (-1, Error.NONE)}


def test_member_commit_validation():
    h = Harness()
    a, _b = h.form_group("g", 2)
    ok = h.commit("g", {T0: 1}, generation=1, member_id=a)
    h.flush()
    assert errors(ok) == {T0: Error.NONE}
    assert errors(h.commit("g", {T0: 1}, generation=0, member_id=a)) == {
        T0: Error.ILLEGAL_GENERATION}
    assert errors(h.commit("g", {T0: 1}, generation=1, member_id="x")) == {
        T0: Error.UNKNOWN_MEMBER_ID}
    # a non-member commit (generation -1, no member id) to a non-empty group
    assert errors(h.commit("g", {T0: 1})) == {T0: Error.UNKNOWN_MEMBER_ID}
    assert errors(h.commit("g", {T0: 1}, generation=1, member_id=a, instance_id="i")) == {
        T0: Error.UNKNOWN_MEMBER_ID}
    # unknown group with a generation: v9 GROUP_ID_NOT_FOUND, before ILLEGAL_GENERATION
    assert errors(h.commit("nope", {T0: 1}, generation=3, member_id="m")) == {
        T0: Error.GROUP_ID_NOT_FOUND}
    assert errors(h.commit("nope", {T0: 1}, generation=3, member_id="m", version=8)) == {
        T0: Error.ILLEGAL_GENERATION}


def test_commit_keeps_the_member_session_alive():
    h = Harness()
    a, b = h.form_group("g", 2, session_ms=5000)
    for _ in range(3):
        h.advance(3000)
        h.heartbeat("g", b, 1)
        h.commit("g", {T0: 1}, generation=1, member_id=a)
        h.flush()
    assert h.group("g").has_member(a)


def test_offset_metadata_too_large():
    h = Harness(offset_metadata_max_bytes=4)
    reply = h.commit("g", {T0: 1}, metadata="12345")
    assert errors(reply) == {T0: Error.OFFSET_METADATA_TOO_LARGE}
    assert not h.pending_writes()


def test_transactional_offsets_visible_only_after_commit_marker():
    h = Harness()
    h.commit("g", {T0: 5})
    h.flush()
    reply = h.txn_commit("g", 1000, {T0: 50, T1: 60}, producer_epoch=3)
    writes = h.flush()
    assert errors(reply) == {T0: Error.NONE, T1: Error.NONE}
    assert writes[0].producer_id == 1000 and writes[0].producer_epoch == 3
    assert writes[0].transactional
    assert h.fetch("g", [T0, T1]) == {T0: (5, Error.NONE), T1: (-1, Error.NONE)}
    assert h.fetch("g", [T0, T1], require_stable=True) == {
        T0: (-1, Error.UNSTABLE_OFFSET_COMMIT), T1: (-1, Error.UNSTABLE_OFFSET_COMMIT)}
    assert h.fetch("g", require_stable=True) == {T0: (-1, Error.UNSTABLE_OFFSET_COMMIT)}
    partition = h.shard.partition_for("g")
    h.marker(1000, (partition + 1) % h.shard.num_partitions, committed=True)  # not ours
    assert h.fetch("g", [T0]) == {T0: (5, Error.NONE)}
    h.marker(1000, partition, committed=True)
    assert h.fetch("g", [T0, T1], require_stable=True) == {T0: (50, Error.NONE),
                                                          T1: (60, Error.NONE)}


def test_aborted_transactional_offsets_are_dropped():
    h = Harness()
    h.txn_commit("g", 7, {T0: 50})
    h.flush()
    h.marker(7, h.shard.partition_for("g"), committed=False)
    assert h.fetch("g", [T0], require_stable=True) == {T0: (-1, Error.NONE)}
    assert not h.shard.offset_manager.store.open_transactions


def test_a_later_regular_commit_wins_over_an_earlier_transactional_one():
    h = Harness()
    h.txn_commit("g", 7, {T0: 50})
    h.flush()
    h.commit("g", {T0: 70})
    h.flush()
    h.marker(7, h.shard.partition_for("g"), committed=True)
    assert h.fetch("g", [T0]) == {T0: (70, Error.NONE)}


def test_transactional_offsets_are_reloaded_pending_and_completed_by_markers():
    h = Harness()
    h.txn_commit("g", 7, {T0: 50})
    h.txn_commit("g", 8, {T1: 80})
    h.flush()
    h.marker(7, h.shard.partition_for("g"), committed=True)
    restarted = h.restarted()
    assert restarted.fetch("g", [T0, T1], require_stable=True) == {
        T0: (50, Error.NONE), T1: (-1, Error.UNSTABLE_OFFSET_COMMIT)}
    restarted.marker(8, restarted.shard.partition_for("g"), committed=True)
    assert restarted.fetch("g", [T1]) == {T1: (80, Error.NONE)}


def test_txn_commit_validation():
    h = Harness()
    a, _b = h.form_group("g", 2)
    ok = h.txn_commit("g", 1, {T0: 1}, generation=1, member_id=a)
    assert not ok.done  # answered once the write is durable
    h.flush()
    assert errors(ok) == {T0: Error.NONE}
    assert errors(h.txn_commit("g", 1, {T0: 1}, generation=2, member_id=a)) == {
        T0: Error.ILLEGAL_GENERATION}
    assert errors(h.txn_commit("nope", 1, {T0: 1}, generation=2, member_id=a)) == {
        T0: Error.ILLEGAL_GENERATION}
    # old TxnOffsetCommit versions carry no member: accepted whatever the group state
    reply = h.txn_commit("g", 1, {T0: 2})
    h.flush()
    assert errors(reply) == {T0: Error.NONE}
    assert errors(h.txn_commit("", 1, {T0: 1})) == {T0: Error.INVALID_GROUP_ID}


def test_commits_and_group_survive_a_restart():
    h = Harness()
    a, _b = h.form_group("g", 2)
    h.commit("g", {T0: 11, T1: 22}, generation=1, member_id=a)
    h.commit("simple", {("u", 3): 33}, metadata="m")
    h.flush()
    restarted = h.restarted()
    assert restarted.fetch("g", [T0, T1]) == {T0: (11, Error.NONE), T1: (22, Error.NONE)}
    assert restarted.fetch("simple") == {("u", 3): (33, Error.NONE)}
    assert restarted.group("g").generation_id == 1
    assert restarted.shard.offset_manager.store.get("simple", "u", 3).metadata == "m"


def test_empty_group_offsets_expire_after_retention_then_the_group_goes():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h.shard.schedule_cleanup()
    a, = h.form_group("g", 1)
    h.commit("g", {T0: 1}, generation=1, member_id=a)
    h.flush()
    h.leave("g", (a, None))
    h.flush()
    assert h.group("g").state is EMPTY
    h.advance(50_000)
    assert h.fetch("g", [T0]) == {T0: (1, Error.NONE)}
    h.advance(10_000)  # 60 s since the group became empty
    assert h.fetch("g", [T0]) == {T0: (-1, Error.NONE)}
    tombstones = [r for w in h.flush() for r in w.records]
    assert [(type(r.key), r.value) for r in tombstones] == [(OffsetCommitKey, None),
                                                          (GroupMetadataKey, None)]
    assert "g" not in h.groups
    assert "g" not in h.restarted().groups


def test_stable_consumer_group_keeps_offsets_of_subscribed_topics_only():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h.shard.schedule_cleanup()
    a, = h.form_group("g", 1)  # subscribed to topic "t"
    h.commit("g", {T0: 1, ("other", 0): 2}, generation=1, member_id=a)
    h.flush()
    for _ in range(14):
        h.advance(5_000)
        assert h.heartbeat("g", a, 1) == Error.NONE
    assert h.fetch("g") == {T0: (1, Error.NONE)}


def test_simple_group_offsets_expire_from_commit_time_and_retention_time_ms():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h.shard.schedule_cleanup()
    h.commit("s", {T0: 1})
    h.commit("s", {T1: 1}, retention_ms=20_000, version=4)  # explicit expire timestamp
    h.flush()
    h.advance(20_000)
    assert h.fetch("s") == {T0: (1, Error.NONE)}
    h.advance(40_000)
    assert h.fetch("s") == {}


def test_delete_groups():
    h = Harness()
    h.form_group("busy", 1)
    h.commit("idle", {T0: 1, T1: 2})
    h.txn_commit("idle", 9, {("u", 0): 3})
    h.flush()
    reply = Reply()
    h.shard.delete_groups(["idle", "busy", "missing"], reply)
    assert not reply.done
    writes = h.flush()
    assert {(r.group_id, r.error_code) for r in reply.value} == {
        ("idle", Error.NONE), ("busy", Error.NON_EMPTY_GROUP),
        ("missing", Error.GROUP_ID_NOT_FOUND)}
    keys = [r.key for w in writes for r in w.records]
    assert keys == [OffsetCommitKey("idle", "t", 0), OffsetCommitKey("idle", "t", 1),
                    OffsetCommitKey("idle", "u", 0), GroupMetadataKey("idle")]
    assert "idle" not in h.groups
    assert h.fetch("idle") == {}
    restarted = h.restarted()
    assert "idle" not in restarted.groups and restarted.fetch("idle", [T0]) == {
        T0: (-1, Error.NONE)}


def delete_offsets(h: Harness, group_id: str, partitions: list[tuple[str, int]]):
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    reply = Reply()
    h.shard.offset_manager.delete_offsets(OffsetDeleteRequest(group_id=group_id, topics=[
        OffsetDeleteRequestTopic(t, [OffsetDeleteRequestPartition(p) for p in ps])
        for t, ps in by_topic.items()]), reply)
    h.flush()
    return reply.value


def test_offset_delete():
    h = Harness()
    a, = h.form_group("g", 1)  # consumer group subscribed to "t"
    h.commit("g", {T0: 1, ("u", 0): 2}, generation=1, member_id=a)
    h.flush()
    response = delete_offsets(h, "g", [T0, ("u", 0), ("u", 1)])
    assert response.error_code == Error.NONE
    assert {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions} == {
        T0: Error.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): Error.NONE, ("u", 1): Error.NONE}
    assert h.fetch("g") == {T0: (1, Error.NONE)}
    assert delete_offsets(h, "missing", [T0]).error_code == Error.GROUP_ID_NOT_FOUND
    # a non-consumer group with members cannot lose offsets
    other = h.join_new("connect-group", protocol_type="connect")
    h.join("connect-group", other, protocol_type="connect")
    h.advance(0)
    assert delete_offsets(h, "connect-group", [T0]).error_code == Error.NON_EMPTY_GROUP


def test_offsets_of_deleted_topics_are_dropped():
    h = Harness()
    h.commit("g1", {T0: 1, ("keep", 0): 2})
    h.commit("g2", {T1: 3})
    h.txn_commit("g3", 5, {T0: 4})
    h.flush()
    assert h.shard.offset_manager.on_topics_deleted({"t"}) == 3
    assert h.fetch("g1") == {("keep", 0): (2, Error.NONE)}
    assert h.fetch("g2") == {}
    assert h.fetch("g3", [T0], require_stable=True) == {T0: (-1, Error.NONE)}
    tombstones = [r for w in h.flush() for r in w.records]
    assert sorted((r.key.group, r.key.topic, r.key.partition) for r in tombstones) == [
        ("g1", "t", 0), ("g2", "t", 1), ("g3", "t", 0)]
    assert all(r.value is None for r in tombstones)
    assert h.restarted().fetch("g1") == {("keep", 0): (2, Error.NONE)}
