"""Where the coordinator writes an id's records: ``abs(java_hash(id)) % partitions`` of
``__transaction_state``, with the partition and record key of an id computed once and kept
only while the coordinator holds the id (expiration drops them)."""

from __future__ import annotations

from semel.coordinator.partitioning import partition_for
from semel.coordinator.transaction.log import TRANSACTION_STATE_TOPIC_NAME, decode_key
from semel.protocol.errors import Error
from semel.protocol.records import iter_records
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import ManualClock, running

T0 = TopicPartition("t", 0)
IDS = [f"tiny-txn-{i}" for i in range(12)]


def ids_by_partition(log_manager, partitions: int) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for p in range(partitions):
        plog = log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME, p)
        for header, data in plog.iter_batches_from(0, with_data=True):
            for record in iter_records(data, header):
                found.setdefault(p, set()).add(decode_key(record.key))
    return found


async def commit_one(tc, tid: str) -> None:
    result = await tc.init_producer_id(tid, 60000)
    assert result.error == Error.NONE
    pid, epoch = result.producer_id, result.producer_epoch
    assert await tc.add_partitions(tid, pid, epoch, [T0]) == Error.NONE
    assert (await tc.end_txn(tid, pid, epoch, True)).error == Error.NONE


async def test_records_of_an_id_stay_on_its_partition_across_a_restart(tmp_path):
    # the topic exists with 6 partitions; the second run is configured with 4 and must
    # route by the 6 it finds
    async with running(tmp_path, transaction_state_log_num_partitions=6) as env:
        for tid in IDS[:6]:
            await commit_one(env.tc, tid)
        await env.tc.wait_completions()
    async with running(tmp_path, transaction_state_log_num_partitions=4) as env:
        assert env.tc.num_partitions == 6
        for tid in IDS:
            await commit_one(env.tc, tid)
        await env.tc.wait_completions()
        found = ids_by_partition(env.log_manager, 6)
    assert sum(len(ids) for ids in found.values()) == len(IDS)
    for p, ids in found.items():
        assert all(partition_for(tid, 6) == p for tid in ids), (p, ids)


async def test_an_expired_id_leaves_nothing_behind(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock=clock, transactional_id_expiration_ms=1000) as env:
        tc = env.tc
        for tid in IDS[:3]:
            await commit_one(tc, tid)
        await tc.wait_completions()
        clock.advance(1000)
        assert await tc.remove_expired_transactional_ids() == 3
        assert not tc.txns
        assert not tc._routes  # the per-id cache is bounded by the ids held
        await commit_one(tc, IDS[0])  # a comeback is routed (and written) afresh
        assert set(tc._routes) == {IDS[0]}
