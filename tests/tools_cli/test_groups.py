"""``semel groups`` against a broker with a real consumer group (confluent-kafka): describe
shows the committed offsets, log end offsets, lag and members the clients see; reset-offsets
changes what a consumer of the group reads as committed (only with --execute, only while the
group is inactive); delete removes the group for the AdminClient too."""

from __future__ import annotations

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.tools_cli.semel_cli import semel

TIMEOUT = 30
TOPIC, GROUP = "cli-group-topic", "cli-group"
PER_PARTITION = 10


def committed(bootstrap: str, group: str, partitions: int = 3) -> list[int]:
    """The group's committed offsets, read by a consumer of the group (-1001: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed(
            [TopicPartition(TOPIC, p) for p in range(partitions)], timeout=TIMEOUT)]
    finally:
        consumer.close()


def test_describe_reset_and_delete(cli_broker):
    b = cli_broker.bootstrap
    assert semel("topics", "create", "--topic", TOPIC, "--partitions", 3,
                 bootstrap=b).returncode == 0
    producer = Producer({"bootstrap.servers": b, "linger.ms": 1})
    for i in range(3 * PER_PARTITION):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % 3)
    assert producer.flush(TIMEOUT) == 0

    consumer = Consumer({"bootstrap.servers": b, "group.id": GROUP, "client.id": "cli-test",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    for _ in range(300):
        if len(consumer.assignment()) == 3:
            break
        consumer.poll(0.1)
    assert len(consumer.assignment()) == 3
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 4), TopicPartition(TOPIC, 1, 7)],
                    asynchronous=False)
    member_id = consumer.memberid()

    [group] = semel("groups", "describe", "--group", GROUP, bootstrap=b,
                    json_output=True).json["groups"]
    assert group["state"] == "Stable" and group["protocol_type"] == "consumer"
    [member] = group["members"]
    assert member["consumer_id"] == member_id and member["client_id"] == "cli-test"
    assert sorted(map(tuple, member["assignment"])) == [(TOPIC, p) for p in range(3)]
    ends = [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), TIMEOUT)[1]
            for p in range(3)]
    assert ends == [PER_PARTITION] * 3
    rows = {o["partition"]: o for o in group["offsets"]}
    assert [(rows[p]["current_offset"], rows[p]["log_end_offset"], rows[p]["lag"],
             rows[p]["consumer_id"]) for p in range(3)] == [
        (4, ends[0], ends[0] - 4, member_id), (7, ends[1], ends[1] - 7, member_id),
        (None, ends[2], None, member_id)]
    text = semel("groups", "describe", "--group", GROUP, bootstrap=b).stdout.splitlines()
    assert text[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                               "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert text[1].split()[:7] == [GROUP, TOPIC, "0", "4", str(ends[0]), str(ends[0] - 4),
                                   member_id]
    assert semel("groups", "describe", "--group", GROUP, "--state", bootstrap=b,
                 json_output=True).json["groups"][0]["assignor"] == "range"

    # an active group cannot be reset
    busy = semel("groups", "reset-offsets", "--group", GROUP, "--all-topics", "--to-earliest",
                 "--execute", bootstrap=b)
    assert busy.returncode == 1
    assert busy.error_line.startswith("semel groups reset-offsets: NON_EMPTY_GROUP:")
    consumer.close()

    admin = AdminClient({"bootstrap.servers": b})
    listed = {g["group"]: g for g in semel("groups", "list", bootstrap=b,
                                           json_output=True).json["groups"]}
    wire = admin.list_consumer_groups().result(TIMEOUT)
    assert {g.group_id for g in wire.valid} == set(listed)
    assert listed[GROUP]["state"] == "Empty"

    # a dry run changes nothing
    plan = semel("groups", "reset-offsets", "--group", GROUP, "--topic", TOPIC,
                 "--to-offset", 3, bootstrap=b, json_output=True).json
    assert plan["executed"] is False
    assert [(o["partition"], o["new_offset"]) for o in plan["offsets"]] == [(0, 3), (1, 3),
                                                                            (2, 3)]
    assert committed(b, GROUP) == [4, 7, -1001]

    result = semel("groups", "reset-offsets", "--group", GROUP, "--topic", TOPIC,
                   "--to-offset", 3, "--execute", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert committed(b, GROUP) == [3, 3, 3]
    # shifted past the end: clamped to the log end offset, with a warning
    result = semel("groups", "reset-offsets", "--group", GROUP, "--topic", f"{TOPIC}:0,2",
                   "--shift-by", 100, "--execute", bootstrap=b)
    assert result.returncode == 0 and "higher than the latest offset" in result.stderr
    assert committed(b, GROUP) == [PER_PARTITION, 3, PER_PARTITION]
    result = semel("groups", "--reset-offsets", "--group", GROUP, "--topic", f"{TOPIC}:1",
                   "--to-earliest", "--execute", bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert committed(b, GROUP) == [PER_PARTITION, 0, PER_PARTITION]
    offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(GROUP)])
    assert sorted((tp.partition, tp.offset) for tp in offsets[GROUP].result(TIMEOUT)
                  .topic_partitions) == [(0, PER_PARTITION), (1, 0), (2, PER_PARTITION)]
    # the lag follows
    rows = semel("groups", "describe", "--group", GROUP, bootstrap=b,
                 json_output=True).json["groups"][0]["offsets"]
    assert [(o["lag"], o["consumer_id"]) for o in rows] == [
        (0, None), (PER_PARTITION, None), (0, None)]

    result = semel("groups", "delete", "--group", GROUP, bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert GROUP not in {g.group_id for g in admin.list_consumer_groups().result(TIMEOUT).valid}
    for argv in (["describe", "--group", GROUP], ["delete", "--group", GROUP]):
        gone = semel("groups", *argv, bootstrap=b)
        assert gone.returncode == 1
        assert "GROUP_ID_NOT_FOUND" in gone.error_line
