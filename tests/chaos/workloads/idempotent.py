"""Workload 2: idempotent producers, each writing a strictly increasing sequence per key.

`producers` threads, each with its own confluent-kafka producer (enable.idempotence=true,
acks=all, max.in.flight=5); producer i owns keys "p<i>-k<j>" and writes "<key>:<n>" with n
strictly increasing per key, to the key's partition, paced at `rate` records/s. Each
producer instance is one session in the history; a session ends after a random number of
records (or at a fatal error) and a new producer instance takes over the keys. Every send is
recorded at produce() and at its delivery report.
"""

from __future__ import annotations

import random
import threading
import time

from tests.chaos.history import History
from tests.chaos.workloads.common import (
    ThreadedWorkload,
    error_text,
    finish_session,
    partition_for,
    producer_config,
)


class IdempotentWorkload(ThreadedWorkload):
    def __init__(self, bootstrap: str, history: History, seed: int, *, topic: str = "idem",
                 partitions: int = 3, producers: int = 3, keys: int = 4, rate: float = 150.0,
                 logger=None) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.history = history
        self.seed = seed
        self.topic = topic
        self.partitions = partitions
        self.producers = producers
        self.keys = keys
        self.rate = rate
        self.logger = logger

    def topics(self) -> dict[str, int]:
        return {self.topic: self.partitions}

    def start(self) -> None:
        for i in range(self.producers):
            self._start_thread(self._run, f"idem-{i}", i)


    def _send(self, producer, p: str, producer_id: str, key: str, value: str) -> None:
        partition = partition_for(key, self.partitions)
        op = self.history.next_id()
        self.history.record(p, "invoke", "send", id=op, topic=self.topic, value=value, key=key,
                            producer=producer_id, txn=None, partition=partition)

        def report(err, msg) -> None:
            if err is None:
                self.history.record(p, "ok", "send", id=op, partition=msg.partition(),
                                    offset=msg.offset())
            else:
                self.history.record(p, "info", "send", id=op, error=error_text(err))

        while True:
            try:
                producer.produce(self.topic, value=value.encode(), key=key.encode(),
                                 partition=partition, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)

    def _run(self, i: int) -> None:
        from confluent_kafka import KafkaError, KafkaException, Producer

        rng = random.Random(self.seed * 1000 + i)
        p = f"idem-{i}"
        keys = [f"p{i}-k{j}" for j in range(self.keys)]
        seq = dict.fromkeys(keys, 0)
        session = 0
        interval = 1.0 / self.rate
        while not self.stop_event.is_set():
            session += 1
            producer_id = f"{p}.{session}"
            fatal = threading.Event()

            def on_error(err, fatal=fatal) -> None:
                if err.fatal():
                    fatal.set()

            producer = Producer(producer_config(self.bootstrap, self.logger, error_cb=on_error))
            length = rng.randint(300, 3000)
            next_t = time.monotonic()
            try:
                for n in range(length):
                    if self.stop_event.is_set() or fatal.is_set():
                        break
                    key = keys[n % len(keys)]
                    seq[key] += 1
                    self._send(producer, p, producer_id, key, f"{key}:{seq[key]}")
                    next_t += interval
                    while (wait := next_t - time.monotonic()) > 0:
                        producer.poll(min(wait, 0.05))
            except KafkaException as e:  # poll/produce raise a fatal error (a lost sequence)
                if not (e.args[0].fatal() or e.args[0].code() == KafkaError._FATAL):
                    raise
                fatal.set()
            left = finish_session(producer, fatal)
            if left:
                self.errors.append(f"{producer_id}: {left} records without a delivery report")
