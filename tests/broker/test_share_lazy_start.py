"""The share-partition manager is made on first use (issue 18): a broker without share state
starts without it, answers what reads share state (ListGroups, metrics, the group id checks,
the time jobs) as a broker without share groups, makes it - started - with the first share
request, and makes and loads it at start once ``__share_group_state`` is on disk, so a
restart keeps the share state. (test_startup_imports checks the modules a start loads.)"""

from __future__ import annotations

from semel.broker.testing import BrokerThread
from tests.kafka_wire import KafkaWire, message
from tests.metrics.test_metrics_page import scrape

LIST_GROUPS = 16
DESCRIBE_OFFSETS, ALTER_OFFSETS = 90, 91
TOPIC, GROUP = "lazy-share-topic", "lazy-share-group"


def describe_offsets(wire: KafkaWire) -> dict[int, int]:
    group = message(DESCRIBE_OFFSETS, "request", "DescribeShareGroupOffsetsRequestGroup",
                    group_id=GROUP, topics=[message(
                        DESCRIBE_OFFSETS, "request", "DescribeShareGroupOffsetsRequestTopic",
                        topic_name=TOPIC, partitions=[0, 1])])
    resp = wire.request(DESCRIBE_OFFSETS, 0, message(DESCRIBE_OFFSETS, "request",
                                                      groups=[group]))
    [answer] = resp.groups
    assert answer.error_code == 0, answer
    return {p.partition_index: p.start_offset for t in answer.topics for p in t.partitions}


def alter_offsets(wire: KafkaWire, offsets: dict[int, int]) -> None:
    resp = wire.request(ALTER_OFFSETS, 0, message(
        ALTER_OFFSETS, "request", group_id=GROUP, topics=[message(
            ALTER_OFFSETS, "request", "AlterShareGroupOffsetsRequestTopic", topic_name=TOPIC,
            partitions=[message(ALTER_OFFSETS, "request",
                                "AlterShareGroupOffsetsRequestPartition",
                                partition_index=p, start_offset=o)
                        for p, o in offsets.items()])]))
    assert resp.error_code == 0, resp
    assert [p.error_code for t in resp.responses for p in t.partitions] == [0] * len(offsets)


def list_groups(wire: KafkaWire) -> list[tuple[str, str]]:
    resp = wire.request(LIST_GROUPS, 5, message(LIST_GROUPS, "request", types_filter=[]))
    assert resp.error_code == 0
    return [(g.group_id, g.group_type) for g in resp.groups]


def test_made_by_the_first_share_request_and_loaded_at_the_next_start(tmp_path):
    with BrokerThread(tmp_path / "data", {"metrics.listener": "127.0.0.1:0"}) as b:
        async def create_topic() -> None:
            b.broker.log_manager.create_topic(TOPIC, 2, {})

        b.call(create_topic())
        with KafkaWire.connect(b.bootstrap) as wire:
            assert list_groups(wire) == []
            b.advance(seconds=5)  # the time jobs, lock expiry among them
            assert "semel_share_delivered_records_total" not in scrape(b.broker.metrics_port)
            # no share state: a group id is not a share group's
            assert not b.broker._is_share_group(GROUP)
            assert b.broker.share_manager_if_made is None
            # the first share request makes the manager, started
            assert describe_offsets(wire) == {0: -1, 1: -1}
            manager = b.broker.share_manager_if_made
            assert manager is not None and manager.active
            alter_offsets(wire, {0: 0, 1: 0})
            assert describe_offsets(wire) == {0: 0, 1: 0}
            assert b.broker._is_share_group(GROUP)
            assert (GROUP, "share") in list_groups(wire)
        assert "__share_group_state" in b.broker.log_manager.topics
        b.restart()
        # the state topic is on disk: made and loaded at start, before any request
        manager = b.broker.share_manager_if_made
        assert manager is not None and manager.active
        assert {key.partition for key in manager.store.states if key.group_id == GROUP} \
            == {0, 1}
        with KafkaWire.connect(b.bootstrap) as wire:
            assert describe_offsets(wire) == {0: 0, 1: 0}
