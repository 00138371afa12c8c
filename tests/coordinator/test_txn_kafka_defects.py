"""Pins how semel behaves in the scenario of a known Apache Kafka defect (docs/TRANSACTIONS.md).

KAFKA-20785: under transaction version 2 the coordinator aborts a timed-out transaction and
bumps the epoch; a commit already in flight then arrives at the pre-abort epoch, which looks
like a retry of the last EndTxn (stored epoch == request epoch + 1), so it fails the state
check instead of the epoch check. Kafka 4.x releases answer INVALID_TXN_STATE (fatal in the
clients); Kafka trunk answers PRODUCER_FENCED since the fix. semel answers as the releases do,
and the commit never takes effect. Under transaction version 0/1 the same race is
PRODUCER_FENCED (tests/coordinator/test_txn_coordinator.py).
"""

from __future__ import annotations

from semel.coordinator.transaction.metadata import TV_2
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error
from semel.storage.topic_partition import TopicPartition
from tests.coordinator.txn_harness import ManualClock, running

S = TransactionState
T0 = TopicPartition("t", 0)


async def test_kafka_20785_commit_racing_a_timeout_abort_under_tv2(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock=clock, transaction_version=2) as env:
        tc = env.tc
        init = await tc.init_producer_id("tx", 1000)
        pid, epoch = init.producer_id, init.producer_epoch
        assert await tc.add_partitions("tx", pid, epoch, [T0]) == Error.NONE
        clock.advance(2000)
        assert await tc.abort_timed_out_transactions() == 1
        await tc.wait_completions()
        assert (tc.txns["tx"].state, tc.txns["tx"].producer_epoch) == (S.COMPLETE_ABORT,
                                                                      epoch + 1)
        # the producer's commit, sent before it learnt of the abort, at the old epoch
        late = await tc.end_txn("tx", pid, epoch, True, client_transaction_version=TV_2)
        assert late.error == Error.INVALID_TXN_STATE  # Kafka trunk: PRODUCER_FENCED
        await tc.wait_completions()
        md = tc.txns["tx"]
        assert (md.state, md.producer_epoch) == (S.COMPLETE_ABORT, epoch + 1)
        assert [c.commit for c in env.markers.calls] == [False]
        # a retried abort at that epoch is the completed abort, answered OK
        again = await tc.end_txn("tx", pid, epoch, False, client_transaction_version=TV_2)
        assert (again.error, again.producer_epoch) == (Error.NONE, epoch + 1)
