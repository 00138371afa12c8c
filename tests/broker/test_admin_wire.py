"""Admin APIs on the raw wire: version differences and the edge cases clients never send."""

from __future__ import annotations

import shutil

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.primitives import ZERO_UUID
from tests.kafka_wire import KafkaWire, fetch_request, message, records_batch

CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, ALTER_CONFIGS = 19, 20, 32, 33
DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = 35, 37, 44
DESCRIBE_CLUSTER, GET_TELEMETRY_SUBSCRIPTIONS = 60, 71
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


@pytest.fixture
def wire(bootstrap):
    with KafkaWire.connect(bootstrap) as w:
        yield w


def creatable(name: str, partitions: int = 1, rf: int = 1, *, configs=None, assignments=None):
    return message(CREATE_TOPICS, "request", "CreatableTopic", name=name,
                   num_partitions=partitions, replication_factor=rf,
                   configs=[message(CREATE_TOPICS, "request", "CreatableTopicConfig",
                                    name=k, value=v) for k, v in (configs or {}).items()],
                   assignments=[message(CREATE_TOPICS, "request", "CreatableReplicaAssignment",
                                        partition_index=i, broker_ids=ids)
                                for i, ids in (assignments or [])])


def create_topics(wire, *topics, version: int = 7, validate_only: bool = False):
    req = message(CREATE_TOPICS, "request", topics=list(topics), timeout_ms=10_000,
                  validate_only=validate_only)
    return wire.request(CREATE_TOPICS, version, req).topics


def codes(results) -> list[int]:
    return [r.error_code for r in results]


# ------------------------------------------------------------------------------ CreateTopics


def test_create_v7_returns_id_counts_and_configs(wire, broker):
    (result,) = create_topics(wire, creatable("t7", 3, configs={"retention.ms": "5000"}))
    assert result.error_code == Error.NONE
    info = broker.broker.log_manager.topics["t7"]
    assert result.topic_id == info.topic_id != ZERO_UUID
    assert (result.num_partitions, result.replication_factor) == (3, 1)
    configs = {c.name: c for c in result.configs}
    assert [c.name for c in result.configs] == sorted(configs)
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("5000", 1)
    assert configs["segment.bytes"].config_source == 5
    assert not any(c.read_only or c.is_sensitive for c in result.configs)


def test_create_v4_has_no_v5_fields(wire):
    (result,) = create_topics(wire, creatable("t4", 2), version=4)
    assert result.error_code == Error.NONE
    assert (result.num_partitions, result.replication_factor, result.configs) == (-1, -1, [])


def test_create_count_checks(wire, broker):
    results = create_topics(
        wire, creatable("zero", 0), creatable("minus-two", -2), creatable("rf-zero", 1, 0),
        creatable("rf-minus-two", 1, -2), creatable("dup"), creatable("dup", 2))
    assert codes(results) == [Error.INVALID_PARTITIONS, Error.INVALID_PARTITIONS,
                              Error.INVALID_REPLICATION_FACTOR,
                              Error.INVALID_REPLICATION_FACTOR, Error.INVALID_REQUEST,
                              Error.INVALID_REQUEST]
    assert results[4].error_message == "Duplicate topic name."
    assert not broker.broker.log_manager.topics


def test_create_manual_assignment_checks(wire, broker):
    results = create_topics(
        wire,
        creatable("counts-set", 2, -1, assignments=[(0, [0])]),
        creatable("rf-set", -1, 1, assignments=[(0, [0])]),
        creatable("gap", -1, -1, assignments=[(0, [0]), (2, [0])]),
        creatable("twice", -1, -1, assignments=[(0, [0]), (0, [0])]),
        creatable("empty", -1, -1, assignments=[(0, [])]),
        creatable("repeat", -1, -1, assignments=[(0, [0, 0])]),
        creatable("ok", -1, -1, assignments=[(1, [0]), (0, [0])]))
    assert codes(results) == [Error.INVALID_REQUEST, Error.INVALID_REQUEST,
                              Error.INVALID_REPLICA_ASSIGNMENT,
                              Error.INVALID_REPLICA_ASSIGNMENT,
                              Error.INVALID_REPLICA_ASSIGNMENT,
                              Error.INVALID_REPLICA_ASSIGNMENT, Error.NONE]
    assert results[-1].num_partitions == 2
    assert set(broker.broker.log_manager.topics) == {"ok"}


def test_create_null_config_value_and_validate_only(wire, broker):
    (null,) = create_topics(wire, creatable("nulls", configs={"retention.ms": None}))
    assert null.error_code == Error.INVALID_CONFIG
    assert "retention.ms" in null.error_message
    (dry,) = create_topics(wire, creatable("dry", 4, configs={"retention.ms": "10"}),
                           validate_only=True)
    assert dry.error_code == Error.NONE
    assert (dry.topic_id, dry.num_partitions) == (ZERO_UUID, 4)
    assert {c.name: c.value for c in dry.configs}["retention.ms"] == "10"
    assert not broker.broker.log_manager.topics


def test_oversized_request_is_a_policy_violation(wire, broker):
    results = create_topics(wire, creatable("small", 1), creatable("huge", 10_001))
    assert codes(results) == [Error.POLICY_VIOLATION, Error.POLICY_VIOLATION]
    assert not broker.broker.log_manager.topics


# ------------------------------------------------------------------------------ DeleteTopics


def delete_request(*, names=None, states=None):
    return message(DELETE_TOPICS, "request", topic_names=names or [], timeout_ms=10_000,
                   topics=[message(DELETE_TOPICS, "request", "DeleteTopicState", name=n,
                                   topic_id=i) for n, i in (states or [])])


def test_delete_by_id_and_the_v6_checks(wire, broker):
    create_topics(wire, creatable("a"), creatable("b"), creatable("c"))
    topics = broker.broker.log_manager.topics
    a_id, b_id, c_id = topics["a"].topic_id, topics["b"].topic_id, topics["c"].topic_id
    unknown = type(a_id)(int=12345)
    req = delete_request(states=[(None, a_id), (None, unknown), (None, ZERO_UUID),
                                 ("b", b_id), ("c", ZERO_UUID), (None, c_id)])
    results = wire.request(DELETE_TOPICS, 6, req).responses
    assert [(r.name, r.topic_id, r.error_code) for r in results] == [
        ("a", a_id, Error.NONE),
        (None, unknown, Error.UNKNOWN_TOPIC_ID),
        (None, ZERO_UUID, Error.INVALID_REQUEST),
        ("b", b_id, Error.INVALID_REQUEST),
        ("c", c_id, Error.INVALID_REQUEST),  # named and given by id: neither is deleted
        (None, c_id, Error.INVALID_REQUEST),
    ]
    assert set(broker.broker.log_manager.topics) == {"b", "c"}


def test_delete_answers_a_fetch_parked_on_the_topic(wire, bootstrap):
    """A long-poll fetch waiting on a topic that gets deleted is answered at once with
    UNKNOWN_TOPIC_OR_PARTITION, not after its max wait (here far beyond the socket timeout,
    so a fetch left parked fails the test)."""
    create_topics(wire, creatable("gone"))
    with KafkaWire.connect(bootstrap) as fetcher:
        fetcher.sock.settimeout(20)
        fetcher.send(1, 12, fetch_request([("gone", 0, 0)], max_wait_ms=600_000))
        # the fetch is parked before the deletion: a metadata round trip on its connection
        # would queue behind it, so give the broker a moment on the other one first
        wire.request(18, 3, message(18, "request"))
        results = wire.request(DELETE_TOPICS, 5, delete_request(names=["gone"])).responses
        assert [r.error_code for r in results] == [Error.NONE]
        fetched = fetcher.receive()
    assert fetched.responses[0].partitions[0].error_code == Error.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_duplicate_names_by_version(wire, broker):
    create_topics(wire, creatable("x"))
    results = wire.request(DELETE_TOPICS, 4, delete_request(names=["x", "x"])).responses
    assert codes(results) == [Error.INVALID_REQUEST, Error.INVALID_REQUEST]
    assert "x" in broker.broker.log_manager.topics
    results = wire.request(DELETE_TOPICS, 1, delete_request(names=["x", "nope"])).responses
    assert codes(results) == [Error.NONE, Error.UNKNOWN_TOPIC_OR_PARTITION]


def test_delete_disabled_code_depends_on_version(tmp_path):
    with BrokerThread(tmp_path / "data", {"delete.topic.enable": "false"}) as b:
        with KafkaWire.connect(b.bootstrap) as w:
            create_topics(w, creatable("kept"))
            v2 = w.request(DELETE_TOPICS, 2, delete_request(names=["kept"])).responses
            v5 = w.request(DELETE_TOPICS, 5, delete_request(names=["kept"])).responses
        assert codes(v2) == [Error.INVALID_REQUEST]
        assert codes(v5) == [Error.TOPIC_DELETION_DISABLED]
        assert "kept" in b.broker.log_manager.topics


# -------------------------------------------------------------------------- CreatePartitions


def create_partitions(wire, *topics, validate_only=False, version=3):
    req = message(CREATE_PARTITIONS, "request", timeout_ms=10_000, validate_only=validate_only,
                  topics=[message(CREATE_PARTITIONS, "request", "CreatePartitionsTopic",
                                  name=name, count=count,
                                  assignments=None if assignments is None else [
                                      message(CREATE_PARTITIONS, "request",
                                              "CreatePartitionsAssignment", broker_ids=ids)
                                      for ids in assignments])
                          for name, count, assignments in topics])
    return wire.request(CREATE_PARTITIONS, version, req).results


def test_create_partitions_checks(wire, broker):
    create_topics(wire, creatable("g", 2), creatable("__transaction_state", 1))
    results = create_partitions(wire, ("g", 4, [[0]]), ("g2", 3, None),
                                ("__transaction_state", 3, None))
    assert codes(results) == [Error.INVALID_REPLICA_ASSIGNMENT,
                              Error.UNKNOWN_TOPIC_OR_PARTITION, Error.INVALID_REQUEST]
    results = create_partitions(wire, ("g", 4, None), ("g", 5, None), version=0)
    assert codes(results) == [Error.INVALID_REQUEST, Error.INVALID_REQUEST]
    results = create_partitions(wire, ("g", 20_000, None))
    assert codes(results) == [Error.POLICY_VIOLATION]
    assert broker.broker.log_manager.topics["g"].num_partitions == 2
    assert codes(create_partitions(wire, ("g", 4, [[0], [0]]))) == [Error.NONE]
    assert broker.broker.log_manager.topics["g"].num_partitions == 4


# --------------------------------------------------------------------------- DescribeConfigs


def describe_configs(wire, *resources, version=4, synonyms=False, documentation=False):
    req = message(DESCRIBE_CONFIGS, "request", include_synonyms=synonyms,
                  include_documentation=documentation,
                  resources=[message(DESCRIBE_CONFIGS, "request", "DescribeConfigsResource",
                                     resource_type=t, resource_name=n, configuration_keys=k)
                             for t, n, k in resources])
    return wire.request(DESCRIBE_CONFIGS, version, req).results


def test_describe_configs_types_docs_and_filter(wire):
    create_topics(wire, creatable("d", configs={"cleanup.policy": "compact"}))
    (result,) = describe_configs(wire, (TOPIC, "d", ["retention.ms", "cleanup.policy", "nope"]),
                                 synonyms=True, documentation=True)
    assert result.error_code == Error.NONE
    configs = {c.name: c for c in result.configs}
    assert set(configs) == {"retention.ms", "cleanup.policy"}
    assert configs["retention.ms"].config_type == 5  # LONG
    assert configs["cleanup.policy"].config_type == 7  # LIST
    assert configs["retention.ms"].documentation
    assert [(s.name, s.value, s.source) for s in configs["cleanup.policy"].synonyms] == [
        ("cleanup.policy", "compact", 1), ("log.cleanup.policy", "delete", 5)]
    (v1,) = describe_configs(wire, (TOPIC, "d", None), version=1)
    assert all(c.synonyms == [] for c in v1.configs)
    assert {c.name: c.config_source for c in v1.configs}["cleanup.policy"] == 1
    (plain,) = describe_configs(wire, (TOPIC, "d", []), version=3)
    assert all(c.documentation is None and not c.synonyms for c in plain.configs)


def test_describe_configs_resource_errors(wire):
    results = describe_configs(wire, (BROKER, "7", None), (BROKER, "zero", None),
                               (BROKER, "", None), (BROKER_LOGGER, "0", None), (99, "x", None),
                               (TOPIC, "", None), (TOPIC, "absent", None))
    assert codes(results) == [Error.INVALID_REQUEST, Error.INVALID_REQUEST, Error.NONE,
                              Error.INVALID_REQUEST, Error.INVALID_REQUEST,
                              Error.INVALID_TOPIC_EXCEPTION, Error.UNKNOWN_TOPIC_OR_PARTITION]
    assert results[2].configs == []
    assert [(r.resource_type, r.resource_name) for r in results][:2] == [(4, "7"), (4, "zero")]


def test_describe_broker_synonyms_and_types(tmp_path):
    with (BrokerThread(tmp_path / "data", {"num.partitions": "6"}) as b,
          KafkaWire.connect(b.bootstrap) as w):
        (result,) = describe_configs(w, (BROKER, "0", ["num.partitions", "log.retention.ms",
                                                       "auto.create.topics.enable"]),
                                     synonyms=True)
    configs = {c.name: c for c in result.configs}
    assert [(s.value, s.source) for s in configs["num.partitions"].synonyms] == [("6", 4),
                                                                                ("1", 5)]
    assert configs["num.partitions"].config_type == 3  # INT
    assert configs["log.retention.ms"].config_type == 5  # LONG
    assert configs["auto.create.topics.enable"].config_type == 1  # BOOLEAN
    # log.retention.ms is one of Kafka's dynamic broker configs
    assert {n for n, c in configs.items() if c.read_only} == {"num.partitions",
                                                               "auto.create.topics.enable"}


# ------------------------------------------------------------------------------ AlterConfigs


def alter_configs(wire, *resources, validate_only=False, version=2):
    req = message(ALTER_CONFIGS, "request", validate_only=validate_only, resources=[
        message(ALTER_CONFIGS, "request", "AlterConfigsResource", resource_type=t,
                resource_name=n, configs=[message(ALTER_CONFIGS, "request", "AlterableConfig",
                                                  name=k, value=v) for k, v in pairs])
        for t, n, pairs in resources])
    return wire.request(ALTER_CONFIGS, version, req).responses


def test_alter_configs_checks(wire, broker):
    create_topics(wire, creatable("a", configs={"retention.ms": "1"}), creatable("b"))
    results = alter_configs(
        wire, (TOPIC, "a", [("segment.ms", "1000")]), (TOPIC, "a", []),
        (TOPIC, "b", [("retention.ms", None)]),
        (TOPIC, "b", [("retention.ms", "1"), ("retention.ms", "2")]),
        (99, "x", []), (BROKER, "0", []), (BROKER, "", [("num.partitions", "2")]),
        (BROKER, "1", []), (TOPIC, "", [("retention.ms", "1")]))
    assert codes(results) == [Error.INVALID_REQUEST, Error.INVALID_REQUEST,
                              Error.INVALID_REQUEST, Error.INVALID_REQUEST,
                              Error.INVALID_REQUEST, Error.NONE, Error.INVALID_REQUEST,
                              Error.INVALID_REQUEST, Error.INVALID_REQUEST]
    assert results[0].error_message == "Each resource must appear at most once."
    assert "dynamically" in results[6].error_message
    logs = broker.broker.log_manager
    assert (logs.topics["a"].configs, logs.topics["b"].configs) == ({"retention.ms": "1"}, {})

    assert codes(alter_configs(wire, (TOPIC, "a", [("segment.ms", "1000")]),
                               validate_only=True)) == [Error.NONE]
    assert logs.topics["a"].configs == {"retention.ms": "1"}
    assert codes(alter_configs(wire, (TOPIC, "a", [("segment.ms", "1000")]),
                               version=0)) == [Error.NONE]
    assert logs.topics["a"].configs == {"segment.ms": "1000"}


def incremental(wire, topic, *ops, validate_only=False):
    req = message(INCREMENTAL_ALTER_CONFIGS, "request", validate_only=validate_only, resources=[
        message(INCREMENTAL_ALTER_CONFIGS, "request", "AlterConfigsResource",
                resource_type=TOPIC, resource_name=topic,
                configs=[message(INCREMENTAL_ALTER_CONFIGS, "request", "AlterableConfig",
                                 name=k, config_operation=o, value=v) for k, o, v in ops])])
    return wire.request(INCREMENTAL_ALTER_CONFIGS, 1, req).responses[0]


def test_incremental_request_checks(wire, broker):
    create_topics(wire, creatable("i", configs={"retention.ms": "1"}))
    assert incremental(wire, "i", ("retention.ms", 9, "1")).error_code == Error.INVALID_REQUEST
    assert incremental(wire, "i", ("retention.ms", 0, None)).error_code == Error.INVALID_REQUEST
    assert incremental(wire, "i", ("cleanup.policy", 2, None)).error_code == Error.INVALID_REQUEST
    assert broker.broker.log_manager.topics["i"].configs == {"retention.ms": "1"}
    assert incremental(wire, "i", ("retention.ms", 1, None)).error_code == Error.NONE
    # APPEND starts from the default list; APPEND of a present item adds nothing
    assert incremental(wire, "i", ("cleanup.policy", 2, "delete,compact")).error_code == 0
    assert broker.broker.log_manager.topics["i"].configs == {"cleanup.policy": "delete,compact"}


# -------------------------------------------------------------- cluster, log dirs, telemetry


def test_describe_cluster_versions(wire, broker):
    def ask(version, **fields):
        return wire.request(DESCRIBE_CLUSTER, version, message(DESCRIBE_CLUSTER, "request",
                                                               **fields))

    r = ask(1)
    assert (r.error_code, r.cluster_id, r.controller_id) == (0, broker.broker.cluster_id, 0)
    assert [(n.broker_id, n.host, n.port) for n in r.brokers] == [
        (0, "127.0.0.1", broker.broker.port)]
    assert r.cluster_authorized_operations == -(2**31)
    assert ask(0, include_cluster_authorized_operations=True).cluster_authorized_operations \
        == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
    assert ask(1, endpoint_type=2).error_code == Error.MISMATCHED_ENDPOINT_TYPE
    assert ask(1, endpoint_type=7).error_code == Error.UNSUPPORTED_ENDPOINT_TYPE


def test_describe_log_dirs(wire, broker):
    create_topics(wire, creatable("sized", 2), creatable("other"))
    plog = broker.broker.log_manager.get_partition("sized", 1)

    async def append():
        plog.append(records_batch([b"x" * 100, b"y" * 100]))

    broker.call(append())
    req = message(DESCRIBE_LOG_DIRS, "request", topics=None)
    resp = wire.request(DESCRIBE_LOG_DIRS, 4, req)
    (result,) = resp.results
    assert result.log_dir == str(broker.broker.log_manager.data_dir.resolve())
    sizes = {(t.name, p.partition_index): p.partition_size
             for t in result.topics for p in t.partitions}
    assert sizes == {("sized", 0): 0, ("sized", 1): plog.size_in_bytes, ("other", 0): 0}
    assert plog.size_in_bytes > 200
    usage = shutil.disk_usage(result.log_dir)
    assert result.total_bytes == usage.total and 0 <= result.usable_bytes <= result.total_bytes

    wanted = [message(DESCRIBE_LOG_DIRS, "request", "DescribableLogDirTopic", topic="sized",
                      partitions=[1, 7]),
              message(DESCRIBE_LOG_DIRS, "request", "DescribableLogDirTopic", topic="ghost",
                      partitions=[0])]
    (result,) = wire.request(DESCRIBE_LOG_DIRS, 1, message(DESCRIBE_LOG_DIRS, "request",
                                                           topics=wanted)).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        ("sized", [1])]
    assert result.total_bytes == -1  # not in v1


def test_telemetry_subscription_is_empty(wire):
    req = message(GET_TELEMETRY_SUBSCRIPTIONS, "request")
    first = wire.request(GET_TELEMETRY_SUBSCRIPTIONS, 0, req)
    assert first.error_code == Error.NONE
    assert first.client_instance_id != ZERO_UUID
    assert first.requested_metrics == []
    assert first.push_interval_ms > 0
    again = wire.request(GET_TELEMETRY_SUBSCRIPTIONS, 0, message(
        GET_TELEMETRY_SUBSCRIPTIONS, "request", client_instance_id=first.client_instance_id))
    assert again.client_instance_id == first.client_instance_id
