"""Compaction seen by a real client (confluent-kafka): keyed records with updates and
tombstones, some in committed and some in aborted transactions, interleaved with a plain
idempotent producer on the same partition; the broker's cleaner (run on demand:
``LogManager.run_cleaner_once``) compacts the topic; read_committed and read_uncommitted
consumers from offset 0 then see the latest value per key, no aborted record, increasing
offsets with gaps; after the delete horizon the tombstones are gone; the idempotent
producer keeps producing after its records were compacted away, also after a restart."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from semel.broker.testing import BrokerThread

DELETE_RETENTION_MS = 60_000


class Clock:
    def __init__(self) -> None:
        import time

        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


def consume_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    try:
        while True:
            msg = c.poll(10)
            assert msg is not None, "no end of partition"
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    return out
                raise KafkaException(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        c.close()


def latest(records):
    result = {}
    for offset, key, value in records:
        result[key] = (offset, value)
    return result


def test_compacted_topic_through_confluent_kafka(tmp_path):
    clock = Clock()
    overrides = {"log.cleaner.enable": "false"}  # cleanings run on demand below
    bt = BrokerThread(tmp_path / "d", overrides, clock=clock)
    with bt:
        bootstrap = bt.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = "compacted"
        admin.create_topics([NewTopic(topic, 1, config={
            "cleanup.policy": "compact", "segment.bytes": "2000",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": str(DELETE_RETENTION_MS)})])[topic].result(30)
        plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                          "linger.ms": 0})
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-compact",
                        "linger.ms": 0})
        txn.init_transactions(30)
        aborted_values = set()
        for round_ in range(12):
            for k in range(5):
                plain.produce(topic, key=b"k%d" % k, value=b"plain-%d-%d" % (round_, k),
                              partition=0)
                plain.flush(30)
            txn.begin_transaction()
            value = b"txn-%d" % round_
            txn.produce(topic, key=b"k%d" % (round_ % 5), value=value, partition=0)
            txn.produce(topic, key=b"t%d" % round_, value=value, partition=0)
            txn.flush(30)  # written before the abort, which would otherwise purge them
            if round_ % 3 == 0:
                txn.abort_transaction(30)
                aborted_values.add(value)
            else:
                txn.commit_transaction(30)
        plain.produce(topic, key=b"k0", value=None, partition=0)  # a tombstone
        for i in range(30):  # past the tombstone, enough to roll it out of the active segment
            plain.produce(topic, key=b"zz", value=b"last-%d" % i, partition=0)
            plain.flush(30)

        before_committed = consume_all(bootstrap, topic, "read_committed")
        before_uncommitted = consume_all(bootstrap, topic, "read_uncommitted")
        assert any(v in aborted_values for _, _, v in before_uncommitted)

        async def clean():
            return await bt.broker.log_manager.run_cleaner_once()

        result = bt.call(clean())
        assert result is not None and result.bytes_after < result.bytes_before
        metric = bt.broker.metrics.registry.get_sample_value
        assert metric("semel_log_cleaner_runs") == 1
        assert metric("semel_log_cleaner_bytes_reclaimed") == (
            result.bytes_before - result.bytes_after)
        assert metric("semel_log_cleaner_seconds_since_last_run") == 0
        assert 0 < metric("semel_log_cleaner_max_dirty_ratio") <= 1
        assert metric("semel_log_cleaner_process_peak_rss_bytes") > 1 << 20
        assert metric("semel_log_cleaner_partition_seconds_since_last_clean",
                      {"topic": topic, "partition": "0"}) == 0
        clock.ms += 5_000
        assert metric("semel_log_cleaner_partition_seconds_since_last_clean",
                      {"topic": topic, "partition": "0"}) == 5
        after_committed = consume_all(bootstrap, topic, "read_committed")
        after_uncommitted = consume_all(bootstrap, topic, "read_uncommitted")
        assert len(after_committed) < len(before_committed)
        # the latest value of every key, at its offset; nothing aborted, even uncommitted
        assert latest(after_committed) == latest(before_committed)
        assert not {v for _, _, v in after_uncommitted} & aborted_values
        offsets = [o for o, _, _ in after_committed]
        assert offsets == sorted(set(offsets)) and offsets[-1] == before_committed[-1][0]
        assert (b"k0", None) in [(k, v) for _, k, v in after_committed]  # within its horizon

        # the idempotent producer goes on after its batches were compacted away; its new
        # records make a dirty range again (a cleaning rewrites the log from its start, so
        # the next one also drops the tombstone once its horizon has passed)
        for i in range(40):
            plain.produce(topic, key=b"k1", value=b"after-clean-%d" % i, partition=0)
            assert plain.flush(30) == 0
        clock.ms += DELETE_RETENTION_MS + 1
        assert bt.call(clean()) is not None
        final = consume_all(bootstrap, topic, "read_committed")
        assert (b"k0", None) not in [(k, v) for _, k, v in final]
        assert latest(final)[b"k1"][1] == b"after-clean-39"
        # duplicates left only in the active segment, which is never cleaned
        assert len([v for _, k, v in final if k == b"k1"]) < 40

    with BrokerThread(tmp_path / "d", overrides, clock=clock) as again:
        producer = Producer({"bootstrap.servers": again.bootstrap, "enable.idempotence": True})
        producer.produce(topic, key=b"k2", value=b"after-restart", partition=0)
        assert producer.flush(30) == 0
        reread = consume_all(again.bootstrap, topic, "read_committed")
        assert latest(reread)[b"k2"][1] == b"after-restart"
        assert {k: v for k, v in latest(reread).items() if k != b"k2"} == {
            k: v for k, v in latest(final).items() if k != b"k2"}


def internal_logs(bt: BrokerThread):
    return [plog for tp, plog in bt.broker.log_manager.logs.items()
            if tp.topic in ("__consumer_offsets", "__transaction_state")]


def test_coordinators_load_their_compacted_internal_topics(tmp_path):
    """__consumer_offsets and __transaction_state (created compacted) cleaned after many
    offset commits and transactions: they shrink, and after a restart the group coordinator
    returns the latest committed offsets and the transaction coordinator resumes the
    transactional id."""
    overrides = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
                 "group.initial.rebalance.delay.ms": "0"}
    async def roll_internal():
        for plog in internal_logs(bt):
            plog.roll()

    async def clean_all():
        results = []
        while (result := await bt.broker.log_manager.run_cleaner_once()) is not None:
            results.append(result)
        return results

    with BrokerThread(tmp_path / "d", overrides) as bt:
        admin = AdminClient({"bootstrap.servers": bt.bootstrap})
        admin.create_topics([NewTopic("data", 2)])["data"].result(30)
        consumer = Consumer({"bootstrap.servers": bt.bootstrap, "group.id": "g",
                             "enable.auto.commit": False})
        txn = Producer({"bootstrap.servers": bt.bootstrap, "transactional.id": "tx-internal",
                        "linger.ms": 0})
        txn.init_transactions(30)
        for i in range(1, 201):
            consumer.commit(offsets=[TopicPartition("data", i % 2, i)], asynchronous=False)
            if i % 20 == 0:
                txn.begin_transaction()
                txn.produce("data", value=b"v%d" % i, partition=0)
                txn.commit_transaction(30)
            if i % 50 == 0:
                bt.call(roll_internal())
        consumer.close()
        bt.call(roll_internal())
        before = sum(p.size_in_bytes for p in internal_logs(bt))
        results = bt.call(clean_all())
        after = sum(p.size_in_bytes for p in internal_logs(bt))
        assert {r.topic_partition.topic for r in results} == {"__consumer_offsets",
                                                             "__transaction_state"}
        assert after < before / 3, (before, after)

    with BrokerThread(tmp_path / "d", overrides) as again:
        consumer = Consumer({"bootstrap.servers": again.bootstrap, "group.id": "g",
                             "enable.auto.commit": False})
        committed = consumer.committed([TopicPartition("data", 0), TopicPartition("data", 1)],
                                       timeout=30)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 200), (1, 199)]
        consumer.close()
        txn = Producer({"bootstrap.servers": again.bootstrap,
                        "transactional.id": "tx-internal", "linger.ms": 0})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn.produce("data", value=b"after", partition=0)
        txn.commit_transaction(30)
        got = consume_all(again.bootstrap, "data", "read_committed")
        assert [v for _, _, v in got][-1] == b"after" and len(got) == 11
