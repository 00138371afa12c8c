"""The admin APIs through kafka-python's KafkaAdminClient."""

from __future__ import annotations

import pytest
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import InvalidReplicationFactorError, TopicAlreadyExistsError


@pytest.fixture
def client(bootstrap):
    c = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    yield c
    c.close()


def test_create_describe_alter_delete(client, broker):
    created = client.create_topics([NewTopic("kp", 2, 1, topic_configs={"retention.ms": "1000"})])
    (topic,) = created["topics"]
    assert (topic["error_code"], topic["num_partitions"], topic["replication_factor"]) == (0, 2, 1)
    assert topic["configs"]["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    with pytest.raises(TopicAlreadyExistsError):
        client.create_topics([NewTopic("kp", 2, 1)])
    with pytest.raises(InvalidReplicationFactorError):
        client.create_topics([NewTopic("kp3", 1, 3)])

    described = client.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kp")],
                                        config_filter="all")
    configs = described["topic"]["kp"]
    assert configs["retention.ms"]["value"] == "1000"
    assert configs["segment.bytes"]["config_source"] == "DEFAULT_CONFIG"

    altered = client.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kp",
                                                   configs={"retention.ms": "2000"})])
    assert altered == {"topic": {"kp": "OK"}}
    assert broker.broker.log_manager.topics["kp"].configs == {"retention.ms": "2000"}

    client.create_partitions({"kp": NewPartitions(4)})
    assert broker.broker.log_manager.topics["kp"].num_partitions == 4

    (node,) = client.describe_log_dirs()
    (log_dir,) = node["log_dirs"]
    assert [len(t["partitions"]) for t in log_dir["topics"]] == [4]

    cluster = client.describe_cluster()
    assert (cluster["cluster_id"], cluster["controller_id"]) == (broker.broker.cluster_id, 0)

    client.delete_topics(["kp"])
    assert client.list_topics() == []
