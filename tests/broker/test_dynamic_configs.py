"""Dynamic broker configs and group configs: confluent-kafka's AdminClient on the BROKER
and GROUP resources, Kafka's errors on the wire, and persistence across a restart."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.kafka_wire import KafkaWire, message

TIMEOUT = 15
INCREMENTAL, DESCRIBE, ALTER = 44, 32, 33
BROKER, GROUP = 4, 32


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def describe(client: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    return client.describe_configs([resource])[resource].result(TIMEOUT)


def alter(client: AdminClient, kind: str, name: str, *ops: tuple[str, str | None, AlterConfigOpType],
          validate_only: bool = False) -> KafkaError | None:
    resource = ConfigResource(kind, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=o) for k, v, o in ops])
    future = client.incremental_alter_configs([resource], validate_only=validate_only)[resource]
    try:
        future.result(TIMEOUT)
    except KafkaException as e:
        return e.args[0]
    return None


SET, DELETE, APPEND = AlterConfigOpType.SET, AlterConfigOpType.DELETE, AlterConfigOpType.APPEND


def wire_incremental(bootstrap: str, resource_type: int, name: str, *configs, version=1):
    """(error code, message) of one resource's IncrementalAlterConfigs on the wire (librdkafka
    refuses the cluster-default BROKER resource, whose name is empty)."""
    with KafkaWire.connect(bootstrap) as w:
        req = message(INCREMENTAL, "request", resources=[message(
            INCREMENTAL, "request", "AlterConfigsResource", resource_type=resource_type,
            resource_name=name, configs=[message(
                INCREMENTAL, "request", "AlterableConfig", name=k, config_operation=int(op),
                value=v) for k, v, op in configs])])
        (result,) = w.request(INCREMENTAL, version, req).responses
    return result.error_code, result.error_message


def test_broker_config_is_dynamic_persisted_and_inherited(tmp_path):
    data = tmp_path / "data"
    with BrokerThread(data) as b:
        client = admin(b.bootstrap)
        client.create_topics([NewTopic("inherits", 1, 1)])["inherits"].result(TIMEOUT)
        client.create_topics([NewTopic("own", 1, 1, config={"retention.ms": "5000"})])[
            "own"].result(TIMEOUT)
        # cluster default, then a per-broker value over it
        assert wire_incremental(b.bootstrap, BROKER, "", ("log.retention.ms", "3600000", 0)) \
            == (Error.NONE, None)
        assert alter(client, "broker", "0", ("log.retention.ms", "7200000", SET),
                     ("max.connections", "50", SET)) is None
        logs = b.broker.log_manager
        assert logs.topic_config("inherits").retention_ms == 7200000  # in force at once
        assert logs.topic_config("own").retention_ms == 5000
        assert logs.get_partition("inherits", 0).config.retention_ms == 7200000
        assert b.broker.config.max_connections == 50

        entries = describe(client, ConfigResource("broker", "0"))
        retention = entries["log.retention.ms"]
        assert retention.value == "7200000"
        assert retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        with KafkaWire.connect(b.bootstrap) as w:  # confluent-kafka keys synonyms by name
            req = message(DESCRIBE, "request", include_synonyms=True, resources=[message(
                DESCRIBE, "request", "DescribeConfigsResource", resource_type=BROKER,
                resource_name="0", configuration_keys=["log.retention.ms"])])
            (result,) = w.request(DESCRIBE, 4, req).results
        assert [(s.name, s.value, s.source) for s in result.configs[0].synonyms] == [
            ("log.retention.ms", "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG.value),
            ("log.retention.ms", "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]
        with KafkaWire.connect(b.bootstrap) as w:  # the cluster default: only what is set
            req = message(DESCRIBE, "request", include_synonyms=True, resources=[message(
                DESCRIBE, "request", "DescribeConfigsResource", resource_type=BROKER,
                resource_name="", configuration_keys=None)])
            (result,) = w.request(DESCRIBE, 4, req).results
        assert [(c.name, c.value, c.config_source, [s.source for s in c.synonyms])
                for c in result.configs] == [
            ("log.retention.ms", "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
             [ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value])]
        topic = describe(client, ConfigResource("topic", "inherits"))["retention.ms"]
        assert topic.value == "7200000"
        assert topic.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    with BrokerThread(data) as b:  # the same data dir: the dynamic values are back
        client = admin(b.bootstrap)
        assert b.broker.log_manager.topic_config("inherits").retention_ms == 7200000
        assert b.broker.config.max_connections == 50
        # deleting the per-broker value uncovers the cluster default
        assert alter(client, "broker", "0", ("log.retention.ms", None, DELETE)) is None
        assert b.broker.log_manager.topic_config("inherits").retention_ms == 3600000
        assert describe(client, ConfigResource("broker", "0"))["log.retention.ms"].source == \
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def test_broker_config_errors_are_kafkas(bootstrap, broker):
    client = admin(bootstrap)
    err = alter(client, "broker", "0", ("num.partitions", "3", SET))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(num.partitions)" in err.str()
    err = alter(client, "broker", "0", ("log.retention.hours", "3", SET))
    assert err.code() == KafkaError.INVALID_REQUEST
    err = alter(client, "broker", "0", ("log.segment.bytes", "abc", SET))
    assert err.code() == KafkaError.INVALID_REQUEST
    assert "Invalid value abc for configuration log.segment.bytes" in err.str()
    err = alter(client, "broker", "0", ("log.segment.bytes", "1", APPEND))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "Config value append is not allowed for config key: log.segment.bytes" in err.str()
    assert alter(client, "broker", "0", ("log.cleanup.policy", "compact", APPEND)) is None
    assert broker.broker.config.log_cleanup_policy == "delete,compact"
    assert alter(client, "broker", "0", ("log.segment.bytes", "2000000", SET),
                 validate_only=True) is None
    assert broker.broker.config.log_segment_bytes == 1073741824
    assert broker.broker.dynamic_configs.broker == {"log.cleanup.policy": "delete,compact"}


def test_broker_resource_on_the_wire(tmp_path):
    with BrokerThread(tmp_path / "data") as b, KafkaWire.connect(b.bootstrap) as w:
        def incremental(name, *configs):
            return wire_incremental(b.bootstrap, BROKER, name, *((k, v, op) for k, op, v in configs))

        assert incremental("7", ("message.max.bytes", 0, "2000")) == (
            Error.INVALID_REQUEST, "Unexpected broker id, expected 0, but received 7")
        assert incremental("x", ("message.max.bytes", 0, "2000")) == (
            Error.INVALID_REQUEST, "Node id must be an integer, but it is: x")
        assert incremental("0", ("message.max.bytes", 9, "2000")) == (
            Error.INVALID_REQUEST, "Unknown operations type 9")
        assert incremental("0", ("message.max.bytes", 0, "2000"))[0] == Error.NONE
        assert b.broker.log_manager.default_config.max_message_bytes == 2000
        req = message(ALTER, "request", resources=[message(
            ALTER, "request", "AlterConfigsResource", resource_type=BROKER, resource_name="0",
            configs=[message(ALTER, "request", "AlterableConfig", name="max.connections.per.ip",
                             value="9")])])
        (result,) = w.request(ALTER, 2, req).responses
        assert result.error_code == Error.NONE
        # the legacy API replaces the whole set: message.max.bytes is gone again
        assert b.broker.dynamic_configs.broker == {"max.connections.per.ip": "9"}
        assert b.broker.log_manager.default_config.max_message_bytes == 1048588
        assert b.broker.config.max_connections_per_ip == 9


def test_group_configs(tmp_path):
    data = tmp_path / "data"
    with BrokerThread(data) as b:
        client = admin(b.bootstrap)
        entries = describe(client, ConfigResource("group", "g1"))
        assert entries["consumer.session.timeout.ms"].value == "45000"
        assert entries["consumer.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
        assert alter(client, "group", "g1", ("consumer.session.timeout.ms", "50000", SET),
                     ("consumer.heartbeat.interval.ms", "6000", SET)) is None
        entries = describe(client, ConfigResource("group", "g1"))
        assert entries["consumer.session.timeout.ms"].value == "50000"
        assert entries["consumer.session.timeout.ms"].source == 8  # GROUP_CONFIG
        assert b.broker.dynamic_configs.group_config("g1", b.broker.config)[
            "consumer.heartbeat.interval.ms"] == 6000
        for ops, message_part in (
                ((("consumer.session.timeout.ms", "30000", SET),),
                 ("consumer.session.timeout.ms must be greater than or equal to "
                 "group.consumer.min.session.timeout.ms")),
                ((("consumer.session.timeout.ms", "70000", SET),),
                 ("consumer.session.timeout.ms must be less than or equal to "
                 "group.consumer.max.session.timeout.ms")),
                ((("consumer.heartbeat.interval.ms", "1000", SET),),
                 ("consumer.heartbeat.interval.ms must be greater than or equal to "
                 "group.consumer.min.heartbeat.interval.ms")),
                ((("made.up", "1", SET),), "Unknown group config name: made.up"),
                ((("consumer.session.timeout.ms", "x", SET),),
                 "Invalid value x for configuration consumer.session.timeout.ms"),
                ((("consumer.session.timeout.ms", "1", APPEND),),
                 "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")):
            err = alter(client, "group", "g1", *ops)
            assert err is not None and err.code() == KafkaError.INVALID_CONFIG, ops
            assert message_part in err.str()
    with BrokerThread(data) as b, KafkaWire.connect(b.bootstrap) as w:
        assert b.broker.dynamic_configs.group_overrides("g1") == {
            "consumer.session.timeout.ms": "50000", "consumer.heartbeat.interval.ms": "6000"}
        req = message(DESCRIBE, "request", include_synonyms=True, resources=[message(
            DESCRIBE, "request", "DescribeConfigsResource", resource_type=GROUP,
            resource_name="", configuration_keys=None)])
        (result,) = w.request(DESCRIBE, 4, req).results
        assert (result.error_code, result.error_message) == (
            Error.INVALID_REQUEST, "Group name must not be empty")


def test_topic_synonyms_without_builtin_default(bootstrap):
    """Kafka has no built-in default for log.retention.ms or log.roll.ms (log.retention.hours
    and log.roll.hours carry it), so retention.ms and segment.ms show no synonym at all
    (kafkajs' describeConfigs test), while segment.bytes shows log.segment.bytes'."""
    client = admin(bootstrap)
    client.create_topics([NewTopic("plain", 1, 1)])["plain"].result(TIMEOUT)
    entries = describe(client, ConfigResource("topic", "plain"))
    for name in ("retention.ms", "segment.ms"):
        assert entries[name].source == ConfigSource.DEFAULT_CONFIG.value
        assert entries[name].synonyms == {}
    assert [(s.name, s.source) for s in entries["segment.bytes"].synonyms.values()] == [
        ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG.value)]


def test_topic_synonyms_of_an_hours_setting(tmp_path):
    """log.retention.hours set in the broker's configuration: Kafka drops the synonyms that
    precede log.retention.ms, so retention.ms shows none (the value is still 2 h)."""
    with BrokerThread(tmp_path / "data", {"log.retention.hours": "2"}) as b:
        client = admin(b.bootstrap)
        client.create_topics([NewTopic("hours", 1, 1)])["hours"].result(TIMEOUT)
        entry = describe(client, ConfigResource("topic", "hours"))["retention.ms"]
        assert entry.value == "7200000"
        assert entry.source == ConfigSource.DEFAULT_CONFIG.value
        assert entry.synonyms == {}


def _join(wire: KafkaWire, group: str, topic: str):
    """A KIP-848 member joining ``group`` (ConsumerGroupHeartbeat v1 at epoch 0)."""
    return wire.request(68, 1, message(
        68, "request", group_id=group, member_id=f"{group}-member", member_epoch=0,
        rebalance_timeout_ms=30000, subscribed_topic_names=[topic], topic_partitions=[]))


def _members(wire: KafkaWire, group: str) -> int:
    (described,) = wire.request(69, 1, message(69, "request", group_ids=[group])).groups
    return len(described.members)


def test_group_configs_set_a_consumer_groups_heartbeat_interval_and_session_timeout(tmp_path):
    """consumer.heartbeat.interval.ms and consumer.session.timeout.ms of a GROUP resource
    are what the KIP-848 coordinator gives that group's members and expires them by (other
    groups keep the broker's 5 s and 45 s)."""
    with BrokerThread(tmp_path / "data") as b:
        assert wire_incremental(b.bootstrap, GROUP, "tuned",
                                ("consumer.heartbeat.interval.ms", "6000", 0),
                                ("consumer.session.timeout.ms", "55000", 0)) == (0, None)
        with KafkaWire.connect(b.bootstrap) as w:
            w.request(19, 7, message(19, "request", topics=[message(
                19, "request", "CreatableTopic", name="gc", num_partitions=2,
                replication_factor=1)], timeout_ms=10000))
            tuned, plain = _join(w, "tuned", "gc"), _join(w, "plain", "gc")
            assert (tuned.error_code, tuned.heartbeat_interval_ms) == (0, 6000)
            assert (plain.error_code, plain.heartbeat_interval_ms) == (0, 5000)
            b.advance(50)  # past the broker's 45 s, within the tuned group's 55 s
            assert (_members(w, "tuned"), _members(w, "plain")) == (1, 0)
            b.advance(6)
            assert _members(w, "tuned") == 0
