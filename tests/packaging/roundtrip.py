"""A real client's round trip through a broker started outside the test process (an installed
semel, a container): confluent-kafka writes idempotent records, an aborted transaction and a
committed one to one partition, and a read_committed consumer group reads back exactly the
idempotent and committed records, in order."""

from __future__ import annotations

import time

TIMEOUT_S = 60.0


def roundtrip(bootstrap: str, topic: str, n: int = 50) -> None:
    """Raises AssertionError when the records read back are not exactly the committed ones."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1)]).values():
        future.result(timeout=TIMEOUT_S)

    plain = [b"plain-%d" % i for i in range(n)]
    aborted = [b"aborted-%d" % i for i in range(n)]
    committed = [b"committed-%d" % i for i in range(n)]

    errors: list = []

    def report(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "acks": "all", "message.timeout.ms": int(TIMEOUT_S * 1000)})
    for value in plain:
        idempotent.produce(topic, value=value, partition=0, on_delivery=report)
    assert idempotent.flush(TIMEOUT_S) == 0 and errors == []

    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn",
                    "message.timeout.ms": int(TIMEOUT_S * 1000)})
    txn.init_transactions(TIMEOUT_S)
    for values, commit in ((aborted, False), (committed, True)):
        txn.begin_transaction()
        for value in values:
            txn.produce(topic, value=value, partition=0, on_delivery=report)
        if commit:
            txn.commit_transaction(TIMEOUT_S)
        else:
            txn.flush(TIMEOUT_S)
            txn.abort_transaction(TIMEOUT_S)
    assert errors == []

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-group",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    received: list[bytes] = []
    try:
        consumer.subscribe([topic])
        # the last committed record comes after every other record of the partition: once it
        # is read, anything the aborted transaction leaked would have been read before it
        deadline = time.monotonic() + TIMEOUT_S
        while (not received or received[-1] != committed[-1]) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            received.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert received == plain + committed, f"read back {len(received)} records: {received[:5]}"
