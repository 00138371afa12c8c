"""``semel transactions`` against a broker holding a hanging transaction.

The broker runs with transaction.partition.verification.enable=false, so a transactional batch
from a producer id no coordinator knows is appended and hangs: it pins the last stable offset
and read_committed consumers stop in front of it. A confluent-kafka transactional producer
keeps an ordinary transaction open on the other partition. The CLI's describe-producers must
equal the Java AdminClient's; list and describe show the open transaction with the producer id
the partition reports; find-hanging finds the hung one and not the open one; abort (by start
offset, as kafka-transactions.sh, and by explicit producer id and epochs) writes the ABORT
marker, after which a read_committed consumer moves past the aborted records."""

from __future__ import annotations

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from semel.protocol.errors import Error
from tests.javaclient import require_java, run_java
from tests.kafka_wire import PRODUCE, KafkaWire, produce_request, records_batch
from tests.tools_cli.semel_cli import semel

TIMEOUT = 30
TOPIC = "cli-txn"
HUNG_PID, SECOND_HUNG_PID = 910_000_007, 910_000_008


def produce(bootstrap: str, partition: int, batch: bytes, txn_id: str | None = None) -> None:
    with KafkaWire.connect(bootstrap) as wire:
        resp = wire.request(PRODUCE, 9, produce_request(TOPIC, partition, batch,
                                                        transactional_id=txn_id))
        assert resp.responses[0].partition_responses[0].error_code == Error.NONE


def last_stable_offset(admin: AdminClient, partition: int) -> int:
    tp = TopicPartition(TOPIC, partition)
    result = admin.list_offsets({tp: OffsetSpec.latest()},
                                isolation_level=IsolationLevel.READ_COMMITTED)
    return result[tp].result(TIMEOUT).offset


def read_committed(bootstrap: str, partition: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cli-txn-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    values: list[bytes] = []
    try:
        for _ in range(300):
            if len(values) >= count:
                break
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_find_hanging_and_abort(cli_broker):
    require_java()
    b = cli_broker.bootstrap
    assert semel("topics", "create", "--topic", TOPIC, "--partitions", 2,
                 bootstrap=b).returncode == 0
    produce(b, 0, records_batch([b"before-0", b"before-1"]))
    produce(b, 0, records_batch([b"hung-0", b"hung-1", b"hung-2"], is_transactional=True,
                                producer_id=HUNG_PID, producer_epoch=3, base_sequence=0),
            txn_id="cli-hung")
    produce(b, 0, records_batch([b"after-0", b"after-1"]))
    admin = AdminClient({"bootstrap.servers": b})
    assert last_stable_offset(admin, 0) == 2  # pinned by the hung batch at offsets 2-4

    open_producer = Producer({"bootstrap.servers": b, "transactional.id": "cli-open",
                              "linger.ms": 1})
    open_producer.init_transactions(TIMEOUT)
    open_producer.begin_transaction()
    open_producer.produce(TOPIC, value=b"open", partition=1)
    assert open_producer.flush(TIMEOUT) == 0

    # describe-producers: the same as the Java AdminClient's describeProducers
    cli = semel("transactions", "describe-producers", "--topic", TOPIC, "--partition", 0,
                bootstrap=b, json_output=True).json["producers"]
    java = run_java("admin", "--bootstrap", b, "--timeout-ms", "20000", "describe-producers",
                    TOPIC, "0", timeout=TIMEOUT + 30)
    fields = ("producer_id", "producer_epoch", "last_sequence", "last_timestamp",
              "current_transaction_start_offset")
    assert sorted(tuple(p[f] for f in fields) + (p["coordinator_epoch"],) for p in cli) == \
        sorted(tuple(p[f] for f in fields) + (-1 if p["coordinator_epoch"] is None
                                              else p["coordinator_epoch"],) for p in java)
    assert (HUNG_PID, 3, 2, 1_700_000_000_002, 2) in [tuple(p[f] for f in fields) for p in cli]
    text = semel("transactions", "describe-producers", "--topic", TOPIC, "--partition", 0,
                 bootstrap=b).stdout.splitlines()
    assert text[0].split() == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                               "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]

    # list and describe show the open transaction, with the producer id partition 1 reports
    [open_state] = semel("transactions", "describe-producers", "--topic", TOPIC, "--partition",
                         1, bootstrap=b, json_output=True).json["producers"]
    listed = {t["transactional_id"]: t for t in semel(
        "transactions", "list", bootstrap=b, json_output=True).json["transactions"]}
    assert listed["cli-open"]["state"] == "Ongoing"
    assert listed["cli-open"]["producer_id"] == open_state["producer_id"]
    assert "cli-hung" not in listed
    described = semel("transactions", "describe", "--transactional-id", "cli-open",
                      bootstrap=b, json_output=True).json
    assert described["state"] == "Ongoing"
    assert (described["producer_id"], described["producer_epoch"]) == (
        open_state["producer_id"], open_state["producer_epoch"])
    assert described["partitions"] == [[TOPIC, 1]]
    assert semel("transactions", "list", "--transactional-id-pattern", "cli-o.*", bootstrap=b,
                 json_output=True).json["transactions"] == [listed["cli-open"]]

    # find-hanging: the hung one; the open one (its coordinator holds it) is not hanging,
    # even when every open transaction is a candidate (--max-transaction-timeout 0)
    for extra in ([], ["--max-transaction-timeout", "0"]):
        hanging = semel("transactions", "find-hanging", "--topic", TOPIC, *extra, bootstrap=b,
                        json_output=True).json["hanging"]
        assert [(h["partition"], h["producer_id"], h["producer_epoch"], h["start_offset"])
                for h in hanging] == [(0, HUNG_PID, 3, 2)]

    # abort by start offset: the ABORT marker unpins the LSO
    missing = semel("transactions", "abort", "--topic", TOPIC, "--partition", 0,
                    "--start-offset", 3, bootstrap=b)
    assert missing.returncode == 1 and "no open transaction starts at offset 3" in \
        missing.error_line
    aborted = semel("transactions", "abort", "--topic", TOPIC, "--partition", 0,
                    "--start-offset", 2, bootstrap=b, json_output=True).json["aborted"]
    assert (aborted["producer_id"], aborted["producer_epoch"]) == (HUNG_PID, 3)
    assert read_committed(b, 0, 4) == [b"before-0", b"before-1", b"after-0", b"after-1"]
    end = 2 + 3 + 2 + 1  # records and the marker
    assert last_stable_offset(admin, 0) == end
    assert semel("transactions", "find-hanging", "--topic", TOPIC, "--partition", 0,
                 bootstrap=b, json_output=True).json["hanging"] == []

    # abort with the producer id and epochs given (a coordinator epoch of -1 means 0)
    produce(b, 0, records_batch([b"hung-again"], is_transactional=True,
                                producer_id=SECOND_HUNG_PID, producer_epoch=0, base_sequence=0),
            txn_id="cli-hung-2")
    produce(b, 0, records_batch([b"last"]))
    assert last_stable_offset(admin, 0) == end
    [hung] = semel("transactions", "find-hanging", "--topic", TOPIC, bootstrap=b,
                   json_output=True).json["hanging"]
    assert (hung["producer_id"], hung["start_offset"], hung["coordinator_epoch"]) == (
        SECOND_HUNG_PID, end, -1)
    result = semel("transactions", "abort", "--topic", TOPIC, "--partition", 0,
                   "--producer-id", SECOND_HUNG_PID, "--producer-epoch", 0,
                   "--coordinator-epoch", -1, bootstrap=b)
    assert result.returncode == 0, result.stderr
    assert last_stable_offset(admin, 0) == end + 3
    assert read_committed(b, 0, 5)[-1] == b"last"

    # errors
    unknown = semel("transactions", "describe", "--transactional-id", "cli-nobody",
                    bootstrap=b)
    assert unknown.returncode == 1
    assert unknown.error_line.startswith(
        "semel transactions describe: TRANSACTIONAL_ID_NOT_FOUND:")
    result = semel("transactions", "describe-producers", "--topic", "cli-no-topic",
                   "--partition", 0, bootstrap=b)
    assert result.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in result.error_line
    open_producer.abort_transaction(TIMEOUT)
