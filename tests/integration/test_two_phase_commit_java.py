"""KIP-939 two-phase commit transactions seen and ended by Java kafka-clients 3.9.1's admin
client: describeTransactions shows a prepared transaction with its Integer.MAX_VALUE timeout
and its start time (how long it has been prepared), listTransactions lists it, a
read_committed Java consumer sees none of it, and fenceProducers - what Kafka 4.1's
Admin.forceTerminateTransaction calls - aborts it for good.
"""

from __future__ import annotations

import time

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.broker.test_two_phase_commit_wire import init, write
from tests.integration.test_txn_admin_java import admin, read_committed_values
from tests.javaclient import require_java
from tests.kafka_wire import KafkaWire, make_topic

MAX_TIMEOUT = 2**31 - 1


def test_java_admin_describes_lists_and_terminates_a_prepared_transaction(tmp_path):
    require_java()
    overrides = {"transaction.two.phase.commit.enable": "true",
                 "transaction.state.log.num.partitions": "2"}
    with BrokerThread(tmp_path / "data", overrides) as b, KafkaWire.connect(b.bootstrap) as w:
        make_topic(b, "j2pc")
        tid = "java-2pc"
        r = init(w, tid, enable_2pc=True)
        assert write(w, tid, r.producer_id, r.producer_epoch, "j2pc", 0,
                     [b"prepared-0", b"prepared-1"]) == Error.NONE
        kept = init(w, tid, enable_2pc=True, keep=True)  # the producer restarted
        assert kept.ongoing_txn_producer_epoch == r.producer_epoch

        (described,) = admin(b.bootstrap, "describe-transactions", tid)
        assert (described["state"], described["producer_id"], described["producer_epoch"],
                described["transaction_timeout_ms"]) == (
            "Ongoing", r.producer_id, kept.producer_epoch, MAX_TIMEOUT)
        prepared_for_ms = time.time() * 1000 - described["transaction_start_time_ms"]
        assert 0 <= prepared_for_ms < 600_000
        assert described["partitions"] == [["j2pc", 0]]
        listed = {t["transactional_id"]: t for t in admin(b.bootstrap, "list-transactions")}
        assert listed[tid]["state"] == "Ongoing"
        assert read_committed_values(b.bootstrap, "j2pc") == []

        assert admin(b.bootstrap, "fence-producers", tid) == [
            {"type": "fenced", "transactional_id": tid}]
        (after,) = admin(b.bootstrap, "describe-transactions", tid)
        assert after["state"] in ("CompleteAbort", "Empty")
        assert after["producer_epoch"] > kept.producer_epoch
        assert read_committed_values(b.bootstrap, "j2pc") == []
        # the kept producer cannot commit it any more
        gone = init(w, tid, enable_2pc=True, keep=True)
        assert (gone.error_code, gone.ongoing_txn_producer_id) == (Error.NONE, -1)
