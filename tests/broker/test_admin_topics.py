"""CreateTopics, DeleteTopics and CreatePartitions through confluent-kafka's AdminClient."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from semel.broker.testing import BrokerThread

TIMEOUT = 15


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def outcome(futures: dict, key) -> KafkaError | None:
    """None when the operation for `key` succeeded, else its KafkaError."""
    try:
        futures[key].result(TIMEOUT)
    except KafkaException as e:
        return e.args[0]
    return None


def partition_count(client: AdminClient, topic: str) -> int | None:
    topics = client.list_topics(timeout=TIMEOUT).topics
    return len(topics[topic].partitions) if topic in topics else None


@pytest.fixture
def start_broker(tmp_path):
    """start_broker({"key": "value"}) -> a running BrokerThread with those overrides."""
    started: list[BrokerThread] = []

    def start(overrides: dict[str, str]) -> BrokerThread:
        b = BrokerThread(tmp_path / f"tuned{len(started)}", overrides).start()
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()


def test_create_topics_with_counts_and_configs(bootstrap, broker):
    client = admin(bootstrap)
    futures = client.create_topics([
        NewTopic("orders", 3, 1, config={"retention.ms": "60000", "cleanup.policy": "compact"}),
        NewTopic("events", 1, 1)])
    assert outcome(futures, "orders") is None
    assert outcome(futures, "events") is None
    assert partition_count(client, "orders") == 3
    info = broker.broker.log_manager.topics["orders"]
    assert info.configs == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assert broker.broker.log_manager.topic_config("orders").retention_ms == 60000


def test_minus_one_takes_the_broker_defaults(start_broker):
    tuned_broker = start_broker({"num.partitions": "4", "default.replication.factor": "1"})
    client = admin(tuned_broker.bootstrap)
    futures = client.create_topics([NewTopic("defaults")])  # -1 / -1
    assert outcome(futures, "defaults") is None
    assert partition_count(client, "defaults") == 4


def test_replication_factor_above_one_is_refused(bootstrap):
    client = admin(bootstrap)
    err = outcome(client.create_topics([NewTopic("replicated", 1, 3)]), "replicated")
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR
    assert "only 1 broker(s)" in err.str()
    assert partition_count(client, "replicated") is None


def test_overcommit_creates_with_one_replica(start_broker):
    tuned_broker = start_broker({"allow.replication.factor.overcommit": "true"})
    client = admin(tuned_broker.bootstrap)
    assert outcome(client.create_topics([NewTopic("replicated", 2, 3)]), "replicated") is None
    topic = client.list_topics(timeout=TIMEOUT).topics["replicated"]
    assert [p.replicas for p in topic.partitions.values()] == [[0], [0]]


def test_validate_only_creates_nothing(bootstrap, broker):
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic("dry", 2, 1, config={"retention.ms": "1000"})],
                                   validate_only=True)
    assert outcome(futures, "dry") is None
    assert "dry" not in broker.broker.log_manager.topics
    bad = client.create_topics([NewTopic("dry", 2, 1, config={"retention.ms": "soon"})],
                               validate_only=True)
    err = outcome(bad, "dry")
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in err.str()


def test_already_exists_and_invalid_names(bootstrap):
    client = admin(bootstrap)
    assert outcome(client.create_topics([NewTopic("taken", 1, 1)]), "taken") is None
    err = outcome(client.create_topics([NewTopic("taken", 1, 1)]), "taken")
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    err = outcome(client.create_topics([NewTopic("taken", 1, 1)], validate_only=True), "taken")
    assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS
    err = outcome(client.create_topics([NewTopic("no spaces", 1, 1)]), "no spaces")
    assert err.code() == KafkaError.TOPIC_EXCEPTION
    err = outcome(client.create_topics([NewTopic("a.b", 1, 1)]), "a.b")
    assert err is None
    err = outcome(client.create_topics([NewTopic("a_b", 1, 1)]), "a_b")
    assert err.code() == KafkaError.TOPIC_EXCEPTION
    assert "collides" in err.str()


def test_unknown_or_bad_config_is_invalid_config(bootstrap, broker):
    client = admin(bootstrap)
    err = outcome(client.create_topics([NewTopic("c1", 1, 1, config={"no.such": "1"})]), "c1")
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "no.such" in err.str()
    err = outcome(client.create_topics(
        [NewTopic("c2", 1, 1, config={"cleanup.policy": "shred"})]), "c2")
    assert err.code() == KafkaError.INVALID_CONFIG
    assert not {"c1", "c2"} & set(broker.broker.log_manager.topics)


def test_manual_assignment_accepts_only_this_node(bootstrap):
    client = admin(bootstrap)
    ok = client.create_topics([NewTopic("manual", 3, replica_assignment=[[0], [0], [0]])])
    assert outcome(ok, "manual") is None
    assert partition_count(client, "manual") == 3
    bad = client.create_topics([NewTopic("elsewhere", 2, replica_assignment=[[0], [1]])])
    assert outcome(bad, "elsewhere").code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert partition_count(client, "elsewhere") is None


def test_delete_topics(bootstrap, broker):
    client = admin(bootstrap)
    assert outcome(client.create_topics([NewTopic("doomed", 2, 1)]), "doomed") is None
    futures = client.delete_topics(["doomed", "never-was"])
    assert outcome(futures, "doomed") is None
    assert outcome(futures, "never-was").code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert "doomed" not in broker.broker.log_manager.topics
    assert partition_count(client, "doomed") is None
    # the name is free again
    assert outcome(client.create_topics([NewTopic("doomed", 1, 1)]), "doomed") is None


def test_delete_disabled(start_broker):
    tuned_broker = start_broker({"delete.topic.enable": "false"})
    client = admin(tuned_broker.bootstrap)
    assert outcome(client.create_topics([NewTopic("kept", 1, 1)]), "kept") is None
    err = outcome(client.delete_topics(["kept"]), "kept")
    assert err.code() == KafkaError.TOPIC_DELETION_DISABLED
    assert "kept" in tuned_broker.broker.log_manager.topics


def test_internal_topics_are_not_deleted(bootstrap, broker):
    client = admin(bootstrap)
    created = client.create_topics([NewTopic("__consumer_offsets", 1, 1)])
    assert outcome(created, "__consumer_offsets") is None
    err = outcome(client.delete_topics(["__consumer_offsets"]), "__consumer_offsets")
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "__consumer_offsets" in broker.broker.log_manager.topics


def test_create_partitions(bootstrap, broker):
    client = admin(bootstrap)
    assert outcome(client.create_topics([NewTopic("grow", 2, 1)]), "grow") is None
    assert outcome(client.create_partitions([NewPartitions("grow", 5)]), "grow") is None
    assert partition_count(client, "grow") == 5
    assert broker.broker.log_manager.get_partition("grow", 4) is not None

    err = outcome(client.create_partitions([NewPartitions("grow", 5)]), "grow")
    assert err.code() == KafkaError.INVALID_PARTITIONS
    assert "already has 5" in err.str()
    err = outcome(client.create_partitions([NewPartitions("grow", 3)]), "grow")
    assert err.code() == KafkaError.INVALID_PARTITIONS
    assert "would not be an increase" in err.str()
    err = outcome(client.create_partitions([NewPartitions("absent", 3)]), "absent")
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_validate_only_and_assignments(bootstrap, broker):
    client = admin(bootstrap)
    assert outcome(client.create_topics([NewTopic("grow", 1, 1)]), "grow") is None
    futures = client.create_partitions([NewPartitions("grow", 4)], validate_only=True)
    assert outcome(futures, "grow") is None
    assert broker.broker.log_manager.topics["grow"].num_partitions == 1
    ok = client.create_partitions([NewPartitions("grow", 3, replica_assignment=[[0], [0]])])
    assert outcome(ok, "grow") is None
    bad = client.create_partitions([NewPartitions("grow", 4, replica_assignment=[[7]])])
    assert outcome(bad, "grow").code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert broker.broker.log_manager.topics["grow"].num_partitions == 3
