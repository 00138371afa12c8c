"""LogManager: meta.properties, topic metadata and its persistence, topic operations with
Kafka's errors, deletion, retention task, log start offset checkpoint, the directory lock."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from log_helpers import FakeClock, make_batch, offsets

from semel.protocol.errors import Error, KafkaError
from semel.storage.config import LogConfig
from semel.storage.log_manager import LogManager, kafka_uuid_string, validate_topic_name


async def started(data_dir, clock=None, flush_mode="none", **config):
    manager = LogManager(
        data_dir,
        default_config=LogConfig(**config),
        flush_mode=flush_mode,
        clock=clock or FakeClock(),
    )
    await manager.start()
    return manager


def code_of(excinfo) -> Error:
    return excinfo.value.code


async def test_meta_properties_and_stable_cluster_id(tmp_path):
    manager = await started(tmp_path)
    props = dict(
        line.split("=", 1)
        for line in (tmp_path / "meta.properties").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert props["version"] == "1" and props["node.id"] == "0"
    cluster_id = props["cluster.id"]
    assert cluster_id == manager.cluster_id and len(cluster_id) == 22
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16
    assert not cluster_id.startswith("-")
    await manager.close()
    again = await started(tmp_path)
    assert again.cluster_id == cluster_id
    await again.close()


def test_kafka_uuid_string():
    value = uuid.UUID("4f2d7a0e-44c6-4c8d-9d9b-4f6a2e0b8c11")
    assert kafka_uuid_string(value) == base64.urlsafe_b64encode(value.bytes).decode()[:22]


async def test_create_topic_and_persist(tmp_path):
    manager = await started(tmp_path)
    info = manager.create_topic("orders", 3, {"retention.ms": "1000", "segment.bytes": "2048"})
    assert (info.name, info.num_partitions) == ("orders", 3)
    assert manager.topics["orders"] is info and manager.topic_by_id(info.topic_id) is info
    for p in range(3):
        assert (tmp_path / f"orders-{p}" / "00000000000000000000.log").exists()
    plog = manager.get_partition("orders", 1)
    assert plog.config.retention_ms == 1000 and plog.config.segment_bytes == 2048
    assert manager.get_partition("orders", 3) is None and manager.get_partition("x", 0) is None
    stored = json.loads((tmp_path / "__semel_topics.json").read_text())
    assert stored["version"] == 1
    assert stored["topics"] == [
        {
            "name": "orders",
            "topic_id": str(info.topic_id),
            "num_partitions": 3,
            "configs": {"retention.ms": "1000", "segment.bytes": "2048"},
        }
    ]
    plog.append(make_batch(2))
    await manager.close()
    again = await started(tmp_path)
    assert again.topics["orders"].topic_id == info.topic_id
    assert again.topic_config("orders").segment_bytes == 2048
    assert again.get_partition("orders", 1).log_end_offset == 2
    await again.close()


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "ünïcode", "a/b"])
def test_illegal_topic_names(name):
    with pytest.raises(KafkaError) as info:
        validate_topic_name(name)
    assert code_of(info) == Error.INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("name", ["a", "a" * 249, "A-b_c.9", "__consumer_offsets", "..."])
def test_legal_topic_names(name):
    validate_topic_name(name)


async def test_create_topic_errors(tmp_path):
    manager = await started(tmp_path)
    manager.create_topic("a.b", 1)
    cases = [
        (("a.b", 1, {}), Error.TOPIC_ALREADY_EXISTS),
        (("a_b", 1, {}), Error.INVALID_TOPIC_EXCEPTION),  # collides in metric names
        (("bad name", 1, {}), Error.INVALID_TOPIC_EXCEPTION),
        (("c", 0, {}), Error.INVALID_PARTITIONS),
        (("c", 1, {"no.such.config": "1"}), Error.INVALID_CONFIG),
        (("c", 1, {"retention.ms": "soon"}), Error.INVALID_CONFIG),
    ]
    for args, code in cases:
        with pytest.raises(KafkaError) as info:
            manager.create_topic(*args)
        assert code_of(info) == code
    assert list(manager.topics) == ["a.b"] and not (tmp_path / "c-0").exists()
    await manager.close()


async def test_delete_topic(tmp_path):
    manager = await started(tmp_path)
    info = manager.create_topic("t", 2)
    plog = manager.get_partition("t", 0)
    plog.append(make_batch(5))
    manager.delete_topic("t")
    assert "t" not in manager.topics and manager.topic_by_id(info.topic_id) is None
    assert manager.get_partition("t", 0) is None and plog.closed
    assert not (tmp_path / "t-0").exists()
    with pytest.raises(KafkaError) as err:
        plog.append(make_batch(1))
    assert code_of(err) == Error.NOT_LEADER_OR_FOLLOWER
    await manager.purge_deleted()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("t-")]
    with pytest.raises(KafkaError) as err:
        manager.delete_topic("t")
    assert code_of(err) == Error.UNKNOWN_TOPIC_OR_PARTITION
    again = manager.create_topic("t", 1)
    assert again.topic_id != info.topic_id
    assert manager.get_partition("t", 0).log_end_offset == 0
    await manager.close()


async def test_interrupted_topic_deletion_finishes_at_start(tmp_path):
    manager = await started(tmp_path)
    manager.create_topic("t", 1)
    await manager.close()
    doomed = tmp_path / f"t-0.{uuid.uuid4().hex}-delete"
    (tmp_path / "t-0").rename(doomed)
    (tmp_path / "__semel_topics.json").write_text('{"version": 1, "topics": []}')
    again = await started(tmp_path)
    await again.purge_deleted()
    assert not doomed.exists()
    await again.close()


async def test_create_partitions(tmp_path):
    manager = await started(tmp_path)
    manager.create_topic("t", 2)
    for total, code in ((2, Error.INVALID_PARTITIONS), (1, Error.INVALID_PARTITIONS)):
        with pytest.raises(KafkaError) as info:
            manager.create_partitions("t", total)
        assert code_of(info) == code
    with pytest.raises(KafkaError) as info:
        manager.create_partitions("nope", 3)
    assert code_of(info) == Error.UNKNOWN_TOPIC_OR_PARTITION
    assert manager.create_partitions("t", 5).num_partitions == 5
    assert manager.get_partition("t", 4) is not None
    await manager.close()
    again = await started(tmp_path)
    assert again.topics["t"].num_partitions == 5 and again.get_partition("t", 4) is not None
    await again.close()


async def test_alter_topic_configs(tmp_path):
    manager = await started(tmp_path)
    manager.create_topic("t", 1, {"retention.ms": "5"})
    plog = manager.get_partition("t", 0)
    manager.alter_topic_configs("t", {"max.message.bytes": "100"}, ["retention.ms"])
    assert plog.config.max_message_bytes == 100
    assert plog.config.retention_ms == LogConfig().retention_ms
    with pytest.raises(KafkaError) as info:
        plog.append(make_batch(1, value_size=200))
    assert code_of(info) == Error.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as info:
        manager.alter_topic_configs("t", {"max.message.bytes": "-5"})
    assert code_of(info) == Error.INVALID_CONFIG
    manager.alter_topic_configs("t", {"segment.ms": "7"}, validate_only=True)
    assert manager.topics["t"].configs == {"max.message.bytes": "100"}
    await manager.close()
    again = await started(tmp_path)
    assert again.topic_config("t").max_message_bytes == 100
    await again.close()


async def test_run_retention_and_log_start_checkpoint(tmp_path):
    clock = FakeClock(1_700_000_000_000)
    manager = await started(tmp_path, clock=clock, segment_bytes=300, retention_ms=60_000)
    manager.create_topic("t", 1)
    plog = manager.get_partition("t", 0)
    for i in range(20):
        plog.append(make_batch(2, value_size=40, timestamp=clock() + i))
    assert await manager.run_retention() == 0
    plog.delete_records_before(7)
    remaining = len(plog.segments)
    await manager.close()
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\nt 0 7\n"
    again = await started(tmp_path, clock=clock, segment_bytes=300, retention_ms=60_000)
    plog = again.get_partition("t", 0)
    assert plog.log_start_offset == 7
    assert offsets(plog.read(7, 10**6).records)[0] == 6  # the batch holding offset 7
    clock.advance(120_000)
    assert await again.run_retention() == remaining  # all of them, after a roll
    assert plog.log_start_offset == plog.log_end_offset == 40
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted")]
    await again.close()


async def test_directory_lock(tmp_path):
    manager = await started(tmp_path)
    other = LogManager(tmp_path, default_config=LogConfig())
    with pytest.raises(RuntimeError, match="lock"):
        await other.start()
    await manager.close()
    await other.start()
    await other.close()


async def test_operations_need_a_started_manager(tmp_path):
    manager = LogManager(tmp_path, default_config=LogConfig())
    with pytest.raises(KafkaError):
        manager.create_topic("t", 1)
    with pytest.raises(ValueError):
        LogManager(tmp_path, default_config=LogConfig(), flush_mode="sometimes")
