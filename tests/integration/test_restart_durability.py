"""acks=all survives SIGKILL: every acknowledged record is there exactly once after restart.

The broker runs as a subprocess (``python -m semel.broker serve``) with the durable default
log.flush.mode=fsync. Producers run while the broker is killed with SIGKILL; after a
restart on the same data directory the whole log is read back.
"""

from __future__ import annotations

import threading

from semel.broker.testing import BrokerProcess
from semel.protocol.errors import Error
from tests.kafka_wire import (
    FETCH,
    PRODUCE,
    KafkaWire,
    create_topic,
    decode_records,
    fetch_request,
    produce_request,
    records_batch,
)

RECORDS_PER_BATCH = 10
IN_FLIGHT = 8


def read_all(bootstrap: str, topic: str, partition: int = 0) -> list:
    """Every record of the partition, from offset 0 to the high watermark."""
    records = []
    with KafkaWire.connect(bootstrap) as wire:
        offset = 0
        while True:
            resp = wire.request(FETCH, 12, fetch_request([(topic, partition, offset)]))
            part = resp.responses[0].partitions[0]
            assert part.error_code == Error.NONE
            batch = [r for r in decode_records(part.records) if r.offset >= offset]
            records.extend(batch)
            if not batch:
                assert offset == part.high_watermark
                return records
            offset = batch[-1].offset + 1


class PipelinedProducer(threading.Thread):
    """Sends acks=all produce requests, IN_FLIGHT at a time, until the connection dies;
    remembers the base offset of every batch the broker acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.wire = KafkaWire.connect(bootstrap, timeout=60)
        self.topic = topic
        self.acked: dict[int, int] = {}  # batch number -> base offset
        self.some_acked = threading.Event()
        self.failures: list[str] = []

    def run(self) -> None:
        sent = 0
        outstanding: list[int] = []
        try:
            while True:
                while len(outstanding) < IN_FLIGHT:
                    values = [b"%d-%d" % (sent, j) for j in range(RECORDS_PER_BATCH)]
                    self.wire.send(PRODUCE, 9, produce_request(self.topic, 0,
                                                               records_batch(values)))
                    outstanding.append(sent)
                    sent += 1
                resp = self.wire.receive()
                number = outstanding.pop(0)
                part = resp.responses[0].partition_responses[0]
                if part.error_code != Error.NONE:
                    self.failures.append(f"batch {number}: {Error(part.error_code).name}")
                    continue
                self.acked[number] = part.base_offset
                if len(self.acked) >= 200:
                    self.some_acked.set()
        except OSError:  # the broker was killed
            pass
        finally:
            self.some_acked.set()
            self.wire.close()


def test_acknowledged_batches_survive_sigkill_exactly_once(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        with KafkaWire.connect(broker.bootstrap) as wire:
            assert create_topic(wire, "durable") == Error.NONE
        producer = PipelinedProducer(broker.bootstrap, "durable")
        producer.start()
        assert producer.some_acked.wait(120)
        broker.kill()  # SIGKILL while requests are in flight
        producer.join(60)
        assert producer.failures == []
        assert len(producer.acked) >= 200
    finally:
        broker.kill()

    restarted = BrokerProcess(data).start()
    try:
        records = read_all(restarted.bootstrap, "durable")
    finally:
        assert restarted.stop() == 0
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record is stored twice"
    assert [r.offset for r in records] == list(range(len(records)))
    by_value = {r.value: r.offset for r in records}
    for number, base_offset in producer.acked.items():
        for j in range(RECORDS_PER_BATCH):
            assert by_value.get(b"%d-%d" % (number, j)) == base_offset + j
    # batches went in send order: the stored ones are a prefix of what was sent
    batches = [int(v.split(b"-")[0]) for v in values[::RECORDS_PER_BATCH]]
    assert batches == list(range(len(batches)))


def test_confluent_producer_acks_all_then_sigkill(tmp_path):
    from confluent_kafka import Producer

    n = 10_000
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "linger.ms": 5, "enable.idempotence": False})
        errors = []
        for i in range(n):
            while True:
                try:
                    producer.produce("events", value=b"event-%d" % i, partition=0,
                                     on_delivery=lambda err, _m: err and errors.append(err))
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        assert producer.flush(60) == 0
        assert errors == []
    finally:
        broker.kill()  # no clean shutdown: only what was fsynced before each ack counts

    restarted = BrokerProcess(data).start()
    try:
        records = read_all(restarted.bootstrap, "events")
    finally:
        assert restarted.stop() == 0
    assert [r.value for r in records] == [b"event-%d" % i for i in range(n)]
