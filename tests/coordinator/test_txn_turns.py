"""Turns of the event loop a transaction costs: without fsync (log.flush.mode=none) the
coordinator's operations end in the caller's turn (no task, no hop), the markers of a
transaction need no turn, and a request that arrives between EndTxn's answer and its
completion's start waits for the markers instead of being told CONCURRENT_TRANSACTIONS."""

from __future__ import annotations

import asyncio

import pytest

from semel.coordinator.transaction.markers import LogMarkerWriter
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error
from semel.storage.config import LogConfig
from semel.storage.log_manager import LogManager
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import ManualClock, running

S = TransactionState
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def at_once(coro):
    """The value of a coroutine that must end without suspending."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise AssertionError("the operation suspended: it needed a turn of the loop")


async def committed_at_once(tc) -> tuple[int, int]:
    """Producer id and epoch of "tx", whose transaction on t-0 EndTxn just committed in the
    caller's turn (its completion not started yet)."""
    begun = await tc.init_producer_id("tx", 60000)
    pid, epoch = begun.producer_id, begun.producer_epoch
    assert await tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE
    assert at_once(tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
    return pid, epoch


async def test_operations_end_in_the_callers_turn_without_fsync(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        begun = at_once(tc.init_producer_id("tx", 60000))
        assert begun.error == Error.NONE
        pid, epoch = begun.producer_id, begun.producer_epoch
        assert at_once(tc.add_partitions("tx", pid, epoch, [T0])) == Error.NONE
        assert at_once(tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        # answered before its markers: the completion runs in a later turn
        assert tc.txns["tx"].state == S.PREPARE_COMMIT and env.markers.calls == []
        await tc.wait_completions()
        assert tc.txns["tx"].state == S.COMPLETE_COMMIT
        assert at_once(tc.add_partitions("tx", pid, epoch, [T1])) == Error.NONE
        assert not tc._ops  # no operation needed a task


async def test_an_operation_that_waits_for_the_disk_still_answers(tmp_path):
    async with running(tmp_path, flush_mode="fsync") as env:
        tc = env.tc
        begun = await tc.init_producer_id("tx", 60000)
        pid, epoch = begun.producer_id, begun.producer_epoch
        coro = tc.add_partitions("tx", pid, epoch, [T0])
        waiting = coro.send(None)  # appended ONGOING, now waits for the fsync
        assert isinstance(waiting, asyncio.Future)
        assert len([op for op in tc._ops if not op.done()]) == 1
        assert tc.txns["tx"].pending_state == S.ONGOING
        coro.close()  # the caller goes away: the operation goes on
        while tc._ops:
            await asyncio.wait(list(tc._ops))
        assert tc.txns["tx"].state == S.ONGOING and tc.txns["tx"].pending_state is None
        assert (await tc.end_txn("tx", pid, epoch, False)).error == Error.NONE
        await tc.wait_completions()
        assert tc.txns["tx"].state == S.COMPLETE_ABORT


async def test_a_request_before_the_completion_started_waits_for_it(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        pid, epoch = await committed_at_once(tc)
        # the client's next transaction, before the completion task ran at all
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == Error.NONE
        assert [c.partitions for c in env.markers.calls] == [frozenset({T0})]
        md = tc.txns["tx"]
        assert md.state == S.ONGOING and md.topic_partitions == {T1}


async def test_a_completion_cancelled_before_it_ran_lets_its_waiters_go(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        pid, epoch = await committed_at_once(tc)
        waiting = asyncio.ensure_future(tc.add_partitions("tx", pid, epoch, [T1]))
        tc._completions["tx"].cancel()
        # let go, it decides again: the transaction is still being completed
        assert await asyncio.wait_for(waiting, 5) == Error.CONCURRENT_TRANSACTIONS
        assert "tx" not in tc._completing


@pytest.mark.parametrize("flush_mode", ["none", "fsync"])
async def test_markers_without_fsync_need_no_turn(tmp_path, flush_mode):
    clock = ManualClock()
    lm = LogManager(tmp_path, default_config=LogConfig(), flush_mode=flush_mode, clock=clock)
    await lm.start()
    try:
        lm.create_topic("t", 2)
        write = LogMarkerWriter(lm, None, clock=clock)
        call = write("tx", 7, 3, 0, True, {T0}, transaction_version=0)
        if flush_mode == "none":
            assert at_once(call) == {T0: Error.NONE}
        else:
            assert await call == {T0: Error.NONE}
        assert await write("tx", 7, 3, 0, True, {T0, T1}, transaction_version=0) == \
            {T0: Error.NONE, T1: Error.NONE}
        for tp in (T0, T1):
            assert lm.get_partition(*tp).high_watermark == (2 if tp == T0 else 1)
    finally:
        await lm.close()
