"""Idempotent producers of real clients (librdkafka via confluent-kafka, Java kafka-clients
3.9.1) with enable.idempotence=true and max.in.flight.requests.per.connection=5, while the
durable broker (a subprocess) is SIGKILLed and restarted on the same port several times
mid-stream: the log holds every acknowledged record exactly once, at the offset its
acknowledgement named, nothing twice, and each partition in send order."""

from __future__ import annotations

import subprocess
import threading
import time

from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests.javaclient import java_command, produced_value, require_java
from tests.kafka_wire import (
    FETCH,
    KafkaWire,
    create_topic,
    decode_records,
    fetch_request,
    list_offsets_request,
)

PARTITIONS = 3
KILLS = 3
LIST_OFFSETS = 2


def read_partition(bootstrap: str, topic: str, partition: int) -> list:
    records = []
    with KafkaWire.connect(bootstrap) as wire:
        offset = 0
        while True:
            resp = wire.request(FETCH, 12, fetch_request([(topic, partition, offset)]))
            part = resp.responses[0].partitions[0]
            assert part.error_code == Error.NONE
            batch = [r for r in decode_records(part.records) if r.offset >= offset]
            if not batch:
                assert offset == part.high_watermark
                return records
            records.extend(batch)
            offset = batch[-1].offset + 1


def stored_records(bootstrap: str, topic: str) -> dict[int, list]:
    return {p: read_partition(bootstrap, topic, p) for p in range(PARTITIONS)}


def high_watermarks(bootstrap: str, topic: str) -> int:
    total = 0
    with KafkaWire.connect(bootstrap, timeout=5) as wire:
        for p in range(PARTITIONS):
            resp = wire.request(LIST_OFFSETS, 7, list_offsets_request(topic, p, -1))
            total += resp.topics[0].partitions[0].offset
    return total


def check_exactly_once(stored: dict[int, list], acked: dict[str, tuple[int, int]],
                       index_of) -> None:
    """`acked`: value -> (partition, offset) from the producer's acknowledgements."""
    seen: set[str] = set()
    for partition, records in stored.items():
        values = [r.value.decode() for r in records]
        assert len(values) == len(set(values)), f"partition {partition} holds a record twice"
        assert not seen & set(values), "a record is in two partitions"
        seen |= set(values)
        indexes = [index_of(v) for v in values]
        assert indexes == sorted(indexes), f"partition {partition} is out of send order"
        at = {r.value.decode(): r.offset for r in records}
        for value, (p, offset) in acked.items():
            if p == partition:
                assert at.get(value) == offset, f"acknowledged {value} not at {offset}"
    assert set(acked) <= seen


def restart(broker: BrokerProcess) -> BrokerProcess:
    broker.kill()
    return BrokerProcess(broker.data_dir, port=broker.port).start()


def test_confluent_idempotent_producer_through_sigkills(tmp_path):
    from confluent_kafka import Producer

    n = 24_000
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            assert create_topic(wire, "idem", PARTITIONS) == Error.NONE
        producer = Producer({
            "bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5, "acks": "all", "linger.ms": 2,
            "batch.num.messages": 200, "message.timeout.ms": 120_000,
            "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 20})
        acked: dict[str, tuple[int, int]] = {}
        errors: list = []

        def report(err, msg) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked[msg.value().decode()] = (msg.partition(), msg.offset())

        phase = n // (KILLS + 1)
        unacked_at_kills = []
        for i in range(n):
            while True:
                try:
                    producer.produce("idem", value=b"r-%d" % i, partition=i % PARTITIONS,
                                     on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
            if i % phase == phase - 1 and i < n - 1:
                # some of this phase acknowledged, the rest queued or in flight: kill
                while len(acked) < i - phase // 2:
                    producer.poll(0.01)
                unacked_at_kills.append(i + 1 - len(acked))
                broker = restart(broker)
        assert producer.flush(120) == 0
        assert errors == []
        assert len(unacked_at_kills) == KILLS and sum(unacked_at_kills) > 0
        assert len(acked) == n
        stored = stored_records(broker.bootstrap, "idem")
    finally:
        broker.kill()
    check_exactly_once(stored, acked, lambda v: int(v.split("-")[1]))


def test_java_idempotent_producer_through_sigkills(tmp_path):
    require_java()
    n = 30_000
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            assert create_topic(wire, "idem", PARTITIONS) == Error.NONE
        cmd = java_command(
            "produce", "--bootstrap", broker.bootstrap, "--topic", "idem", "--count", n,
            "--key-prefix", "k", "--idempotent", "true", "--acks", "all", "--linger-ms", 2,
            "--timeout-ms", 120_000, "--dump-acks",
            "--prop", "max.in.flight.requests.per.connection=5",
            "--prop", "batch.size=4096",
            "--prop", "reconnect.backoff.max.ms=200", "--prop", "retry.backoff.ms=20")
        java = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.extend(java.stdout), daemon=True)
        reader.start()
        kills = 0
        for threshold in (n // 5, 2 * n // 5, 3 * n // 5):
            while java.poll() is None:
                try:
                    if high_watermarks(broker.bootstrap, "idem") >= threshold:
                        break
                except OSError:
                    pass
                time.sleep(0.02)  # polling the broker's progress, not timing logic
            if java.poll() is not None:
                break
            broker = restart(broker)
            kills += 1
        java.wait(180)
        reader.join(10)
        stderr = java.stderr.read()
        assert java.returncode == 0, stderr[-3000:]
        assert kills == 3, "the producer finished before the broker was killed three times"
        stored = stored_records(broker.bootstrap, "idem")
    finally:
        broker.kill()
    import json

    lines = [json.loads(line) for line in out if line.startswith("{")]
    summary = lines[-1]
    assert summary["type"] == "produce_summary" and summary["acked"] == n, summary
    acked = {produced_value(a["index"]): (a["partition"], a["offset"])
             for a in lines if a["type"] == "ack"}
    assert len(acked) == n
    check_exactly_once(stored, acked, lambda v: int(v.split("-")[1]))
