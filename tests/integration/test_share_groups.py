"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.16) over real
sockets: ShareGroupHeartbeat, ShareFetch and ShareAcknowledge v1 against the broker.

The group's ``share.auto.offset.reset`` is set to earliest (IncrementalAlterConfigs on the
group), so records produced before the consumers join are delivered.
"""

from __future__ import annotations

import time

import pytest
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
from tests.kafka_wire import KafkaWire, message

TOPIC = "share-topic"
GROUP = "share-group"
OTHER = "share-other-topic"
LIST_GROUPS, SHARE_GROUP_DESCRIBE = 16, 77


@pytest.fixture
def broker(tmp_path):
    with BrokerThread(tmp_path / "data") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
        resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        yield b


def produce(b: BrokerThread, count: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    for i in range(start, start + count):
        p.produce(TOPIC, f"v{i}".encode())
    assert p.flush(30) == 0


def consumer(b: BrokerThread, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": b.bootstrap, "group.id": GROUP,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([TOPIC])
    return c


def poll(c: ShareConsumer, timeout: float = 1.0) -> list:
    msgs = list(c.poll(timeout))
    for m in msgs:
        assert m.error() is None, m.error()
    return msgs


def poll_until(c: ShareConsumer, want: int, deadline_s: float = 30) -> list:
    got: list = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        got += poll(c)
    return got


def test_consumers_share_a_partition_each_record_once(broker):
    """Three consumers on one partition: every record reaches exactly one of them, and
    accepted records are not delivered again."""
    produce(broker, 300)
    consumers = [consumer(broker) for _ in range(3)]
    seen: dict[int, int] = {}
    per_consumer = [0, 0, 0]
    end = time.monotonic() + 60
    try:
        while len(seen) < 300 and time.monotonic() < end:
            for i, c in enumerate(consumers):
                for m in poll(c, 0.3):
                    seen[m.offset()] = seen.get(m.offset(), 0) + 1
                    per_consumer[i] += 1
        for c in consumers:  # the implicit acks of the last poll go with the next poll
            for m in poll(c, 0.5):
                seen[m.offset()] = seen.get(m.offset(), 0) + 1
        group = broker.call(_group(broker))
        # the simple assignor gives every member the single partition
        assert group.group_state == "Stable" and len(group.members) == 3
        assert all([(tp.topic_name, tp.partitions) for tp in m.assignment.topic_partitions]
                   == [(TOPIC, [0])] for m in group.members)
    finally:
        for c in consumers:
            c.close()
    assert sorted(seen) == list(range(300))
    assert set(seen.values()) == {1}
    assert sum(per_consumer) == 300


async def _group(b: BrokerThread):
    return b.broker.share_membership.describe(GROUP)


def test_released_redelivered_rejected_archived(broker):
    produce(broker, 6)
    c = consumer(broker, explicit=True)
    try:
        first = poll_until(c, 6)
        assert [m.offset() for m in first] == list(range(6))
        assert all(m.delivery_count() == 1 for m in first)
        for m in first:
            kind = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}.get(
                m.offset() % 3, AcknowledgeType.ACCEPT)
            c.acknowledge(m, kind)
        c.commit_sync()
        again = poll_until(c, 2)
        assert sorted(m.offset() for m in again) == [0, 3]
        assert all(m.delivery_count() == 2 for m in again)
        for m in again:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync()
        assert poll_until(c, 1, deadline_s=3) == []
    finally:
        c.close()


def test_close_without_ack_releases_to_other_member(broker):
    produce(broker, 5)
    a = consumer(broker, explicit=True)
    got = poll_until(a, 5)
    assert len(got) == 5
    b = consumer(broker)
    try:
        assert poll(b, 2) == []  # all five are acquired by a
        a.close()  # leaves the group without acknowledging: the records are released
        again = poll_until(b, 5)
        assert sorted(m.offset() for m in again) == list(range(5))
        assert all(m.delivery_count() == 1 for m in again)  # a release gives the count back
    finally:
        b.close()


def test_lock_expiry_redelivers(broker):
    """A member that holds records past group.share.record.lock.duration.ms (30 s; the
    broker's virtual clock moves) loses them to another member, with delivery count 2."""
    produce(broker, 4)
    a = consumer(broker, explicit=True)
    b = consumer(broker)
    try:
        held = poll_until(a, 4)
        assert len(held) == 4
        assert poll(b, 1) == []
        broker.advance(31)
        again = poll_until(b, 4)
        assert sorted(m.offset() for m in again) == list(range(4))
        assert all(m.delivery_count() == 2 for m in again)
    finally:
        a.close()
        b.close()


def test_delivery_count_limit_archives_poison_record(broker):
    """Released five times (group.share.delivery.count.limit), a record is archived."""
    produce(broker, 1)
    c = consumer(broker, explicit=True)
    try:
        for attempt in range(1, 6):
            msgs = poll_until(c, 1)
            assert [(m.offset(), m.delivery_count()) for m in msgs] == [(0, attempt)]
            c.acknowledge(msgs[0], AcknowledgeType.RELEASE)
            c.commit_sync()
        assert poll_until(c, 1, deadline_s=3) == []
        produce(broker, 1, start=1)
        assert [m.offset() for m in poll_until(c, 1)] == [1]
    finally:
        c.close()


def describe_group(bootstrap: str) -> tuple[int, dict[str, int], bool]:
    """(group epoch, member id -> member epoch, listed by ListGroups) of GROUP."""
    with KafkaWire.connect(bootstrap) as wire:
        resp = wire.request(SHARE_GROUP_DESCRIBE, 1, message(
            SHARE_GROUP_DESCRIBE, "request", group_ids=[GROUP]))
        (group,) = resp.groups
        assert group.error_code == 0, group.error_message
        listed = wire.request(LIST_GROUPS, 5, message(LIST_GROUPS, "request",
                                                      types_filter=["share"]))
        return (group.group_epoch, {m.member_id: m.member_epoch for m in group.members},
                GROUP in {g.group_id for g in listed.groups})


def test_acknowledgements_survive_sigkill(tmp_path):
    """A durable broker (fsync) is SIGKILLed after the first half of the records was
    acknowledged and restarted on the same port; the second half is produced then. The
    group's membership is in __consumer_offsets: the restarted broker knows the group, its
    member and epochs before anything else happens, and the consumer continues at its epoch
    (the acknowledgements are in __share_group_state). Every record ends up acknowledged
    exactly once: none acknowledged before the kill is delivered again."""
    from semel.broker.testing import BrokerProcess

    half = 100
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1),
                                           NewTopic(OTHER, 1, 1)]).values():
            future.result(30)
        resource = ConfigResource(ResourceType.GROUP, GROUP, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(30)
        produce(proc, half)
        c = consumer(proc, explicit=True)
        acked: list[int] = []
        failures: list[Exception] = []
        try:
            for target in (half, 2 * half):
                if target > half:
                    port = proc.port
                    # a member of another topic joins and leaves: the epoch moves past
                    # what a rejoin of the consumer into a forgotten group would give
                    other = ShareConsumer({"bootstrap.servers": proc.bootstrap,
                                           "group.id": GROUP})
                    other.subscribe([OTHER])
                    end = time.monotonic() + 30
                    while len(describe_group(proc.bootstrap)[1]) < 2 \
                            and time.monotonic() < end:
                        other.poll(0.5)
                    other.close()
                    before = describe_group(proc.bootstrap)
                    assert len(before[1]) == 1 and before[0] >= 3 and before[2], before
                    proc.kill()  # no clean shutdown: only what was fsynced counts
                    proc = BrokerProcess(tmp_path / "data", port=port).start()
                    # known from the log, the member still at its epoch: it did not rejoin
                    assert describe_group(proc.bootstrap) == before
                    produce(proc, half, start=half)
                end = time.monotonic() + 60
                while len(acked) < target and time.monotonic() < end:
                    try:
                        msgs = [m for m in c.poll(1.0) if m.error() is None]
                    except Exception as e:  # noqa: BLE001 - the broker is coming back
                        failures.append(e)
                        continue
                    for m in msgs:
                        c.acknowledge(m, AcknowledgeType.ACCEPT)
                    if not msgs:
                        continue
                    try:
                        results = c.commit_sync(30)
                    except Exception as e:  # noqa: BLE001 - not acknowledged: redelivered
                        failures.append(e)
                        continue
                    if all(error is None for error in results.values()):
                        acked += [m.offset() for m in msgs]
                assert len(acked) >= target, failures
        finally:
            c.close()
        assert sorted(acked) == list(range(2 * half))
    finally:
        proc.stop()
