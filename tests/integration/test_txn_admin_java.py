"""KIP-664 admin with Java kafka-clients 3.9.1 against a deliberately hung transaction.

The broker runs with transaction.partition.verification.enable=false, so a transactional
batch for a partition its coordinator never heard of is appended (the hanging-transaction
hole verification closes): it pins the LSO, and read_committed consumers stop in front of it
while later plain records pile up behind. A confluent-kafka producer also keeps an ordinary
transaction open. AdminClient listTransactions and describeTransactions show the open one;
describeProducers shows the hung producer with its transaction's start offset;
abortTransaction (found by start offset, as kafka-transactions.sh abort does) writes an ABORT
marker through WriteTxnMarkers, after which read_committed consumers move past it.
"""

from __future__ import annotations

from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.javaclient import require_java, run_java
from tests.kafka_wire import PRODUCE, KafkaWire, make_topic, produce_request, records_batch

TIMEOUT_S = 30
HUNG_PRODUCER_ID = 900_000_001


def admin(bootstrap: str, *args: object) -> list[dict]:
    return run_java("admin", "--bootstrap", bootstrap, "--timeout-ms", "20000", *args,
                    timeout=TIMEOUT_S + 30)


def read_committed_values(bootstrap: str, topic: str) -> list[str]:
    *records, summary = run_java("consume", "--bootstrap", bootstrap, "--topic", topic,
                                 "--until-end", "--isolation", "read_committed",
                                 timeout=TIMEOUT_S + 30)
    assert summary["count"] == len(records)
    return [r["value"] for r in records]


def test_admin_lists_describes_and_aborts_a_hung_transaction(tmp_path):
    require_java()
    from confluent_kafka import Producer

    overrides = {"transaction.partition.verification.enable": "false",
                 "transaction.state.log.num.partitions": "2"}
    with BrokerThread(tmp_path / "data", overrides) as b:
        make_topic(b, "adm-hung")
        make_topic(b, "adm-open")
        with KafkaWire.connect(b.bootstrap) as wire:
            plain = records_batch([b"before-0", b"before-1"])
            hung = records_batch([b"hung-0", b"hung-1", b"hung-2"], is_transactional=True,
                                 producer_id=HUNG_PRODUCER_ID, producer_epoch=3,
                                 base_sequence=0)
            after = records_batch([b"after-0", b"after-1"])
            for batch, txn_id in ((plain, None), (hung, "adm-hung"), (after, None)):
                resp = wire.request(PRODUCE, 9, produce_request("adm-hung", 0, batch,
                                                                transactional_id=txn_id))
                assert resp.responses[0].partition_responses[0].error_code == Error.NONE
        # the hung batch (offsets 2-4) pins the LSO at 2
        assert read_committed_values(b.bootstrap, "adm-hung") == ["before-0", "before-1"]

        open_producer = Producer({"bootstrap.servers": b.bootstrap,
                                  "transactional.id": "adm-open", "linger.ms": 1})
        open_producer.init_transactions(TIMEOUT_S)
        open_producer.begin_transaction()
        open_producer.produce("adm-open", value=b"open", partition=0)
        open_producer.flush(TIMEOUT_S)

        listed = {t["transactional_id"]: t for t in admin(b.bootstrap, "list-transactions")}
        assert listed["adm-open"]["state"] == "Ongoing"
        [described] = admin(b.bootstrap, "describe-transactions", "adm-open")
        assert described["state"] == "Ongoing"
        assert described["producer_id"] == listed["adm-open"]["producer_id"]
        assert described["partitions"] == [["adm-open", 0]]
        assert described["coordinator_id"] == 0

        producers = admin(b.bootstrap, "describe-producers", "adm-hung", "0")
        [hung_state] = [p for p in producers if p["producer_id"] == HUNG_PRODUCER_ID]
        assert hung_state["producer_epoch"] == 3
        assert hung_state["last_sequence"] == 2
        assert hung_state["current_transaction_start_offset"] == 2

        [aborted] = admin(b.bootstrap, "abort-transaction", "adm-hung", "0",
                          "--start-offset", "2")
        assert (aborted["producer_id"], aborted["producer_epoch"]) == (HUNG_PRODUCER_ID, 3)
        producers = admin(b.bootstrap, "describe-producers", "adm-hung", "0")
        [hung_state] = [p for p in producers if p["producer_id"] == HUNG_PRODUCER_ID]
        assert hung_state["current_transaction_start_offset"] is None
        # read_committed consumers now move past the aborted batch
        assert read_committed_values(b.bootstrap, "adm-hung") == [
            "before-0", "before-1", "after-0", "after-1"]

        open_producer.abort_transaction(TIMEOUT_S)
