"""The attacks of issue 13's first paragraph, replayed with ACLs in place, and the
transactional ACL matrix with confluent-kafka's transactional producer.

The victim is User:victim on a SASL_PLAINTEXT listener (PLAIN), with Write on its
transactional id and topic; the attacker is User:ANONYMOUS on the PLAINTEXT listener, with
Describe on every topic and Write on its own transactional id. Every attack is sent as raw
frames; each is denied, and the victim's transactions commit or abort exactly as it asked.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from semel.broker.security import CLUSTER_NAME, AclOperation, PatternType
from semel.broker.security import ResourceType as R
from semel.broker.testing import BrokerThread
from semel.protocol.errors import Error
from tests.kafka_wire import KafkaWire, make_topic
from tests.security.test_authz_wire import (
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    FETCH,
    INIT_PRODUCER_ID,
    WRITE_TXN_MARKERS,
    acl,
    delete_records,
    delete_topics,
    fetch,
    fetch_errors,
    grant,
    m,
    marker_errors,
    write_markers,
)

Op = AclOperation
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_victim="victim-secret" user_eve="eve-secret";')
VICTIM = "User:victim"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    bt = BrokerThread(tmp_path_factory.mktemp("attacks") / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "group.initial.rebalance.delay.ms": "0",
        "transaction.state.log.num.partitions": "1",
        "offsets.topic.num.partitions": "1",
    })
    with bt:
        make_topic(bt, "vt", 1)
        grant(bt,
              acl(R.TRANSACTIONAL_ID, "victim-tx", Op.WRITE, principal=VICTIM),
              acl(R.TOPIC, "vt", Op.WRITE, principal=VICTIM),
              acl(R.TOPIC, "vt", Op.READ, principal=VICTIM),
              acl(R.GROUP, "victim-", Op.READ, principal=VICTIM, pattern=PatternType.PREFIXED),
              acl(R.TOPIC, "*", Op.DESCRIBE),
              acl(R.TRANSACTIONAL_ID, "eve-tx", Op.WRITE),
              acl(R.GROUP, "eve", Op.READ))
        yield bt


def sasl_address(bt: BrokerThread) -> str:
    port = next(e.port for e in bt.broker.endpoints if e.name == "SASL_PLAINTEXT")
    return f"127.0.0.1:{port}"


def victim_config(bt: BrokerThread, user: str = "victim", password: str = "victim-secret"):
    return {"bootstrap.servers": sasl_address(bt), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}


def attack(bt: BrokerThread, api_key: int, version: int, body):
    with KafkaWire.connect(bt.bootstrap) as wire:
        return wire.request(api_key, version, body)


def committed_values(bt: BrokerThread) -> list[bytes]:
    consumer = Consumer({**victim_config(bt), "group.id": "victim-reader",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("vt", 0, 0)])
    values = []
    try:
        for _ in range(40):
            msg = consumer.poll(0.25)
            if msg is not None and not msg.error():
                values.append(msg.value())
            elif msg is None and values:
                break
    finally:
        consumer.close()
    return values


def test_attacks_are_denied_and_the_victims_transactions_stand(broker):
    producer = Producer({**victim_config(broker), "transactional.id": "victim-tx"})
    producer.init_transactions(30)
    state = broker.broker.txn_coordinator.describe("victim-tx")
    victim_pid, victim_epoch = state.producer_id, state.producer_epoch

    producer.begin_transaction()
    for value in (b"aborted-1", b"aborted-2"):
        producer.produce("vt", value)
    producer.flush(30)

    # read another producer's id and epoch
    (described,) = attack(broker, DESCRIBE_TRANSACTIONS, 0, m(
        DESCRIBE_TRANSACTIONS, transactional_ids=["victim-tx"])).transaction_states
    assert described.error_code == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert (described.transaction_state, described.producer_epoch, described.topics) == (
        "", 0, [])  # nothing of the victim's state told
    # commit it behind the victim's back, or write markers for made-up producer ids
    for pid, epoch in ((victim_pid, victim_epoch), (987_654, 0)):
        response = attack(broker, WRITE_TXN_MARKERS, 1, write_markers("vt", pid))
        assert marker_errors(response) == [Error.CLUSTER_AUTHORIZATION_FAILED]
    # end or fence another application's transaction
    response = attack(broker, END_TXN, 3, m(END_TXN, transactional_id="victim-tx",
                                            producer_id=victim_pid,
                                            producer_epoch=victim_epoch, committed=True))
    assert response.error_code == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    response = attack(broker, INIT_PRODUCER_ID, 5, m(
        INIT_PRODUCER_ID, transactional_id="victim-tx", transaction_timeout_ms=60_000,
        producer_id=-1, producer_epoch=-1))
    assert response.error_code == Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # delete the topic, wipe its partition
    (deleted,) = attack(broker, DELETE_TOPICS, 6, delete_topics("vt")).responses
    assert deleted.error_code == Error.TOPIC_AUTHORIZATION_FAILED
    (wiped,) = attack(broker, DELETE_RECORDS, 2, delete_records("vt")).topics
    assert [p.error_code for p in wiped.partitions] == [Error.TOPIC_AUTHORIZATION_FAILED]
    # read the coordinators' internal topics
    for internal in ("__transaction_state", "__consumer_offsets"):
        response = attack(broker, FETCH, 12, fetch(internal))
        assert fetch_errors(response) == [Error.TOPIC_AUTHORIZATION_FAILED], internal
    # an attacker's own transactional id works: the denials above are the ACLs' doing
    response = attack(broker, INIT_PRODUCER_ID, 5, m(
        INIT_PRODUCER_ID, transactional_id="eve-tx", transaction_timeout_ms=60_000,
        producer_id=-1, producer_epoch=-1))
    assert response.error_code == Error.NONE

    producer.abort_transaction(30)
    producer.begin_transaction()
    for value in (b"committed-1", b"committed-2"):
        producer.produce("vt", value)
    producer.commit_transaction(30)

    assert "vt" in broker.broker.log_manager.topics
    assert committed_values(broker) == [b"committed-1", b"committed-2"]


def _fatal_or_error(call) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0]


def test_init_transactions_without_write_on_the_id(broker):
    producer = Producer({**victim_config(broker, "eve", "eve-secret"),
                         "transactional.id": "victim-tx"})
    error = _fatal_or_error(lambda: producer.init_transactions(30))
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal()


def test_produce_to_a_topic_without_write(broker):
    grant(broker, acl(R.TRANSACTIONAL_ID, "eve-tx", Op.WRITE, principal="User:eve"),
          acl(R.TOPIC, "vt", Op.DESCRIBE, principal="User:eve"))
    producer = Producer({**victim_config(broker, "eve", "eve-secret"),
                         "transactional.id": "eve-tx"})
    producer.init_transactions(30)
    producer.begin_transaction()
    errors = []
    producer.produce("vt", b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    error = _fatal_or_error(lambda: producer.commit_transaction(30))
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in (
        error.code(), *(e.code() for e in errors if e is not None))


def test_send_offsets_without_read_on_the_group(broker):
    producer = Producer({**victim_config(broker), "transactional.id": "victim-tx"})
    consumer = Consumer({**victim_config(broker), "group.id": "not-victims"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("vt", b"x")
    error = _fatal_or_error(lambda: producer.send_offsets_to_transaction(
        [TopicPartition("vt", 0, 1)], consumer.consumer_group_metadata(), 30))
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    producer.abort_transaction(30)
    consumer.close()


def test_cluster_name_is_kafkas():
    assert CLUSTER_NAME == "kafka-cluster"
