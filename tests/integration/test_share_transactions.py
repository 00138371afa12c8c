"""Share groups over transactional data with confluent-kafka's ShareConsumer (librdkafka
2.16) over real sockets: the group's ``share.isolation.level`` (a group config set with
IncrementalAlterConfigs) decides what members are given.

At read_committed a share-partition reads only up to the last stable offset: records of
aborted transactions are archived (never delivered) and an open transaction's records -
and everything after them - are delivered only once it commits. At read_uncommitted
(the default) every data record is delivered, aborted or open ones included.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from semel.broker.testing import BrokerThread

TOPIC = "share-txn-topic"


def set_group_configs(b: BrokerThread, group: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)


@pytest.fixture
def broker(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        yield b


def transactional_producer(b: BrokerThread, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn_id,
                  "linger.ms": 0})
    p.init_transactions(30)
    return p


def send_transaction(p: Producer, values: list[str], commit: bool | None) -> None:
    """One transaction of ``values``: committed, aborted, or (None) left open."""
    p.begin_transaction()
    for v in values:
        p.produce(TOPIC, v.encode())
    assert p.flush(30) == 0
    if commit is True:
        p.commit_transaction(30)
    elif commit is False:
        p.abort_transaction(30)


def plain_produce(b: BrokerThread, values: list[str]) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for v in values:
        p.produce(TOPIC, v.encode())
    assert p.flush(30) == 0


def share_consumer(b: BrokerThread, group: str) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    c.subscribe([TOPIC])
    return c


def values(c: ShareConsumer, want: int, deadline_s: float = 30) -> list[str]:
    """Poll until ``want`` records arrived or the deadline passed (implicit acks)."""
    got: list[str] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        for m in c.poll(0.5):
            assert m.error() is None, m.error()
            got.append(m.value().decode())
    return got


def test_read_committed_skips_aborted_and_waits_for_open(broker):
    """Committed, aborted, committed, then an open transaction followed by plain records:
    a read_committed share group gets the committed records only, nothing at or above
    the last stable offset until the open transaction commits, and never an aborted one."""
    group = "share-rc"
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest",
                                      "share.isolation.level": "read_committed"})
    p = transactional_producer(broker, "share-txn-1")
    send_transaction(p, ["c0", "c1", "c2"], commit=True)
    send_transaction(p, ["a0", "a1", "a2"], commit=False)
    send_transaction(p, ["c3", "c4"], commit=True)
    send_transaction(p, ["o0", "o1"], commit=None)  # open: the LSO stays at o0
    plain_produce(broker, ["n0", "n1"])  # above the LSO while the transaction is open
    c = share_consumer(broker, group)
    try:
        got = values(c, 5)
        assert got == ["c0", "c1", "c2", "c3", "c4"]
        assert values(c, 1, deadline_s=3) == []  # o0.. are above the LSO
        p.commit_transaction(30)
        got = values(c, 4)
        assert got == ["o0", "o1", "n0", "n1"]
        send_transaction(p, ["a3"], commit=False)
        send_transaction(p, ["c5"], commit=True)
        assert values(c, 1) == ["c5"]
        assert values(c, 1, deadline_s=3) == []
    finally:
        c.close()
    offsets = broker.call(_offsets(broker, group))
    # everything up to the last commit marker is finished: the start offset passed it
    assert offsets == (broker.call(_end_offset(broker)), 0)


def test_read_uncommitted_delivers_aborted_and_open(broker):
    """The default isolation level: aborted and open transactions' records are delivered
    (the markers are not)."""
    group = "share-ru"
    set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
    p = transactional_producer(broker, "share-txn-2")
    send_transaction(p, ["c0", "c1"], commit=True)
    send_transaction(p, ["a0", "a1"], commit=False)
    send_transaction(p, ["o0"], commit=None)
    plain_produce(broker, ["n0"])
    c = share_consumer(broker, group)
    try:
        assert values(c, 6) == ["c0", "c1", "a0", "a1", "o0", "n0"]
        assert values(c, 1, deadline_s=3) == []
    finally:
        c.close()
        p.abort_transaction(30)


async def _offsets(b: BrokerThread, group: str) -> tuple[int, int]:
    info = b.broker.log_manager.topics[TOPIC]
    offsets = b.broker.share_manager.describe_offsets(group, info.topic_id, 0)
    return offsets.start_offset, offsets.lag


async def _end_offset(b: BrokerThread) -> int:
    return b.broker.log_manager.get_partition(TOPIC, 0).high_watermark
