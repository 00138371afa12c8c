"""``semel topics`` and ``semel configs`` against a broker, checked with confluent-kafka's
AdminClient (librdkafka): what the CLI creates, alters and deletes is what the real client
sees, and what the CLI describes is what the real client reads."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

from tests.tools_cli.semel_cli import semel

TIMEOUT = 30


@pytest.fixture(scope="module")
def admin(cli_broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": cli_broker.bootstrap})


def topic_configs(admin: AdminClient, topic: str) -> dict:
    [future] = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return future.result(TIMEOUT)


def test_create_list_describe_match_the_wire(cli_broker, admin):
    b = cli_broker.bootstrap
    created = semel("topics", "create", "--topic", "cli-orders", "--partitions", 3,
                    "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact",
                    bootstrap=b, json_output=True).json
    assert created["created"] is True and created["partitions"] == 3
    # Kafka's flag style works too
    assert semel("topics", "--create", "--topic", "cli-plain", bootstrap=b).returncode == 0

    metadata = admin.list_topics(timeout=TIMEOUT)
    assert len(metadata.topics["cli-orders"].partitions) == 3
    configs = topic_configs(admin, "cli-orders")
    assert configs["retention.ms"].value == "86400000"
    assert configs["cleanup.policy"].value == "compact"

    listed = semel("topics", "list", bootstrap=b, json_output=True).json["topics"]
    assert listed == sorted(metadata.topics)
    text = semel("topics", "list", "--exclude-internal", bootstrap=b)
    assert text.stdout.split() == sorted(t for t in metadata.topics if not t.startswith("__"))
    assert semel("topics", "list", "--topic", "cli-(orders|plain)",
                 bootstrap=b).stdout.split() == ["cli-orders", "cli-plain"]

    [described] = semel("topics", "describe", "--topic", "cli-orders", bootstrap=b,
                        json_output=True).json["topics"]
    assert described["partition_count"] == 3 and described["replication_factor"] == 1
    # the overridden configs, as kafka-topics shows them
    overridden = {name: entry.value for name, entry in configs.items()
                  if entry.source != ConfigSource.DEFAULT_CONFIG.value}
    assert described["configs"] == overridden
    assert {"retention.ms", "cleanup.policy"} <= set(overridden)
    wire = metadata.topics["cli-orders"].partitions
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"])
            for p in described["partitions"]] == [
        (i, wire[i].leader, list(wire[i].replicas), list(wire[i].isrs)) for i in sorted(wire)]
    assert described["topic_id"] and not described["internal"]

    table = semel("topics", "describe", "--topic", "cli-orders", bootstrap=b).stdout
    assert "cleanup.policy=compact" in table and "retention.ms=86400000" in table
    assert len([line for line in table.splitlines() if line.startswith("cli-orders ")]) == 4


def test_alter_partitions_and_configs(cli_broker, admin):
    b = cli_broker.bootstrap
    assert semel("topics", "create", "--topic", "cli-grow", "--partitions", 2,
                 bootstrap=b).returncode == 0
    result = semel("topics", "alter", "--topic", "cli-grow", "--partitions", 5,
                   "--config", "max.message.bytes=20000", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert len(admin.list_topics("cli-grow", timeout=TIMEOUT).topics["cli-grow"].partitions) == 5
    assert topic_configs(admin, "cli-grow")["max.message.bytes"].value == "20000"

    # configs alter: a list value in brackets, and a second key; then describe vs the wire
    result = semel("configs", "alter", "--entity-type", "topics", "--entity-name", "cli-grow",
                   "--add-config", "cleanup.policy=[compact,delete],segment.ms=3600000",
                   bootstrap=b)
    assert result.returncode == 0, result.stderr
    wire = topic_configs(admin, "cli-grow")
    assert wire["cleanup.policy"].value == "compact,delete"
    [resource] = semel("configs", "describe", "--topic", "cli-grow", bootstrap=b,
                       json_output=True).json["resources"]
    dynamic = {name: e.value for name, e in wire.items()
               if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert {c["name"]: c["value"] for c in resource["configs"]} == dynamic == {
        "cleanup.policy": "compact,delete", "segment.ms": "3600000", "max.message.bytes": "20000"}
    everything = semel("configs", "describe", "--topic", "cli-grow", "--all", bootstrap=b,
                       json_output=True).json["resources"][0]["configs"]
    assert {c["name"]: c["value"] for c in everything} == {n: e.value for n, e in wire.items()}

    result = semel("configs", "--alter", "--entity-type", "topics", "--entity-name", "cli-grow",
                   "--delete-config", "segment.ms", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert topic_configs(admin, "cli-grow")["segment.ms"].source == \
        ConfigSource.DEFAULT_CONFIG.value
    # deleting a key that is not set is refused, as kafka-configs does
    result = semel("configs", "alter", "--topic", "cli-grow", "--delete-config", "segment.ms",
                   bootstrap=b)
    assert result.returncode == 1
    assert result.error_line.startswith("semel configs alter: INVALID_CONFIG:")
    # fewer partitions: the broker's error, named
    result = semel("topics", "alter", "--topic", "cli-grow", "--partitions", 3, bootstrap=b)
    assert result.returncode == 1
    assert result.error_line.startswith("semel topics alter: INVALID_PARTITIONS:")


def test_broker_configs(cli_broker):
    b = cli_broker.bootstrap
    [resource] = semel("configs", "describe", "--entity-type", "brokers", "--all",
                       bootstrap=b, json_output=True).json["resources"]
    configs = {c["name"]: c for c in resource["configs"]}
    assert configs["super.users"]["value"] == "User:ANONYMOUS"
    assert configs["transaction.partition.verification.enable"]["value"] == "false"
    # dynamic broker configs: none until one is set; a key Kafka allows to change at runtime
    # is set and shown as DYNAMIC_BROKER_CONFIG, a static one refused (INVALID_REQUEST)
    broker = resource["entity_name"]

    def dynamic() -> dict[str, str]:
        configs = semel("configs", "describe", "--broker", broker, bootstrap=b,
                        json_output=True).json["resources"][0]["configs"]
        return {c["name"]: (c["value"], c["source"]) for c in configs}

    assert dynamic() == {}
    assert semel("configs", "alter", "--broker", broker, "--add-config",
                 "log.retention.ms=3600000", bootstrap=b).returncode == 0
    assert dynamic() == {"log.retention.ms": ("3600000", "DYNAMIC_BROKER_CONFIG")}
    result = semel("configs", "alter", "--broker", broker, "--add-config",
                   "log.dirs=/elsewhere", bootstrap=b)
    assert result.returncode == 1
    assert result.error_line.startswith("semel configs alter: INVALID_REQUEST:")
    assert semel("configs", "alter", "--broker", broker, "--delete-config",
                 "log.retention.ms", bootstrap=b).returncode == 0
    assert dynamic() == {}


def test_delete(cli_broker, admin):
    b = cli_broker.bootstrap
    assert semel("topics", "create", "--topic", "cli-doomed", bootstrap=b).returncode == 0
    assert "cli-doomed" in admin.list_topics(timeout=TIMEOUT).topics
    result = semel("topics", "delete", "--topic", "cli-doomed", bootstrap=b, json_output=True)
    assert result.json == {"deleted": ["cli-doomed"]}
    assert "cli-doomed" not in admin.list_topics(timeout=TIMEOUT).topics
    assert semel("topics", "delete", "--topic", "cli-doomed", "--if-exists",
                 bootstrap=b).returncode == 0


def test_errors_are_one_line_with_the_right_exit_code(cli_broker):
    b = cli_broker.bootstrap
    assert semel("topics", "create", "--topic", "cli-twice", bootstrap=b).returncode == 0
    again = semel("topics", "create", "--topic", "cli-twice", bootstrap=b)
    assert again.returncode == 1 and again.stdout == ""
    assert again.error_line.startswith("semel topics create: TOPIC_ALREADY_EXISTS:")
    assert semel("topics", "create", "--topic", "cli-twice", "--if-not-exists",
                 bootstrap=b).returncode == 0

    unknown = semel("topics", "describe", "--topic", "cli-no-such-topic", bootstrap=b)
    assert unknown.returncode == 1
    assert unknown.error_line.startswith("semel topics describe: UNKNOWN_TOPIC_OR_PARTITION:")
    unknown = semel("configs", "describe", "--topic", "cli-no-such-topic", bootstrap=b)
    assert unknown.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in unknown.error_line

    # nothing listens on port 1: a connection error, exit 2
    refused = semel("topics", "list", bootstrap="127.0.0.1:1")
    assert refused.returncode == 2
    assert refused.error_line.startswith("semel topics list: cannot connect to 127.0.0.1:1")
    for argv in (["topics", "list"],  # no --bootstrap-server
                 ["topics", "frobnicate", "--bootstrap-server", b],
                 ["topics", "create", "--topic", "x", "--partitions", "two",
                  "--bootstrap-server", b],
                 ["topics", "create", "--topic", "x", "--partitions", "0",
                  "--bootstrap-server", b],
                 ["topics", "list", "--bootstrap-server", "no-port"],
                 ["configs", "describe", "--bootstrap-server", b],  # no entity
                 ["groups", "reset-offsets", "--group", "g", "--all-topics",
                  "--bootstrap-server", b],  # no scenario
                 ["transactions", "abort", "--topic", "t", "--partition", "0",
                  "--bootstrap-server", b],  # neither --start-offset nor --producer-id
                 ["nonsense"]):
        result = semel(*argv)
        assert result.returncode == 2, argv
        assert result.stdout == ""
        assert result.error_line.startswith("semel"), argv
