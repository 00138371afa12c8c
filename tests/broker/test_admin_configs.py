"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs through confluent-kafka."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from semel.broker.dynamic_config import DYNAMIC_KEYS
from semel.broker.testing import BrokerThread
from semel.storage.config import TOPIC_CONFIG_DEFS

TIMEOUT = 15


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create(client: AdminClient, name: str, config: dict[str, str] | None = None) -> None:
    client.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(TIMEOUT)


def describe(client: AdminClient, resource: ConfigResource, **kw) -> dict[str, ConfigEntry]:
    return client.describe_configs([resource], **kw)[resource].result(TIMEOUT)


def failure(future) -> KafkaError | None:
    try:
        future.result(TIMEOUT)
    except KafkaException as e:
        return e.args[0]
    return None


def incremental(client: AdminClient, topic: str, *entries: ConfigEntry, **kw):
    resource = ConfigResource("topic", topic, incremental_configs=list(entries))
    return client.incremental_alter_configs([resource], **kw)[resource]


def op(name: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=kind)


def test_describe_topic_lists_every_config_with_its_source(bootstrap):
    client = admin(bootstrap)
    create(client, "described", {"retention.ms": "123456"})
    entries = describe(client, ConfigResource("topic", "described"))
    assert set(entries) == {d.name for d in TOPIC_CONFIG_DEFS}
    retention = entries["retention.ms"]
    assert retention.value == "123456"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not retention.is_read_only and not retention.is_default
    segment = entries["segment.bytes"]
    assert segment.value == "1073741824"
    assert segment.source == ConfigSource.DEFAULT_CONFIG.value
    assert segment.is_default
    assert entries["cleanup.policy"].value == "delete"


def test_broker_settings_show_as_static_broker_config(tmp_path):
    overrides = {"log.segment.bytes": "2097152", "log.retention.ms": "3600000"}
    with BrokerThread(tmp_path / "data", overrides) as b:
        client = admin(b.bootstrap)
        create(client, "inherits", {"retention.ms": "1000"})
        entries = describe(client, ConfigResource("topic", "inherits"))  # asks for synonyms
        segment = entries["segment.bytes"]
        assert segment.value == "2097152"
        assert segment.source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert "log.segment.bytes" in segment.synonyms  # a dict by name (both entries share it)
        retention = entries["retention.ms"]
        assert retention.value == "1000"
        assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        # Kafka's order: override, the static log.retention.ms, then log.retention.hours'
        # built-in default (log.retention.ms itself has none)
        assert [(s.name, s.value, s.source) for s in retention.synonyms.values()] == [
            ("retention.ms", "1000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
            ("log.retention.ms", "3600000", ConfigSource.STATIC_BROKER_CONFIG.value),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]


def test_cleaner_defaults_from_broker_settings(tmp_path):
    """Kafka's broker-wide defaults of the cleaner's topic configs: log.cleanup.policy,
    log.cleaner.min.cleanable.ratio, log.cleaner.delete.retention.ms,
    log.cleaner.min.compaction.lag.ms and log.cleaner.max.compaction.lag.ms reach the
    topics that do not set their own, and the cleaner uses them."""
    from semel.storage.topic_partition import TopicPartition

    overrides = {"log.cleanup.policy": "compact,delete",
                 "log.cleaner.min.cleanable.ratio": "0.25",
                 "log.cleaner.delete.retention.ms": "1000",
                 "log.cleaner.min.compaction.lag.ms": "7",
                 "log.cleaner.max.compaction.lag.ms": "600000"}
    with BrokerThread(tmp_path / "data", overrides) as b:
        client = admin(b.bootstrap)
        create(client, "inherits", {"min.compaction.lag.ms": "9"})
        entries = describe(client, ConfigResource("topic", "inherits"))
        for name, value in (("cleanup.policy", "compact,delete"),
                            ("min.cleanable.dirty.ratio", "0.25"),
                            ("delete.retention.ms", "1000"),
                            ("max.compaction.lag.ms", "600000")):
            assert (entries[name].value, entries[name].source) == (
                value, ConfigSource.STATIC_BROKER_CONFIG.value), name
        assert entries["min.compaction.lag.ms"].value == "9"
        config = b.broker.log_manager.logs[TopicPartition("inherits", 0)].config
        assert (config.cleanup_policy, config.min_cleanable_dirty_ratio,
                config.delete_retention_ms, config.min_compaction_lag_ms,
                config.max_compaction_lag_ms) == (["compact", "delete"], 0.25, 1000, 9, 600000)


def test_describe_unknown_topic_and_bad_name(bootstrap):
    client = admin(bootstrap)
    err = failure(client.describe_configs([ConfigResource("topic", "ghost")])[
        ConfigResource("topic", "ghost")])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    bad = ConfigResource("topic", "bad name!")
    assert failure(client.describe_configs([bad])[bad]).code() == KafkaError.TOPIC_EXCEPTION


def test_describe_broker(bootstrap):
    client = admin(bootstrap)
    entries = describe(client, ConfigResource("broker", "0"))
    assert entries["num.partitions"].value == "1"
    assert entries["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["log.flush.mode"].value == "none"  # the test fixture sets it
    assert entries["log.flush.mode"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # only Kafka's dynamic broker configs are writable
    assert {name for name, e in entries.items() if not e.is_read_only} == DYNAMIC_KEYS


def test_incremental_set_delete_append_subtract(bootstrap, broker):
    client = admin(bootstrap)
    create(client, "tuned")
    assert failure(incremental(
        client, "tuned", op("retention.ms", "5000", AlterConfigOpType.SET),
        op("cleanup.policy", "compact", AlterConfigOpType.APPEND))) is None
    entries = describe(client, ConfigResource("topic", "tuned"))
    assert entries["retention.ms"].value == "5000"
    assert entries["cleanup.policy"].value == "delete,compact"
    assert broker.broker.log_manager.topic_config("tuned").retention_ms == 5000

    assert failure(incremental(
        client, "tuned", op("retention.ms", None, AlterConfigOpType.DELETE),
        op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))) is None
    entries = describe(client, ConfigResource("topic", "tuned"))
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["cleanup.policy"].value == "compact"
    assert broker.broker.log_manager.topics["tuned"].configs == {"cleanup.policy": "compact"}


def test_incremental_errors(bootstrap, broker):
    client = admin(bootstrap)
    create(client, "strict", {"retention.ms": "1000"})
    err = failure(incremental(client, "strict", op("retention.ms", "1", AlterConfigOpType.APPEND)))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "not LIST" in err.str()
    err = failure(incremental(client, "strict", op("retention.ms", "x", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = failure(incremental(client, "strict", op("made.up", "1", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG
    err = failure(incremental(client, "ghost", op("retention.ms", "1", AlterConfigOpType.SET)))
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert broker.broker.log_manager.topics["strict"].configs == {"retention.ms": "1000"}


def test_incremental_validate_only(bootstrap, broker):
    client = admin(bootstrap)
    create(client, "dry")
    future = incremental(client, "dry", op("retention.ms", "9", AlterConfigOpType.SET),
                         validate_only=True)
    assert failure(future) is None
    assert broker.broker.log_manager.topics["dry"].configs == {}


def test_broker_configs_cannot_be_altered(bootstrap):
    client = admin(bootstrap)
    resource = ConfigResource("broker", "0", incremental_configs=[
        op("num.partitions", "3", AlterConfigOpType.SET)])
    err = failure(client.incremental_alter_configs([resource])[resource])
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "num.partitions" in err.str()
    assert describe(client, ConfigResource("broker", "0"))["num.partitions"].value == "1"


def test_legacy_alter_configs_replaces_the_override_set(bootstrap, broker):
    client = admin(bootstrap)
    create(client, "legacy", {"retention.ms": "1000", "segment.ms": "60000"})
    resource = ConfigResource("topic", "legacy", set_config={"cleanup.policy": "compact"})
    with pytest.warns(DeprecationWarning):
        futures = client.alter_configs([resource])
    assert failure(futures[resource]) is None
    assert broker.broker.log_manager.topics["legacy"].configs == {"cleanup.policy": "compact"}
    assert broker.broker.log_manager.topic_config("legacy").retention_ms == 604800000


def test_overrides_survive_a_restart(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        client = admin(b.bootstrap)
        create(client, "durable")
        assert failure(incremental(
            client, "durable", op("retention.ms", "777", AlterConfigOpType.SET))) is None
    with BrokerThread(tmp_path / "data") as b:
        entries = describe(admin(b.bootstrap), ConfigResource("topic", "durable"))
        assert entries["retention.ms"].value == "777"
        assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
