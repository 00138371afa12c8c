"""coordinator/eager.py's Resumed: a coroutine started eagerly and driven on by a task
behaves as if it had run in that task from the start - its results, exceptions and
cancellation included, also when the task is cancelled before its first step (a task
whose coroutine merely awaited the rest would then never start, and the carried coroutine
would be dropped without its cleanup). The transaction coordinator's _run on top of it."""

from __future__ import annotations

import asyncio

import pytest

from semel.coordinator.eager import Resumed
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import running


def started(coro):
    """``coro`` run up to its first suspension: (coro, what it yielded)."""
    return coro, coro.send(None)


async def op(gate: asyncio.Future, seen: list):
    try:
        value = await gate
    except asyncio.CancelledError:
        seen.append("cancelled")
        raise
    finally:
        seen.append("finally")
    return value * 2


async def test_the_task_gets_the_rest_of_the_coroutine():
    gate = asyncio.get_running_loop().create_future()
    seen: list = []
    task = asyncio.get_running_loop().create_task(Resumed(*started(op(gate, seen))))
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(21)
    assert await task == 42
    assert seen == ["finally"]


async def test_an_exception_of_the_coroutine_is_the_tasks():
    gate = asyncio.get_running_loop().create_future()
    task = asyncio.get_running_loop().create_task(Resumed(*started(op(gate, []))))
    await asyncio.sleep(0)
    gate.set_exception(ValueError("no"))
    with pytest.raises(ValueError, match="no"):
        await task


@pytest.mark.parametrize("steps_first", [False, True])
async def test_cancelling_the_task_reaches_the_coroutine(steps_first):
    """Cancelled before its first step (``steps_first`` False) or while waiting: the
    coroutine gets the CancelledError where it waits, its cleanup runs, the task is
    cancelled."""
    gate = asyncio.get_running_loop().create_future()
    seen: list = []
    task = asyncio.get_running_loop().create_task(Resumed(*started(op(gate, seen))))
    if steps_first:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert seen == ["cancelled", "finally"]


async def test_ended_is_told_in_the_step_that_ends_the_coroutine():
    loop = asyncio.get_running_loop()
    ends: list = []

    def ended(result, exc):
        ends.append((result, type(exc).__name__ if exc else None, task.done()))

    gate = loop.create_future()
    task = loop.create_task(Resumed(*started(op(gate, [])), ended))
    await asyncio.sleep(0)
    gate.set_result(5)
    assert await task == 10
    assert ends == [(10, None, False)]  # before the task was done

    ends.clear()
    gate = loop.create_future()
    task = loop.create_task(Resumed(*started(op(gate, [])), ended))
    await asyncio.sleep(0)
    gate.set_exception(KeyError("k"))
    assert await task is None  # handed to ended, not raised by the task
    assert ends == [(None, "KeyError", False)]

    ends.clear()
    gate = loop.create_future()
    task = loop.create_task(Resumed(*started(op(gate, [])), ended))
    task.cancel()  # before its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ends == [(None, "CancelledError", False)]


async def test_run_whose_task_is_cancelled_before_it_ran_cancels_the_caller(tmp_path):
    """TransactionCoordinator._run's task cancelled before its first step (a cancel-all at
    shutdown, say): the caller is cancelled too, not left waiting for ever."""
    async with running(tmp_path) as env:
        tc = env.tc
        gate = asyncio.get_running_loop().create_future()
        seen: list = []
        caller = asyncio.ensure_future(tc._run(op(gate, seen)))
        await asyncio.sleep(0)  # the caller ran op eagerly and created the task
        (task,) = tc._ops
        task.cancel()
        done, _ = await asyncio.wait([caller], timeout=30)
        assert caller in done and caller.cancelled()
        assert seen == ["cancelled", "finally"]


async def test_run_hands_the_caller_an_exception_and_logs_one_nobody_waits_for(tmp_path, caplog):
    async with running(tmp_path) as env:
        tc = env.tc
        loop = asyncio.get_running_loop()
        gate = loop.create_future()
        caller = asyncio.ensure_future(tc._run(op(gate, [])))
        await asyncio.sleep(0)
        gate.set_exception(RuntimeError("ours"))
        with pytest.raises(RuntimeError, match="ours"):
            await caller

        gate = loop.create_future()
        caller = asyncio.ensure_future(tc._run(op(gate, [])))
        await asyncio.sleep(0)
        (task,) = tc._ops
        caller.cancel()  # the caller goes away: the operation goes on
        await asyncio.sleep(0)
        assert not task.done()
        gate.set_exception(RuntimeError("late"))
        await task
        assert "failed after its caller went away" in caplog.text


async def test_an_operation_cancelled_before_its_task_ran_leaves_no_pending_state(tmp_path):
    """A real operation waiting for the disk (AddPartitionsToTxn's ONGOING record), its
    task cancelled before its first step: the operation's own cleanup runs, the id takes
    the next request instead of answering CONCURRENT_TRANSACTIONS for ever."""
    t0 = TopicPartition("t", 0)
    async with running(tmp_path, flush_mode="fsync") as env:
        tc = env.tc
        begun = await tc.init_producer_id("tx", 60000)
        pid, epoch = begun.producer_id, begun.producer_epoch
        caller = asyncio.ensure_future(tc.add_partitions("tx", pid, epoch, [t0]))
        await asyncio.sleep(0)  # ONGOING appended eagerly; its task not yet stepped
        (task,) = tc._ops
        task.cancel()
        done, _ = await asyncio.wait([caller], timeout=30)
        assert caller in done and caller.cancelled()
        assert tc.txns["tx"].pending_state is None
        assert await tc.add_partitions("tx", pid, epoch, [t0]) == Error.NONE
        assert tc.txns["tx"].state == TransactionState.ONGOING
