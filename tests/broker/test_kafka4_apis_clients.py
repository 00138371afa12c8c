"""Kafka 4.x's client-facing APIs through real clients: the Java AdminClient 3.9.1
(electLeaders, alterPartitionReassignments, listPartitionReassignments, alterReplicaLogDirs,
describeTopics over DescribeTopicPartitions with pagination, delegation tokens,
listClientMetricsResources), confluent-kafka's AdminClient (elect_leaders), kafka-python's
admin client (the same calls) and the broker version kafka-python infers from ApiVersions."""

from __future__ import annotations

from pathlib import Path

import pytest

from semel.broker.testing import BrokerThread
from tests.javaclient import run_program
from tests.kafka_wire import make_topic

DESCRIBE_TOPIC_PARTITIONS = 75

JAVA_SOURCE = Path(__file__).resolve().parents[1] / "java" / "Kafka4Admin.java"


def java_admin(bootstrap: str) -> dict[str, dict]:
    """Run Kafka4Admin; its JSON lines by step."""
    steps = run_program(JAVA_SOURCE, "Kafka4Admin", bootstrap)
    return {step.pop("step"): step for step in steps}


@pytest.fixture
def kafka4(tmp_path):
    with BrokerThread(tmp_path / "data") as bt:
        make_topic(bt, "jt", 3)
        make_topic(bt, "other", 1)
        yield bt


def test_java_admin_client(kafka4):
    steps = java_admin(kafka4.bootstrap)
    # describeTopics goes over DescribeTopicPartitions, two partitions a page: jt takes two
    # requests (the cursor carries it on), then other; missing fails alone
    assert steps["describe-topics"] == {"jt": "0:011 1:011 2:011", "other": "0:011",
                                        "missing": "UnknownTopicOrPartitionException"}
    # page 1: jt-0, jt-1 and the cursor jt/2; page 2: jt-2, missing, other
    assert sum(kafka4.broker.metrics.latency[DESCRIBE_TOPIC_PARTITIONS].snapshot()[0]) == 2
    elect = steps["elect-leaders"]
    for kind in ("PREFERRED", "UNCLEAN"):
        assert elect[f"{kind} jt-0"] == "ElectionNotNeededException"
        assert elect[f"{kind} jt-9"] == elect[f"{kind} nope-0"] \
            == "UnknownTopicOrPartitionException"
    assert elect["all"] == "0"  # no partition needs an election: none is listed
    assert steps["reassignments"] == {
        "jt-0": "ok", "jt-1": "InvalidReplicaAssignmentException",
        "jt-2": "NoReassignmentInProgressException",
        "nope-0": "UnknownTopicOrPartitionException", "listed-all": "0", "listed-jt": "0"}
    assert steps["alter-replica-log-dirs"] == {
        "jt-0": "ok", "jt-1": "LogDirNotFoundException",
        "jt-7": "UnknownTopicOrPartitionException"}
    # delegation tokens are off; on PLAINTEXT they may not even be asked for
    assert steps["tokens-and-telemetry"] == {
        "create-token": "UnsupportedByAuthenticationException",
        "describe-tokens": "UnsupportedByAuthenticationException",
        "client-metrics-resources": "0"}


def test_confluent_kafka_elect_leaders(kafka4):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka4.bootstrap})
    future = admin.elect_leaders(ElectionType.PREFERRED,
                                 [TopicPartition("jt", 0), TopicPartition("jt", 9)])
    result = future.result(timeout=20)
    errors = {(tp.topic, tp.partition): err for tp, err in result.items()}
    assert errors[("jt", 0)].code() == confluent_kafka.KafkaError.ELECTION_NOT_NEEDED
    assert errors[("jt", 9)].code() == confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
    # every partition: none needs an election, so none is listed
    assert admin.elect_leaders(ElectionType.UNCLEAN, None).result(timeout=20) == {}


def test_kafka_python_infers_a_kafka_4_broker(kafka4):
    """kafka-python reads the broker's version off ApiVersions: ListOffsets v10 is 4.0 (v9,
    semel's range before, read as 3.9); Produce v13 would be 4.1, which semel does not
    serve (v13 names topics by id only)."""
    from kafka.net.compat import KafkaNetClient

    client = KafkaNetClient(bootstrap_servers=kafka4.bootstrap, client_id="infer")
    try:
        assert client.check_version() == (4, 0)
    finally:
        client.close()


def test_kafka_python_admin_client(kafka4):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import InvalidReplicationAssignmentError, LogDirNotFoundError, NoError
    from kafka.structs import TopicPartitionReplica

    admin = KafkaAdminClient(bootstrap_servers=kafka4.bootstrap, client_id="kafka4")
    try:
        elected = admin.elect_leaders(0, {"jt": [0, 1]})  # ELECTION_NOT_NEEDED is no error
        assert [(p.partition_id, p.error_code) for r in elected.replica_election_results
                for p in r.partition_result] == [(0, 84), (1, 84)]
        assert admin.alter_partition_reassignments({
            TopicPartition("jt", 0): [0], TopicPartition("jt", 1): [3]}) == {
            TopicPartition("jt", 0): None,
            TopicPartition("jt", 1): InvalidReplicationAssignmentError}
        assert admin.list_partition_reassignments() == {}
        log_dir = str(Path(kafka4.broker.log_manager.data_dir).resolve())
        assert admin.alter_replica_log_dirs({
            TopicPartitionReplica("jt", 0, 0): log_dir,
            TopicPartitionReplica("jt", 1, 0): "/nowhere"}) == {
            TopicPartitionReplica("jt", 0, 0): NoError,
            TopicPartitionReplica("jt", 1, 0): LogDirNotFoundError}
        described = admin.describe_topic_partitions(["jt", "other"],
                                                    response_partition_limit=2)
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in described["topics"]] == [("jt", [0, 1])]
        assert described["next_cursor"] == {"topic_name": "jt", "partition_index": 2}
        assert admin.list_config_resources() == {}
    finally:
        admin.close()
