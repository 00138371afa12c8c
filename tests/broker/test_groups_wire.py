"""Group coordinator APIs over a real socket (tests/kafka_wire.py): FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups,
DescribeGroups, DeleteGroups, OffsetDelete - their versions and error codes.

One in-process broker for the module (initial rebalance delay 0, short minimum session
timeout); every test uses its own group and topic names.
"""

from __future__ import annotations

import re
import time

import pytest

from semel.broker.testing import BrokerThread
from semel.coordinator.group import RequestInfo
from semel.protocol.errors import Error
from semel.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from tests.group_wire import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    commit,
    fetch_offsets,
    heartbeat,
    join,
    join_request,
    sync,
)
from tests.kafka_wire import KafkaWire, make_topic, message

API_VERSIONS = 18


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    overrides = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "100",
                 "offsets.topic.num.partitions": "5"}
    with BrokerThread(tmp_path_factory.mktemp("groups"), overrides) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    with KafkaWire.connect(shared_broker.bootstrap, client_id="wire-client") as w:
        yield w


@pytest.fixture
def name(shared_broker, request) -> str:
    """A group id and topic name (6 partitions) unique to the test."""
    name = re.sub(r"[^a-zA-Z0-9._-]", "_", request.node.name)[:200]
    make_topic(shared_broker, name, 6)
    return name


# -- FindCoordinator --------------------------------------------------------------------


@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_every_version(wire, shared_broker, version):
    broker = shared_broker.broker
    if version >= 4:
        response = wire.request(FIND_COORDINATOR, version, message(
            FIND_COORDINATOR, "request", key_type=0, coordinator_keys=["g1", "g2"]))
        assert [(c.key, c.error_code, c.node_id, c.port) for c in response.coordinators] == [
            ("g1", 0, broker.node_id, broker.advertised_port),
            ("g2", 0, broker.node_id, broker.advertised_port)]
        assert response.coordinators[0].host == broker.advertised_host
    else:
        response = wire.request(FIND_COORDINATOR, version, message(
            FIND_COORDINATOR, "request", key="g1", key_type=0))
        assert response.error_code == Error.NONE
        assert (response.node_id, response.host, response.port) == (
            broker.node_id, broker.advertised_host, broker.advertised_port)
    assert "__consumer_offsets" in broker.log_manager.topics
    assert broker.log_manager.topics["__consumer_offsets"].num_partitions == 5
    assert broker.log_manager.topics["__consumer_offsets"].configs["cleanup.policy"] == "compact"


def test_find_coordinator_transaction_and_unknown_key_types(wire, shared_broker):
    response = wire.request(FIND_COORDINATOR, 4, message(
        FIND_COORDINATOR, "request", key_type=1, coordinator_keys=["txn-1"]))
    assert response.coordinators[0].error_code == Error.NONE
    assert response.coordinators[0].port == shared_broker.broker.advertised_port
    for key_type in (2, 7):
        response = wire.request(FIND_COORDINATOR, 6, message(
            FIND_COORDINATOR, "request", key_type=key_type, coordinator_keys=["x"]))
        assert response.coordinators[0].error_code == Error.INVALID_REQUEST
        assert response.coordinators[0].node_id == -1
    response = wire.request(FIND_COORDINATOR, 3, message(
        FIND_COORDINATOR, "request", key="x", key_type=3))
    assert (response.error_code, response.node_id, response.port) == (
        Error.INVALID_REQUEST, -1, -1)


def test_api_versions_advertises_the_group_apis(wire):
    response = wire.request(API_VERSIONS, 3, message(
        API_VERSIONS, "request", client_software_name="wire", client_software_version="1"))
    versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert versions[JOIN_GROUP] == (0, 9)
    assert versions[FIND_COORDINATOR] == (0, 6)
    assert versions[OFFSET_FETCH] == (1, 9)
    assert versions[OFFSET_DELETE] == (0, 0)
    assert versions[68] == versions[69] == (0, 1)  # ConsumerGroupHeartbeat/Describe (KIP-848)


# -- membership -------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(10))
def test_join_sync_heartbeat_leave_every_join_version(wire, name, version):
    first = wire.request(JOIN_GROUP, version, join_request(name))
    if version >= 4:
        assert first.error_code == Error.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("wire-client-")
        assert first.protocol_name == (None if version >= 7 else "")
        first = wire.request(JOIN_GROUP, version, join_request(name, first.member_id))
    assert first.error_code == Error.NONE
    member_id = first.member_id
    assert first.generation_id == 1 and first.leader == member_id
    assert first.protocol_name == "range"
    if version >= 7:
        assert first.protocol_type == "consumer"
    assert [m.member_id for m in first.members] == [member_id]
    synced = sync(wire, name, member_id, 1, {member_id: b"assignment"},
                  version=min(version, 5))
    assert synced.error_code == Error.NONE and synced.assignment == b"assignment"
    assert heartbeat(wire, name, member_id, 1, version=min(version, 4)) == Error.NONE
    assert heartbeat(wire, name, member_id, 7, version=min(version, 4)) == \
        Error.ILLEGAL_GENERATION
    assert heartbeat(wire, name, "someone", 1, version=min(version, 4)) == \
        Error.UNKNOWN_MEMBER_ID
    leave_version = min(version, 5)
    if leave_version >= 3:
        req = message(LEAVE_GROUP, "request", group_id=name, members=[
            message(LEAVE_GROUP, "request", "MemberIdentity", member_id=member_id)])
        response = wire.request(LEAVE_GROUP, leave_version, req)
        assert response.error_code == Error.NONE
        assert [(m.member_id, m.error_code) for m in response.members] == [(member_id, 0)]
    else:
        response = wire.request(LEAVE_GROUP, leave_version, message(
            LEAVE_GROUP, "request", group_id=name, member_id=member_id))
        assert response.error_code == Error.NONE
        again = wire.request(LEAVE_GROUP, leave_version, message(
            LEAVE_GROUP, "request", group_id=name, member_id=member_id))
        assert again.error_code == Error.UNKNOWN_MEMBER_ID


def test_join_errors(wire, name):
    assert wire.request(JOIN_GROUP, 9, join_request("")).error_code == Error.INVALID_GROUP_ID
    assert wire.request(JOIN_GROUP, 9, join_request(name, session_ms=50)).error_code == \
        Error.INVALID_SESSION_TIMEOUT
    assert wire.request(JOIN_GROUP, 9, join_request(name, "stranger")).error_code == \
        Error.UNKNOWN_MEMBER_ID
    assert wire.request(JOIN_GROUP, 9, join_request(name, protocols=())).error_code == \
        Error.INCONSISTENT_GROUP_PROTOCOL


def test_sync_v5_requires_protocol_type_and_name(wire, name):
    member_id, _ = join(wire, name)
    response = wire.request(SYNC_GROUP, 5, message(
        SYNC_GROUP, "request", group_id=name, generation_id=1, member_id=member_id,
        protocol_type=None, protocol_name="range"))
    assert response.error_code == Error.INCONSISTENT_GROUP_PROTOCOL


def test_second_member_rebalances_the_group(shared_broker, name):
    with KafkaWire.connect(shared_broker.bootstrap) as w1, \
            KafkaWire.connect(shared_broker.bootstrap) as w2:
        a, _joined = join(w1, name)
        sync(w1, name, a, 1, {a: b"all"})
        b_first = w2.request(JOIN_GROUP, 9, join_request(name))
        w2.send(JOIN_GROUP, 9, join_request(name, b_first.member_id))  # parked
        assert heartbeat(w1, name, a, 1) == Error.REBALANCE_IN_PROGRESS
        a_again = w1.request(JOIN_GROUP, 9, join_request(name, a))
        b_joined = w2.receive()
        assert a_again.generation_id == b_joined.generation_id == 2
        assert {m.member_id for m in a_again.members} == {a, b_first.member_id}
        w2.send(SYNC_GROUP, 5, message(
            SYNC_GROUP, "request", group_id=name, generation_id=2,
            member_id=b_first.member_id, protocol_type="consumer", protocol_name="range"))
        a_sync = sync(w1, name, a, 2, {a: b"half-a", b_first.member_id: b"half-b"})
        assert a_sync.assignment == b"half-a"
        assert w2.receive().assignment == b"half-b"


def test_member_without_heartbeats_is_evicted(shared_broker, name):
    with KafkaWire.connect(shared_broker.bootstrap) as w1, \
            KafkaWire.connect(shared_broker.bootstrap) as w2:
        a, _ = join(w1, name, session_ms=10_000)
        sync(w1, name, a, 1, {a: b""})
        b_first = w2.request(JOIN_GROUP, 9, join_request(name, session_ms=300))
        w2.send(JOIN_GROUP, 9, join_request(name, b_first.member_id, session_ms=300))
        w1.request(JOIN_GROUP, 9, join_request(name, a))
        b = w2.receive().member_id
        sync(w1, name, a, 2, {a: b"", b: b""})
        deadline = time.monotonic() + 20
        while heartbeat(w1, name, a, 2) == Error.NONE and time.monotonic() < deadline:
            time.sleep(0.05)  # b stays silent
        assert heartbeat(w1, name, a, 2) == Error.REBALANCE_IN_PROGRESS
        assert heartbeat(w2, name, b, 2) == Error.UNKNOWN_MEMBER_ID


def test_static_member_rejoin_fences_the_old_member_id(wire, name):
    old, _ = join(wire, name, instance_id="instance-1")
    assert old.startswith("instance-1-")
    sync(wire, name, old, 1, {old: b"mine"}, instance_id="instance-1")
    new, response = join(wire, name, instance_id="instance-1")
    assert new != old and response.error_code == Error.NONE
    assert response.generation_id == 1 and response.skip_assignment
    fenced = wire.request(HEARTBEAT, 4, message(HEARTBEAT, "request", group_id=name,
                                                generation_id=1, member_id=old,
                                                group_instance_id="instance-1"))
    assert fenced.error_code == Error.FENCED_INSTANCE_ID


def test_load_in_progress(wire, shared_broker, name):
    gc = shared_broker.broker.group_coordinator

    async def set_loading(partitions):
        gc.loading = partitions

    shared_broker.call(set_loading({gc.partition_for(name)}))
    try:
        assert wire.request(JOIN_GROUP, 9, join_request(name)).error_code == \
            Error.COORDINATOR_LOAD_IN_PROGRESS
        assert heartbeat(wire, name, "m", 1) == Error.NONE  # Kafka answers blindly
        assert fetch_offsets(wire, name, [(name, 0)])[0] == Error.COORDINATOR_LOAD_IN_PROGRESS
        assert wire.request(LIST_GROUPS, 4, message(LIST_GROUPS, "request")).error_code == \
            Error.COORDINATOR_LOAD_IN_PROGRESS
    finally:
        shared_broker.call(set_loading(set()))


# -- offsets ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(2, 10))
def test_simple_commit_and_fetch_every_commit_version(wire, name, version):
    result = commit(wire, name, {(name, 0): 42, (name, 5): 7, ("no-such-topic", 0): 1,
                                 (name, 6): 1}, version=version, metadata="md")
    assert result == {(name, 0): 0, (name, 5): 0, ("no-such-topic", 0): Error.UNKNOWN_TOPIC_OR_PARTITION,
                      (name, 6): Error.UNKNOWN_TOPIC_OR_PARTITION}
    error, offsets = fetch_offsets(wire, name, [(name, 0), (name, 1), (name, 5)])
    assert error == Error.NONE
    epoch = 3 if version >= 6 else -1
    assert offsets == {(name, 0): (42, epoch, "md", 0), (name, 1): (-1, -1, "", 0),
                       (name, 5): (7, epoch, "md", 0)}


@pytest.mark.parametrize("version", range(1, 10))
def test_offset_fetch_every_version(wire, name, version):
    commit(wire, name, {(name, 2): 20})
    error, offsets = fetch_offsets(wire, name, [(name, 2), (name, 3)], version=version)
    epoch = 3 if version >= 5 else -1
    assert error == Error.NONE
    assert offsets == {(name, 2): (20, epoch, "", 0), (name, 3): (-1, -1, "", 0)}
    if version >= 2:  # null topics: everything committed
        _, everything = fetch_offsets(wire, name, None, version=version)
        assert everything == {(name, 2): (20, epoch, "", 0)}
    _, unknown = fetch_offsets(wire, "never-heard-of", [(name, 0)], version=version)
    assert unknown == {(name, 0): (-1, -1, "", 0)}


def test_offset_fetch_batched_groups(wire, name):
    commit(wire, name + "-a", {(name, 0): 1})
    commit(wire, name + "-b", {(name, 0): 2})
    req = message(OFFSET_FETCH, "request", groups=[
        message(OFFSET_FETCH, "request", "OffsetFetchRequestGroup", group_id=g, topics=[
            message(OFFSET_FETCH, "request", "OffsetFetchRequestTopics", name=name,
                    partition_indexes=[0])]) for g in (name + "-a", name + "-b")])
    response = wire.request(OFFSET_FETCH, 8, req)
    assert [(g.group_id, g.topics[0].partitions[0].committed_offset)
            for g in response.groups] == [(name + "-a", 1), (name + "-b", 2)]


def test_require_stable_sees_pending_transactional_offsets(wire, shared_broker, name):
    gc = shared_broker.broker.group_coordinator

    async def txn_commit():
        req = TxnOffsetCommitRequest(
            transactional_id="tx", group_id=name, producer_id=4242, producer_epoch=0,
            topics=[TxnOffsetCommitRequestTopic(name, [TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=99)])])
        return await gc.commit_transactional_offsets(RequestInfo(), req)

    async def complete(committed: bool):
        return await gc.complete_transaction(4242, 0, 0, gc.partition_for(name), committed)

    commit(wire, name, {(name, 0): 10})
    shared_broker.call(txn_commit())
    assert fetch_offsets(wire, name, [(name, 0)])[1][(name, 0)][0] == 10
    stable = fetch_offsets(wire, name, [(name, 0)], require_stable=True)[1]
    assert stable[(name, 0)] == (-1, -1, "", Error.UNSTABLE_OFFSET_COMMIT)
    assert shared_broker.call(complete(True)) == Error.NONE
    assert fetch_offsets(wire, name, [(name, 0)], require_stable=True)[1][(name, 0)][0] == 99


def test_member_commits_are_checked_against_the_generation(wire, name):
    member_id, _ = join(wire, name)
    assert commit(wire, name, {(name, 0): 1}, generation=1, member_id=member_id) == {
        (name, 0): Error.REBALANCE_IN_PROGRESS}  # joined but not synced yet
    sync(wire, name, member_id, 1, {member_id: b""})
    assert commit(wire, name, {(name, 0): 1}, generation=1, member_id=member_id) == {
        (name, 0): Error.NONE}
    assert commit(wire, name, {(name, 0): 1}, generation=2, member_id=member_id) == {
        (name, 0): Error.ILLEGAL_GENERATION}
    assert commit(wire, name, {(name, 0): 1}) == {(name, 0): Error.UNKNOWN_MEMBER_ID}
    assert commit(wire, name + "-none", {(name, 0): 1}, generation=1, member_id="m") == {
        (name, 0): Error.GROUP_ID_NOT_FOUND}
    assert commit(wire, name + "-none", {(name, 0): 1}, generation=1, member_id="m",
                  version=8) == {(name, 0): Error.ILLEGAL_GENERATION}


# -- admin ------------------------------------------------------------------------------


def test_list_describe_delete_groups_and_offset_delete(wire, name):
    member_id, _ = join(wire, name)
    sync(wire, name, member_id, 1, {member_id: b"assigned"})
    commit(wire, name + "-simple", {(name, 0): 5, (name, 1): 6})

    listed = wire.request(LIST_GROUPS, 5, message(LIST_GROUPS, "request"))
    by_id = {g.group_id: g for g in listed.groups}
    assert by_id[name].group_state == "Stable" and by_id[name].protocol_type == "consumer"
    assert by_id[name].group_type == "classic"
    assert by_id[name + "-simple"].group_state == "Empty"
    assert by_id[name + "-simple"].protocol_type == ""
    empty_only = wire.request(LIST_GROUPS, 4, message(LIST_GROUPS, "request",
                                                      states_filter=["Empty"]))
    assert name not in {g.group_id for g in empty_only.groups}
    assert name + "-simple" in {g.group_id for g in empty_only.groups}
    assert any(g.group_id == name
               for g in wire.request(LIST_GROUPS, 0, message(LIST_GROUPS, "request")).groups)

    described = wire.request(DESCRIBE_GROUPS, 5, message(
        DESCRIBE_GROUPS, "request", groups=[name, "no-such-group"],
        include_authorized_operations=True))
    stable, dead = described.groups
    assert (stable.group_state, stable.protocol_type, stable.protocol_data) == (
        "Stable", "consumer", "range")
    assert stable.members[0].member_id == member_id
    assert stable.members[0].client_id == "wire-client"
    assert stable.members[0].client_host == "/127.0.0.1"
    assert stable.members[0].member_assignment == b"assigned"
    assert stable.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
    assert (dead.group_state, dead.error_code) == ("Dead", Error.NONE)

    # OffsetDelete: the consumer group subscribes to "t", not to this topic
    commit(wire, name, {(name, 0): 1}, generation=1, member_id=member_id)
    response = wire.request(OFFSET_DELETE, 0, message(
        OFFSET_DELETE, "request", group_id=name, topics=[
            message(OFFSET_DELETE, "request", "OffsetDeleteRequestTopic", name=name,
                    partitions=[message(OFFSET_DELETE, "request",
                                        "OffsetDeleteRequestPartition", partition_index=i)
                                for i in (0, 9)])]))
    assert response.error_code == Error.NONE
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == [
        (0, 0), (9, Error.UNKNOWN_TOPIC_OR_PARTITION)]
    assert fetch_offsets(wire, name, [(name, 0)])[1][(name, 0)][0] == -1
    missing = wire.request(OFFSET_DELETE, 0, message(OFFSET_DELETE, "request",
                                                     group_id="missing-" + name, topics=[]))
    assert missing.error_code == Error.GROUP_ID_NOT_FOUND

    deleted = wire.request(DELETE_GROUPS, 2, message(
        DELETE_GROUPS, "request", groups_names=[name, name + "-simple", name + "-simple",
                                                "missing-" + name]))
    assert {(r.group_id, r.error_code) for r in deleted.results} == {
        (name, Error.NON_EMPTY_GROUP), (name + "-simple", Error.NONE),
        ("missing-" + name, Error.GROUP_ID_NOT_FOUND)}
    assert len(deleted.results) == 3
    assert fetch_offsets(wire, name + "-simple", None)[1] == {}


def test_graceful_stop_answers_parked_joins_with_not_coordinator(tmp_path):
    overrides = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}
    b = BrokerThread(tmp_path / "data", overrides).start()
    try:
        with KafkaWire.connect(b.bootstrap) as w1, KafkaWire.connect(b.bootstrap) as w2:
            a, _ = join(w1, "g")
            sync(w1, "g", a, 1, {a: b""})
            second = w2.request(JOIN_GROUP, 9, join_request("g"))
            w2.send(JOIN_GROUP, 9, join_request("g", second.member_id))  # waits for a
            b.stop()
            parked = w2.receive()
            assert parked.error_code == Error.NOT_COORDINATOR
    finally:
        b.stop()


def test_group_max_size_and_offset_metadata_max_bytes_properties(tmp_path):
    overrides = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
                 "group.max.size": "1", "offset.metadata.max.bytes": "4"}
    with BrokerThread(tmp_path / "data", overrides) as b:
        make_topic(b, "t", 1)
        with KafkaWire.connect(b.bootstrap) as w1, KafkaWire.connect(b.bootstrap) as w2:
            a, _ = join(w1, "g")
            sync(w1, "g", a, 1, {a: b"all"})
            first = w2.request(JOIN_GROUP, 9, join_request("g"))  # member id required first
            second = w2.request(JOIN_GROUP, 9, join_request("g", first.member_id))
            assert second.error_code == Error.GROUP_MAX_SIZE_REACHED
            assert commit(w1, "simple", {("t", 0): 1}, metadata="1234") == {("t", 0): 0}
            assert commit(w1, "simple", {("t", 0): 2}, metadata="12345") == {
                ("t", 0): Error.OFFSET_METADATA_TOO_LARGE}
