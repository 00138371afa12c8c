"""SharePartitionManager over a real LogManager: share-partition initialisation
(share.auto.offset.reset), acquisition from the log, acknowledgement made durable in
``__share_group_state``, lock expiry on a manual clock, member departure, read_committed
over committed and aborted transactions, restarts that keep every acknowledgement and
redeliver only the rest, snapshot rewriting and pruning."""

from __future__ import annotations

import errno
from contextlib import asynccontextmanager
from pathlib import Path

from semel.coordinator.share.config import (
    AutoOffsetReset,
    ShareGroupConfig,
    ShareGroupSettings,
)
from semel.coordinator.share.manager import SharePartitionManager
from semel.coordinator.share.partition import AcknowledgementBatch, AcquiredRecords
from semel.coordinator.share.records import (
    SHARE_GROUP_STATE_TOPIC_NAME,
    SHARE_SNAPSHOT,
    SHARE_UPDATE,
    decode_record,
)
from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_batch, build_control_batch, iter_records
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from semel.storage.log_manager import LogManager
from tests.coordinator.txn_harness import ManualClock

ACCEPT, RELEASE, REJECT = 1, 2, 3
EARLIEST = ShareGroupSettings(AutoOffsetReset("earliest"))


@asynccontextmanager
async def running(data_dir: Path, clock: ManualClock, settings=EARLIEST,
                  flush_mode: str = "none", fs=None, crash: bool = False, **config):
    """A log manager and a share-partition manager; ``crash``: end with a power loss
    (``fs`` a FaultyFileSystem) instead of a clean close."""
    log_manager = LogManager(data_dir, default_config=LogConfig(), flush_mode=flush_mode,
                             clock=clock, fs=fs)
    await log_manager.start()
    if "t" not in log_manager.topics:
        log_manager.create_topic("t", 1, {})
    manager = SharePartitionManager(
        log_manager, ShareGroupConfig(**{"record_lock_duration_ms": 1000, **config}),
        clock=clock, group_settings=lambda _g: settings, lock_check_interval_ms=10**6)
    await manager.start()
    try:
        yield manager, log_manager
    finally:
        await manager.stop()
        if crash:
            if log_manager.started:
                await log_manager.abandon()
                fs.simulate_power_loss()
        else:
            await log_manager.close()


def produce(log_manager, n: int, **kwargs) -> None:
    plog = log_manager.get_partition("t", 0)
    records = [(None, f"v{i}".encode(), None, 1000 + i) for i in range(n)]
    plog.append(bytearray(build_batch(records, **kwargs)))


def end_txn(log_manager, producer_id: int, commit: bool) -> None:
    log_manager.get_partition("t", 0).append(bytearray(build_control_batch(
        commit=commit, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
        timestamp_ms=5000)), origin="coordinator")


def topic_id(log_manager):
    return log_manager.topics["t"].topic_id


async def acquire(manager, log_manager, member, max_records=100, group="g"):
    result = await manager.acquire(group, member, topic_id(log_manager), 0, max_records,
                                   1 << 20)
    assert result.error == Error.NONE
    return result.acquired


async def ack(manager, log_manager, member, first, last, kind, group="g"):
    return await manager.acknowledge(group, member, topic_id(log_manager), 0,
                                     [AcknowledgementBatch(first, last, [kind])])


def state_records(log_manager):
    out = []
    info = log_manager.topics.get(SHARE_GROUP_STATE_TOPIC_NAME)
    for p in range(info.num_partitions):
        plog = log_manager.get_partition(SHARE_GROUP_STATE_TOPIC_NAME, p)
        for header, data in plog.iter_batches_from(plog.log_start_offset, with_data=True):
            out.extend(decode_record(r.key, r.value) for r in iter_records(data, header))
    return out


async def test_acquire_ack_restart_redelivers_only_unacknowledged(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock, flush_mode="fsync") as (manager, log_manager):
        produce(log_manager, 5)
        produce(log_manager, 5)
        await log_manager.flush_all()
        got = await acquire(manager, log_manager, "m1", max_records=5)
        assert got == [AcquiredRecords(0, 4, 1)]
        got = await acquire(manager, log_manager, "m2", max_records=5)
        assert got == [AcquiredRecords(5, 9, 1)]
        assert await ack(manager, log_manager, "m1", 0, 2, ACCEPT) == (Error.NONE, None)
        assert await ack(manager, log_manager, "m2", 5, 6, REJECT) == (Error.NONE, None)
        assert await ack(manager, log_manager, "m2", 7, 7, RELEASE) == (Error.NONE, None)
        error, _ = await ack(manager, log_manager, "m1", 5, 5, ACCEPT)
        assert error == Error.INVALID_RECORD_STATE
    async with running(tmp_path, clock) as (manager, log_manager):
        # 0-2 accepted, 5-6 rejected: never again; 3-4, 7-9 again
        got = await acquire(manager, log_manager, "m3")
        offsets = sorted(o for r in got for o in range(r.first_offset, r.last_offset + 1))
        assert offsets == [3, 4, 7, 8, 9]
        # 7 was released (delivery 1 durable), so this is its second delivery
        counts = {o: r.delivery_count for r in got
                  for o in range(r.first_offset, r.last_offset + 1)}
        assert counts == {3: 1, 4: 1, 7: 2, 8: 1, 9: 1}
        for r in got:
            assert await ack(manager, log_manager, "m3", r.first_offset, r.last_offset,
                             ACCEPT) == (Error.NONE, None)
        sp = next(iter(manager.partitions.values()))
        assert sp.start_offset == 10 and sp.records == {}
    async with running(tmp_path, clock) as (manager, log_manager):
        assert await acquire(manager, log_manager, "m4") == []


async def test_lock_expiry_and_member_leave(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock, delivery_count_limit=2) as (manager, log_manager):
        produce(log_manager, 3)
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(0, 2, 1)]
        assert await acquire(manager, log_manager, "m2") == []
        clock.advance(1000)
        assert await manager.expire_locks() == 1
        assert await acquire(manager, log_manager, "m2") == [AcquiredRecords(0, 2, 2)]
        assert (await ack(manager, log_manager, "m1", 0, 0, ACCEPT))[0] == \
            Error.INVALID_RECORD_STATE
        # leaving gives the delivery back: not archived though at the limit
        assert await manager.release_member("g", "m2") == Error.NONE
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(0, 2, 2)]
        clock.advance(1000)  # the second delivery times out: the limit archives them
        assert await acquire(manager, log_manager, "m2") == []
        sp = next(iter(manager.partitions.values()))
        assert sp.start_offset == 3


async def test_read_committed(tmp_path):
    clock = ManualClock()
    settings = ShareGroupSettings(AutoOffsetReset("earliest"), "read_committed")
    async with running(tmp_path, clock, settings) as (manager, log_manager):
        produce(log_manager, 2)                                          # 0-1
        produce(log_manager, 2, producer_id=7, producer_epoch=0, base_sequence=0,
                is_transactional=True)                                   # 2-3 aborted
        produce(log_manager, 2, producer_id=8, producer_epoch=0, base_sequence=0,
                is_transactional=True)                                   # 4-5 committed
        end_txn(log_manager, 7, commit=False)                            # 6
        produce(log_manager, 1, producer_id=9, producer_epoch=0, base_sequence=0,
                is_transactional=True)                                   # 7 open
        got = await acquire(manager, log_manager, "m1")
        # nothing above the LSO (4: the open transaction of producer 8 starts there)
        assert got == [AcquiredRecords(0, 1, 1)]
        end_txn(log_manager, 8, commit=True)                             # 8
        got = await acquire(manager, log_manager, "m1")
        assert got == [AcquiredRecords(4, 5, 1)]  # 2-3 aborted, 6 a marker: archived
        end_txn(log_manager, 9, commit=False)                            # 9
        produce(log_manager, 1)                                          # 10
        got = await acquire(manager, log_manager, "m1")
        assert got == [AcquiredRecords(10, 10, 1)]
        for first, last in ((0, 1), (4, 5), (10, 10)):
            assert (await ack(manager, log_manager, "m1", first, last, ACCEPT))[0] == Error.NONE
        sp = next(iter(manager.partitions.values()))
        assert sp.start_offset == 11


async def test_auto_offset_reset(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock, ShareGroupSettings()) as (manager, log_manager):
        produce(log_manager, 3)
        assert await acquire(manager, log_manager, "m1") == []  # latest: starts at 3
        produce(log_manager, 2)
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(3, 4, 1)]
    by_duration = ShareGroupSettings(AutoOffsetReset.parse("by_duration:PT0.002S"))
    clock.now_ms = 1003  # records at timestamps 1000, 1001, 1002, 1000, 1001
    async with running(tmp_path, clock, by_duration) as (manager, log_manager):
        # the first record no older than 2 ms is offset 1 (timestamp 1001)
        assert await acquire(manager, log_manager, "m1", group="h") == \
            [AcquiredRecords(1, 4, 1)]
    earliest = ShareGroupSettings(AutoOffsetReset.parse("earliest"))
    async with running(tmp_path, clock, earliest) as (manager, log_manager):
        assert await acquire(manager, log_manager, "m1", group="e") == \
            [AcquiredRecords(0, 4, 1)]
        # an initialised share-partition keeps its start offset whatever the setting; 3-4
        # were acquired, not acknowledged: delivered again (acquisitions are not durable)
        assert await acquire(manager, log_manager, "m2", group="g") == \
            [AcquiredRecords(3, 4, 1)]


async def test_snapshots_rewritten_and_pruned(tmp_path):
    clock = ManualClock()
    config = {"snapshot_update_records_per_snapshot": 3, "state_topic_num_partitions": 2}
    async with running(tmp_path, clock, **config) as (manager, log_manager):
        produce(log_manager, 10)
        await acquire(manager, log_manager, "m1")
        for offset in range(10):
            assert (await ack(manager, log_manager, "m1", offset, offset, ACCEPT))[0] == \
                Error.NONE
        kinds = [r.record_type for r in state_records(log_manager)]
        assert kinds == [SHARE_SNAPSHOT] + ([SHARE_UPDATE] * 3 + [SHARE_SNAPSHOT]) * 2 + \
            [SHARE_UPDATE] * 2
        assert manager.prune() == 1
        kinds = [r.record_type for r in state_records(log_manager)]
        assert kinds == [SHARE_SNAPSHOT, SHARE_UPDATE, SHARE_UPDATE]
    async with running(tmp_path, clock, **config) as (manager, log_manager):
        assert await acquire(manager, log_manager, "m1") == []
        produce(log_manager, 1)
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(10, 10, 1)]


async def test_failed_write_reloads_the_durable_state(tmp_path, monkeypatch):
    clock = ManualClock()
    async with running(tmp_path, clock) as (manager, log_manager):
        produce(log_manager, 4)
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(0, 3, 1)]
        assert (await ack(manager, log_manager, "m1", 0, 0, ACCEPT))[0] == Error.NONE
        plog = log_manager.get_partition(SHARE_GROUP_STATE_TOPIC_NAME,
                                         manager.partition_for(next(iter(manager.partitions))))

        def fail(*_args, **_kwargs):
            raise KafkaError(Error.KAFKA_STORAGE_ERROR, "disk gone")

        monkeypatch.setattr(plog, "append", fail)
        error, _ = await ack(manager, log_manager, "m1", 1, 2, ACCEPT)
        assert error == Error.KAFKA_STORAGE_ERROR
        monkeypatch.undo()
        # what was durable survives (0 accepted); 1-2 were not accepted, 1-3 not acquired
        sp = next(iter(manager.partitions.values()), None)
        assert sp is None  # dropped, made again from the store on next use
        assert await acquire(manager, log_manager, "m2") == [AcquiredRecords(1, 3, 1)]
        assert (await ack(manager, log_manager, "m1", 1, 1, ACCEPT))[0] == \
            Error.INVALID_RECORD_STATE


async def test_acknowledgements_are_answered_durable_and_survive_a_power_loss(tmp_path):
    """fsync mode: an acknowledgement is answered only once its record is on disk - one
    whose fsync fails is answered KAFKA_STORAGE_ERROR and undone - and a power loss keeps
    every answered one; what was only acquired is delivered again."""
    clock = ManualClock()
    fs = FaultyFileSystem()
    async with running(tmp_path, clock, flush_mode="fsync", fs=fs, crash=True) as (
            manager, log_manager):
        for _ in range(4):
            produce(log_manager, 5)
        await log_manager.flush_all()
        assert await acquire(manager, log_manager, "m1", max_records=10) == \
            [AcquiredRecords(0, 9, 1)]
        assert await acquire(manager, log_manager, "m2", max_records=10) == \
            [AcquiredRecords(10, 19, 1)]
        for first, last, kind in ((0, 3, ACCEPT), (5, 5, REJECT), (6, 9, RELEASE)):
            assert await ack(manager, log_manager, "m1", first, last, kind) == \
                (Error.NONE, None)
        fs.path_filter, fs.fsync_error = SHARE_GROUP_STATE_TOPIC_NAME, errno.EIO
        error, _ = await ack(manager, log_manager, "m2", 10, 19, ACCEPT)
        assert error == Error.KAFKA_STORAGE_ERROR
        fs.clear_faults()
        # undone: the state is what the disk holds, 10-19 no longer acquired by anyone
        error, _ = await ack(manager, log_manager, "m2", 10, 19, ACCEPT)
        assert error == Error.INVALID_RECORD_STATE
    async with running(tmp_path, clock, flush_mode="fsync", fs=FaultyFileSystem()) as (
            manager, log_manager):
        got = await acquire(manager, log_manager, "m3")
        counts = {o: r.delivery_count for r in got
                  for o in range(r.first_offset, r.last_offset + 1)}
        # 4 and 10-19 were only acquired (first delivery again); 6-9 were released
        assert counts == {4: 1, 6: 2, 7: 2, 8: 2, 9: 2, **dict.fromkeys(range(10, 20), 1)}


async def test_offsets_describe_alter_delete(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock) as (manager, log_manager):
        tid = topic_id(log_manager)
        assert manager.describe_offsets("g", tid, 0).start_offset == -1
        produce(log_manager, 10)
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(0, 9, 1)]
        assert (await ack(manager, log_manager, "m1", 0, 1, ACCEPT))[0] == Error.NONE
        assert (await ack(manager, log_manager, "m1", 5, 6, REJECT))[0] == Error.NONE
        info = manager.describe_offsets("g", tid, 0)
        assert (info.start_offset, info.leader_epoch) == (2, 0)
        assert info.lag == 10 - 2 - 2  # 5-6 finished above the start offset
        assert await manager.alter_offsets("g", tid, 0, 7) == Error.NONE
        assert manager.describe_offsets("g", tid, 0).start_offset == 7
        assert manager.describe_offsets("g", tid, 0).lag == 3
        assert await acquire(manager, log_manager, "m2") == [AcquiredRecords(7, 9, 1)]
        assert await manager.delete_offsets("g", tid, 0) == Error.NONE
        assert manager.describe_offsets("g", tid, 0).start_offset == -1
    async with running(tmp_path, clock) as (manager, log_manager):
        tid = topic_id(log_manager)
        assert manager.describe_offsets("g", tid, 0).start_offset == -1
        # initialized again by share.auto.offset.reset (earliest here)
        assert await acquire(manager, log_manager, "m1") == [AcquiredRecords(0, 9, 1)]
        assert await acquire(manager, log_manager, "m1", group="other") == \
            [AcquiredRecords(0, 9, 1)]
        assert await manager.delete_group("g") == Error.NONE
        assert manager.store.keys_of_group("g") == [] and len(manager.partitions) == 1
    async with running(tmp_path, clock) as (manager, log_manager):
        assert manager.store.keys_of_group("g") == []
        assert len(manager.store.keys_of_group("other")) == 1
