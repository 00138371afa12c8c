"""Compaction over raw frames. An idempotent producer whose batches the cleaner compacted
away: its last batch survives as an empty header, so a retry of that batch is still a
duplicate (answered with the original offset, nothing appended), the next sequence is
accepted and a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, also after a restart, with and without
producer snapshots (the state then comes from the cleaned log). A read_committed reader
inside an aborted transaction while the cleaner runs (the two-pass rule, on the broker's
injected clock)."""

from __future__ import annotations

import os
import time

import pytest

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import ControlType, iter_batches, iter_records, parse_control_record
from semel.storage.topic_partition import TopicPartition
from tests.broker.test_idempotent_wire import fetch_values, init_producer_id, produce
from tests.kafka_wire import (
    FETCH,
    KafkaWire,
    decode_records,
    fetch_request,
    make_topic,
    records_batch,
)

TOPIC = "compacted"
OVERRIDES = {"log.cleaner.enable": "false"}  # cleanings on demand


def keyed(pid: int, seq: int, value: bytes) -> bytes:
    """One record of key ``a`` from idempotent producer ``pid`` (current timestamps: a
    producer idle for producer.id.expiration.ms is forgotten at a snapshot load)."""
    return records_batch([value], keys=[b"a"], producer_id=pid, producer_epoch=0,
                         base_sequence=seq, timestamp=time.time_ns() // 1_000_000)


def values_from(wire: KafkaWire, offset: int) -> list[bytes]:
    """The values of the records a fetch from ``offset`` returns (one segment's worth)."""
    resp = wire.request(FETCH, 12, fetch_request([(TOPIC, 0, offset)]))
    part = resp.responses[0].partitions[0]
    assert part.error_code == Error.NONE
    return [r.value for r in decode_records(part.records)]


def roll_and_clean(bt: BrokerThread):
    async def run():
        bt.broker.log_manager.logs[TopicPartition(TOPIC, 0)].roll()
        return await bt.broker.log_manager.run_cleaner_once()

    return bt.call(run())


@pytest.mark.parametrize("snapshots", ["kept", "deleted"])
def test_a_retry_after_compaction_is_still_a_duplicate(tmp_path, snapshots):
    with BrokerThread(tmp_path / "d", OVERRIDES) as bt:
        make_topic(bt, TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": "1000",
                                  "min.cleanable.dirty.ratio": "0.01"})
        with KafkaWire.connect(bt.bootstrap) as wire:
            pid = init_producer_id(wire).producer_id
            offsets = []
            for seq in range(10):
                answer = produce(wire, TOPIC, keyed(pid, seq, b"idem-%d" % seq))
                assert answer.error_code == Error.NONE
                offsets.append(answer.base_offset)
            # a later write of the same key (no producer id) supersedes all of them
            answer = produce(wire, TOPIC, records_batch([b"plain"], keys=[b"a"]))
            assert answer.error_code == Error.NONE
            end = answer.base_offset + 1
            assert roll_and_clean(bt) is not None
            assert fetch_values(wire, TOPIC) == [b"plain"]  # the producer's records are gone

            retry = produce(wire, TOPIC, keyed(pid, 9, b"idem-9"))
            assert (retry.error_code, retry.base_offset) == (Error.NONE, offsets[9])
            assert values_from(wire, end) == []  # nothing appended
        partition_dir = tmp_path / "d" / f"{TOPIC}-0"

    if snapshots == "deleted":  # the producer state is rebuilt from the cleaned log
        for name in os.listdir(partition_dir):
            if name.endswith(".snapshot"):
                os.remove(partition_dir / name)
    with BrokerThread(tmp_path / "d", OVERRIDES) as again, \
            KafkaWire.connect(again.bootstrap) as wire:
        retry = produce(wire, TOPIC, keyed(pid, 9, b"idem-9"))
        assert (retry.error_code, retry.base_offset) == (Error.NONE, offsets[9])
        assert values_from(wire, end) == []
        nxt = produce(wire, TOPIC, keyed(pid, 10, b"idem-10"))
        assert (nxt.error_code, nxt.base_offset) == (Error.NONE, end)
        gap = produce(wire, TOPIC, keyed(pid, 12, b"idem-12"))
        assert gap.error_code == Error.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert values_from(wire, end) == [b"idem-10"]


class CommittedReader:
    """A read_committed consumer over raw fetches, as the clients are: the aborted
    transactions of each response mark their producers aborted from their first offsets
    until that producer's ABORT marker; batches of an aborted producer are skipped."""

    def __init__(self, wire: KafkaWire) -> None:
        self.wire = wire
        self.offset = 0
        self.pending: list[tuple[int, int]] = []  # (first offset, producer id), by offset
        self.aborted_producers: set[int] = set()
        self.delivered: list[tuple[int, bytes, bytes | None]] = []

    def fetch_once(self) -> bool:
        """One fetch of a few hundred bytes; False at the end of the log."""
        resp = self.wire.request(FETCH, 12, fetch_request(
            [(TOPIC, 0, self.offset)], isolation_level=1, partition_max_bytes=300,
            max_bytes=300))
        part = resp.responses[0].partitions[0]
        assert part.error_code == Error.NONE
        for txn in part.aborted_transactions or ():
            if (txn.first_offset, txn.producer_id) not in self.pending:
                self.pending.append((txn.first_offset, txn.producer_id))
        self.pending.sort()
        data = bytes(part.records or b"")
        headers = list(iter_batches(data))
        for header in headers:
            if header.last_offset < self.offset:
                continue
            while self.pending and self.pending[0][0] <= header.last_offset:
                self.aborted_producers.add(self.pending.pop(0)[1])
            if header.is_control:
                record = next(iter_records(data, header))
                if parse_control_record(record)[0] == ControlType.ABORT:
                    self.aborted_producers.discard(header.producer_id)
            elif not (header.is_transactional
                      and header.producer_id in self.aborted_producers):
                self.delivered += [(r.offset, r.key, r.value)
                                   for r in iter_records(data, header)]
            self.offset = header.last_offset + 1
        return bool(headers)


def test_a_reader_inside_an_aborted_transaction_while_the_cleaner_runs(tmp_path):
    """A read_committed reader is part way through an aborted transaction when cleanings
    remove its data and find its ABORT marker removable: the marker stays (that pass only
    stamps its delete horizon), so the reader meets it and goes on to the same producer's
    next, committed transaction; after the horizon (the broker's injected clock) a cleaning removes the
    marker, and a new reader from offset 0 finds no aborted record either."""
    from confluent_kafka import Producer

    from tests.integration.test_compaction_clients import Clock

    clock = Clock()
    with BrokerThread(tmp_path / "d", OVERRIDES, clock=clock) as bt:
        make_topic(bt, TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": "1000",
                                  "min.cleanable.dirty.ratio": "0.01",
                                  "delete.retention.ms": "60000"})
        plain = Producer({"bootstrap.servers": bt.bootstrap, "linger.ms": 0})
        txn = Producer({"bootstrap.servers": bt.bootstrap, "transactional.id": "reader-tx",
                        "linger.ms": 0})
        txn.init_transactions(30)

        def send(producer, key: bytes, value: bytes) -> None:
            producer.produce(TOPIC, key=key, value=value, partition=0)
            assert producer.flush(30) == 0  # one batch each

        for i in range(5):
            send(plain, b"k%d" % i, b"first-%d" % i)
        txn.begin_transaction()
        for i in range(8):
            send(txn, b"a%d" % i, b"aborted-%d" % i)
        txn.abort_transaction(30)
        txn.begin_transaction()
        for i in range(3):
            send(txn, b"c%d" % i, b"committed-later-%d" % i)
        txn.commit_transaction(30)
        for i in range(30):  # rolls the transactions out of the active segment
            send(plain, b"pad", b"pad-%d" % i)

        with KafkaWire.connect(bt.bootstrap) as wire:
            reader = CommittedReader(wire)
            while not reader.aborted_producers:  # into the aborted transaction
                assert reader.fetch_once()
            # the first cleaning removes the aborted data; the next one (new dirty data,
            # the log cleaned from its start again) finds the marker removable and only
            # stamps its horizon
            for round_ in range(2):
                assert bt.call(bt.broker.log_manager.run_cleaner_once()) is not None
                for i in range(30):
                    send(plain, b"pad", b"pad-%d-%d" % (round_, i))
            while reader.fetch_once():
                pass
            values = [v for _, _, v in reader.delivered]
            assert not [v for v in values if v.startswith(b"aborted")]
            assert [b"committed-later-%d" % i for i in range(3)] == [
                v for v in values if v.startswith(b"committed-later")]

            clock.ms += 60_001  # past the horizon: the marker goes
            while bt.call(bt.broker.log_manager.run_cleaner_once()) is not None:
                pass
            fresh = CommittedReader(wire)
            while fresh.fetch_once():
                pass
            latest = {k: v for _, k, v in fresh.delivered}
            assert not [v for v in latest.values() if v.startswith(b"aborted")]
            assert latest[b"c2"] == b"committed-later-2" and latest[b"pad"] == b"pad-1-29"
