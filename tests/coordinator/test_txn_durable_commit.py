"""A commit in durable mode over real logs and the real marker writer: the fsync rounds it
costs (counted by the file-system seam) and what a power loss between them leaves.

The rounds of a commit: PREPARE_COMMIT (EndTxn is answered), then the markers of every
partition, then COMPLETE_COMMIT - written lazily, so its fsync is the one that also makes
the client's next transaction (its first AddPartitionsToTxn) durable, and that request
waits for the markers instead of being told CONCURRENT_TRANSACTIONS."""

from __future__ import annotations

import asyncio
import errno
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from semel.coordinator.transaction import TransactionCoordinator
from semel.coordinator.transaction.log import TRANSACTION_STATE_TOPIC_NAME
from semel.coordinator.transaction.markers import LogMarkerWriter
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error
from semel.protocol.records import build_batch
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from semel.storage.log_manager import LogManager
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import CONFIG, Env, FakeProducerIds, ManualClock
from tests.held_fsyncs import HeldFsyncs

S = TransactionState
T0 = TopicPartition("t", 0)


async def start(data_dir: Path, fs, clock: ManualClock, producer_ids: FakeProducerIds,
                **config) -> Env:
    log_manager = LogManager(data_dir, default_config=LogConfig(), flush_mode="fsync", fs=fs,
                             clock=clock)
    await log_manager.start()
    if "t" not in log_manager.topics:
        log_manager.create_topic("t", 1)
    markers = LogMarkerWriter(log_manager, None, clock=clock)
    tc = TransactionCoordinator(log_manager, producer_ids, replace(CONFIG, **config), clock,
                                markers)
    await tc.start()
    await tc.wait_loaded()
    return Env(tc, log_manager, clock, markers, producer_ids)


@asynccontextmanager
async def durable(data_dir: Path, fs=None, **config):
    env = await start(data_dir, fs, ManualClock(), FakeProducerIds(), **config)
    try:
        yield env
    finally:
        await env.tc.stop()
        await env.log_manager.close()


async def begin(env: Env, sequence: int = 0) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn t-0 and one durable transactional record."""
    tc = env.tc
    init = await tc.init_producer_id("tx", 60000)
    assert init.error == Error.NONE
    pid, epoch = init.producer_id, init.producer_epoch
    assert await tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE
    await produce(env, pid, epoch, sequence)
    return pid, epoch


async def produce(env: Env, pid: int, epoch: int, sequence: int) -> None:
    plog = env.log_manager.get_partition(*T0)
    batch = build_batch([(None, b"value", None, env.clock())], producer_id=pid,
                        producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    await plog.wait_durable(plog.append(bytearray(batch)).next_offset)


def log_fsyncs(fs: FaultyFileSystem, plog) -> int:
    """fsyncs of the partition's segment files (.log)."""
    prefix = str(plog.dir)
    return sum(n for path, n in fs.fsync_calls.items()
               if path.startswith(prefix) and path.endswith(".log"))


def state_log(env: Env):
    return env.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME,
                                         env.tc.partition_for("tx"))


async def test_a_commit_and_the_next_transaction_share_the_complete_fsync(tmp_path):
    fs = FaultyFileSystem()
    async with durable(tmp_path, fs) as env:
        tc = env.tc
        pid, epoch = await begin(env)
        data, states = env.log_manager.get_partition(*T0), state_log(env)
        before = log_fsyncs(fs, states), log_fsyncs(fs, data)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        assert log_fsyncs(fs, states) == before[0] + 1  # PREPARE_COMMIT, then the answer
        # the client's next transaction starts at once; it waits for the markers instead of
        # being told CONCURRENT_TRANSACTIONS
        assert await tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE
        # one round for the marker; COMPLETE_COMMIT and the next ONGOING in one more
        assert (log_fsyncs(fs, states), log_fsyncs(fs, data)) == (before[0] + 2,
                                                                  before[1] + 1)
        assert env.states_written("tx")[-3:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT,
                                                 S.ONGOING]
        assert states.high_watermark == states.log_end_offset
        assert data.last_stable_offset == data.high_watermark == data.log_end_offset
        await tc.wait_completions()


async def test_power_loss_before_the_lazy_complete_is_durable(tmp_path):
    fs = HeldFsyncs()
    clock, producer_ids = ManualClock(), FakeProducerIds()
    env = await start(tmp_path, fs, clock, producer_ids)
    pid, epoch = await begin(env)
    data = env.log_manager.get_partition(*T0)
    assert (await env.tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
    fs.hold = str(state_log(env).dir)  # PREPARE_COMMIT is durable; hold what follows
    await asyncio.get_running_loop().run_in_executor(None, fs.held.wait)
    # the marker is durable, COMPLETE_COMMIT applied but its fsync not done
    md = env.tc.txns["tx"]
    assert (md.state, md.pending_state) == (S.COMPLETE_COMMIT, None)
    assert data.last_stable_offset == data.high_watermark == data.log_end_offset
    assert env.states_written("tx")[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    await env.tc.stop(grace_s=0)
    fs.simulate_power_loss()
    fs.release.set()
    await env.log_manager.abandon()

    env = await start(tmp_path, FaultyFileSystem(), clock, producer_ids)
    try:
        await env.tc.wait_completions()
        # the restart found PREPARE_COMMIT and completed the transaction again
        assert env.states_written("tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT,
                                            S.COMPLETE_COMMIT]
        md = env.tc.txns["tx"]
        assert (md.state, md.producer_id, md.producer_epoch) == (S.COMPLETE_COMMIT, pid, epoch)
        data = env.log_manager.get_partition(*T0)
        assert data.last_stable_offset == data.high_watermark == data.log_end_offset
        assert data.collect_aborted_transactions(0, data.log_end_offset) == []
        # the producer carries on
        assert await env.tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE
        await produce(env, pid, epoch, 1)
        assert (await env.tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await env.tc.wait_completions()
        assert data.last_stable_offset == data.log_end_offset
    finally:
        await env.tc.stop()
        await env.log_manager.close()


async def test_a_lazy_complete_whose_fsync_fails_is_written_again(tmp_path):
    fs = FaultyFileSystem()
    async with durable(tmp_path, fs, retry_backoff_ms=5) as env:
        tc = env.tc
        pid, epoch = await begin(env)
        states = state_log(env)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        fs.path_filter = str(states.dir)
        fs.fsync_error = errno.EIO
        failed = log_fsyncs(fs, states)
        for _ in range(10_000):  # COMPLETE_COMMIT's fsync fails, and fails again
            if log_fsyncs(fs, states) >= failed + 2:
                break
            await asyncio.sleep(0.001)
        else:
            pytest.fail("COMPLETE_COMMIT was not written again")
        # applied in memory; on disk it is gone (cut back) or written again, not durable
        assert tc.txns["tx"].state == S.COMPLETE_COMMIT
        assert states.high_watermark < states.log_end_offset or \
            env.states_written("tx")[-1] == S.PREPARE_COMMIT
        fs.clear_faults()
        await tc.wait_completions()
        assert env.states_written("tx")[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        assert states.high_watermark == states.log_end_offset
        assert await tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE
