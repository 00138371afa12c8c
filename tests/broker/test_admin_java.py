"""The admin APIs through the Java AdminClient (kafka-clients 3.9.1, tests/java/SemelClient)."""

from __future__ import annotations

import pytest

from tests.javaclient import JavaClientError, run_java


def admin(bootstrap: str, *args: object) -> list[dict]:
    return run_java("admin", "--bootstrap", bootstrap, "--timeout-ms", "20000", *args)


def admin_error(bootstrap: str, *args: object) -> JavaClientError:
    with pytest.raises(JavaClientError) as info:
        admin(bootstrap, *args)
    return info.value


def test_topic_lifecycle(bootstrap, broker):
    (created,) = admin(bootstrap, "create-topic", "jt", "--partitions", "2",
                       "--config", "retention.ms=5000", "--config", "cleanup.policy=compact")
    info = broker.broker.log_manager.topics["jt"]
    assert created["partitions"] == 2 and created["replication_factor"] == 1
    assert created["topic_id"] is not None
    assert info.configs == {"retention.ms": "5000", "cleanup.policy": "compact"}

    (described,) = admin(bootstrap, "describe-configs", "jt")
    retention = described["configs"]["retention.ms"]
    assert (retention["value"], retention["source"]) == ("5000", "DYNAMIC_TOPIC_CONFIG")
    assert described["configs"]["segment.bytes"]["source"] == "DEFAULT_CONFIG"
    assert described["configs"]["segment.bytes"]["default"] is True

    admin(bootstrap, "alter-config", "jt", "segment.ms=60000", "--delete", "retention.ms")
    assert info.configs == {"cleanup.policy": "compact", "segment.ms": "60000"}

    admin(bootstrap, "create-partitions", "jt", "5")
    (topic,) = admin(bootstrap, "describe-topic", "jt")
    assert [p["replicas"] for p in topic["partitions"]] == [[0]] * 5

    admin(bootstrap, "delete-topic", "jt")
    assert admin(bootstrap, "list-topics")[0]["topics"] == []


def test_errors_map_to_java_exceptions(bootstrap):
    admin(bootstrap, "create-topic", "once", "--partitions", "1")
    assert admin_error(bootstrap, "create-topic", "once").exception_class.endswith(
        "TopicExistsException")
    assert admin_error(bootstrap, "create-topic", "rf3", "--rf", "3").exception_class.endswith(
        "InvalidReplicationFactorException")
    err = admin_error(bootstrap, "create-topic", "cfg", "--config", "retention.ms=later")
    assert err.exception_class.endswith("InvalidConfigurationException")
    assert "retention.ms" in err.message
    assert admin_error(bootstrap, "create-partitions", "once", "1").exception_class.endswith(
        "InvalidPartitionsException")
    assert admin_error(bootstrap, "delete-topic", "never").exception_class.endswith(
        "UnknownTopicOrPartitionException")
    err = admin_error(bootstrap, "alter-config", "--broker", "0", "num.partitions=3")
    assert err.exception_class.endswith("InvalidRequestException")


def test_broker_configs_and_cluster(bootstrap, broker):
    (described,) = admin(bootstrap, "describe-configs", "--broker", "0")
    num_partitions = described["configs"]["num.partitions"]
    assert (num_partitions["value"], num_partitions["read_only"]) == ("1", True)
    assert described["configs"]["log.flush.mode"]["source"] == "STATIC_BROKER_CONFIG"
    (cluster,) = admin(bootstrap, "describe-cluster")
    assert cluster["cluster_id"] == broker.broker.cluster_id
    assert cluster["controller"] == 0
    assert cluster["nodes"] == [{"id": 0, "host": "127.0.0.1", "port": broker.broker.port,
                                 "rack": None}]
