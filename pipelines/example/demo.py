"""``make pipeline``: the example job end to end, on local Spark, against a fresh semel.

1. start semel (``semel serve`` on port 0, a temporary data directory) unless a cluster is
   given; create the topics
2. produce about half of the orders with a transactional producer, some transactions
   aborted, and leave one more open (to be aborted): the job must stop at the last stable
   offset
3. run the job (Trigger.AvailableNow: it writes everything committed, then stops)
4. pretend the driver died between the sink's commit and Spark's: drop each query's last
   batch from its checkpoint's commit log, so the restart replays it (the sink must skip it)
5. end the open transaction, produce the second half, run the job again from the same
   checkpoints
6. read both outputs at read_committed and check them (``pipelines.example.check``)

Everything the demo starts (semel, the Spark session's queries, its clients) it stops.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from semel.pipelines.example import check, job
from semel.pipelines.example.orders import Order, Transaction, generate

READY = re.compile(r"ready on (\S+):(\d+)")
TIMEOUT_S = 60.0
PARTITIONS = {"input": 4, "output": 4, "totals": 2}


class Semel:
    """``semel serve`` as a child process on 127.0.0.1, an ephemeral port, ``data_dir``."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.proc: subprocess.Popen | None = None
        self.bootstrap = ""
        self.lines: deque[str] = deque(maxlen=40)

    def start(self) -> Self:
        script = Path(sys.executable).with_name("semel")  # the installed CLI, else the module
        command = [str(script)] if script.exists() else [sys.executable, "-m", "semel.broker"]
        self.proc = subprocess.Popen(
            command + ["serve", "--host", "127.0.0.1", "--port", "0",
                       "--data-dir", str(self.data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ready = threading.Event()

        def drain() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                match = READY.search(line)
                if match and not ready.is_set():
                    self.bootstrap = f"{match.group(1)}:{match.group(2)}"
                    ready.set()
            ready.set()

        threading.Thread(target=drain, name="semel-output", daemon=True).start()
        if not ready.wait(TIMEOUT_S) or not self.bootstrap:
            self.stop()
            raise RuntimeError("semel did not start:\n" + "".join(self.lines))
        return self

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(TIMEOUT_S)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, count) for name, count in partitions.items()],
                                  operation_timeout=TIMEOUT_S, request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result()


class OrderProducer:
    """The input's one transactional producer. Aborted transactions are flushed before the
    abort, so their records are in the log (as aborted ones) and not merely dropped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "transactional.id": f"semel-example-orders-{uuid.uuid4()}",
            "transaction.timeout.ms": 300_000,  # one stays open while the first run reads
            "partitioner": "murmur2_random",  # Java's: a customer's orders in one partition
            "linger.ms": 5,
        })
        self.producer.init_transactions(TIMEOUT_S)
        self.open: Transaction | None = None

    def write(self, transactions: list[Transaction]) -> None:
        for transaction in transactions:
            self.begin(transaction)
            self.end()

    def begin(self, transaction: Transaction) -> None:
        """Produce ``transaction``'s orders and leave it open."""
        self.producer.begin_transaction()
        for order in transaction.orders:
            self.producer.produce(self.topic, key=order.key(), value=order.value())
        self.producer.flush(TIMEOUT_S)
        self.open = transaction

    def end(self) -> None:
        if self.open.commit:
            self.producer.commit_transaction(TIMEOUT_S)
        else:
            self.producer.abort_transaction(TIMEOUT_S)
        self.open = None


def read_topic(bootstrap: str, topic: str) -> list[check.OutputRecord]:
    """Every record of ``topic`` a read_committed consumer finds, up to the end."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"semel-example-check-{uuid.uuid4()}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True,
    })
    try:
        partitions = consumer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records, at_end = [], set()
        deadline = time.monotonic() + TIMEOUT_S
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: no end of partitions {set(partitions) - at_end}")
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    records.append(check.OutputRecord(m.partition(), m.offset(), m.key(),
                                                      m.value()))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                else:
                    raise RuntimeError(f"{topic}: {m.error()}")
        return records
    finally:
        consumer.close()


def forget_last_batch(checkpoint: Path) -> int | None:
    """Remove the newest entry of a query's commit log (``<checkpoint>/commits/<batch id>``
    and its checksum), as if the driver died after the sink committed that batch; the next
    start replays it. The batch id, or None when the query has no batch yet."""
    commits = checkpoint / "commits"
    batches = sorted(int(p.name) for p in commits.glob("[0-9]*")) if commits.is_dir() else []
    if not batches:
        return None
    last = batches[-1]
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    return last


@dataclass(frozen=True)
class DemoResult:
    report: check.Report
    batches: list[dict[str, list[int]]]  # per run: query name -> its batch ids
    replayed: int  # batches the second run replayed (and the sink skipped)
    produced: list[tuple[Order, bool]]  # every order written to the input, and if committed
    enriched: list[check.OutputRecord]
    totals: list[check.OutputRecord]

    def summary(self) -> str:
        count = sum(len(ids) for run in self.batches for ids in run.values())
        return self.report.summary(
            f"{len(self.batches)} runs, {count} micro-batches, {self.replayed} replayed")


def run_demo(spark, bootstrap: str, workdir: Path, orders: int = 4000,
             max_offsets_per_trigger: int | None = 1000, suffix: str = "") -> DemoResult:
    """Produce, run the job twice, check; ``spark`` knows ``format("semel")``.
    ``suffix`` is appended to the topic names (a cluster that already has them)."""
    topics = {"input": f"orders{suffix}", "output": f"orders-enriched{suffix}",
              "totals": f"orders-by-region{suffix}"}
    create_topics(bootstrap, {topics[role]: count for role, count in PARTITIONS.items()})
    config = job.JobConfig(
        bootstrap_servers=bootstrap, checkpoint=str(workdir / "checkpoint"),
        input_topic=topics["input"], output_topic=topics["output"],
        totals_topic=topics["totals"], max_offsets_per_trigger=max_offsets_per_trigger)
    transactions = generate(orders)
    # held open while the first run reads, and aborted after: a read past the last stable
    # offset would leak its orders into the output
    half = len(transactions) // 2
    held = next((i for i in range(half, len(transactions)) if not transactions[i].commit),
                half)
    producer = OrderProducer(bootstrap, topics["input"])
    producer.write(transactions[:held])
    producer.begin(transactions[held])
    batches = [_batch_ids(job.run(spark, config))]
    last_committed = [forget_last_batch(Path(config.checkpoint_of(q))) for q in batches[0]]
    producer.end()
    producer.write(transactions[held + 1:])
    batches.append(_batch_ids(job.run(spark, config)))
    replayed = sum(1 for query, last in zip(batches[0], last_committed, strict=True)
                   if last is not None and last in batches[1][query])
    produced = [(o, t.commit) for t in transactions for o in t.orders]
    enriched = read_topic(bootstrap, topics["output"])
    totals = read_topic(bootstrap, topics["totals"])
    return DemoResult(check.check(produced, enriched, totals), batches, replayed, produced,
                      enriched, totals)


def _batch_ids(queries: dict) -> dict[str, list[int]]:
    return {name: [p["batchId"] for p in q.recentProgress] for name, q in queries.items()}
