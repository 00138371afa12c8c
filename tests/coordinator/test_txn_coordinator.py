"""The transaction coordinator's async shell over real logs: persistence before every
transition, markers then COMPLETE_*, fencing, timeouts, expiration, restarts and failed
writes - on a manual clock with a fake marker writer."""

from __future__ import annotations

import asyncio
import errno

import pytest

from semel.coordinator.transaction.log import TRANSACTION_STATE_TOPIC_NAME
from semel.coordinator.transaction.metadata import MAX_PRODUCER_EPOCH, TV_2
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error
from semel.storage.fs import FaultyFileSystem
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import FakeMarkers, ManualClock, running

S = TransactionState
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
OFFSETS_3 = TopicPartition("__consumer_offsets", 3)


async def begin(tc, tid="tx", partitions=(T0,), timeout_ms=60000):
    result = await tc.init_producer_id(tid, timeout_ms)
    assert result.error == Error.NONE
    assert await tc.add_partitions(tid, result.producer_id, result.producer_epoch,
                                   partitions) == Error.NONE
    return result.producer_id, result.producer_epoch


async def test_new_transactional_id_gets_a_fresh_producer_id(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        assert TRANSACTION_STATE_TOPIC_NAME not in env.log_manager.topics
        first = await tc.init_producer_id("tx", 60000)
        assert (first.error, first.producer_id, first.producer_epoch) == (Error.NONE, 1000, 0)
        info = env.log_manager.topics[TRANSACTION_STATE_TOPIC_NAME]
        assert info.num_partitions == 4 and info.configs["cleanup.policy"] == "compact"
        assert env.states_written("tx") == [S.EMPTY]
        # a second instance fences the first: same producer id, next epoch
        second = await tc.init_producer_id("tx", 30000)
        assert (second.producer_id, second.producer_epoch) == (1000, 1)
        assert tc.txns["tx"].txn_timeout_ms == 30000
        other = await tc.init_producer_id("other", 60000)
        assert other.producer_id == 1001


async def test_commit_writes_prepare_markers_then_complete(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        pid, epoch = await begin(tc, partitions=(T0,))
        assert await tc.add_offsets("tx", pid, epoch, 3) == Error.NONE
        assert await tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE  # no new write
        result = await tc.end_txn("tx", pid, epoch, True)
        assert result.error == Error.NONE
        await tc.wait_completions()
        [call] = env.markers.calls
        assert (call.producer_id, call.producer_epoch, call.commit) == (pid, epoch, True)
        assert call.partitions == {T0, OFFSETS_3}
        assert call.coordinator_epoch == 0 and call.transaction_version == 0
        assert env.states_written("tx") == [S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT,
                                            S.COMPLETE_COMMIT]
        md = tc.txns["tx"]
        assert md.state == S.COMPLETE_COMMIT and not md.topic_partitions
        # a retry of the commit is answered OK; an abort now is not
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        assert (await tc.end_txn("tx", pid, epoch, False)).error == Error.INVALID_TXN_STATE
        # the next transaction of the same producer
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == Error.NONE
        assert (await tc.end_txn("tx", pid, epoch, False)).error == Error.NONE
        await tc.wait_completions()
        assert env.markers.calls[-1].partitions == {T1}
        assert tc.txns["tx"].state == S.COMPLETE_ABORT


async def _settle_loop() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_requests_wait_while_markers_are_written(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        env.markers.gate = asyncio.Event()
        pid, epoch = await begin(tc)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await env.markers.called.wait()
        md = tc.txns["tx"]
        assert (md.state, md.pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        # a retried commit and the next transaction's first partition wait for the markers
        # instead of being told CONCURRENT_TRANSACTIONS
        retry = asyncio.ensure_future(tc.end_txn("tx", pid, epoch, True))
        add = asyncio.ensure_future(tc.add_partitions("tx", pid, epoch, [T1]))
        await _settle_loop()
        assert not retry.done() and not add.done()
        assert tc.describe("tx").state == "PrepareCommit"
        env.markers.gate.set()
        assert (await retry).error == Error.NONE
        assert await add == Error.NONE
        assert (md.state, md.topic_partitions) == (S.ONGOING, {T1})
        assert env.states_written("tx") == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT,
                                            S.COMPLETE_COMMIT, S.ONGOING]


async def test_init_producer_id_waits_for_the_completion_then_bumps(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        env.markers.gate = asyncio.Event()
        pid, epoch = await begin(tc)
        assert (await tc.end_txn("tx", pid, epoch, False)).error == Error.NONE
        await env.markers.called.wait()
        init = asyncio.ensure_future(tc.init_producer_id("tx", 60000))
        await _settle_loop()
        assert not init.done()
        env.markers.gate.set()
        result = await init
        assert (result.error, result.producer_epoch) == (Error.NONE, epoch + 1)


async def test_waiting_requests_are_told_to_retry_when_markers_need_another_attempt(tmp_path):
    async with running(tmp_path, retry_backoff_ms=10) as env:
        tc = env.tc
        env.markers.gate = asyncio.Event()
        env.markers.results = [{T0: Error.NOT_LEADER_OR_FOLLOWER}]
        pid, epoch = await begin(tc)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await env.markers.called.wait()
        add = asyncio.ensure_future(tc.add_partitions("tx", pid, epoch, [T1]))
        await _settle_loop()
        assert not add.done()
        env.markers.gate.set()  # the first attempt fails: the waiter is let go
        assert await add == Error.CONCURRENT_TRANSACTIONS
        # while the retry is pending, nothing waits: answered at once
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == \
            Error.CONCURRENT_TRANSACTIONS
        await tc.wait_completions()
        assert len(env.markers.calls) == 2
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == Error.NONE


@pytest.mark.parametrize("hook", ["before_markers", "before_complete"])
async def test_requests_do_not_wait_on_a_completion_held_by_a_test_hook(tmp_path, hook):
    async with running(tmp_path) as env:
        tc = env.tc
        held = asyncio.Event()
        release = asyncio.Event()

        async def hold(transactional_id, md):
            held.set()
            await release.wait()

        setattr(tc, hook, hold)
        pid, epoch = await begin(tc)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await held.wait()
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == \
            Error.CONCURRENT_TRANSACTIONS
        assert (await tc.init_producer_id("tx", 60000)).error == \
            Error.CONCURRENT_TRANSACTIONS
        release.set()
        await tc.wait_completions()
        assert tc.txns["tx"].state == S.COMPLETE_COMMIT


async def test_marker_errors_are_retried_or_dropped(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        gone = TopicPartition("deleted", 0)
        pid, epoch = await begin(tc, partitions=(T0, T1, gone))
        env.markers.results = [
            {T0: Error.NOT_LEADER_OR_FOLLOWER, gone: Error.UNKNOWN_TOPIC_OR_PARTITION},
            {T0: Error.KAFKA_STORAGE_ERROR},
        ]
        assert (await tc.end_txn("tx", pid, epoch, False)).error == Error.NONE
        await tc.wait_completions()
        assert [c.partitions for c in env.markers.calls] == [{T0, T1, gone}, {T0}, {T0}]
        assert all(not c.commit for c in env.markers.calls)
        assert tc.txns["tx"].state == S.COMPLETE_ABORT


async def test_marker_writer_exception_is_retried(tmp_path):
    async with running(tmp_path) as env:
        calls = []

        async def flaky(*args, **kw):
            calls.append(args)
            if len(calls) == 1:
                raise RuntimeError("boom")
            return dict.fromkeys(args[5], Error.NONE)

        env.tc.write_markers = flaky
        pid, epoch = await begin(env.tc)
        assert (await env.tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await env.tc.wait_completions()
        assert len(calls) == 2 and env.tc.txns["tx"].state == S.COMPLETE_COMMIT


async def test_init_during_an_ongoing_transaction_aborts_it_first(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        pid, epoch = await begin(tc)
        fenced = await tc.init_producer_id("tx", 60000)
        assert fenced.error == Error.CONCURRENT_TRANSACTIONS
        await tc.wait_completions()
        [call] = env.markers.calls
        assert (call.commit, call.producer_epoch) == (False, epoch + 1)  # fences the zombie
        assert env.states_written("tx")[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
        # the zombie is fenced everywhere; the new instance retries and gets a new epoch
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == Error.PRODUCER_FENCED
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.PRODUCER_FENCED
        retry = await tc.init_producer_id("tx", 60000)
        assert (retry.error, retry.producer_id, retry.producer_epoch) == (
            Error.NONE, pid, epoch + 2)


async def test_kip_360_init_with_expected_producer(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        first = await tc.init_producer_id("tx", 60000)
        bumped = await tc.init_producer_id("tx", 60000, first.producer_id, first.producer_epoch)
        assert (bumped.producer_id, bumped.producer_epoch) == (first.producer_id, 1)
        retried = await tc.init_producer_id("tx", 60000, first.producer_id,
                                            first.producer_epoch)
        assert retried.producer_epoch == 1  # a retry of the bump: the same answer
        stale = await tc.init_producer_id("tx", 60000, first.producer_id, 7)
        assert stale.error == Error.PRODUCER_FENCED
        assert (stale.producer_id, stale.producer_epoch) == (-1, -1)


async def test_epoch_exhaustion_rotates_the_producer_id(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        first = await tc.init_producer_id("tx", 60000)
        tc.txns["tx"].producer_epoch = MAX_PRODUCER_EPOCH - 1
        rotated = await tc.init_producer_id("tx", 60000)
        assert (rotated.producer_id, rotated.producer_epoch) == (first.producer_id + 1, 0)


async def test_invalid_requests(tmp_path):
    async with running(tmp_path, transaction_max_timeout_ms=60000) as env:
        tc = env.tc
        assert (await tc.init_producer_id("", 1000)).error == Error.INVALID_REQUEST
        assert (await tc.init_producer_id("tx", 60001)).error == \
            Error.INVALID_TRANSACTION_TIMEOUT
        assert (await tc.init_producer_id("tx", 0)).error == Error.INVALID_TRANSACTION_TIMEOUT
        assert (await tc.init_producer_id("tx", 1000, 5, -1)).error == Error.INVALID_REQUEST
        # two-phase commit is off by default: Kafka's answer
        assert (await tc.init_producer_id("tx", 1000, enable_two_phase_commit=True)).error == \
            Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert await tc.add_partitions("", 1, 0, [T0]) == Error.INVALID_REQUEST
        assert (await tc.end_txn("", 1, 0, True)).error == Error.INVALID_REQUEST
        # unknown ids
        assert await tc.add_partitions("nope", 1, 0, [T0]) == Error.INVALID_PRODUCER_ID_MAPPING
        assert (await tc.end_txn("nope", 1, 0, True)).error == \
            Error.INVALID_PRODUCER_ID_MAPPING
        assert tc.verify_partitions("nope", 1, 0, [T0]) == {
            T0: Error.INVALID_PRODUCER_ID_MAPPING}
        assert TRANSACTION_STATE_TOPIC_NAME not in env.log_manager.topics


async def test_verify_partitions(tmp_path):
    async with running(tmp_path) as env:
        pid, epoch = await begin(env.tc)
        assert env.tc.verify_partitions("tx", pid, epoch, [T0, T1]) == {
            T0: Error.NONE, T1: Error.TRANSACTION_ABORTABLE}
        assert env.tc.verify_partitions("tx", pid, epoch + 1, [T0]) == {
            T0: Error.PRODUCER_FENCED}


async def test_transaction_version_2_bumps_the_epoch_per_transaction(tmp_path):
    async with running(tmp_path, transaction_version=2) as env:
        tc = env.tc
        init = await tc.init_producer_id("tx", 60000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await tc.add_partitions("tx", pid, epoch, [T0],
                                       client_transaction_version=TV_2) == Error.NONE
        result = await tc.end_txn("tx", pid, epoch, True, client_transaction_version=TV_2)
        assert (result.error, result.producer_id, result.producer_epoch) == (
            Error.NONE, pid, epoch + 1)
        await tc.wait_completions()
        [call] = env.markers.calls
        assert (call.producer_epoch, call.transaction_version) == (epoch + 1, TV_2)
        # a retry with the old epoch gets the same answer; the next transaction uses the new
        retry = await tc.end_txn("tx", pid, epoch, True, client_transaction_version=TV_2)
        assert (retry.error, retry.producer_epoch) == (Error.NONE, epoch + 1)
        assert await tc.add_partitions("tx", pid, epoch + 1, [T1],
                                       client_transaction_version=TV_2) == Error.NONE
        # an abort of an empty TV2 transaction is allowed too
        aborted = await tc.end_txn("tx", pid, epoch + 1, False,
                                   client_transaction_version=TV_2)
        assert aborted.producer_epoch == epoch + 2
        await tc.wait_completions()
        again = await tc.end_txn("tx", pid, epoch + 2, False, client_transaction_version=TV_2)
        assert (again.error, again.producer_epoch) == (Error.NONE, epoch + 3)
        await tc.wait_completions()
        # markers: the commit's and the abort of T1; the empty abort needs none
        assert [c.partitions for c in env.markers.calls] == [{T0}, {T1}]
        assert tc.txns["tx"].state == S.COMPLETE_ABORT


async def test_timed_out_transaction_is_aborted_with_an_epoch_bump(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock=clock) as env:
        tc = env.tc
        pid, epoch = await begin(tc, timeout_ms=5000)
        await begin(tc, "young", timeout_ms=60000)
        clock.advance(5000)
        assert await tc.abort_timed_out_transactions() == 0  # not older than its timeout yet
        clock.advance(1)
        assert await tc.abort_timed_out_transactions() == 1
        await tc.wait_completions()
        [call] = env.markers.calls
        assert (call.transactional_id, call.commit, call.producer_epoch) == (
            "tx", False, epoch + 1)
        md = tc.txns["tx"]
        assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
        # the vanished producer comes back: fenced
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.PRODUCER_FENCED
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == Error.PRODUCER_FENCED
        assert tc.txns["young"].state == S.ONGOING
        assert await tc.abort_timed_out_transactions() == 0


async def test_timeout_abort_with_transaction_version_2_bumps_once(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock=clock, transaction_version=2) as env:
        tc = env.tc
        _, epoch = await begin(tc, timeout_ms=1000)
        clock.advance(2000)
        assert await tc.abort_timed_out_transactions() == 1
        await tc.wait_completions()
        assert env.markers.calls[0].producer_epoch == epoch + 1
        assert tc.txns["tx"].producer_epoch == epoch + 1


async def test_transactional_ids_expire_but_never_with_an_open_transaction(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock=clock, transactional_id_expiration_ms=10_000) as env:
        tc = env.tc
        await tc.init_producer_id("idle", 60000)
        await begin(tc, "open", timeout_ms=900000)
        pid, epoch = await begin(tc, "done")
        assert (await tc.end_txn("done", pid, epoch, True)).error == Error.NONE
        await tc.wait_completions()
        clock.advance(10_000)
        assert await tc.remove_expired_transactional_ids() == 2
        assert set(tc.txns) == {"open"}
        assert env.states_written("idle")[-1] is None  # a tombstone
        assert tc.describe("idle").error == Error.TRANSACTIONAL_ID_NOT_FOUND
        # a forgotten id starts over with a new producer id
        again = await tc.init_producer_id("idle", 60000)
        assert again.producer_epoch == 0 and again.producer_id > pid
    async with running(tmp_path, clock=clock) as env:  # tombstones hold after a restart
        assert set(env.tc.txns) == {"open", "idle"}
        assert env.tc.txns["idle"].producer_epoch == 0


async def test_restart_reloads_state_and_completes_prepared_transactions(tmp_path):
    clock = ManualClock()
    markers = FakeMarkers()
    markers.gate = asyncio.Event()  # markers never get written before the "crash"
    async with running(tmp_path, clock=clock, markers=markers) as env:
        tc = env.tc
        pid, epoch = await begin(tc, partitions=(T0, T1))
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await markers.called.wait()
        other_pid, other_epoch = await begin(tc, "still-open")
        assert env.states_written("tx")[-1] == S.PREPARE_COMMIT
    fresh = FakeMarkers()
    async with running(tmp_path, clock=clock, markers=fresh) as env:
        tc = env.tc
        await tc.wait_completions()
        [call] = fresh.calls
        assert (call.producer_id, call.producer_epoch, call.commit) == (pid, epoch, True)
        assert call.partitions == {T0, T1}
        assert tc.txns["tx"].state == S.COMPLETE_COMMIT
        assert env.states_written("tx")[-2:] == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        still = tc.txns["still-open"]
        assert (still.state, still.producer_id, still.topic_partitions) == (
            S.ONGOING, other_pid, {T0})
        # the reloaded producer continues where it was
        assert await tc.add_partitions("still-open", other_pid, other_epoch, [T1]) == \
            Error.NONE
        assert (await tc.init_producer_id("tx", 60000)).producer_epoch == epoch + 1


async def test_failed_writes_answer_coordinator_not_available_and_change_nothing(tmp_path):
    fs = FaultyFileSystem()
    async with running(tmp_path, fs=fs) as env:
        tc = env.tc
        pid, epoch = await begin(tc)
        fs.path_filter = TRANSACTION_STATE_TOPIC_NAME
        fs.write_error = errno.EIO
        assert (await tc.init_producer_id("new", 60000)).error == \
            Error.COORDINATOR_NOT_AVAILABLE
        assert await tc.add_partitions("tx", pid, epoch, [T1]) == Error.COORDINATOR_NOT_AVAILABLE
        assert (await tc.end_txn("tx", pid, epoch, True)).error == \
            Error.COORDINATOR_NOT_AVAILABLE
        md = tc.txns["tx"]
        assert (md.state, md.pending_state, md.topic_partitions, md.producer_epoch) == (
            S.ONGOING, None, {T0}, epoch)
        # a fence whose write fails: the epoch moves once, and not again on the next attempt
        assert (await tc.init_producer_id("tx", 60000)).error == \
            Error.COORDINATOR_NOT_AVAILABLE
        assert (md.state, md.producer_epoch, md.has_failed_epoch_fence) == (
            S.ONGOING, epoch + 1, True)
        assert (await tc.init_producer_id("tx", 60000)).error == \
            Error.COORDINATOR_NOT_AVAILABLE
        assert md.producer_epoch == epoch + 1
        fs.clear_faults()
        assert (await tc.init_producer_id("tx", 60000)).error == \
            Error.CONCURRENT_TRANSACTIONS
        await tc.wait_completions()
        assert env.markers.calls[-1].producer_epoch == epoch + 1
        assert (await tc.init_producer_id("tx", 60000)).producer_epoch == epoch + 2
        assert (await tc.init_producer_id("new", 60000)).error == Error.NONE


async def test_failed_fsync_in_durable_mode(tmp_path):
    fs = FaultyFileSystem()
    async with running(tmp_path, fs=fs, flush_mode="fsync") as env:
        tc = env.tc
        pid, epoch = await begin(tc)
        fs.path_filter = TRANSACTION_STATE_TOPIC_NAME
        fs.fsync_error = errno.EIO
        assert (await tc.end_txn("tx", pid, epoch, True)).error == \
            Error.COORDINATOR_NOT_AVAILABLE
        md = tc.txns["tx"]
        assert (md.state, md.pending_state) == (S.ONGOING, None)
        assert not env.markers.calls
        fs.clear_faults()
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await tc.wait_completions()
        assert md.state == S.COMPLETE_COMMIT


async def test_complete_write_is_retried_until_it_succeeds(tmp_path):
    fs = FaultyFileSystem()
    markers = FakeMarkers()
    markers.gate = asyncio.Event()
    async with running(tmp_path, fs=fs, markers=markers) as env:
        tc = env.tc
        pid, epoch = await begin(tc)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await markers.called.wait()
        fs.path_filter = TRANSACTION_STATE_TOPIC_NAME
        fs.write_error = errno.EIO
        markers.gate.set()
        for _ in range(20):  # COMPLETE_COMMIT keeps failing, the transaction stays pending
            await asyncio.sleep(0)
        md = tc.txns["tx"]
        assert (md.state, md.pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        fs.clear_faults()
        await tc.wait_completions()
        assert md.state == S.COMPLETE_COMMIT


async def test_an_operation_finishes_when_its_caller_is_cancelled(tmp_path):
    async with running(tmp_path, flush_mode="fsync") as env:
        tc = env.tc
        pid, epoch = await begin(tc)
        caller = asyncio.ensure_future(tc.end_txn("tx", pid, epoch, True))
        await asyncio.sleep(0)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        while tc._ops:
            await asyncio.wait(list(tc._ops))
        await tc.wait_completions()
        assert tc.txns["tx"].state == S.COMPLETE_COMMIT


async def test_describe_and_list(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock=clock) as env:
        tc = env.tc
        pid, epoch = await begin(tc, "a-1", partitions=(T0, T1, OFFSETS_3))
        clock.advance(1000)
        await tc.init_producer_id("b-2", 60000)
        d = tc.describe("a-1")
        assert (d.error, d.state, d.producer_id, d.producer_epoch) == (
            Error.NONE, "Ongoing", pid, epoch)
        assert d.transaction_start_time_ms == clock.now_ms - 1000
        assert d.partitions == {"__consumer_offsets": [3], "t": [0, 1]}
        assert tc.describe("zzz").error == Error.TRANSACTIONAL_ID_NOT_FOUND
        assert tc.describe("").error == Error.INVALID_REQUEST

        def ids(**kw):
            listing = tc.list_transactions(**kw)
            assert listing.error == Error.NONE
            return [row[0] for row in listing.transactions]

        assert ids() == ["a-1", "b-2"]
        assert ids(state_filters=["Ongoing"]) == ["a-1"]
        listing = tc.list_transactions(state_filters=["Empty", "Bogus"])
        assert [r[0] for r in listing.transactions] == ["b-2"]
        assert listing.unknown_state_filters == ["Bogus"]
        assert ids(producer_id_filters=[pid]) == ["a-1"]
        assert ids(duration_filter_ms=999) == ["a-1", "b-2"]  # EMPTY: start -1, "long ago"
        assert ids(state_filters=["Ongoing"], duration_filter_ms=1000) == []
        assert ids(transactional_id_pattern="a-.*") == ["a-1"]
        assert ids(transactional_id_pattern="a") == []  # the whole id must match
        assert tc.list_transactions(transactional_id_pattern="(").error == \
            Error.INVALID_REGULAR_EXPRESSION
        assert tc.list_transactions().transactions[0] == ("a-1", pid, "Ongoing")


async def test_loading_and_stopped_coordinator_errors(tmp_path):
    async with running(tmp_path) as env:
        tc = env.tc
        tc.loading = {tc.partition_for("tx")}
        assert (await tc.init_producer_id("tx", 1000)).error == \
            Error.COORDINATOR_LOAD_IN_PROGRESS
        assert tc.describe("tx").error == Error.COORDINATOR_LOAD_IN_PROGRESS
        assert tc.list_transactions().error == Error.COORDINATOR_LOAD_IN_PROGRESS
        tc.loading = set()
        await tc.stop()
        assert (await tc.init_producer_id("tx", 1000)).error == Error.COORDINATOR_NOT_AVAILABLE
        assert tc.describe("tx").error == Error.COORDINATOR_NOT_AVAILABLE
        assert tc.verify_partitions("tx", 1, 0, [T0]) == {T0: Error.COORDINATOR_NOT_AVAILABLE}


def test_partition_for_is_kafkas():
    # Utils.abs(id.hashCode()) % partitions, values from Java 17
    from semel.coordinator.group.shard import java_string_hash, partition_for
    assert java_string_hash("my-transactional-id") == -959806496
    assert partition_for("my-transactional-id", 50) == 46
    assert partition_for("tx", 50) == 16
    assert java_string_hash("é-ü-𝄞") == -1868460993  # UTF-16 code units
    assert partition_for("é-ü-𝄞", 50) == 43
    assert partition_for("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE


async def test_expired_ids_are_tombstoned_in_bounded_batches(tmp_path, monkeypatch):
    from semel.coordinator.transaction import coordinator as module
    monkeypatch.setattr(module, "_TOMBSTONE_BATCH_BYTES", 200)
    clock = ManualClock()
    async with running(tmp_path, clock=clock, transactional_id_expiration_ms=1000,
                       transaction_state_log_num_partitions=1) as env:
        tc = env.tc
        for i in range(12):
            await tc.init_producer_id(f"id-{i:02d}", 60000)
        clock.advance(1000)
        assert await tc.remove_expired_transactional_ids() == 12
        assert not tc.txns
        plog = env.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, 0)
        tombstone_batches = [h for h, _ in plog.iter_batches_from(12)]
        assert len(tombstone_batches) == 3  # 12 ids of 5 bytes + 32 each, 200 bytes a batch
        assert plog.log_end_offset == 24


async def test_stop_lets_a_completion_finish_within_the_grace_period(tmp_path):
    markers = FakeMarkers()
    markers.gate = asyncio.Event()
    async with running(tmp_path, markers=markers) as env:
        tc = env.tc
        pid, epoch = await begin(tc)
        assert (await tc.end_txn("tx", pid, epoch, True)).error == Error.NONE
        await markers.called.wait()
        asyncio.get_running_loop().call_soon(markers.gate.set)
        await tc.stop(grace_s=30)
        assert env.states_written("tx")[-1] == S.COMPLETE_COMMIT
        assert (await tc.end_txn("tx", pid, epoch, True)).error == \
            Error.COORDINATOR_NOT_AVAILABLE
