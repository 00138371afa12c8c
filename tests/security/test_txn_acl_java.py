"""The transactional ACL matrix with real transactional producers: Java kafka-clients 3.9.1
(SemelClient's ``txn-acl-probe``) and confluent-kafka (librdkafka).

The application is User:app on a SASL_PLAINTEXT listener (PLAIN). Each case gives it the ACLs
a transactional application needs - Write on its transactional id, Write on the output topic,
Read on the consumer group and on the input topic - less one, runs init / begin / send /
send offsets / commit or abort, and checks which step fails with which client-side exception
(KIP-98's model: TransactionalId Write for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn and transactional Produce; Topic Write for AddPartitionsToTxn; Group Read for
AddOffsetsToTxn and TxnOffsetCommit). Cases revoking an ACL mid-transaction reach the APIs a
client cannot be denied otherwise (EndTxn). Where everything is granted, a read_committed
consumer sees the committed records and none of the aborted ones.

Every case uses its own transactional id, topic and group, so the ACLs of one case do not
help another.
"""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from semel.broker.security import AclOperation
from semel.broker.security import ResourceType as R
from semel.broker.security.acl import AclBindingFilter
from semel.broker.testing import BrokerThread
from tests import javaclient
from tests.kafka_wire import make_topic
from tests.security.test_authz_wire import acl, grant

Op = AclOperation
APP = "User:app"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_app="app-secret" user_admin="admin-secret";')
JAVA_SASL = ["--prop", "security.protocol=SASL_PLAINTEXT", "--prop", "sasl.mechanism=PLAIN",
             "--prop", ("sasl.jaas.config=org.apache.kafka.common.security.plain."
                        'PlainLoginModule required username="app" password="app-secret";')]

# what a case may leave out of the application's ACLs
ALL = ("txn_write", "topic_write", "group_read", "topic_read")


def without(name: str) -> tuple[str, ...]:
    return tuple(n for n in ALL if n != name)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    bt = BrokerThread(tmp_path_factory.mktemp("txnacl") / "data", {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": "0",
        "transaction.state.log.num.partitions": "1",
        "offsets.topic.num.partitions": "1",
    })
    with bt:
        yield bt


def sasl_address(bt: BrokerThread) -> str:
    port = next(e.port for e in bt.broker.endpoints if e.name == "SASL_PLAINTEXT")
    return f"127.0.0.1:{port}"


class App:
    """One case's names and ACLs: transactional id, topic, group."""

    def __init__(self, bt: BrokerThread, grants=ALL) -> None:
        tag = uuid.uuid4().hex[:8]
        self.bt = bt
        self.tid, self.topic, self.group = f"tx-{tag}", f"out-{tag}", f"grp-{tag}"
        make_topic(bt, self.topic, 1)
        self.acls = {
            "txn_write": acl(R.TRANSACTIONAL_ID, self.tid, Op.WRITE, principal=APP),
            "topic_write": acl(R.TOPIC, self.topic, Op.WRITE, principal=APP),
            "group_read": acl(R.GROUP, self.group, Op.READ, principal=APP),
            "topic_read": acl(R.TOPIC, self.topic, Op.READ, principal=APP),
        }
        grant(bt, *(self.acls[name] for name in grants))

    def revoke(self, name: str) -> None:
        async def delete():
            (deleted,) = await self.bt.broker.authorizer.delete_acls(
                [AclBindingFilter(*self.acls[name])])
            assert deleted == [self.acls[name]]

        self.bt.call(delete())

    def committed_values(self) -> list[bytes]:
        """What a read_committed consumer (as the super user) reads from the topic."""
        consumer = Consumer({"bootstrap.servers": sasl_address(self.bt),
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": "admin-secret",
                             "group.id": f"reader-{self.tag()}", "enable.auto.commit": False,
                             "isolation.level": "read_committed"})
        consumer.assign([TopicPartition(self.topic, 0, 0)])
        values: list[bytes] = []
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

    def txn_state(self) -> str:
        """The coordinator's state of the transactional id (read on the broker's loop)."""
        async def describe():
            return self.bt.broker.txn_coordinator.describe(self.tid).state

        return self.bt.call(describe())

    def tag(self) -> str:
        return self.tid[3:]


# -- Java --------------------------------------------------------------------------------


def java_probe(app: App, steps: str, *, on_pause=()) -> list[tuple[str, str]]:
    """Run SemelClient txn-acl-probe; (step, "ok" or the simple name of the exception class)
    per step. Each "pause" step runs the next callable of ``on_pause`` before going on."""
    javaclient.require_java()
    cmd = javaclient.java_command(
        "txn-acl-probe", "--bootstrap", sasl_address(app.bt), "--topic", app.topic,
        "--transactional-id", app.tid, "--group", app.group, "--steps", steps,
        "--timeout-ms", 15000, *JAVA_SASL)
    actions = list(on_pause)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    results = []
    try:
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            if event["type"] == "paused":
                actions.pop(0)()
                proc.stdin.write("\n")
                proc.stdin.flush()
            elif event["type"] == "step":
                results.append(event)
        assert proc.wait(60) == 0, proc.stderr.read()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return [(r["step"], "ok" if r["result"] == "ok" else _simple(r)) for r in results]


def _simple(result: dict) -> str:
    name = result["class"].rsplit(".", 1)[-1]
    root = result["root_class"].rsplit(".", 1)[-1]
    return name if root == name else f"{name}<{root}>"


JAVA_CASES = {
    # everything granted: both ends of a transaction work
    "allowed-commit": (ALL, "init,begin,send,offsets,commit", [
        ("init", "ok"), ("begin", "ok"), ("send", "ok"), ("offsets", "ok"),
        ("commit", "ok")]),
    # InitProducerId needs Write on the transactional id: fatal for the producer
    "init-denied": (without("txn_write"), "init,begin", [
        ("init", "TransactionalIdAuthorizationException"),
        ("begin", "KafkaException<TransactionalIdAuthorizationException>")]),
    # AddPartitionsToTxn needs Write on the topic: abortable; commit refused, abort works and
    # the producer goes on with the next transaction
    "send-denied-commit": (without("topic_write"),
                           "init,begin,send,commit,abort,begin,offsets,commit", [
        ("init", "ok"), ("begin", "ok"), ("send", "TopicAuthorizationException"),
        ("commit", "KafkaException<TopicAuthorizationException>"), ("abort", "ok"),
        ("begin", "ok"), ("offsets", "ok"), ("commit", "ok")]),
    "send-denied-abort": (without("topic_write"),
                          "init,begin,send,abort,begin,offsets,commit", [
        ("init", "ok"), ("begin", "ok"), ("send", "TopicAuthorizationException"),
        ("abort", "ok"), ("begin", "ok"), ("offsets", "ok"), ("commit", "ok")]),
    # AddOffsetsToTxn needs Read on the group: abortable
    "offsets-denied-commit": (without("group_read"),
                              "init,begin,send,offsets,commit,abort", [
        ("init", "ok"), ("begin", "ok"), ("send", "ok"),
        ("offsets", "GroupAuthorizationException"),
        ("commit", "KafkaException<GroupAuthorizationException>"), ("abort", "ok")]),
    "offsets-denied-abort": (without("group_read"),
                             "init,begin,send,offsets,abort,begin,send,commit", [
        ("init", "ok"), ("begin", "ok"), ("send", "ok"),
        ("offsets", "GroupAuthorizationException"), ("abort", "ok"),
        ("begin", "ok"), ("send", "ok"), ("commit", "ok")]),
}


@pytest.mark.parametrize("name", list(JAVA_CASES))
def test_java_transactional_acl_matrix(broker, name):
    grants, steps, expected = JAVA_CASES[name]
    app = App(broker, grants)
    assert java_probe(app, steps) == expected


def test_java_committed_and_aborted_records(broker):
    """Everything granted: an aborted transaction's record stays hidden from read_committed,
    the committed one is read."""
    app = App(broker)
    assert java_probe(app, "init,begin,send,abort,begin,send,offsets,commit") == [
        ("init", "ok"), ("begin", "ok"), ("send", "ok"), ("abort", "ok"), ("begin", "ok"),
        ("send", "ok"), ("offsets", "ok"), ("commit", "ok")]
    assert app.committed_values() == [b"probe-1"]


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_java_end_txn_denied_after_revoking_write_on_the_id(broker, end):
    """EndTxn needs Write on the transactional id: revoked mid-transaction, commit and abort
    both fail with TransactionalIdAuthorizationException (fatal), and nothing is committed."""
    app = App(broker)
    result = java_probe(app, f"init,begin,send,pause,{end}",
                        on_pause=[lambda: app.revoke("txn_write")])
    assert result == [("init", "ok"), ("begin", "ok"), ("send", "ok"),
                      (end, "TransactionalIdAuthorizationException")]
    assert app.txn_state() == "Ongoing"  # neither committed nor aborted by the denied EndTxn
    assert app.committed_values() == []


def test_java_produce_denied_after_revoking_write_on_the_id(broker):
    """AddPartitionsToTxn needs Write on the transactional id too: the send fails with
    TransactionalIdAuthorizationException, fatal (abort cannot recover the producer)."""
    app = App(broker)
    result = java_probe(app, "init,begin,pause,send,abort",
                        on_pause=[lambda: app.revoke("txn_write")])
    assert result == [("init", "ok"), ("begin", "ok"),
                      ("send", "TransactionalIdAuthorizationException"),
                      ("abort", "KafkaException<TransactionalIdAuthorizationException>")]


def test_java_offsets_denied_after_revoking_read_on_the_group(broker):
    """Group Read revoked mid-transaction (after records were added): sendOffsetsToTransaction
    fails with GroupAuthorizationException (AddOffsetsToTxn), abortable: the abort hides the
    record sent and the next transaction, without offsets, commits."""
    app = App(broker)
    result = java_probe(app, "init,begin,send,pause,offsets,abort,begin,send,commit",
                        on_pause=[lambda: app.revoke("group_read")])
    assert result == [("init", "ok"), ("begin", "ok"), ("send", "ok"),
                      ("offsets", "GroupAuthorizationException"), ("abort", "ok"),
                      ("begin", "ok"), ("send", "ok"), ("commit", "ok")]
    assert app.committed_values() == [b"probe-1"]


# -- confluent-kafka (librdkafka) ----------------------------------------------------------


def app_config(app: App) -> dict:
    return {"bootstrap.servers": sasl_address(app.bt), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "app-secret",
            "transactional.id": app.tid}


# a record for a denied partition: failed, or purged when the transaction became abortable
DENIED_DELIVERY = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._PURGE_QUEUE}


def _error_of(call) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0]


def _offsets(app: App, producer: Producer) -> None:
    consumer = Consumer({**{k: v for k, v in app_config(app).items()
                            if k != "transactional.id"}, "group.id": app.group})
    try:
        producer.send_offsets_to_transaction([TopicPartition(app.topic, 0, 1)],
                                             consumer.consumer_group_metadata(), 30)
    finally:
        consumer.close()


def test_confluent_allowed_commit_and_abort(broker):
    app = App(broker)
    producer = Producer(app_config(app))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"aborted")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"committed")
    _offsets(app, producer)
    producer.commit_transaction(30)
    assert app.committed_values() == [b"committed"]


def test_confluent_send_offsets_denied_then_commit(broker):
    """Group Read missing: send_offsets_to_transaction fails abortable; commit is refused
    (the transaction must be aborted), abort works and the next transaction commits."""
    app = App(broker, without("group_read"))
    producer = Producer(app_config(app))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"doomed")
    error = _error_of(lambda: _offsets(app, producer))
    assert error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert error.txn_requires_abort() and not error.fatal()
    error = _error_of(lambda: producer.commit_transaction(30))
    assert error.txn_requires_abort() and not error.fatal()
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"after")
    producer.commit_transaction(30)
    assert app.committed_values() == [b"after"]


def test_confluent_produce_denied_in_an_empty_transaction_then_abort(broker):
    """Topic Write missing on the transaction's first partition: AddPartitionsToTxn is denied
    (abortable), and the transaction is still Empty at the coordinator. librdkafka sends
    EndTxn(abort) all the same (it counts the denied AddPartitionsToTxn as a request the
    broker may have acted on), and the coordinator answers INVALID_TXN_STATE, as Kafka's
    TransactionCoordinator does for EndTxn on an Empty transaction: librdkafka makes it fatal.
    (The Java client sends no EndTxn when nothing was added: its abort succeeds, see
    send-denied-abort above.)"""
    app = App(broker, without("topic_write"))
    producer = Producer(app_config(app))
    producer.init_transactions(30)
    producer.begin_transaction()
    errors = []
    producer.produce(app.topic, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and {e.code() for e in errors} <= DENIED_DELIVERY
    assert app.txn_state() == "Empty"
    error = _error_of(lambda: producer.abort_transaction(30))
    assert (error.code(), error.fatal()) == (KafkaError.INVALID_TXN_STATE, True)


def test_confluent_produce_denied_in_an_ongoing_transaction_then_abort(broker):
    """Topic Write missing on a second topic, after the transaction already holds a partition
    of an allowed one: the denial is abortable, abort_transaction ends the transaction (its
    records stay hidden) and the next transaction commits."""
    app = App(broker)
    denied = f"denied-{app.tag()}"
    make_topic(broker, denied, 1)
    producer = Producer(app_config(app))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"aborted")
    producer.flush(30)
    assert app.txn_state() == "Ongoing"
    errors = []
    producer.produce(denied, b"x", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert errors and {e.code() for e in errors} <= DENIED_DELIVERY
    error = _error_of(lambda: producer.commit_transaction(30))
    assert error.txn_requires_abort() and not error.fatal()
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"committed")
    producer.commit_transaction(30)
    assert app.committed_values() == [b"committed"]


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_confluent_end_txn_denied_after_revoking_write_on_the_id(broker, end):
    app = App(broker)
    producer = Producer(app_config(app))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(app.topic, b"x")
    producer.flush(30)
    app.revoke("txn_write")
    call = producer.commit_transaction if end == "commit" else producer.abort_transaction
    error = _error_of(lambda: call(30))
    assert error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert error.fatal()
    assert app.txn_state() == "Ongoing"
    assert app.committed_values() == []
