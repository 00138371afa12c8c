"""Share group metrics (KIP-932) on the /metrics page, scraped over HTTP after confluent-kafka
ShareConsumers worked a topic: in-flight and acquired records per share-partition, records
delivered and redelivered per group, members.
"""

from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from semel.broker.testing import BrokerThread
from tests.metrics.test_metrics_page import scrape, value

TOPIC, GROUP = "share-metrics", "share-metrics-group"


def poll_until(c: ShareConsumer, want: int, deadline_s: float = 30) -> list:
    got: list = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        got += [m for m in c.poll(0.5) if m.error() is None]
    return got


def test_share_metrics(tmp_path):
    with BrokerThread(tmp_path / "data", {"metrics.listener": "127.0.0.1:0"}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
        for i in range(10):
            p.produce(TOPIC, f"v{i}".encode())
        assert p.flush(30) == 0
        labels = {"group": GROUP, "topic": TOPIC, "partition": "0"}
        c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP,
                           "share.acknowledgement.mode": "explicit"})
        c.subscribe([TOPIC])
        try:
            first = poll_until(c, 10)
            assert len(first) == 10
            samples = scrape(b.broker.metrics_port)
            # all ten delivered once and held by the member
            assert value(samples, "semel_share_inflight_records", **labels) == 10
            assert value(samples, "semel_share_acquired_records", **labels) == 10
            assert value(samples, "semel_share_inflight_records_sum", group=GROUP) == 10
            assert value(samples, "semel_share_delivered_records_total", group=GROUP) == 10
            assert value(samples, "semel_share_redelivered_records_total", group=GROUP) == 0
            assert value(samples, "semel_share_group_members", group=GROUP) == 1
            # accept the first six, release the last four: they come again (count 2)
            for m in first:
                c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 6
                              else AcknowledgeType.RELEASE)
            c.commit_sync()
            again = poll_until(c, 4)
            assert sorted(m.offset() for m in again) == [6, 7, 8, 9]
            samples = scrape(b.broker.metrics_port)
            assert value(samples, "semel_share_inflight_records", **labels) == 4
            assert value(samples, "semel_share_acquired_records", **labels) == 4
            assert value(samples, "semel_share_delivered_records_total", group=GROUP) == 14
            assert value(samples, "semel_share_redelivered_records_total", group=GROUP) == 4
            for m in again:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            c.commit_sync()
            samples = scrape(b.broker.metrics_port)
            assert value(samples, "semel_share_inflight_records", **labels) == 0
            assert value(samples, "semel_share_acquired_records", **labels) == 0
        finally:
            c.close()
        samples = scrape(b.broker.metrics_port)
        assert value(samples, "semel_share_group_members", group=GROUP) == 0
