"""Topic config table and LogConfig parsing/validation with Kafka's names and defaults."""

from __future__ import annotations

import pytest

from semel.protocol.errors import Error, KafkaError
from semel.storage.config import (
    CONFIG_DEFS_BY_NAME,
    TOPIC_CONFIG_DEFS,
    LogConfig,
)


def test_table_defaults_match_log_config_defaults():
    defaults = LogConfig()
    assert {d.attr for d in TOPIC_CONFIG_DEFS} == set(LogConfig.__dataclass_fields__)
    for definition in TOPIC_CONFIG_DEFS:
        assert getattr(defaults, definition.attr) == definition.default, definition.name
        assert definition.doc and "\n" not in definition.doc


def test_kafka_defaults():
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == config.retention_ms == 7 * 24 * 3600 * 1000
    assert config.retention_bytes == -1
    assert config.index_interval_bytes == 4096
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.max_message_bytes == 1048588
    assert config.message_timestamp_type == "CreateTime"
    assert config.cleanup_policy == ["delete"]
    assert config.min_insync_replicas == 1
    assert CONFIG_DEFS_BY_NAME["segment.bytes"].server_name == "log.segment.bytes"


def test_from_overrides_parses_each_type():
    base = LogConfig()
    config = LogConfig.from_overrides(
        base,
        {
            "segment.bytes": "1048576",
            "retention.ms": "-1",
            "preallocate": "TRUE",
            "cleanup.policy": "compact, delete",
            "min.cleanable.dirty.ratio": "0.25",
            "message.timestamp.type": "LogAppendTime",
        },
    )
    assert config.segment_bytes == 1048576 and config.retention_ms == -1
    assert config.preallocate is True and config.cleanup_policy == ["compact", "delete"]
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.message_timestamp_type == "LogAppendTime"
    assert base.segment_bytes == 1 << 30  # the base is not modified
    assert config.value_string("cleanup.policy") == "compact,delete"
    assert config.to_strings()["preallocate"] == "true"
    assert LogConfig.from_overrides(config, {}) == config


@pytest.mark.parametrize(
    "key,value",
    [
        ("no.such.key", "1"),
        ("segment.bytes", "13"),
        ("segment.bytes", "2147483648"),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("retention.ms", "1.5"),
        ("preallocate", "yes"),
        ("cleanup.policy", "delete,shred"),
        ("message.timestamp.type", "WallTime"),
        ("compression.type", "brotli"),
        ("compression.gzip.level", "0"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.insync.replicas", "0"),
        ("max.message.bytes", "-1"),
    ],
)
def test_invalid_overrides(key, value):
    with pytest.raises(KafkaError) as info:
        LogConfig.from_overrides(LogConfig(), {key: value})
    assert info.value.code == Error.INVALID_CONFIG
    assert key in str(info.value)
