"""Fault injection (semel_broker.faults) with real clients: every rule changes what a real
client sees, and the broker's answers stay exactly-once-correct."""

from __future__ import annotations

import contextlib
import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kafka import KafkaConsumer, KafkaProducer

from tests.javaclient import require_java, run_java
from tests.plugin.test_virtual_time import create, read_committed


def values_of(bootstrap: str, topic: str) -> list[bytes]:
    return read_committed(bootstrap, topic)


def test_retriable_errors_are_retried_without_duplicates(semel_broker, caplog):
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "flaky")
    caplog.set_level(logging.WARNING, logger="semel.faults")
    rule = semel_broker.faults.fail("Produce", "NOT_ENOUGH_REPLICAS", times=2, topic="flaky")
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "retry.backoff.ms": 10})
    for i in range(10):
        producer.produce("flaky", value=b"%d" % i)
    assert producer.flush(20) == 0
    assert rule.fired == 2 and rule.wait(0)
    assert values_of(bootstrap, "flaky") == [b"%d" % i for i in range(10)]
    assert "fault injection: Produce: fail with NOT_ENOUGH_REPLICAS (topic='flaky')" in caplog.text


def test_a_fatal_error_reaches_the_application(semel_broker):
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "denied")
    create(bootstrap, "other")
    semel_broker.faults.fail("Produce", "TOPIC_AUTHORIZATION_FAILED", topic="denied")
    producer = Producer({"bootstrap.servers": bootstrap})
    reports = []
    producer.produce("other", value=b"ok", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    producer.produce("denied", value=b"no", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[0] is None
    assert reports[1].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_delayed_response_past_the_request_timeout_is_retried_once(semel_broker):
    """kafka-python's idempotent producer times the first Produce out, sends it again, and
    the broker's producer state drops the duplicate."""
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "slow")
    rule = semel_broker.faults.delay("Produce", 3.0, topic="slow")
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                             request_timeout_ms=1000, retry_backoff_ms=50, linger_ms=0)
    try:
        producer.send("slow", b"once").get(timeout=30)
    finally:
        producer.close()
    assert rule.fired == 1
    assert values_of(bootstrap, "slow") == [b"once"]
    [state] = semel_broker.producers("slow", 0)
    assert state.last_sequence == 0


def test_a_disconnected_client_reconnects(semel_broker):
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "dropped")
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="to-drop")
    producer.send("dropped", b"1").get(timeout=10)
    assert semel_broker.faults.disconnect(client_id="to-drop") >= 1
    assert semel_broker.faults.disconnect(client_id="nobody") == 0
    producer.send("dropped", b"2").get(timeout=10)
    producer.close()
    consumer = KafkaConsumer("dropped", bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    assert [m.value for m in consumer] == [b"1", b"2"]
    consumer.close()


def test_a_transaction_held_between_prepare_and_complete(semel_broker):
    """EndTxn is answered once PREPARE_COMMIT is durable; while the markers are held back
    read_committed readers see nothing (the LSO stays), and everything once released."""
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "held")
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "held-1"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("held", value=b"%d" % i)
    with semel_broker.faults.pause_transaction("held-1") as pause:
        producer.commit_transaction(10)
        assert pause.wait(10) and pause.held == "held-1"
        assert semel_broker.transaction("held-1").state == "PrepareCommit"
        assert semel_broker.partition("held", 0).last_stable_offset == 0
        assert values_of(bootstrap, "held") == []
    assert values_of(bootstrap, "held") == [b"0", b"1", b"2"]
    assert semel_broker.transaction("held-1").state == "CompleteCommit"


def test_java_commit_whose_response_is_lost(semel_broker):
    """The EndTxn that commits is run, and its connection closed instead of the answer:
    Java's producer retries EndTxn, learns the commit happened, and the records are there
    once; a failed InitProducerId (coordinator loading) is retried too."""
    require_java()
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "lost-answer")
    init = semel_broker.faults.fail("InitProducerId", "COORDINATOR_LOAD_IN_PROGRESS", times=2,
                                    transactional_id="java-lost")
    end = semel_broker.faults.drop_response("EndTxn", disconnect=True,
                                            transactional_id="java-lost")
    [summary] = run_java("txn-produce", "--bootstrap", bootstrap, "--topic", "lost-answer",
                         "--count", "30", "--per-txn", "10", "--transactional-id", "java-lost")
    assert init.fired == 2 and end.fired == 1
    assert summary["committed_transactions"] == 3
    assert len(values_of(bootstrap, "lost-answer")) == 30


def test_disk_full_fails_the_write_and_keeps_what_was_stored(semel_broker_factory):
    broker = semel_broker_factory()
    create(broker.bootstrap, "full")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    producer.produce("full", value=b"kept")
    producer.flush(10)
    broker.faults.disk_full(path_contains="full-0")
    reports = []
    producer.produce("full", value=b"lost", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[0].code() == KafkaError.KAFKA_STORAGE_ERROR
    broker.faults.clear()
    producer.produce("full", value=b"after", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[1] is None
    broker.restart()
    assert values_of(broker.bootstrap, "full") == [b"kept", b"after"]


def test_a_failed_fsync_is_not_acknowledged(semel_broker_factory):
    """log.flush.mode=fsync: the write whose fsync fails is answered KAFKA_STORAGE_ERROR and
    taken back; the next one is stored."""
    broker = semel_broker_factory({"log.flush.mode": "fsync"})
    create(broker.bootstrap, "synced")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0})
    producer.produce("synced", value=b"kept")
    producer.flush(10)
    broker.faults.fail_fsync(path_contains="synced-0")
    reports = []
    producer.produce("synced", value=b"unsure", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[0].code() == KafkaError.KAFKA_STORAGE_ERROR
    assert broker.partition("synced", 0).log_end_offset == 1
    producer.produce("synced", value=b"next", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert reports[1] is None
    assert values_of(broker.bootstrap, "synced") == [b"kept", b"next"]


@pytest.mark.parametrize("point", ["txn.prepared", "txn.markers-written"])
def test_sigkill_inside_a_commit_completes_it_after_restart(semel_broker_factory, point):
    """The broker dies between PREPARE_COMMIT and COMPLETE_COMMIT; restarted on the same
    data, it completes the commit from its log: the records are there, once."""
    broker = semel_broker_factory(subprocess=True, kill_points=True)
    create(broker.bootstrap, "killed")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "k-1",
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("killed", value=b"%d" % i)
    producer.flush(10)
    broker.arm_kill(point)
    with contextlib.suppress(KafkaException):  # the broker may die before it answers
        producer.commit_transaction(5)
    assert broker.wait_killed(30) == -9
    assert f"fault injection: SIGKILL at {point}" in "".join(broker.lines)
    broker.start()
    assert values_of(broker.bootstrap, "killed") == [b"0", b"1", b"2", b"3"]


def test_sigkill_before_the_produce_response(semel_broker_factory):
    broker = semel_broker_factory(subprocess=True, kill_points=True)
    create(broker.bootstrap, "unanswered")
    broker.arm_kill("response:Produce")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 60000, "reconnect.backoff.ms": 50})
    producer.produce("unanswered", value=b"once")
    producer.poll(1)
    assert broker.wait_killed(30) == -9
    broker.start()
    assert producer.flush(30) == 0
    assert values_of(broker.bootstrap, "unanswered") == [b"once"]


def test_a_dropped_produce_response_is_retried_once_by_aiokafka(semel_broker):
    """The broker stores the batch and never answers: aiokafka's request times out, it sends
    the batch again on a new connection, and the producer state answers the duplicate."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    bootstrap = semel_broker.bootstrap
    create(bootstrap, "unanswered-once")
    rule = semel_broker.faults.drop_response("Produce", topic="unanswered-once")

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    request_timeout_ms=1000, retry_backoff_ms=50)
        await producer.start()
        try:
            await asyncio.wait_for(producer.send_and_wait("unanswered-once", b"once"), 30)
        finally:
            await producer.stop()

    asyncio.run(run())
    assert rule.fired == 1
    assert values_of(bootstrap, "unanswered-once") == [b"once"]
    assert semel_broker.partition("unanswered-once", 0).log_end_offset == 1


def test_sigkill_as_end_txn_arrives_and_the_commit_is_retried(semel_broker_factory):
    """The broker dies before it runs EndTxn; librdkafka's commit_transaction keeps going,
    and once the broker is back it commits: the records are there, once."""
    import threading

    broker = semel_broker_factory(subprocess=True, kill_points=True)
    create(broker.bootstrap, "retried-commit")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "rc-1",
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("retried-commit", value=b"%d" % i)
    producer.flush(10)
    broker.arm_kill("request:EndTxn")
    outcome = []
    committer = threading.Thread(target=lambda: outcome.append(
        producer.commit_transaction(60)))
    committer.start()
    assert broker.wait_killed(30) == -9
    broker.start()
    committer.join(60)
    assert outcome == [None]
    assert values_of(broker.bootstrap, "retried-commit") == [b"0", b"1", b"2"]


def test_a_failed_acks_0_produce_is_not_stored(semel_broker):
    """acks=0: the failed request is not run (and, as any acks=0 produce, not answered); the
    producer's next request goes through on the same connection."""
    bootstrap = semel_broker.bootstrap
    create(bootstrap, "fire-and-forget")
    rule = semel_broker.faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER",
                                    topic="fire-and-forget")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=0, linger_ms=0)
    producer.send("fire-and-forget", b"dropped").get(timeout=10)
    producer.flush(10)
    assert rule.wait(10)
    producer.send("fire-and-forget", b"kept").get(timeout=10)
    producer.flush(10)
    producer.close()
    consumer = KafkaConsumer("fire-and-forget", bootstrap_servers=bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=3000)
    assert [m.value for m in consumer] == [b"kept"]
    consumer.close()
