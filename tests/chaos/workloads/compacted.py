"""Workload 5: keys overwritten again and again in a compacted topic while the cleaner runs.

Topic `compact` (TOPIC_CONFIGS: cleanup.policy=compact, 4 KiB segments, dirty ratio 0.01,
delete.retention.ms 3 s), so the cleaner (on in every chaos broker, target.py) compacts it
every second or so during the faults and removes tombstones and transaction markers too.
A few keys ("k0".."k15", each on the partition of its key) are written by

  compact-t<i>  transactional producers: transactions of 1-4 records (value "t<i>-<n>",
                header txn=<id>), each a tombstone 1 time in 6; commit 2 in 3, abort the rest
                (after their records were delivered: aborted data in the log), and an
                aborted one's record goes 1 time in 4 to a deleted key ("d<n>", below)
  compact-idem  an idempotent producer on the same keys: bursts of 1-4 records (value
                "i-<n>"), each a tombstone 1 time in 8; and short-lived keys "d<n>", a new
                one every few bursts, written 1-3 times, then deleted (a tombstone) for good:
                a deleted key's final state is "absent", whether its tombstone is still
                there or not
  compact-read  read_committed consumers one after another, each from the start of every
                partition for a few seconds: reads racing cleanings and segment swaps

A tombstone has a null value on the wire; its identity travels in the header `tombstone`
(common.TOMBSTONE_HEADER), which the history, the polls and the final read give as its value.
The topic's configs go into the history as a `topic` event: the checker applies the
compaction rules to the topics named there (checker.py, _check_compaction).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time

from tests.chaos.history import History
from tests.chaos.workloads.common import (
    API_TIMEOUT_S,
    TOMBSTONE_HEADER,
    ThreadedWorkload,
    abort_open_transaction,
    consumer_config,
    discard,
    end_transaction,
    error_text,
    finish_session,
    partition_for,
    producer_config,
    record_of,
    transactional_config,
)

# small segments: the active one rolls every second or two, so there is always something to
# clean; tombstones and markers written in the last delete.retention.ms of a run must still
# be there at the final read (the checker holds the cleaner to that)
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "4096",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "3000",
    "min.compaction.lag.ms": "0",
}


class CompactedWorkload(ThreadedWorkload):
    def __init__(self, bootstrap: str, history: History, seed: int, *, topic: str = "compact",
                 partitions: int = 2, keys: int = 16, txn_producers: int = 2,
                 idempotent_rate: float = 60.0, txn_interval_s: float = 0.02,
                 read_pass_s: float = 3.0, logger=None) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.history = history
        self.seed = seed
        self.topic = topic
        self.partitions = partitions
        self.keys = [f"k{i}" for i in range(keys)]
        self.deleted: list[str] = []  # short-lived keys deleted for good
        self.txn_producers = txn_producers
        self.idempotent_rate = idempotent_rate
        self.txn_interval_s = txn_interval_s
        self.read_pass_s = read_pass_s
        self.logger = logger

    def topics(self) -> dict[str, int]:
        return {self.topic: self.partitions}

    def topic_configs(self) -> dict[str, dict[str, str]]:
        return {self.topic: dict(TOPIC_CONFIGS)}

    def start(self) -> None:
        self.history.record("compacted", "info", "topic", topic=self.topic,
                            configs=dict(TOPIC_CONFIGS))
        for i in range(self.txn_producers):
            self._start_thread(self._transactions, f"compact-t{i}", i)
        self._start_thread(self._idempotent, "compact-idem")
        self._start_thread(self._reader, "compact-read")

    def _send(self, producer, p: str, producer_id: str, txn: str | None, value: str,
              key: str, tombstone: bool) -> list[str]:
        partition = partition_for(key, self.partitions)
        op = self.history.next_id()
        self.history.record(p, "invoke", "send", id=op, topic=self.topic, value=value, key=key,
                            producer=producer_id, txn=txn, partition=partition,
                            **({"tombstone": True} if tombstone else {}))

        def report(err, msg) -> None:
            if err is None:
                self.history.record(p, "ok", "send", id=op, partition=msg.partition(),
                                    offset=msg.offset())
            else:
                self.history.record(p, "info", "send", id=op, error=error_text(err))

        headers = [("txn", txn.encode())] if txn is not None else []
        if tombstone:
            headers.append((TOMBSTONE_HEADER, value.encode()))
        while True:
            try:
                producer.produce(self.topic, value=None if tombstone else value.encode(),
                                 key=key.encode(), partition=partition,
                                 headers=headers or None, on_delivery=report)
                return [self.topic, value]
            except BufferError:
                producer.poll(0.05)

    # -- transactional producers ----------------------------------------------------------------

    def _transactions(self, i: int) -> None:
        from confluent_kafka import KafkaException

        rng = random.Random(self.seed * 1000 + 500 + i)
        p = f"compact-t{i}"
        n = txns = 0
        producer = None
        producer_id = ""
        sessions = 0
        try:
            while not self.stop_event.is_set():
                if producer is None:
                    sessions += 1
                    producer_id = f"{p}.t{sessions}"
                    producer = self._txn_producer(p)
                    if producer is None:
                        break
                txns += 1
                txn = f"{producer_id}-{txns}"
                try:
                    producer.begin_transaction()
                    self.history.record(p, "info", "begin", txn=txn, producer=producer_id)
                    writes = []
                    commit = rng.random() < 2 / 3
                    for _ in range(rng.randint(1, 4)):
                        n += 1
                        key = rng.choice(self.keys)
                        if not commit and self.deleted and rng.random() < 1 / 4:
                            key = rng.choice(self.deleted[-20:])
                        writes.append(self._send(producer, p, producer_id, txn, f"t{i}-{n}",
                                                 key, rng.random() < 1 / 6))
                    if not commit:
                        # delivered first, so the aborted records are in the log (an abort
                        # purges what it has not sent) and the cleaner has them to remove
                        producer.flush(API_TIMEOUT_S)
                    outcome = end_transaction(producer, self.history, p, txn, producer_id,
                                              commit=commit, writes=writes)
                except (KafkaException, SystemError) as e:
                    # confluent-kafka may raise a fatal error (a fenced producer) from a
                    # flush as a SystemError caused by the KafkaException
                    cause = e if isinstance(e, KafkaException) else e.__cause__
                    if not isinstance(cause, KafkaException):
                        raise
                    err = cause.args[0]
                    outcome = "fatal"
                    if not err.fatal() and err.txn_requires_abort() and abort_open_transaction(
                            producer, self.history, p, txn, producer_id):
                        outcome = "aborted"
                if outcome == "fatal":
                    discard(producer)
                    producer = None
                self.stop_event.wait(self.txn_interval_s * rng.random() * 2)
        finally:
            if producer is None and sessions:
                # the last one died with its transaction open: a new one with the same id
                # aborts it now instead of after transaction.timeout.ms
                producer = self._txn_producer(p, attempts=3)
            if producer is not None:
                discard(producer)

    def _txn_producer(self, p: str, attempts: int | None = None):
        """An initialized transactional producer: until one works or the workload stops (or
        `attempts` times); None if none did."""
        from confluent_kafka import KafkaException, Producer

        while attempts is not None or not self.stop_event.is_set():
            if attempts is not None:
                if attempts <= 0:
                    return None
                attempts -= 1
            producer = Producer(transactional_config(self.bootstrap, f"chaos-{p}",
                                                     self.logger))
            try:
                producer.init_transactions(API_TIMEOUT_S)
                return producer
            except KafkaException:
                discard(producer)
        return None

    # -- the idempotent producer ------------------------------------------------------------------

    def _idempotent(self) -> None:
        from confluent_kafka import KafkaError, KafkaException, Producer

        rng = random.Random(self.seed * 1000 + 600)
        p = "compact-idem"
        n = session = 0
        short: list[list] = []  # [key, values left before its tombstone]
        short_keys = 0
        while not self.stop_event.is_set():
            session += 1
            producer_id = f"{p}.{session}"
            fatal = threading.Event()

            def on_error(err, fatal=fatal) -> None:
                if err.fatal():
                    fatal.set()

            producer = Producer(producer_config(self.bootstrap, self.logger, error_cb=on_error))
            length, sent = rng.randint(200, 2000), 0
            next_t = time.monotonic()
            try:
                while sent < length and not (self.stop_event.is_set() or fatal.is_set()):
                    burst = rng.randint(1, 4)
                    sent += burst
                    if rng.random() < 1 / 4:
                        short_keys += 1
                        short.append([f"d{short_keys}", rng.randint(1, 3)])
                    for _ in range(burst):
                        n += 1
                        if short and rng.random() < 1 / 3:
                            life = rng.choice(short)
                            life[1] -= 1
                            if life[1] < 0:
                                short.remove(life)
                                self.deleted.append(life[0])
                            self._send(producer, p, producer_id, None, f"i-{n}", life[0],
                                       life[1] < 0)
                            continue
                        self._send(producer, p, producer_id, None, f"i-{n}",
                                   rng.choice(self.keys), rng.random() < 1 / 8)
                    producer.poll(0)
                    next_t += burst / self.idempotent_rate
                    while (wait := next_t - time.monotonic()) > 0:
                        producer.poll(min(wait, 0.05))
            except KafkaException as e:  # poll/produce raise a fatal error (a lost sequence)
                if not (e.args[0].fatal() or e.args[0].code() == KafkaError._FATAL):
                    raise
                fatal.set()
            left = finish_session(producer, fatal)
            if left:
                self.errors.append(f"{producer_id}: {left} records without a delivery report")

    # -- readers ----------------------------------------------------------------------------------

    def _reader(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        passes = 0
        while not self.stop_event.is_set():
            passes += 1
            c = f"compact-read.c{passes}"
            consumer = Consumer(consumer_config(self.bootstrap, "chaos-compact-read",
                                                self.logger))
            try:
                consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                                 for p in range(self.partitions)])
                deadline = time.monotonic() + self.read_pass_s
                while time.monotonic() < deadline and not self.stop_event.is_set():
                    msgs = consumer.consume(num_messages=500, timeout=0.3)
                    records = [record_of(m) for m in msgs if m.error() is None]
                    if records:
                        self.history.record("compact-read", "ok", "poll", c=c,
                                            iso="read_committed", records=records)
            except KafkaException:  # a fatal consumer error: the next pass has a new one
                pass
            finally:
                with contextlib.suppress(Exception):
                    consumer.close()
