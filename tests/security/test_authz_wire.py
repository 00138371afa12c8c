"""Every API's authorization over real sockets, with the authorizer on, as Kafka 4.x's
request handlers check it: each case sends its request as User:ANONYMOUS (a PLAINTEXT
connection) without the ACL and then with it, and checks the exact error codes.

ACLs are granted through the broker's Authorizer on its event loop (a PLAINTEXT client is
ANONYMOUS, so it cannot be a distinct super user); each case starts and ends with no ACLs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from semel.broker.security import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType
from semel.broker.security import ResourceType as R
from semel.broker.security.acl import AclBinding
from semel.broker.security.authorizer import EVERY_ACL
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.primitives import ZERO_UUID
from semel.protocol.records import build_batch
from tests.kafka_wire import KafkaWire, make_topic, message, records_batch

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
Op = AclOperation
E = Error

# api keys
(PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR,
 JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, LIST_GROUPS) = (
    0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16)
(CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH,
 ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT) = (
    19, 20, 21, 22, 23, 24, 25, 26, 27, 28)
(DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, DELETE_GROUPS,
 INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE, DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS,
 DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS) = (32, 33, 35, 37, 42, 44, 47, 60, 61, 65, 66)
CONFIG_TOPIC, CONFIG_BROKER = 2, 4


def acl(rtype: R, name: str, op: AclOperation, *, principal: str = ANON,
        pattern: PatternType = PatternType.LITERAL,
        permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", op, permission)


def grant(bt: BrokerThread, *bindings: AclBinding) -> None:
    async def create():
        errors = await bt.broker.authorizer.create_acls(list(bindings))
        assert errors == [None] * len(bindings)

    bt.call(create())


def revoke_all(bt: BrokerThread) -> None:
    async def delete():
        await bt.broker.authorizer.delete_acls([EVERY_ACL])

    bt.call(delete())


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with Kafka's StandardAuthorizer on, no super users, topics t (2 partitions,
    3 records in partition 0) and u."""
    bt = BrokerThread(tmp_path_factory.mktemp("authz") / "data", {
        "authorizer.class.name": STANDARD_AUTHORIZER, "auto.create.topics.enable": "true"})
    with bt:
        assert bt.broker.authorizer is not None
        make_topic(bt, "t", 2)
        make_topic(bt, "u", 1)

        async def fill():
            bt.broker.log_manager.get_partition("t", 0).append(
                records_batch([b"a", b"b", b"c"]), origin="client")

        bt.call(fill())
        yield bt


@pytest.fixture
def broker(secured):
    revoke_all(secured)
    yield secured
    revoke_all(secured)


def send(bt: BrokerThread, api_key: int, version: int, body):
    with KafkaWire.connect(bt.bootstrap) as wire:
        return wire.request(api_key, version, body)


# -- request builders ----------------------------------------------------------------------

def m(api_key: int, cls: str | None = None, /, **fields):
    return message(api_key, "request", cls, **fields)


def produce(topic="t", records=None, transactional_id=None):
    records = records if records is not None else records_batch([b"x"])
    return m(PRODUCE, acks=1, timeout_ms=30_000, transactional_id=transactional_id,
             topic_data=[m(PRODUCE, "TopicProduceData", name=topic, partition_data=[
                 m(PRODUCE, "PartitionProduceData", index=0, records=records)])])


def fetch(topic="t", replica_id=-1):
    return m(FETCH, replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
             session_id=0, session_epoch=-1, topics=[m(FETCH, "FetchTopic", topic=topic,
                                                       partitions=[m(FETCH, "FetchPartition", partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])


def list_offsets(topic="t"):
    return m(LIST_OFFSETS, replica_id=-1, topics=[m(
        LIST_OFFSETS, "ListOffsetsTopic", name=topic, partitions=[m(
            LIST_OFFSETS, "ListOffsetsPartition", partition_index=0, timestamp=-1)])])


def metadata(*names, all_topics=False, cluster_ops=False, topic_ops=False):
    topics = None if all_topics else [m(METADATA, "MetadataRequestTopic", name=n) for n in names]
    return m(METADATA, topics=topics, allow_auto_topic_creation=True,
             include_cluster_authorized_operations=cluster_ops,
             include_topic_authorized_operations=topic_ops)


def offset_commit(group="g", topic="t"):
    return m(OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="",
             topics=[m(OFFSET_COMMIT, "OffsetCommitRequestTopic", name=topic, partitions=[
                 m(OFFSET_COMMIT, "OffsetCommitRequestPartition", partition_index=0,
                   committed_offset=1)])])


def offset_fetch_v8(group="g", topics=("t",)):
    return m(OFFSET_FETCH, groups=[m(OFFSET_FETCH, "OffsetFetchRequestGroup", group_id=group,
                                     topics=None if topics is None else [
        m(OFFSET_FETCH, "OffsetFetchRequestTopics", name=t, partition_indexes=[0])
        for t in topics])])


def txn_offset_commit(tid="tx", group="g", topic="t"):
    return m(TXN_OFFSET_COMMIT, transactional_id=tid, group_id=group, producer_id=1,
             producer_epoch=0, topics=[m(TXN_OFFSET_COMMIT, "TxnOffsetCommitRequestTopic",
                                         name=topic, partitions=[
        m(TXN_OFFSET_COMMIT, "TxnOffsetCommitRequestPartition", partition_index=0,
          committed_offset=1)])])


def add_partitions_v3(tid="tx", topics=("t",)):
    return m(ADD_PARTITIONS_TO_TXN, v3_and_below_transactional_id=tid,
             v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
             v3_and_below_topics=[m(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnTopic", name=t,
                                    partitions=[0]) for t in topics])


def add_partitions_v4(tid="tx"):
    return m(ADD_PARTITIONS_TO_TXN, transactions=[m(
        ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnTransaction", transactional_id=tid,
        producer_id=1, producer_epoch=0, verify_only=True, topics=[
            m(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnTopic", name="t", partitions=[0])])])


def write_markers(topic="t", producer_id=424242):
    return m(WRITE_TXN_MARKERS, markers=[m(
        WRITE_TXN_MARKERS, "WritableTxnMarker", producer_id=producer_id, producer_epoch=0,
        transaction_result=True, coordinator_epoch=0, topics=[
            m(WRITE_TXN_MARKERS, "WritableTxnMarkerTopic", name=topic, partition_indexes=[0])])])


def describe_configs(rtype, name):
    return m(DESCRIBE_CONFIGS, resources=[m(DESCRIBE_CONFIGS, "DescribeConfigsResource",
                                            resource_type=rtype, resource_name=name,
                                            configuration_keys=None)])


def alter_configs(name="t"):
    return m(ALTER_CONFIGS, validate_only=True, resources=[m(
        ALTER_CONFIGS, "AlterConfigsResource", resource_type=CONFIG_TOPIC, resource_name=name,
        configs=[m(ALTER_CONFIGS, "AlterableConfig", name="retention.ms", value="1000")])])


def incremental_alter_configs(rtype=CONFIG_TOPIC, name="t", config="retention.ms"):
    return m(INCREMENTAL_ALTER_CONFIGS, validate_only=True, resources=[m(
        INCREMENTAL_ALTER_CONFIGS, "AlterConfigsResource", resource_type=rtype,
        resource_name=name, configs=[m(INCREMENTAL_ALTER_CONFIGS, "AlterableConfig",
                                       name=config, config_operation=0, value="1000")])])


def create_topics(name):
    return m(CREATE_TOPICS, topics=[m(CREATE_TOPICS, "CreatableTopic", name=name,
                                      num_partitions=1, replication_factor=-1)])


def delete_topics(name=None, topic_id=ZERO_UUID):
    return m(DELETE_TOPICS, timeout_ms=30_000, topics=[m(DELETE_TOPICS, "DeleteTopicState",
                                                         name=name, topic_id=topic_id)])


def delete_records(topic="t"):
    return m(DELETE_RECORDS, timeout_ms=30_000, topics=[m(
        DELETE_RECORDS, "DeleteRecordsTopic", name=topic, partitions=[
            m(DELETE_RECORDS, "DeleteRecordsPartition", partition_index=0, offset=0)])])


def epochs(topic="t"):
    return m(OFFSET_FOR_LEADER_EPOCH, replica_id=-1, topics=[m(
        OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderTopic", topic=topic, partitions=[
            m(OFFSET_FOR_LEADER_EPOCH, "OffsetForLeaderPartition", partition=0,
              leader_epoch=0)])])


# -- response readers ----------------------------------------------------------------------

def produce_errors(r):
    return [p.error_code for t in r.responses for p in t.partition_responses]


def fetch_errors(r):
    return [p.error_code for t in r.responses for p in t.partitions]


def commit_errors(r):
    return [p.error_code for t in r.topics for p in t.partitions]


def add_partitions_errors(r):
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def marker_errors(r):
    return [p.error_code for mk in r.markers for t in mk.topics for p in t.partitions]


def group_of(r):
    (group,) = r.groups
    return group


def topic_of(r, name):
    return next(t for t in r.topics if t.name == name)


TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = (
    E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED,
    E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


@dataclass
class Case:
    """``request`` sent at each stage; before stage i the ACLs of grants[i] are added
    (stage 0: none). ``checks[i]`` asserts stage i's response."""

    api_key: int
    version: int
    request: object
    stages: list = field(default_factory=list)  # [(grants, check)]


def topic_acl(name, op):
    return acl(R.TOPIC, name, op)


def group_acl(name, op):
    return acl(R.GROUP, name, op)


def txn_acl(name, op):
    return acl(R.TRANSACTIONAL_ID, name, op)


def cluster_acl(op):
    return acl(R.CLUSTER, CLUSTER_NAME, op)


CASES = {
    "produce": Case(PRODUCE, 9, produce(), [
        ((), lambda r: produce_errors(r) == [TOPIC_AUTH]),
        ((topic_acl("t", Op.WRITE),), lambda r: produce_errors(r) == [E.NONE]),
    ]),
    "produce-unknown-topic-denied-first": Case(PRODUCE, 9, produce("nope"), [
        ((), lambda r: produce_errors(r) == [TOPIC_AUTH]),
        ((topic_acl("nope", Op.WRITE),),
         lambda r: produce_errors(r) == [E.UNKNOWN_TOPIC_OR_PARTITION]),
    ]),
    "produce-transactional": Case(PRODUCE, 9, produce(records=build_batch(
        [(None, b"x", [], 1)], producer_id=7, producer_epoch=0, base_sequence=0,
        is_transactional=True), transactional_id="tx"), [
        ((topic_acl("t", Op.WRITE),), lambda r: produce_errors(r) == [TXN_AUTH]),
        ((txn_acl("tx", Op.WRITE),), lambda r: produce_errors(r) not in ([TXN_AUTH],
                                                                      [TOPIC_AUTH])),
    ]),
    "produce-transactional-topic": Case(PRODUCE, 9, produce(records=build_batch(
        [(None, b"x", [], 1)], producer_id=7, producer_epoch=0, base_sequence=0,
        is_transactional=True), transactional_id="tx"), [
        ((txn_acl("tx", Op.WRITE),), lambda r: produce_errors(r) == [TOPIC_AUTH]),
    ]),
    "fetch": Case(FETCH, 12, fetch(), [
        ((), lambda r: fetch_errors(r) == [TOPIC_AUTH]),
        ((topic_acl("t", Op.DESCRIBE),), lambda r: fetch_errors(r) == [TOPIC_AUTH]),
        ((topic_acl("t", Op.READ),), lambda r: fetch_errors(r) == [E.NONE]
         and r.responses[0].partitions[0].records),
    ]),
    "fetch-follower": Case(FETCH, 12, fetch(replica_id=1), [
        ((topic_acl("t", Op.READ),), lambda r: fetch_errors(r) == [TOPIC_AUTH]),
        ((cluster_acl(Op.CLUSTER_ACTION),),
         lambda r: fetch_errors(r) == [E.NOT_LEADER_OR_FOLLOWER]),
    ]),
    "list-offsets": Case(LIST_OFFSETS, 7, list_offsets(), [
        ((), lambda r: [(p.error_code, p.offset, p.timestamp) for p in r.topics[0].partitions]
         == [(TOPIC_AUTH, -1, -1)]),
        ((topic_acl("t", Op.DESCRIBE),),
         lambda r: [p.error_code for p in r.topics[0].partitions] == [0]
         and r.topics[0].partitions[0].offset >= 3),
    ]),
    "metadata-named": Case(METADATA, 12, metadata("t"), [
        ((), lambda r: [(t.name, t.error_code, t.topic_id, t.partitions) for t in r.topics]
         == [("t", TOPIC_AUTH, ZERO_UUID, [])]),
        ((topic_acl("t", Op.DESCRIBE),), lambda r: r.topics[0].error_code == 0
         and len(r.topics[0].partitions) == 2),
    ]),
    "metadata-all": Case(METADATA, 12, metadata(all_topics=True), [
        ((), lambda r: r.topics == []),
        ((topic_acl("t", Op.READ),), lambda r: [t.name for t in r.topics] == ["t"]),
    ]),
    "metadata-auto-create": Case(METADATA, 9, metadata("auto1"), [
        ((topic_acl("auto1", Op.DESCRIBE),),
         lambda r: [(t.name, t.error_code) for t in r.topics] == [("auto1", TOPIC_AUTH)]),
        ((topic_acl("auto1", Op.CREATE),),
         lambda r: [(t.name, t.error_code) for t in r.topics] == [("auto1", E.NONE)]),
    ]),
    "metadata-authorized-operations": Case(METADATA, 10, metadata(
            "t", cluster_ops=True, topic_ops=True), [
        ((topic_acl("t", Op.READ),), lambda r: r.cluster_authorized_operations == 0
         and r.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)),
        ((cluster_acl(Op.DESCRIBE),),
         lambda r: r.cluster_authorized_operations == 1 << Op.DESCRIBE),
    ]),
    "offset-commit": Case(OFFSET_COMMIT, 8, offset_commit(), [
        ((topic_acl("t", Op.READ),), lambda r: commit_errors(r) == [GROUP_AUTH]),
        ((group_acl("g", Op.READ),), lambda r: commit_errors(r) == [E.NONE]),
    ]),
    "offset-commit-topic": Case(OFFSET_COMMIT, 8, offset_commit(), [
        ((group_acl("g", Op.READ),), lambda r: commit_errors(r) == [TOPIC_AUTH]),
    ]),
    "offset-fetch": Case(OFFSET_FETCH, 8, offset_fetch_v8(), [
        ((topic_acl("t", Op.DESCRIBE),), lambda r: group_of(r).error_code == GROUP_AUTH),
        ((group_acl("g", Op.DESCRIBE),), lambda r: group_of(r).error_code == 0 and [
            p.error_code for t in group_of(r).topics for p in t.partitions] == [0]),
    ]),
    "offset-fetch-topic": Case(OFFSET_FETCH, 8, offset_fetch_v8(), [
        ((group_acl("g", Op.DESCRIBE),), lambda r: [
            (p.error_code, p.committed_offset) for t in group_of(r).topics
            for p in t.partitions] == [(TOPIC_AUTH, -1)]),
    ]),
    "offset-fetch-v7": Case(OFFSET_FETCH, 7, m(OFFSET_FETCH, group_id="g", topics=None), [
        ((), lambda r: r.error_code == GROUP_AUTH),
        ((group_acl("g", Op.DESCRIBE),), lambda r: r.error_code == 0),
    ]),
    "find-coordinator-group": Case(FIND_COORDINATOR, 4, m(
            FIND_COORDINATOR, key_type=0, coordinator_keys=["g"]), [
        ((), lambda r: [(c.error_code, c.node_id, c.host, c.port) for c in r.coordinators]
         == [(GROUP_AUTH, -1, "", -1)]),
        ((group_acl("g", Op.DESCRIBE),), lambda r: r.coordinators[0].error_code == 0),
    ]),
    "find-coordinator-txn-v3": Case(FIND_COORDINATOR, 3, m(
            FIND_COORDINATOR, key_type=1, key="tx"), [
        ((), lambda r: (r.error_code, r.node_id) == (TXN_AUTH, -1)),
        ((txn_acl("tx", Op.DESCRIBE),), lambda r: r.error_code == 0),
    ]),
    "join-group": Case(JOIN_GROUP, 9, m(
            JOIN_GROUP, group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
            member_id="", protocol_type="consumer", protocols=[
                m(JOIN_GROUP, "JoinGroupRequestProtocol", name="range", metadata=b"")]), [
        ((), lambda r: r.error_code == GROUP_AUTH),
        ((group_acl("g", Op.READ),), lambda r: r.error_code == E.MEMBER_ID_REQUIRED),
    ]),
    "heartbeat": Case(HEARTBEAT, 4, m(HEARTBEAT, group_id="g", generation_id=1,
                                      member_id="m"), [
        ((group_acl("g", Op.DESCRIBE),), lambda r: r.error_code == GROUP_AUTH),
        ((group_acl("g", Op.READ),), lambda r: r.error_code not in (0, GROUP_AUTH)),
    ]),
    "leave-group": Case(LEAVE_GROUP, 5, m(LEAVE_GROUP, group_id="g", members=[
            m(LEAVE_GROUP, "MemberIdentity", member_id="m")]), [
        ((), lambda r: r.error_code == GROUP_AUTH),
        ((group_acl("g", Op.READ),), lambda r: r.error_code != GROUP_AUTH),
    ]),
    "sync-group": Case(SYNC_GROUP, 5, m(SYNC_GROUP, group_id="g", generation_id=1,
                                        member_id="m", protocol_type="consumer",
                                        protocol_name="range"), [
        ((), lambda r: r.error_code == GROUP_AUTH),
        ((group_acl("g", Op.READ),), lambda r: r.error_code not in (0, GROUP_AUTH)),
    ]),
    "describe-groups": Case(DESCRIBE_GROUPS, 5, m(DESCRIBE_GROUPS, groups=["g", "h"],
                                                  include_authorized_operations=True), [
        ((group_acl("h", Op.DESCRIBE),), lambda r: [(g.group_id, g.error_code)
                                                    for g in r.groups]
         == [("g", GROUP_AUTH), ("h", E.NONE)]
         and r.groups[1].authorized_operations == 1 << Op.DESCRIBE),
    ]),
    "create-topics": Case(CREATE_TOPICS, 7, create_topics("ct"), [
        ((), lambda r: [(t.name, t.error_code, t.error_message) for t in r.topics]
         == [("ct", TOPIC_AUTH, "Authorization failed.")]),
        ((topic_acl("ct", Op.CREATE),), lambda r: [
            (t.error_code, t.topic_config_error_code, t.num_partitions, t.configs)
            for t in r.topics] == [(0, TOPIC_AUTH, -1, [])]),
    ]),
    "create-topics-describable": Case(CREATE_TOPICS, 7, create_topics("ct2"), [
        ((cluster_acl(Op.CREATE), topic_acl("ct2", Op.DESCRIBE_CONFIGS)), lambda r: [
            (t.error_code, t.topic_config_error_code, t.num_partitions) for t in r.topics]
         == [(0, 0, 1)] and r.topics[0].configs),
    ]),
    "delete-topics-by-name": Case(DELETE_TOPICS, 6, delete_topics("u"), [
        ((), lambda r: [(t.name, t.error_code) for t in r.responses] == [("u", TOPIC_AUTH)]),
        ((topic_acl("u", Op.DESCRIBE),),
         lambda r: [t.error_code for t in r.responses] == [TOPIC_AUTH]),
    ]),
    "delete-topics-missing": Case(DELETE_TOPICS, 6, delete_topics("missing"), [
        ((), lambda r: [t.error_code for t in r.responses] == [TOPIC_AUTH]),
        ((topic_acl("missing", Op.DESCRIBE),),
         lambda r: [t.error_code for t in r.responses] == [E.UNKNOWN_TOPIC_OR_PARTITION]),
    ]),
    "delete-records": Case(DELETE_RECORDS, 2, delete_records(), [
        ((topic_acl("t", Op.WRITE),), lambda r: [
            (p.error_code, p.low_watermark) for t in r.topics for p in t.partitions]
         == [(TOPIC_AUTH, -1)]),
        ((topic_acl("t", Op.DELETE),), lambda r: [
            p.error_code for t in r.topics for p in t.partitions] == [0]),
    ]),
    "init-producer-id-idempotent": Case(INIT_PRODUCER_ID, 5, m(
            INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1), [
        ((), lambda r: (r.error_code, r.producer_id) == (CLUSTER_AUTH, -1)),
        ((topic_acl("u", Op.WRITE),), lambda r: r.error_code == 0 and r.producer_id >= 0),
    ]),
    "init-producer-id-idempotent-cluster": Case(INIT_PRODUCER_ID, 5, m(
            INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1), [
        ((cluster_acl(Op.IDEMPOTENT_WRITE),), lambda r: r.error_code == 0),
    ]),
    "init-producer-id-transactional": Case(INIT_PRODUCER_ID, 5, m(
            INIT_PRODUCER_ID, transactional_id="tx-init", transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1), [
        ((cluster_acl(Op.IDEMPOTENT_WRITE), topic_acl("t", Op.WRITE)),
         lambda r: r.error_code == TXN_AUTH),
        ((txn_acl("tx-init", Op.WRITE),), lambda r: r.error_code == 0),
    ]),
    "offset-for-leader-epoch": Case(OFFSET_FOR_LEADER_EPOCH, 4, epochs(), [
        ((), lambda r: [p.error_code for t in r.topics for p in t.partitions] == [TOPIC_AUTH]),
        ((topic_acl("t", Op.DESCRIBE),),
         lambda r: [p.error_code for t in r.topics for p in t.partitions] == [0]),
    ]),
    "offset-for-leader-epoch-cluster": Case(OFFSET_FOR_LEADER_EPOCH, 4, epochs(), [
        ((cluster_acl(Op.CLUSTER_ACTION),),
         lambda r: [p.error_code for t in r.topics for p in t.partitions] == [0]),
    ]),
    "add-partitions-v3": Case(ADD_PARTITIONS_TO_TXN, 3, add_partitions_v3(topics=("t", "u")), [
        ((topic_acl("t", Op.WRITE),), lambda r: set(add_partitions_errors(r).values())
         == {TXN_AUTH}),
        ((txn_acl("tx", Op.WRITE),), lambda r: add_partitions_errors(r)
         == {("t", 0): E.OPERATION_NOT_ATTEMPTED, ("u", 0): TOPIC_AUTH}),
    ]),
    "add-partitions-v4": Case(ADD_PARTITIONS_TO_TXN, 4, add_partitions_v4(), [
        ((txn_acl("tx", Op.WRITE), topic_acl("t", Op.WRITE)),
         lambda r: (r.error_code, r.results_by_transaction) == (CLUSTER_AUTH, [])),
        ((cluster_acl(Op.CLUSTER_ACTION),), lambda r: r.error_code == 0),
    ]),
    "add-offsets": Case(ADD_OFFSETS_TO_TXN, 3, m(ADD_OFFSETS_TO_TXN, transactional_id="tx",
                                                 producer_id=1, producer_epoch=0,
                                                 group_id="g"), [
        ((group_acl("g", Op.READ),), lambda r: r.error_code == TXN_AUTH),
        ((txn_acl("tx", Op.WRITE),), lambda r: r.error_code not in (TXN_AUTH, GROUP_AUTH)),
    ]),
    "add-offsets-group": Case(ADD_OFFSETS_TO_TXN, 3, m(ADD_OFFSETS_TO_TXN, transactional_id="tx",
                                                       producer_id=1, producer_epoch=0,
                                                       group_id="g"), [
        ((txn_acl("tx", Op.WRITE),), lambda r: r.error_code == GROUP_AUTH),
    ]),
    "end-txn": Case(END_TXN, 3, m(END_TXN, transactional_id="tx", producer_id=1,
                                  producer_epoch=0, committed=True), [
        ((txn_acl("tx", Op.DESCRIBE),), lambda r: r.error_code == TXN_AUTH),
        ((txn_acl("tx", Op.WRITE),), lambda r: r.error_code != TXN_AUTH),
    ]),
    "write-txn-markers": Case(WRITE_TXN_MARKERS, 1, write_markers(), [
        ((topic_acl("t", Op.WRITE), cluster_acl(Op.IDEMPOTENT_WRITE)),
         lambda r: marker_errors(r) == [CLUSTER_AUTH]),
        ((cluster_acl(Op.CLUSTER_ACTION),), lambda r: marker_errors(r) != [CLUSTER_AUTH]),
    ]),
    "write-txn-markers-alter": Case(WRITE_TXN_MARKERS, 1, write_markers(), [
        ((cluster_acl(Op.ALTER),), lambda r: marker_errors(r) != [CLUSTER_AUTH]),
    ]),
    "txn-offset-commit": Case(TXN_OFFSET_COMMIT, 3, txn_offset_commit(), [
        ((group_acl("g", Op.READ), topic_acl("t", Op.READ)),
         lambda r: commit_errors(r) == [TXN_AUTH]),
        ((txn_acl("tx", Op.WRITE),), lambda r: commit_errors(r) not in (
            [TXN_AUTH], [GROUP_AUTH], [TOPIC_AUTH])),
    ]),
    "txn-offset-commit-group-topic": Case(TXN_OFFSET_COMMIT, 3, txn_offset_commit(), [
        ((txn_acl("tx", Op.WRITE), topic_acl("t", Op.READ)),
         lambda r: commit_errors(r) == [GROUP_AUTH]),
        ((group_acl("g", Op.READ),), lambda r: commit_errors(r) != [GROUP_AUTH]),
    ]),
    "txn-offset-commit-topic": Case(TXN_OFFSET_COMMIT, 3, txn_offset_commit(), [
        ((txn_acl("tx", Op.WRITE), group_acl("g", Op.READ)),
         lambda r: commit_errors(r) == [TOPIC_AUTH]),
    ]),
    "describe-configs-topic": Case(DESCRIBE_CONFIGS, 4, describe_configs(CONFIG_TOPIC, "t"), [
        ((topic_acl("t", Op.DESCRIBE),), lambda r: [(x.error_code, x.configs)
                                                    for x in r.results] == [(TOPIC_AUTH, [])]),
        ((topic_acl("t", Op.DESCRIBE_CONFIGS),),
         lambda r: r.results[0].error_code == 0 and r.results[0].configs),
    ]),
    "describe-configs-broker": Case(DESCRIBE_CONFIGS, 4, describe_configs(CONFIG_BROKER, "0"), [
        ((topic_acl("t", Op.DESCRIBE_CONFIGS),),
         lambda r: r.results[0].error_code == CLUSTER_AUTH),
        ((cluster_acl(Op.DESCRIBE_CONFIGS),), lambda r: r.results[0].error_code == 0),
    ]),
    "alter-configs": Case(ALTER_CONFIGS, 2, alter_configs(), [
        ((topic_acl("t", Op.DESCRIBE_CONFIGS),),
         lambda r: [x.error_code for x in r.responses] == [TOPIC_AUTH]),
        ((topic_acl("t", Op.ALTER_CONFIGS),),
         lambda r: [x.error_code for x in r.responses] == [0]),
    ]),
    "incremental-alter-configs": Case(INCREMENTAL_ALTER_CONFIGS, 1,
                                      incremental_alter_configs(), [
        ((cluster_acl(Op.ALTER_CONFIGS),),
         lambda r: [x.error_code for x in r.responses] == [TOPIC_AUTH]),
        ((topic_acl("t", Op.ALTER_CONFIGS),),
         lambda r: [x.error_code for x in r.responses] == [0]),
    ]),
    "incremental-alter-configs-broker": Case(INCREMENTAL_ALTER_CONFIGS, 1,
                                             incremental_alter_configs(
                                                 CONFIG_BROKER, "0", "log.retention.ms"), [
        ((topic_acl("t", Op.ALTER_CONFIGS),),
         lambda r: [x.error_code for x in r.responses] == [CLUSTER_AUTH]),
        ((cluster_acl(Op.ALTER_CONFIGS),),
         lambda r: [x.error_code for x in r.responses] != [CLUSTER_AUTH]),
    ]),
    "describe-log-dirs": Case(DESCRIBE_LOG_DIRS, 4, m(DESCRIBE_LOG_DIRS, topics=None), [
        ((), lambda r: (r.error_code, r.results) == (CLUSTER_AUTH, [])),
        ((cluster_acl(Op.DESCRIBE),), lambda r: r.error_code == 0 and r.results),
    ]),
    "create-partitions": Case(CREATE_PARTITIONS, 3, m(
            CREATE_PARTITIONS, validate_only=True, timeout_ms=30_000, topics=[
                m(CREATE_PARTITIONS, "CreatePartitionsTopic", name="t", count=3,
                  assignments=None)]), [
        ((topic_acl("t", Op.DESCRIBE),),
         lambda r: [x.error_code for x in r.results] == [TOPIC_AUTH]),
        ((topic_acl("t", Op.ALTER),), lambda r: [x.error_code for x in r.results] == [0]),
    ]),
    "delete-groups": Case(DELETE_GROUPS, 2, m(DELETE_GROUPS, groups_names=["nog"]), [
        ((group_acl("nog", Op.READ),),
         lambda r: [x.error_code for x in r.results] == [GROUP_AUTH]),
        ((group_acl("nog", Op.DELETE),),
         lambda r: [x.error_code for x in r.results] == [E.GROUP_ID_NOT_FOUND]),
    ]),
    "offset-delete": Case(OFFSET_DELETE, 0, m(OFFSET_DELETE, group_id="nog", topics=[
            m(OFFSET_DELETE, "OffsetDeleteRequestTopic", name="t", partitions=[
                m(OFFSET_DELETE, "OffsetDeleteRequestPartition", partition_index=0)])]), [
        ((group_acl("nog", Op.READ), topic_acl("t", Op.READ)),
         lambda r: (r.error_code, r.topics) == (GROUP_AUTH, [])),
        ((group_acl("nog", Op.DELETE),), lambda r: r.error_code != GROUP_AUTH),
    ]),
    "offset-delete-topic": Case(OFFSET_DELETE, 0, m(OFFSET_DELETE, group_id="g", topics=[
            m(OFFSET_DELETE, "OffsetDeleteRequestTopic", name="t", partitions=[
                m(OFFSET_DELETE, "OffsetDeleteRequestPartition", partition_index=0)])]), [
        ((group_acl("g", Op.DELETE),), lambda r: r.error_code != 0 or [
            p.error_code for t in r.topics for p in t.partitions] == [TOPIC_AUTH]),
    ]),
    "describe-cluster": Case(DESCRIBE_CLUSTER, 1, m(
            DESCRIBE_CLUSTER, include_cluster_authorized_operations=True, endpoint_type=1), [
        ((cluster_acl(Op.IDEMPOTENT_WRITE),),
         lambda r: (r.error_code, r.cluster_authorized_operations) == (0, 0)),
        ((cluster_acl(Op.DESCRIBE),), lambda r: r.cluster_authorized_operations
         == (1 << Op.DESCRIBE) | (1 << Op.IDEMPOTENT_WRITE)),
    ]),
    "describe-producers": Case(DESCRIBE_PRODUCERS, 0, m(DESCRIBE_PRODUCERS, topics=[
            m(DESCRIBE_PRODUCERS, "TopicRequest", name="t", partition_indexes=[0])]), [
        ((topic_acl("t", Op.DESCRIBE),),
         lambda r: [p.error_code for t in r.topics for p in t.partitions] == [TOPIC_AUTH]),
        ((topic_acl("t", Op.READ),),
         lambda r: [p.error_code for t in r.topics for p in t.partitions] == [0]),
    ]),
    "describe-transactions": Case(DESCRIBE_TRANSACTIONS, 0, m(
            DESCRIBE_TRANSACTIONS, transactional_ids=["tx-none"]), [
        ((), lambda r: [s.error_code for s in r.transaction_states] == [TXN_AUTH]),
        ((txn_acl("tx-none", Op.DESCRIBE),), lambda r: [
            s.error_code for s in r.transaction_states] == [E.TRANSACTIONAL_ID_NOT_FOUND]),
    ]),
    "api-versions": Case(18, 3, m(18, client_software_name="x", client_software_version="1"), [
        ((), lambda r: r.error_code == 0),
    ]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_authorization(broker, name):
    case = CASES[name]
    for stage, (grants, check) in enumerate(case.stages):
        if grants:
            grant(broker, *grants)
        response = send(broker, case.api_key, case.version, case.request)
        assert check(response), f"{name} stage {stage}: {response!r}"


def test_list_groups_shows_only_describable_groups(broker):
    grant(broker, group_acl("lg1", Op.READ), group_acl("lg2", Op.READ), topic_acl("t", Op.READ))
    for group in ("lg1", "lg2"):
        assert commit_errors(send(broker, OFFSET_COMMIT, 8, offset_commit(group))) == [0]
    revoke_all(broker)
    request = m(LIST_GROUPS, states_filter=[], types_filter=[])

    def listed():
        response = send(broker, LIST_GROUPS, 5, request)
        assert response.error_code == 0
        return {g.group_id for g in response.groups} & {"lg1", "lg2"}

    assert listed() == set()
    grant(broker, group_acl("lg2", Op.DESCRIBE))
    assert listed() == {"lg2"}
    grant(broker, cluster_acl(Op.DESCRIBE))
    assert listed() == {"lg1", "lg2"}


def test_offset_fetch_all_topics_leaves_out_undescribable(broker):
    grant(broker, group_acl("of", Op.READ), topic_acl("t", Op.READ), topic_acl("u", Op.READ))
    for topic in ("t", "u"):
        assert commit_errors(send(broker, OFFSET_COMMIT, 8, offset_commit("of", topic))) == [0]
    revoke_all(broker)
    grant(broker, group_acl("of", Op.DESCRIBE), topic_acl("u", Op.DESCRIBE))
    group = group_of(send(broker, OFFSET_FETCH, 8, offset_fetch_v8("of", topics=None)))
    assert group.error_code == 0
    assert [t.name for t in group.topics] == ["u"]


def test_list_transactions_shows_only_describable_ids(broker):
    grant(broker, txn_acl("lt-1", Op.WRITE), txn_acl("lt-2", Op.WRITE))
    for tid in ("lt-1", "lt-2"):
        response = send(broker, INIT_PRODUCER_ID, 5, m(
            INIT_PRODUCER_ID, transactional_id=tid, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        assert response.error_code == 0
    revoke_all(broker)

    def listed():
        response = send(broker, LIST_TRANSACTIONS, 1, m(
            LIST_TRANSACTIONS, state_filters=[], producer_id_filters=[], duration_filter=-1))
        return {s.transactional_id for s in response.transaction_states} & {"lt-1", "lt-2"}

    assert listed() == set()
    grant(broker, acl(R.TRANSACTIONAL_ID, "lt-", Op.DESCRIBE, pattern=PatternType.PREFIXED))
    assert listed() == {"lt-1", "lt-2"}


def test_delete_topic_by_id_hides_the_name(broker):
    make_topic(broker, "byid", 1)
    topic_id = broker.broker.log_manager.topics["byid"].topic_id
    request = delete_topics(None, topic_id)

    def result():
        (r,) = send(broker, DELETE_TOPICS, 6, request).responses
        return r.name, r.error_code

    assert result() == (None, TOPIC_AUTH)
    grant(broker, topic_acl("byid", Op.DESCRIBE))
    assert result() == ("byid", TOPIC_AUTH)
    grant(broker, topic_acl("byid", Op.DELETE))
    assert result() == ("byid", E.NONE)
    assert "byid" not in broker.broker.log_manager.topics


def test_delete_topic_with_cluster_delete(broker):
    make_topic(broker, "gone", 1)
    grant(broker, cluster_acl(Op.DELETE))
    (r,) = send(broker, DELETE_TOPICS, 6, delete_topics("gone")).responses
    assert (r.name, r.error_code) == ("gone", E.NONE)


CONTROL_RECORD = (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", [], 1)  # COMMIT


def test_control_batch_through_produce_is_refused(broker):
    marker = build_batch([CONTROL_RECORD], producer_id=5, producer_epoch=0,
                         is_transactional=True, is_control=True)
    grant(broker, topic_acl("t", Op.WRITE))
    response = send(broker, PRODUCE, 9, produce(records=marker, transactional_id="tx"))
    # Write on the transactional id is missing: the whole request is refused first
    assert produce_errors(response) == [TXN_AUTH]
    # with every permission, a client's control batch never reaches the log (Kafka's
    # LogValidator: "Clients are not allowed to write control records")
    grant(broker, cluster_acl(Op.ALL))
    bare = build_batch([CONTROL_RECORD], producer_id=5, producer_epoch=0, is_control=True)
    response = send(broker, PRODUCE, 9, produce(records=bare))
    assert produce_errors(response) == [E.INVALID_RECORD]


def test_internal_topics_need_cluster_action(broker):
    """Beyond Kafka's admin client id, writing an internal topic needs ClusterAction."""
    grant(broker, topic_acl("__consumer_offsets", Op.WRITE))
    keyed = records_batch([b"x"], keys=[b"not-a-group-key"])
    with KafkaWire.connect(broker.bootstrap, client_id="__admin_client") as wire:
        response = wire.request(PRODUCE, 9, produce("__consumer_offsets", keyed))
        assert produce_errors(response) == [E.INVALID_TOPIC_EXCEPTION]
    grant(broker, cluster_acl(Op.CLUSTER_ACTION))
    with KafkaWire.connect(broker.bootstrap, client_id="__admin_client") as wire:
        response = wire.request(PRODUCE, 9, produce("__consumer_offsets", keyed))
        assert produce_errors(response) == [E.NONE]
