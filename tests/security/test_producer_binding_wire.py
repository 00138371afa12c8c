"""Producer ids bound to the principal that obtained them (beyond Kafka; docs/TRANSACTIONS.md),
over real sockets.

A SASL_PLAINTEXT listener with PLAIN users alice and mallory. Both may write topic t, both
may use every transactional id starting with ``app-`` (a team-wide prefix ACL) and read
their own group. alice runs a confluent-kafka transactional producer as ``app-alice``;
mallory learns alice's producer id, epoch and last sequence from DescribeProducers and sends
raw frames with them - under her own transactional id and under alice's, which the ACLs
allow her. Every one is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (an idempotent
producer's id with CLUSTER_AUTHORIZATION_FAILED), and alice's transactions end exactly as
alice asked. The binding survives kill -9; with producer.id.principal.binding.enable=false
the hijack succeeds, as it does on Kafka.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from semel.broker.security import AclOperation, PatternType
from semel.broker.security import ResourceType as R
from semel.broker.testing import BrokerProcess, BrokerThread
from semel.protocol.errors import Error
from semel.protocol.records import build_batch
from tests.kafka_wire import KafkaWire, create_topic, make_topic, message
from tests.security.test_authz_wire import acl, grant

Op = AclOperation
E = Error
(PRODUCE, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN,
 TXN_OFFSET_COMMIT, SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_PRODUCERS) = (
    0, 22, 24, 25, 26, 28, 17, 36, 61)
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
PASSWORDS = {"alice": "alice-secret", "mallory": "mallory-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items()) + ";")
SASL_BROKER = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "group.initial.rebalance.delay.ms": "0",
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
}
REFUSED = "was issued to another principal"


def m(api_key: int, cls: str | None = None, /, **fields):
    return message(api_key, "request", cls, **fields)


def connect(bootstrap: str, user: str) -> KafkaWire:
    """A raw connection authenticated as ``user`` with SASL/PLAIN."""
    wire = KafkaWire.connect(bootstrap, client_id=f"{user}-raw")
    assert wire.request(SASL_HANDSHAKE, 1, m(SASL_HANDSHAKE, mechanism="PLAIN")).error_code == 0
    token = f"\0{user}\0{PASSWORDS[user]}".encode()
    assert wire.request(SASL_AUTHENTICATE, 2, m(SASL_AUTHENTICATE, auth_bytes=token)
                        ).error_code == 0
    return wire


def client_config(bootstrap: str, user: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def grant_both(bt: BrokerThread) -> None:
    bindings = []
    for user in PASSWORDS:
        principal = f"User:{user}"
        bindings += [
            acl(R.TOPIC, "t", Op.WRITE, principal=principal),
            acl(R.TOPIC, "t", Op.READ, principal=principal),
            acl(R.TRANSACTIONAL_ID, "app-", Op.WRITE, principal=principal,
                pattern=PatternType.PREFIXED),
            acl(R.GROUP, f"{user}-", Op.READ, principal=principal,
                pattern=PatternType.PREFIXED),
        ]
    grant(bt, *bindings)


def start_broker(data_dir, **extra) -> BrokerThread:
    bt = BrokerThread(data_dir, {**SASL_BROKER, **extra})
    bt.start()
    make_topic(bt, "t", 1)
    grant_both(bt)
    return bt


@pytest.fixture(scope="module")
def bound(tmp_path_factory):
    bt = start_broker(tmp_path_factory.mktemp("bound") / "data")
    try:
        assert bt.broker.producer_principals is not None  # on by default with the authorizer
        yield bt
    finally:
        bt.stop()


# -- raw requests ------------------------------------------------------------------------------

def producer_state(wire: KafkaWire, producer_id: int | None = None, *, in_txn: bool = False):
    """What DescribeProducers tells anyone with Read on t: (id, epoch, last sequence) of
    ``producer_id``, of the producer with an open transaction (``in_txn``), or of the one
    that wrote last."""
    response = wire.request(DESCRIBE_PRODUCERS, 0, m(DESCRIBE_PRODUCERS, topics=[
        m(DESCRIBE_PRODUCERS, "TopicRequest", name="t", partition_indexes=[0])]))
    (partition,) = response.topics[0].partitions
    states = [s for s in partition.active_producers
              if (producer_id is None or s.producer_id == producer_id)
              and (not in_txn or s.current_txn_start_offset >= 0)]
    state = max(states, key=lambda s: s.last_timestamp)
    return state.producer_id, state.producer_epoch, state.last_sequence


def produce(wire: KafkaWire, pid: int, epoch: int, sequence: int, *, transactional_id=None,
            value=b"mallory"):
    batch = build_batch([(None, value, [], 1_700_000_000_000)], producer_id=pid,
                        producer_epoch=epoch, base_sequence=sequence,
                        is_transactional=transactional_id is not None)
    response = wire.request(PRODUCE, 9, m(
        PRODUCE, acks=-1, timeout_ms=30_000, transactional_id=transactional_id, topic_data=[
            m(PRODUCE, "TopicProduceData", name="t", partition_data=[
                m(PRODUCE, "PartitionProduceData", index=0, records=batch)])]))
    (partition,) = response.responses[0].partition_responses
    return partition.error_code, partition.error_message


def add_partitions(wire, tid, pid, epoch):
    response = wire.request(ADD_PARTITIONS_TO_TXN, 3, m(
        ADD_PARTITIONS_TO_TXN, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            m(ADD_PARTITIONS_TO_TXN, "AddPartitionsToTxnTopic", name="t", partitions=[0])]))
    (topic,) = response.results_by_topic_v3_and_below
    (partition,) = topic.results_by_partition
    return partition.partition_error_code


def add_offsets(wire, tid, pid, epoch, group="mallory-g"):
    return wire.request(ADD_OFFSETS_TO_TXN, 3, m(
        ADD_OFFSETS_TO_TXN, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
        group_id=group)).error_code


def txn_offset_commit(wire, tid, pid, epoch, group="mallory-g"):
    response = wire.request(TXN_OFFSET_COMMIT, 3, m(
        TXN_OFFSET_COMMIT, transactional_id=tid, group_id=group, producer_id=pid,
        producer_epoch=epoch, generation_id=-1, member_id="", topics=[
            m(TXN_OFFSET_COMMIT, "TxnOffsetCommitRequestTopic", name="t", partitions=[
                m(TXN_OFFSET_COMMIT, "TxnOffsetCommitRequestPartition", partition_index=0,
                  committed_offset=0)])]))
    return response.topics[0].partitions[0].error_code


def end_txn(wire, tid, pid, epoch, commit):
    return wire.request(END_TXN, 3, m(END_TXN, transactional_id=tid, producer_id=pid,
                                      producer_epoch=epoch, committed=commit)).error_code


def init_producer_id(wire, tid=None):
    response = wire.request(INIT_PRODUCER_ID, 4, m(
        INIT_PRODUCER_ID, transactional_id=tid, transaction_timeout_ms=60_000,
        producer_id=-1, producer_epoch=-1))
    assert response.error_code == E.NONE
    return response.producer_id, response.producer_epoch


def committed_values(bootstrap: str) -> list[bytes]:
    consumer = Consumer({**client_config(bootstrap, "alice"), "group.id": "alice-reader",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("t", 0, 0)])
    values = []
    try:
        idle = 0
        while idle < 8:
            msg = consumer.poll(0.25)
            if msg is not None and not msg.error():
                values.append(msg.value())
                idle = 0
            else:
                idle += 1 if values else 0.25
    finally:
        consumer.close()
    return values


def hijack_attempts(wire: KafkaWire, pid: int, epoch: int, sequence: int) -> dict[str, tuple]:
    """Every way mallory can use alice's producer id; the answers by attempt."""
    answers = {}
    for tid in ("app-mallory", "app-alice"):
        answers[f"produce as {tid}"] = produce(wire, pid, epoch, sequence + 1,
                                               transactional_id=tid)
        answers[f"add partitions as {tid}"] = add_partitions(wire, tid, pid, epoch)
        answers[f"add offsets as {tid}"] = add_offsets(wire, tid, pid, epoch)
        answers[f"txn offset commit as {tid}"] = txn_offset_commit(wire, tid, pid, epoch)
    return answers


# -- the attacks -------------------------------------------------------------------------------

def test_hijacking_a_transactional_producer_id_is_refused(bound):
    bootstrap = bound.bootstrap
    alice = Producer({**client_config(bootstrap, "alice"), "transactional.id": "app-alice"})
    alice.init_transactions(30)
    with connect(bootstrap, "mallory") as mallory:
        # mallory's own producer id works: what follows is the binding's doing, not the ACLs'
        own_pid, own_epoch = init_producer_id(mallory, "app-mallory")
        assert add_partitions(mallory, "app-mallory", own_pid, own_epoch) == E.NONE
        assert end_txn(mallory, "app-mallory", own_pid, own_epoch, False) == E.NONE

        for commit in (False, True):
            alice.begin_transaction()
            for i in range(2):
                alice.produce("t", f"alice-{'commit' if commit else 'abort'}-{i}".encode())
            alice.flush(30)
            pid, epoch, sequence = producer_state(mallory, in_txn=True)
            assert pid != own_pid
            answers = hijack_attempts(mallory, pid, epoch, sequence)
            for attempt, answer in answers.items():
                if attempt.startswith("produce"):
                    code, text = answer
                    assert code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, attempt
                    assert REFUSED in text and "User:mallory" in text, text
                else:
                    assert answer == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, attempt
            # ending alice's transaction the other way round, under either transactional id
            for tid in ("app-mallory", "app-alice"):
                assert end_txn(mallory, tid, pid, epoch, not commit) == \
                    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, tid
            if commit:
                alice.commit_transaction(30)
            else:
                alice.abort_transaction(30)
    assert committed_values(bootstrap) == [b"alice-commit-0", b"alice-commit-1"]


def test_an_idempotent_producers_id_is_refused_to_another_principal(bound):
    bootstrap = bound.bootstrap
    before = known_producer_ids(bootstrap)
    alice = Producer({**client_config(bootstrap, "alice"), "enable.idempotence": True})
    alice.produce("t", b"idempotent-1")
    alice.flush(30)
    (alices_pid,) = known_producer_ids(bootstrap) - before
    with connect(bootstrap, "alice") as wire:
        alices_raw_pid, _ = init_producer_id(wire)
    assert bound.broker.producer_principals.owner(alices_raw_pid) == "User:alice"
    with connect(bootstrap, "mallory") as mallory:
        pid, epoch, sequence = producer_state(mallory, alices_pid)
        code, text = produce(mallory, pid, epoch, sequence + 1)
        assert code == E.CLUSTER_AUTHORIZATION_FAILED and REFUSED in text
        # a non-idempotent batch (no producer id) is what it always was
        assert produce(mallory, -1, -1, -1, value=b"plain")[0] == E.NONE
    alice.produce("t", b"idempotent-2")  # alice's sequence was not disturbed
    assert alice.flush(30) == 0
    assert producer_state_of(bootstrap, pid)[2] == sequence + 1


def known_producer_ids(bootstrap: str) -> set[int]:
    with connect(bootstrap, "alice") as wire:
        response = wire.request(DESCRIBE_PRODUCERS, 0, m(DESCRIBE_PRODUCERS, topics=[
            m(DESCRIBE_PRODUCERS, "TopicRequest", name="t", partition_indexes=[0])]))
    return {s.producer_id for s in response.topics[0].partitions[0].active_producers}


def producer_state_of(bootstrap: str, pid: int):
    with connect(bootstrap, "alice") as wire:
        return producer_state(wire, pid)


def test_switched_off_the_hijack_succeeds_as_on_kafka(tmp_path):
    bt = start_broker(tmp_path / "data", **{"producer.id.principal.binding.enable": "false"})
    try:
        assert bt.broker.producer_principals is None
        alice = Producer({**client_config(bt.bootstrap, "alice"),
                          "transactional.id": "app-alice"})
        alice.init_transactions(30)
        alice.begin_transaction()
        alice.produce("t", b"alice-0")
        alice.flush(30)
        with connect(bt.bootstrap, "mallory") as mallory:
            pid, epoch, sequence = producer_state(mallory, in_txn=True)
            # mallory's record lands in alice's open transaction, under her own id
            assert produce(mallory, pid, epoch, sequence + 1, transactional_id="app-mallory",
                           value=b"mallory-injected") == (E.NONE, None)
        alice.commit_transaction(30)
        assert committed_values(bt.bootstrap) == [b"alice-0", b"mallory-injected"]
    finally:
        bt.stop()


def test_the_binding_survives_kill_9(tmp_path):
    """No ACLs and allow.everyone.if.no.acl.found: the binding is the only thing in the way."""
    overrides = {**SASL_BROKER, "allow.everyone.if.no.acl.found": "true"}
    first = BrokerProcess(tmp_path / "data", overrides).start()
    try:
        with connect(first.bootstrap, "alice") as alice:
            create_topic(alice, "t")
            txn_pid, txn_epoch = init_producer_id(alice, "app-alice")
            idem_pid, idem_epoch = init_producer_id(alice)
            assert add_partitions(alice, "app-alice", txn_pid, txn_epoch) == E.NONE
            assert produce(alice, idem_pid, idem_epoch, 0, value=b"alice")[0] == E.NONE
    finally:
        first.kill()  # SIGKILL right after the answers: nothing written at shutdown
    second = BrokerProcess(tmp_path / "data", overrides).start()
    try:
        with connect(second.bootstrap, "mallory") as mallory:
            assert end_txn(mallory, "app-alice", txn_pid, txn_epoch, True) == \
                E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            code, text = produce(mallory, idem_pid, idem_epoch, 1)
            assert code == E.CLUSTER_AUTHORIZATION_FAILED and REFUSED in text
        with connect(second.bootstrap, "alice") as alice:  # alice's ids are still alice's
            assert produce(alice, idem_pid, idem_epoch, 1, value=b"alice")[0] == E.NONE
            assert end_txn(alice, "app-alice", txn_pid, txn_epoch, False) == E.NONE
    finally:
        second.kill()
