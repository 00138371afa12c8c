"""Kafka 4.x's client-facing APIs on the raw wire, answered as a single-node Kafka 4.x does:
the advertised ranges, the new versions (Metadata v13, ListOffsets v10, DescribeCluster v2),
the APIs a single node answers from its one-broker state (ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments, AlterReplicaLogDirs,
DescribeTopicPartitions), the ones answered as Kafka does with the feature off (delegation
tokens, ListClientMetricsResources) and what happens to keys and versions not served."""

from __future__ import annotations

import os
import struct

import pytest

from semel.broker.handlers import metadata as metadata_handler
from semel.broker.security import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType
from semel.broker.security import ResourceType as R
from semel.broker.security.acl import AclBinding
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.frame import encode_request_header
from semel.protocol.messages import api_versions_response
from semel.protocol.primitives import ZERO_UUID
from tests.kafka_wire import KafkaWire, make_topic, message

LIST_OFFSETS, METADATA, API_VERSIONS, DESCRIBE_CLUSTER = 2, 3, 18, 60
ALTER_REPLICA_LOG_DIRS, ELECT_LEADERS = 34, 43
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, DESCRIBE_TOPIC_PARTITIONS = 45, 46, 75
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Apache Kafka 4.0's broker ranges for the APIs this file is about
KAFKA_4_RANGES = {LIST_OFFSETS: (1, 10), METADATA: (0, 13), DESCRIBE_CLUSTER: (0, 2),
                  ALTER_REPLICA_LOG_DIRS: (1, 2), ELECT_LEADERS: (0, 2),
                  ALTER_REASSIGNMENTS: (0, 1), LIST_REASSIGNMENTS: (0, 0),
                  DESCRIBE_TOPIC_PARTITIONS: (0, 0),
                  38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3),  # delegation tokens
                  74: (0, 0)}  # ListClientMetricsResources


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One broker for the module, topics a (2 partitions), b (3) and c (1)."""
    with BrokerThread(tmp_path_factory.mktemp("kafka4") / "data") as bt:
        make_topic(bt, "a", 2)
        make_topic(bt, "b", 3)
        make_topic(bt, "c", 1)
        yield bt


@pytest.fixture
def wire(single):
    with KafkaWire.connect(single.bootstrap) as w:
        yield w


def m(api_key: int, cls: str | None = None, /, **fields):
    return message(api_key, "request", cls, **fields)


def advertised(wire) -> dict[int, tuple[int, int]]:
    response = wire.request(API_VERSIONS, 3, m(API_VERSIONS, client_software_name="wire",
                                                client_software_version="1"))
    assert response.error_code == Error.NONE
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


# -- ApiVersions, unknown keys and versions ----------------------------------------------


def test_api_versions_advertise_kafka_4_ranges(wire):
    versions = advertised(wire)
    assert {k: versions[k] for k in KAFKA_4_RANGES} == KAFKA_4_RANGES
    # Produce stays at 12 (v13 names topics by id only) and Fetch at 17: a 4.0 broker
    assert versions[0] == (3, 12) and versions[1] == (4, 17)


def test_api_versions_in_a_newer_version_lists_only_its_own_range(wire):
    header = encode_request_header(API_VERSIONS, 99, 42, "future-client", 2)
    body = header + b"\x00"
    wire.send_raw(struct.pack(">i", len(body)) + body)
    frame = wire.read_frame()
    assert struct.unpack_from(">i", frame, 0)[0] == 42
    response, _ = api_versions_response.decode(0, memoryview(frame), 4)
    assert response.error_code == Error.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (API_VERSIONS, 0, 4)]


def test_api_versions_with_an_illegal_client_name_lists_nothing(wire):
    response = wire.request(API_VERSIONS, 3, m(API_VERSIONS, client_software_name="-bad-",
                                                client_software_version="1"))
    assert (response.error_code, response.api_keys) == (Error.INVALID_REQUEST, [])


@pytest.mark.parametrize("api_key,version", [
    (999, 0),  # no such key
    (-1, 0),
    (52, 0),  # Vote: a controller's API, not served on a broker listener
    (38, 3),  # CreateDelegationToken: Kafka has it, semel does not serve it
    (76, 1),  # ShareGroupHeartbeat
])
def test_a_key_not_served_closes_the_connection(single, api_key, version):
    with KafkaWire.connect(single.bootstrap) as w:
        header = encode_request_header(api_key, version, 7, "wire", 2)
        w.send_raw(struct.pack(">i", len(header) + 1) + header + b"\x00")
        assert w.is_closed_by_peer()


@pytest.mark.parametrize("api_key,version", [(METADATA, 14), (LIST_OFFSETS, 0),
                                             (DESCRIBE_TOPIC_PARTITIONS, 1)])
def test_a_version_not_served_closes_the_connection(single, api_key, version):
    with KafkaWire.connect(single.bootstrap) as w:
        header = encode_request_header(api_key, version, 7, "wire", 2)
        w.send_raw(struct.pack(">i", len(header) + 1) + header + b"\x00")
        assert w.is_closed_by_peer()


# -- new versions --------------------------------------------------------------------------


def test_metadata_v13_has_a_top_level_error_code(wire, single):
    response = wire.request(METADATA, 13, m(METADATA, topics=[m(METADATA, "MetadataRequestTopic",
                                                                 name="a")]))
    assert response.error_code == Error.NONE
    (topic,) = response.topics
    assert (topic.name, len(topic.partitions)) == ("a", 2)
    request = m(METADATA, topics=[m(METADATA, "MetadataRequestTopic", name="x")])
    failed = metadata_handler.error_response(request, Error.INVALID_REQUEST)
    assert failed.error_code == Error.INVALID_REQUEST
    assert [t.error_code for t in failed.topics] == [Error.INVALID_REQUEST]


def test_list_offsets_v10_takes_a_timeout(wire):
    request = m(LIST_OFFSETS, replica_id=-1, timeout_ms=5000, topics=[
        m(LIST_OFFSETS, "ListOffsetsTopic", name="b", partitions=[
            m(LIST_OFFSETS, "ListOffsetsPartition", partition_index=i, timestamp=spec)
            for i, spec in ((0, -1), (1, -2), (2, -4))])])
    (topic,) = wire.request(LIST_OFFSETS, 10, request).topics
    assert [(p.partition_index, p.error_code, p.offset, p.leader_epoch)
            for p in topic.partitions] == [(0, 0, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0)]


def test_describe_cluster_v2_reports_the_broker_unfenced(wire, single):
    for include in (False, True):
        response = wire.request(DESCRIBE_CLUSTER, 2, m(DESCRIBE_CLUSTER,
                                                       include_fenced_brokers=include))
        assert response.error_code == Error.NONE
        assert [(b.broker_id, b.port, b.is_fenced) for b in response.brokers] == [
            (single.broker.node_id, single.broker.port, False)]
    assert wire.request(DESCRIBE_CLUSTER, 2, m(DESCRIBE_CLUSTER, endpoint_type=2)).error_code \
        == Error.MISMATCHED_ENDPOINT_TYPE


# -- ElectLeaders --------------------------------------------------------------------------


def elect(wire, version, topic_partitions, election_type=0):
    request = m(ELECT_LEADERS, election_type=election_type, timeout_ms=1000,
                topic_partitions=None if topic_partitions is None else [
                    m(ELECT_LEADERS, "TopicPartitions", topic=t, partitions=ps)
                    for t, ps in topic_partitions])
    return wire.request(ELECT_LEADERS, version, request)


def results(response):
    return [(r.topic, [(p.partition_id, p.error_code, p.error_message)
                       for p in r.partition_result])
            for r in response.replica_election_results]


@pytest.mark.parametrize("version,election_type", [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1)])
def test_elect_leaders_is_never_needed(wire, version, election_type):
    response = elect(wire, version, [("a", [0, 1, 2]), ("nope", [0])], election_type)
    assert response.error_code == Error.NONE
    assert results(response) == [
        ("a", [(0, Error.ELECTION_NOT_NEEDED, None), (1, Error.ELECTION_NOT_NEEDED, None),
               (2, Error.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as a-2")]),
        ("nope", [(0, Error.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope")])]


def test_elect_leaders_for_every_partition_lists_topics_without_partitions(wire, single):
    response = elect(wire, 2, None)
    assert response.error_code == Error.NONE
    listed = dict(results(response))
    assert set(listed) == set(single.broker.log_manager.topics) >= {"a", "b", "c"}
    assert all(partitions == [] for partitions in listed.values())


def test_elect_leaders_with_an_unknown_election_type_fails_the_request(wire):
    response = elect(wire, 2, [("a", [0])], election_type=5)
    assert response.error_code == Error.INVALID_REQUEST
    assert results(response) == [("a", [(0, Error.INVALID_REQUEST, "Unknown election type 5")])]


# -- partition reassignments ----------------------------------------------------------------


def reassign(wire, targets, version=1, allow_rf_change=True):
    request = m(ALTER_REASSIGNMENTS, timeout_ms=1000,
                allow_replication_factor_change=allow_rf_change, topics=[
                    m(ALTER_REASSIGNMENTS, "ReassignableTopic", name=name, partitions=[
                        m(ALTER_REASSIGNMENTS, "ReassignablePartition", partition_index=i,
                          replicas=replicas) for i, replicas in partitions])
                    for name, partitions in targets])
    return wire.request(ALTER_REASSIGNMENTS, version, request)


@pytest.mark.parametrize("version", [0, 1])
def test_alter_partition_reassignments_on_one_broker(wire, single, version):
    node = single.broker.node_id
    response = reassign(wire, [
        ("a", [(0, [node]), (1, [node + 1]), (5, [node])]),
        ("b", [(0, None), (1, []), (2, [node, node])]),
        ("nope", [(0, [node])])], version=version)
    assert (response.error_code, response.error_message) == (Error.NONE, None)
    got = [(t.name, [(p.partition_index, p.error_code, p.error_message) for p in t.partitions])
           for t in response.responses]
    unregistered = (f"The manual partition assignment includes broker {node + 1}, but no such "
                    "broker is registered.")
    assert got == [
        ("a", [(0, Error.NONE, None),
               (1, Error.INVALID_REPLICA_ASSIGNMENT, unregistered),
               (5, Error.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition a:5.")]),
        ("b", [(0, Error.NO_REASSIGNMENT_IN_PROGRESS,
                "No partition reassignment is in progress."),
               (1, Error.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list."),
               (2, Error.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {node} more than once.")]),
        ("nope", [(0, Error.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")])]


def test_alter_partition_reassignments_v1_echoes_the_replication_factor_flag(wire, single):
    response = reassign(wire, [("a", [(0, [single.broker.node_id])])], allow_rf_change=False)
    assert response.allow_replication_factor_change is False
    assert response.responses[0].partitions[0].error_code == Error.NONE


def test_list_partition_reassignments_finds_none_in_progress(wire, single):
    reassign(wire, [("a", [(0, [single.broker.node_id])])])
    for topics in (None, [m(LIST_REASSIGNMENTS, "ListPartitionReassignmentsTopics", name="a",
                            partition_indexes=[0, 1]),
                          m(LIST_REASSIGNMENTS, "ListPartitionReassignmentsTopics", name="nope",
                            partition_indexes=[0])]):
        response = wire.request(LIST_REASSIGNMENTS, 0, m(LIST_REASSIGNMENTS, timeout_ms=1000,
                                                          topics=topics))
        assert (response.error_code, response.error_message, response.topics) == (
            Error.NONE, None, [])


# -- AlterReplicaLogDirs ---------------------------------------------------------------------


def test_alter_replica_log_dirs_on_the_one_log_dir(wire, single):
    log_dir = os.path.abspath(single.broker.log_manager.data_dir)
    long_name = "l" * 220
    request = m(ALTER_REPLICA_LOG_DIRS, dirs=[
        m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDir", path=log_dir, topics=[
            m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirTopic", name="a", partitions=[0, 1, 7]),
            m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirTopic", name=long_name,
              partitions=[0])]),
        m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDir", path="/elsewhere", topics=[
            m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirTopic", name="b", partitions=[0])])])
    for version in (1, 2):
        response = wire.request(ALTER_REPLICA_LOG_DIRS, version, request)
        got = {r.topic_name: [(p.partition_index, p.error_code) for p in r.partitions]
               for r in response.results}
        assert got == {"a": [(0, Error.NONE), (1, Error.NONE),
                             (7, Error.UNKNOWN_TOPIC_OR_PARTITION)],
                       long_name: [(0, Error.INVALID_TOPIC_EXCEPTION)],
                       "b": [(0, Error.LOG_DIR_NOT_FOUND)]}


# -- DescribeTopicPartitions -----------------------------------------------------------------


def describe(wire, names=(), limit=2000, cursor=None):
    request = m(DESCRIBE_TOPIC_PARTITIONS, response_partition_limit=limit,
                topics=[m(DESCRIBE_TOPIC_PARTITIONS, "TopicRequest", name=n) for n in names],
                cursor=None if cursor is None else m(DESCRIBE_TOPIC_PARTITIONS, "Cursor",
                                                     topic_name=cursor[0],
                                                     partition_index=cursor[1]))
    return wire.request(DESCRIBE_TOPIC_PARTITIONS, 0, request)


def listing(response):
    return ([(t.name, t.error_code, [p.partition_index for p in t.partitions])
             for t in response.topics],
            None if response.next_cursor is None else (response.next_cursor.topic_name,
                                                       response.next_cursor.partition_index))


def test_describe_topic_partitions_named(wire, single):
    response = describe(wire, ["c", "a", "nope", "bad/name"])
    assert listing(response) == ([("a", 0, [0, 1]),
                                  ("bad/name", Error.INVALID_TOPIC_EXCEPTION, []),
                                  ("c", 0, [0]),
                                  ("nope", Error.UNKNOWN_TOPIC_OR_PARTITION, [])], None)
    node = single.broker.node_id
    a = response.topics[0]
    assert a.topic_id == single.broker.log_manager.topics["a"].topic_id != ZERO_UUID
    assert not a.is_internal
    assert a.topic_authorized_operations == sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
    p = a.partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes,
            p.eligible_leader_replicas, p.last_known_elr, p.offline_replicas) == (
        0, node, 0, [node], [node], [], [], [])
    assert response.topics[3].topic_id == ZERO_UUID


def test_describe_topic_partitions_pages_through_every_topic(wire, single):
    # a: 2, b: 3, c: 1 partitions (and any internal topics, which sort first)
    everything = []
    cursor = None
    pages = 0
    while True:
        names, cursor = listing(describe(wire, limit=2, cursor=cursor))
        pages += 1
        for name, error, partitions in names:
            assert error == Error.NONE
            everything.extend((name, p) for p in partitions)
        if cursor is None:
            break
    topics = single.broker.log_manager.topics
    assert everything == [(name, p) for name in sorted(topics)
                          for p in range(topics[name].num_partitions)]
    assert pages == (len(everything) + 1) // 2


def test_describe_topic_partitions_cursor_and_limit(wire):
    assert listing(describe(wire, ["a", "b", "c"], limit=3)) == (
        [("a", 0, [0, 1]), ("b", 0, [0])], ("b", 1))
    assert listing(describe(wire, ["a", "b", "c"], limit=2, cursor=("b", 1))) == (
        [("b", 0, [1, 2])], ("c", 0))
    assert listing(describe(wire, ["a", "b", "c"], limit=5, cursor=("b", 1))) == (
        [("b", 0, [1, 2]), ("c", 0, [0])], None)
    # a limit of 0 still returns one partition
    assert listing(describe(wire, ["c"], limit=0)) == ([("c", 0, [0])], None)


@pytest.mark.parametrize("cursor", [("x", 0), ("b", -1)])
def test_describe_topic_partitions_refuses_a_bad_cursor(wire, cursor):
    names, next_cursor = listing(describe(wire, ["a", "b"], cursor=cursor))
    assert (names, next_cursor) == ([("a", Error.INVALID_REQUEST, []),
                                     ("b", Error.INVALID_REQUEST, [])], None)


# -- with the authorizer on ------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("kafka4-authz") / "data",
                      {"authorizer.class.name": STANDARD_AUTHORIZER}) as bt:
        make_topic(bt, "open", 2)
        make_topic(bt, "shut", 1)

        async def grant():
            bindings = [AclBinding(rtype, name, PatternType.LITERAL, "User:ANONYMOUS", "*", op,
                                   AclPermissionType.ALLOW)
                        for rtype, name, op in ((R.TOPIC, "open", AclOperation.DESCRIBE),
                                                (R.CLUSTER, CLUSTER_NAME, AclOperation.CREATE))]
            assert await bt.broker.authorizer.create_acls(bindings) == [None, None]

        bt.call(grant())
        yield bt


def test_cluster_apis_need_their_cluster_acl(secured):
    with KafkaWire.connect(secured.bootstrap) as w:
        failed = Error.CLUSTER_AUTHORIZATION_FAILED
        response = elect(w, 2, [("open", [0, 1])])
        assert response.error_code == failed
        assert results(response) == [("open", [(0, failed, None), (1, failed, None)])]
        assert results(elect(w, 2, None)) == []
        response = reassign(w, [("open", [(0, [0])])])
        assert response.error_code == failed
        assert response.responses[0].partitions[0].error_code == failed
        response = w.request(LIST_REASSIGNMENTS, 0, m(LIST_REASSIGNMENTS, topics=None))
        assert (response.error_code, response.topics) == (failed, [])
        response = w.request(ALTER_REPLICA_LOG_DIRS, 2, m(ALTER_REPLICA_LOG_DIRS, dirs=[
            m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDir", path="/x", topics=[
                m(ALTER_REPLICA_LOG_DIRS, "AlterReplicaLogDirTopic", name="open",
                  partitions=[1])])]))
        assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions])
                for r in response.results] == [("open", [(1, failed)])]
        response = w.request(74, 0, m(74))
        assert (response.error_code, response.client_metrics_resources) == (failed, [])


def test_describe_topic_partitions_hides_topics_without_describe(secured):
    with KafkaWire.connect(secured.bootstrap) as w:
        assert listing(describe(w)) == ([("open", 0, [0, 1])], None)
        response = describe(w, ["shut", "open", "nope"])
        # denied topics come last, whether they exist or not
        assert listing(response) == ([("open", 0, [0, 1]),
                                      ("nope", Error.TOPIC_AUTHORIZATION_FAILED, []),
                                      ("shut", Error.TOPIC_AUTHORIZATION_FAILED, [])], None)
        assert response.topics[0].topic_authorized_operations == 1 << AclOperation.DESCRIBE
        assert response.topics[2].topic_id == ZERO_UUID


# -- delegation tokens (off) and client-metrics resources -------------------------------------

CREATE_TOKEN, RENEW_TOKEN, EXPIRE_TOKEN, DESCRIBE_TOKEN = 38, 39, 40, 41
LIST_CLIENT_METRICS_RESOURCES = 74
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    """A broker with a SASL_PLAINTEXT (PLAIN) listener beside a PLAINTEXT one."""
    with BrokerThread(tmp_path_factory.mktemp("kafka4-sasl") / "data", {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}) as bt:
        yield bt


def sasl_wire(bt) -> KafkaWire:
    port = next(e.port for e in bt.broker.endpoints if e.name == "SASL_PLAINTEXT")
    wire = KafkaWire("127.0.0.1", port)
    assert wire.request(17, 1, message(17, "request", mechanism="PLAIN")).error_code == 0
    assert wire.request(36, 2, message(36, "request",
                                       auth_bytes=b"\0alice\0alice-secret")).error_code == 0
    return wire


def token_requests(owner=None, renewer_type="User"):
    return [
        (CREATE_TOKEN, 3, m(CREATE_TOKEN, owner_principal_type=owner and "User",
                            owner_principal_name=owner, max_lifetime_ms=-1,
                            renewers=[m(CREATE_TOKEN, "CreatableRenewers",
                                        principal_type=renewer_type, principal_name="bob")])),
        (RENEW_TOKEN, 2, m(RENEW_TOKEN, hmac=b"x", renew_period_ms=-1)),
        (EXPIRE_TOKEN, 2, m(EXPIRE_TOKEN, hmac=b"x", expiry_time_period_ms=-1)),
        (DESCRIBE_TOKEN, 3, m(DESCRIBE_TOKEN, owners=None))]


def test_delegation_tokens_are_not_allowed_on_plaintext(wire):
    create, renew, expire, describe_ = (wire.request(*r) for r in token_requests())
    refused = Error.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert (create.error_code, create.principal_type, create.principal_name,
            create.token_requester_principal_name, create.issue_timestamp_ms,
            create.expiry_timestamp_ms, create.max_timestamp_ms, create.token_id,
            create.hmac) == (refused, "User", "ANONYMOUS", "ANONYMOUS", -1, -1, -1, "", b"")
    assert (renew.error_code, renew.expiry_timestamp_ms) == (refused, -1)
    assert (expire.error_code, expire.expiry_timestamp_ms) == (refused, -1)
    assert (describe_.error_code, describe_.tokens) == (refused, [])


def test_delegation_tokens_are_disabled_on_an_authenticated_connection(sasl):
    with sasl_wire(sasl) as w:
        create, renew, expire, describe_ = (w.request(*r) for r in token_requests(owner="carol"))
        disabled = Error.DELEGATION_TOKEN_AUTH_DISABLED
        assert (create.error_code, create.principal_name, create.token_requester_principal_name,
                create.issue_timestamp_ms, create.expiry_timestamp_ms) == (
            disabled, "carol", "alice", 0, 0)
        assert (renew.error_code, renew.expiry_timestamp_ms) == (disabled, 0)
        assert (expire.error_code, expire.expiry_timestamp_ms) == (disabled, 0)
        assert (describe_.error_code, describe_.tokens) == (disabled, [])
        create = w.request(*token_requests(renewer_type="Group")[0])
        assert (create.error_code, create.principal_name, create.expiry_timestamp_ms) == (
            Error.INVALID_PRINCIPAL_TYPE, "alice", -1)


def test_list_client_metrics_resources_is_empty(wire):
    response = wire.request(LIST_CLIENT_METRICS_RESOURCES, 0, m(LIST_CLIENT_METRICS_RESOURCES))
    assert (response.error_code, response.client_metrics_resources) == (Error.NONE, [])
