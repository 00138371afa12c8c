"""The default marker writer (coordinator.transaction.markers.LogMarkerWriter) over real
logs: one durable control batch per partition, offsets partitions through the group
coordinator, per-partition errors."""

from __future__ import annotations

import errno

from semel.coordinator.transaction.markers import LogMarkerWriter
from semel.protocol.errors import Error
from semel.protocol.records import ControlType, iter_records, parse_control_record
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from semel.storage.log_manager import LogManager
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import ManualClock

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
GONE = TopicPartition("gone", 0)
OFFSETS = TopicPartition("__consumer_offsets", 1)


class FakeGroups:
    def __init__(self, error=Error.NONE):
        self.calls = []
        self.error = error

    async def complete_transaction(self, producer_id, producer_epoch, coordinator_epoch,
                                   partition, committed):
        self.calls.append((producer_id, producer_epoch, coordinator_epoch, partition,
                           committed))
        return self.error


def markers_in(plog):
    found = []
    for header, data in plog.iter_batches_from(0, with_data=True):
        assert header.is_control and header.is_transactional
        for record in iter_records(data, header):
            control_type, coordinator_epoch = parse_control_record(record)
            found.append((header.producer_id, header.producer_epoch, control_type,
                          coordinator_epoch, record.timestamp))
    return found


async def test_markers_are_appended_durably_per_partition(tmp_path):
    clock = ManualClock()
    lm = LogManager(tmp_path, default_config=LogConfig(), flush_mode="fsync", clock=clock)
    await lm.start()
    try:
        lm.create_topic("t", 2)
        lm.create_topic("__consumer_offsets", 2)
        groups = FakeGroups()
        write = LogMarkerWriter(lm, groups, clock=clock)
        errors = await write("tx", 7, 3, 5, True, {T0, T1, GONE, OFFSETS},
                             transaction_version=0)
        assert errors == {T0: Error.NONE, T1: Error.NONE, OFFSETS: Error.NONE,
                          GONE: Error.UNKNOWN_TOPIC_OR_PARTITION}
        for tp in (T0, T1):
            plog = lm.get_partition(*tp)
            assert plog.high_watermark == 1  # durable before the answer
            assert markers_in(plog) == [(7, 3, ControlType.COMMIT, 5, clock.now_ms)]
        assert groups.calls == [(7, 3, 5, 1, True)]
        assert lm.get_partition("__consumer_offsets", 1).log_end_offset == 0  # not by us

        groups.error = Error.COORDINATOR_LOAD_IN_PROGRESS
        errors = await write("tx", 7, 3, 5, False, {T0, OFFSETS}, transaction_version=0)
        # Kafka's WriteTxnMarkers answers the group coordinator not being ready this way
        assert errors == {T0: Error.NONE, OFFSETS: Error.NOT_LEADER_OR_FOLLOWER}
        assert markers_in(lm.get_partition(*T0))[-1][2] == ControlType.ABORT
    finally:
        await lm.close()


async def test_storage_errors_are_reported_per_partition(tmp_path):
    fs = FaultyFileSystem()
    clock = ManualClock()
    lm = LogManager(tmp_path, default_config=LogConfig(), flush_mode="fsync", fs=fs,
                    clock=clock)
    await lm.start()
    try:
        lm.create_topic("t", 2)
        fs.path_filter = "/t-1/"
        fs.write_error = errno.EIO
        write = LogMarkerWriter(lm, None, clock=clock)
        assert await write(None, 7, 3, 0, True, [T0, T1], transaction_version=2) == {
            T0: Error.NONE, T1: Error.KAFKA_STORAGE_ERROR}
        fs.clear_faults()
        fs.path_filter = "/t-0/"
        fs.fsync_error = errno.EIO
        assert await write(None, 7, 3, 0, True, [T0], transaction_version=2) == {
            T0: Error.KAFKA_STORAGE_ERROR}
        fs.clear_faults()
    finally:
        await lm.close()
