"""Workload 3: a Jepsen-style queue. Workers do random operations on a few keys of one topic,
each recorded at invocation and completion:

  send  one record from the worker's idempotent producer (value "w<i>-<n>"), waited for
  poll  the worker's read_committed consumer (assigned every partition from the start,
        positions kept across polls) returns what it has
  txn   a transaction of the worker's transactional producer: 1-3 sends (header txn=<id>),
        a poll inside it, then commit (3 in 4) or abort

A fatal producer error ends that producer's session; the worker makes a new one (the new
transactional producer fences the old). An `lso` prober reads the topic with raw
read_committed fetches straight from the broker and records each response's last stable
offset, high watermark and batches (lso_prober.py; the checker's undecided-read test).
"""

from __future__ import annotations

import contextlib
import random

from tests.chaos.history import History
from tests.chaos.workloads.common import (
    API_TIMEOUT_S,
    ThreadedWorkload,
    abort_open_transaction,
    consumer_config,
    discard,
    end_transaction,
    error_text,
    partition_for,
    producer_config,
    record_of,
    transactional_config,
)
from tests.chaos.workloads.lso_prober import probe_lso


class QueueWorkload(ThreadedWorkload):
    def __init__(self, bootstrap: str, direct: callable, history: History, seed: int, *,
                 topic: str = "queue", partitions: int = 3, workers: int = 3, keys: int = 6,
                 op_interval_s: float = 0.02, logger=None) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.direct = direct  # () -> broker address for the raw LSO prober
        self.history = history
        self.seed = seed
        self.topic = topic
        self.partitions = partitions
        self.workers = workers
        self.keys = [f"k{i}" for i in range(keys)]
        self.op_interval_s = op_interval_s
        self.logger = logger

    def topics(self) -> dict[str, int]:
        return {self.topic: self.partitions}

    def start(self) -> None:
        for i in range(self.workers):
            self._start_thread(self._worker, f"queue-{i}", i)
        self._start_thread(self._lso_prober, "queue-lso")


    # -- a worker ----------------------------------------------------------------------------

    def _worker(self, i: int) -> None:
        w = _Worker(self, i)
        try:
            while not self.stop_event.is_set():
                r = w.rng.random()
                if r < 0.4:
                    w.send()
                elif r < 0.75:
                    w.poll()
                else:
                    w.txn()
                self.stop_event.wait(self.op_interval_s * w.rng.random() * 2)
        finally:
            w.close()

    def _lso_prober(self) -> None:
        probe_lso(self.direct, self.history, self.topic, self.partitions, self.stop_event)


class _Worker:
    def __init__(self, workload: QueueWorkload, i: int) -> None:
        self.wl = workload
        self.h = workload.history
        self.p = f"queue-{i}"
        self.rng = random.Random(workload.seed * 1000 + 100 + i)
        self.n = 0
        self.sessions = 0
        self.producer = None
        self.producer_id = ""
        self.txn_producer = None
        self.txn_producer_id = ""
        self.txn_sessions = 0
        self.txns = 0
        self.consumer = None
        self.consumer_id = ""
        self.consumers = 0

    # -- clients ---------------------------------------------------------------------------

    def _producer(self):
        from confluent_kafka import Producer

        if self.producer is None:
            self.sessions += 1
            self.producer_id = f"{self.p}.{self.sessions}"
            self.fatal = False

            def on_error(err) -> None:
                if err.fatal():
                    self.fatal = True

            self.producer = Producer(producer_config(self.wl.bootstrap, self.wl.logger,
                                                     error_cb=on_error, **{"linger.ms": 0}))
        return self.producer

    def _txn_producer(self, attempts: int | None = None):
        """The transactional producer, made (and initialized) if needed: until it works or
        the workload stops, or `attempts` times."""
        from confluent_kafka import KafkaException, Producer

        while self.txn_producer is None and (attempts is not None
                                             or not self.wl.stop_event.is_set()):
            if attempts is not None:
                if attempts <= 0:
                    break
                attempts -= 1
            self.txn_sessions += 1
            self.txn_producer_id = f"{self.p}.t{self.txn_sessions}"
            producer = Producer(transactional_config(self.wl.bootstrap, f"chaos-{self.p}",
                                                     self.wl.logger, **{"linger.ms": 0}))
            try:
                producer.init_transactions(API_TIMEOUT_S)
                self.txn_producer = producer
            except KafkaException:
                discard(producer)
        return self.txn_producer

    def _consumer(self):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        if self.consumer is None:
            self.consumers += 1
            self.consumer_id = f"{self.p}.c{self.consumers}"
            self.consumer = Consumer(consumer_config(self.wl.bootstrap, f"chaos-{self.p}",
                                                     self.wl.logger))
            self.consumer.assign([TopicPartition(self.wl.topic, p, OFFSET_BEGINNING)
                                  for p in range(self.wl.partitions)])
        return self.consumer

    def close(self) -> None:
        if self.producer is not None:
            discard(self.producer, 60, dead=self.fatal)
        if self.txn_producer is None and self.txn_sessions:
            # the last transactional producer died with its transaction open: a new one
            # with the same id aborts it now instead of after transaction.timeout.ms
            self._txn_producer(attempts=3)
        if self.txn_producer is not None:
            discard(self.txn_producer)
        if self.consumer is not None:
            self.consumer.close()

    # -- operations --------------------------------------------------------------------------

    def _value(self) -> tuple[str, str, int]:
        self.n += 1
        key = self.rng.choice(self.wl.keys)
        return f"w{self.p[6:]}-{self.n}", key, partition_for(key, self.wl.partitions)

    def _send(self, producer, producer_id: str, txn: str | None):
        value, key, partition = self._value()
        op = self.h.next_id()
        self.h.record(self.p, "invoke", "send", id=op, topic=self.wl.topic, value=value, key=key,
                      producer=producer_id, txn=txn, partition=partition)

        def report(err, msg) -> None:
            if err is None:
                self.h.record(self.p, "ok", "send", id=op, partition=msg.partition(),
                              offset=msg.offset())
            else:
                self.h.record(self.p, "info", "send", id=op, error=error_text(err))

        headers = [("txn", txn.encode())] if txn is not None else None
        while True:
            try:
                producer.produce(self.wl.topic, value=value.encode(), key=key.encode(),
                                 partition=partition, headers=headers, on_delivery=report)
                return [self.wl.topic, value]
            except BufferError:
                producer.poll(0.05)

    def send(self) -> None:
        producer = self._producer()
        try:
            self._send(producer, self.producer_id, None)
            producer.flush(30)
        except Exception:  # noqa: BLE001 - a fatal producer: the next op makes a new one
            self.fatal = True
        if self.fatal:
            discard(producer)
            self.producer = None

    def poll(self) -> None:
        from confluent_kafka import KafkaException

        consumer = self._consumer()
        try:
            msgs = consumer.consume(num_messages=200, timeout=0.3)
        except KafkaException:  # a fatal consumer error: start a new consumer
            with contextlib.suppress(Exception):
                consumer.close()
            self.consumer = None
            return
        records = [record_of(m) for m in msgs if m.error() is None]
        self.h.record(self.p, "ok", "poll", c=self.consumer_id, iso="read_committed",
                      records=records)

    def txn(self) -> None:
        from confluent_kafka import KafkaException

        producer = self._txn_producer()
        if producer is None:
            return
        self.txns += 1
        txn = f"{self.txn_producer_id}-{self.txns}"
        pid = self.txn_producer_id
        try:
            producer.begin_transaction()
            self.h.record(self.p, "info", "begin", txn=txn, producer=pid)
            writes = [self._send(producer, pid, txn) for _ in range(self.rng.randint(1, 3))]
            self.poll()
            outcome = end_transaction(producer, self.h, self.p, txn, pid,
                                      commit=self.rng.random() < 0.75, writes=writes)
        except KafkaException as e:
            err = e.args[0]
            outcome = "fatal"
            if not err.fatal() and err.txn_requires_abort() and abort_open_transaction(
                    producer, self.h, self.p, txn, pid):
                outcome = "aborted"
        if outcome == "fatal":
            discard(producer)
            self.txn_producer = None
