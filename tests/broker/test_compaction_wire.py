"""An idempotent producer whose batches the cleaner compacted away, over raw frames: its last
batch survives as an empty header, so a retry of that batch is still a duplicate (answered
with the original offset, nothing appended), the next sequence is accepted and a gap is
OUT_OF_ORDER_SEQUENCE_NUMBER, also after a restart, with and without producer snapshots
(the state then comes from the cleaned log)."""

from __future__ import annotations

import os
import time

import pytest

from broker.testing import BrokerThread
from protocol.errors import Error
from storage.topic_partition import TopicPartition
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
