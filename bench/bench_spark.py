"""The PySpark connector's speed (pipelines/spark), against plain confluent-kafka on the same
broker and the same data, in one run:

1. read: a topic of ``--size-mb`` MiB of 1 KiB records in ``--partitions`` partitions, filled
   beforehand by one confluent-kafka producer, read by ``spark.read.format("semel")`` with
   ``count()`` and with ``sum(length(value))`` (which needs every value), and by one
   confluent-kafka consumer in one Python process (all partitions assigned, reading to the
   end). All read_committed with librdkafka's defaults; then again with
   ``fetch.queue.backoff.ms=10`` (librdkafka's default 1000 ms pauses a partition's fetches for
   a second whenever its local queue is over ``queued.max.messages.kbytes``, which a reader
   slower than the network hits; ``--no-tuned`` leaves these rows out).
2. write: the same volume written exactly once by ``df.write.format("semel")`` (``spark.range``
   rows of one constant value, ``--spark-partitions`` tasks, a transaction each), by one
   idempotent producer (acks=all) and by one transactional producer (as many transactions as
   Spark has tasks), each from one Python process (this one) into a new topic.
3. where the time goes: broker and client CPU seconds per phase (Spark's: the JVM, its Python
   workers, the driver); py-spy of Spark's Python workers during one read and one write; and
   cProfile of ``source.read_range`` and ``sink.TaskWriter.write`` called in this process on
   one partition's worth of records.

Then rows 1 and 2 again with 100 B records, at ``--small-mb`` MiB (``--record-sizes 1024``:
1 KiB only). Rounds alternate the order of the rows; the table shows medians. MB/s counts
value bytes (10^6 per MB). The broker is semel as a subprocess (bench/brokers.py), durable by
default (``log.flush.mode=fsync``, the broker's default). The Spark session (local[2], no UI)
is started once; its start and the first query (Python workers start) are reported apart and
not counted. Results in bench/results/<time>-spark/ (RESULTS.md, results.json, profiles,
logs).

    .venv/bin/python bench/bench_spark.py [--quick] [--size-mb 1024] [--rounds 3]
        [--partitions 4] [--spark-partitions 4] [--record-sizes 1024,100] [--small-mb 128]
        [--flush-mode fsync|none] [--no-tuned] [--no-profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report, workloads
from bench.broker_throughput import cpu_seconds
from bench.brokers import RunningBroker, SemelTarget
from bench.profiling import py_spy_path, summarize

MB = 1_000_000
MIB = 1 << 20
TUNED = {"fetch.queue.backoff.ms": "10"}
CLK_TCK = os.sysconf("SC_CLK_TCK")
# JVM thread names (Linux keeps 15 characters) by kind
JVM_THREADS = {"jvm_tasks": ("Executor task",), "jvm_jit": ("C1 Compiler", "C2 Compiler"),
               "jvm_gc": ("GC Thread", "G1 ")}


# -- CPU of Spark's processes ------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def _descendants(pid: int) -> list[int]:
    out, todo = [], _children(pid)
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += _children(pid)
    return out


def _stat_cpu(pid: int) -> tuple[float, float]:
    """(own, reaped children's) user+system CPU seconds from /proc/<pid>/stat (10 ms ticks)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return ((int(fields[11]) + int(fields[12])) / CLK_TCK,
            (int(fields[13]) + int(fields[14])) / CLK_TCK)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class ClientCpu:
    """CPU seconds of the client side: this process (the Spark driver's Python side and the
    plain clients, all threads), Spark's JVM (a child of this process), and the JVM's Python
    workers (every live descendant's own and reaped children's time, and the JVM's reaped
    children's: a worker that exits is counted by the process that waits for it)."""

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self.jvm_pid: int | None = None

    def find_jvm(self) -> None:
        for pid in _children(os.getpid()):
            if pid != self.broker_pid and Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                self.jvm_pid = pid

    def snapshot(self) -> dict:
        out = {"driver": time.process_time(), "jvm": 0.0, "workers": 0.0,
               **dict.fromkeys(JVM_THREADS, 0.0)}
        if self.jvm_pid is not None:
            out["jvm"] = cpu_seconds(self.jvm_pid)
            out["workers"] = _stat_cpu(self.jvm_pid)[1] + sum(
                sum(_stat_cpu(pid)) for pid in _descendants(self.jvm_pid))
            out |= self.jvm_threads()
        return out

    def jvm_threads(self) -> dict:
        """The JVM's CPU by thread kind (live threads; 10 ms ticks): Spark's task threads
        (which feed and drain the Python workers), the JIT compilers, the garbage collector."""
        groups = dict.fromkeys(JVM_THREADS, 0.0)
        for task in Path(f"/proc/{self.jvm_pid}/task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            group = next((g for g, prefixes in JVM_THREADS.items()
                          if name.startswith(prefixes)), None)
            if group is not None:
                groups[group] += (int(fields[11]) + int(fields[12])) / CLK_TCK
        return groups

    def worker_daemon(self) -> int | None:
        """The ``pyspark.daemon`` that forks the workers running tasks (not the ones of the
        data source's planning calls, ``pyspark.sql.worker.*``)."""
        for pid in _descendants(self.jvm_pid) if self.jvm_pid else []:
            words = _cmdline(pid).split()
            if "pyspark.daemon" in words and "pyspark.worker" in words:
                return pid
        return None


class Measure:
    """Wall time, broker CPU and client CPU around one call."""

    def __init__(self, broker: RunningBroker, cpu: ClientCpu) -> None:
        self.broker = broker
        self.cpu = cpu

    def __call__(self, fn: Callable[[], dict], spark: bool) -> dict:
        """``spark``: the client is Spark (driver, JVM, workers), else this process alone (the
        idle JVM's background work is left out)."""
        b0, c0, t0 = self.broker.cpu_seconds(), self.cpu.snapshot(), time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
        b1, c1 = self.broker.cpu_seconds(), self.cpu.snapshot()
        gb = out["bytes"] / 1e9
        cpu = {f"{k}_cpu_s": c1[k] - c0[k] for k in c0}
        client = (cpu["driver_cpu_s"] + cpu["jvm_cpu_s"] + cpu["workers_cpu_s"] if spark
                  else cpu["driver_cpu_s"])
        return {"seconds": wall, "MBps": out["bytes"] / MB / wall,
                "records_per_s": out["records"] / wall, "spark": spark,
                "broker_cpu_s": b1 - b0, "broker_cpu_s_per_GB": (b1 - b0) / gb,
                "client_cpu_s": client, "client_cpu_s_per_GB": client / gb, **cpu, **out}


# -- plain confluent-kafka clients ---------------------------------------------------------------


def _produce_loop(producer, topic: str, value: bytes, records: int,
                  partitions: int | None = None) -> None:
    """``records`` records of ``value``: round-robin over ``partitions`` when given, else
    where the partitioner puts a null key (as the connector leaves it)."""
    produce, poll = producer.produce, producer.poll
    for i in range(records):
        while True:
            try:
                if partitions:
                    produce(topic, value, partition=i % partitions)
                else:
                    produce(topic, value)
                break
            except BufferError:
                poll(0.05)
        if i % 10_000 == 0:
            poll(0)


def _producer(bootstrap: str, errors: list, **config):
    from confluent_kafka import Producer

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(err)

    return Producer({"bootstrap.servers": bootstrap, "delivery.report.only.error": True,
                     "on_delivery": on_delivery, **config})


def fill(bootstrap: str, topic: str, value: bytes, records: int, partitions: int) -> dict:
    """The topic the reads read: one producer, acks=all, records spread round-robin."""
    errors: list = []
    p = _producer(bootstrap, errors, acks="all")
    _produce_loop(p, topic, value, records, partitions)
    if p.flush(300) or errors:
        raise RuntimeError(f"fill of {topic}: {len(errors)} errors, first {errors[:1]}")
    return {"records": records, "bytes": records * len(value)}


def plain_write(bootstrap: str, topic: str, value: bytes, records: int, transactions: int,
                transactional: bool) -> dict:
    """One producer with the sink's partitioner: idempotent, or transactional with
    ``transactions`` transactions of equal size (as the sink's tasks)."""
    errors: list = []
    config = {"acks": "all", "enable.idempotence": True, "partitioner": "murmur2_random"}
    if transactional:
        config["transactional.id"] = f"bench-spark-{uuid.uuid4().hex[:8]}"
    p = _producer(bootstrap, errors, **config)
    if transactional:
        p.init_transactions(60)
        sizes = [records // transactions + (i < records % transactions)
                 for i in range(transactions)]
        for n in sizes:
            p.begin_transaction()
            _produce_loop(p, topic, value, n)
            p.commit_transaction(120)
    else:
        _produce_loop(p, topic, value, records)
        p.flush(300)
    if errors:
        raise RuntimeError(f"write to {topic}: {len(errors)} errors, first {errors[0]}")
    return {"records": records, "bytes": records * len(value)}


def plain_read(bootstrap: str, topic: str, partitions: int, records: int,
               extra: dict) -> dict:
    """One consumer, every partition assigned from the beginning, read_committed, until it has
    ``records`` records (asking librdkafka for no more than are left, so the last call does not
    wait out its timeout)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed", **extra})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = nbytes = 0
    deadline = time.monotonic() + 600
    consume = c.consume
    while got < records:
        if time.monotonic() > deadline:
            raise RuntimeError(f"plain read of {topic}: {got} of {records} records")
        for m in consume(min(10_000, records - got), 1.0):
            if m.error() is not None:
                raise KafkaException(m.error())
            got += 1
            nbytes += len(m.value())
    c.close()
    return {"records": got, "bytes": nbytes}


def log_end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), 30)[1]
                   for p in range(partitions))
    finally:
        c.close()


# -- Spark ---------------------------------------------------------------------------------------


def start_spark(local_dir: Path):
    # executors' Python workers run this interpreter (the venv with pyarrow and confluent-kafka)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from semel.pipelines.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("semel-bench-spark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.local.dir", str(local_dir / "local"))
             .config("spark.sql.warehouse.dir", str(local_dir / "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_source(spark, bootstrap: str, topic: str, extra: dict, **options):
    reader = (spark.read.format("semel").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    for k, v in {**{f"kafka.{k}": v for k, v in extra.items()}, **options}.items():
        reader = reader.option(k, v)
    return reader.load()


def spark_count(spark, bootstrap: str, topic: str, records: int, size: int,
                extra: dict) -> dict:
    n = spark_source(spark, bootstrap, topic, extra).count()
    if n != records:
        raise RuntimeError(f"Spark counted {n} records of {topic}, not {records}")
    return {"records": n, "bytes": n * size}


def spark_sum(spark, bootstrap: str, topic: str, records: int, size: int,
              extra: dict) -> dict:
    row = spark_source(spark, bootstrap, topic, extra).selectExpr(
        "count(*) AS n", "sum(length(value)) AS b").collect()[0]
    if row.n != records or row.b != records * size:
        raise RuntimeError(f"Spark read {row.n} records, {row.b} bytes of {topic}")
    return {"records": row.n, "bytes": row.b}


def spark_write(spark, bootstrap: str, topic: str, value: bytes, records: int,
                tasks: int) -> dict:
    (spark.range(0, records, 1, tasks).selectExpr(f"unhex('{value.hex()}') AS value")
     .write.format("semel").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())
    return {"records": records, "bytes": records * len(value)}


# -- py-spy of the Python workers ---------------------------------------------------------------


def worker_samples(raw: Path, top: int = 14) -> str:
    """The workers' samples by deepest Python line (with its code) and the native code under
    it, and by Python function anywhere on the stack; the daemon's own loop left out."""
    import linecache

    from bench.profiling import _is_python, _native_leaf, _short, _split

    by_line: Counter[str] = Counter()
    by_function: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        python = [f for f in frames if _is_python(f)]
        if not python or not any(_split(f)[0] == "worker" for f in python) and not any(
                "gc_collect" in f for f in frames):
            continue  # the daemon waiting for work
        n = int(count)
        total += n
        where = _split(python[-1])[1]
        path, _, lineno = where.rpartition(":")
        code = linecache.getline(path, int(lineno)).strip() if lineno.isdigit() else ""
        native = _native_leaf(frames)
        by_line[f"{_short(python[-1], keep_line=True)} `{code[:60]}`"
                + (f" -> {native}" if native else "")] += n
        for f in {_short(f) for f in python}:
            by_function[f] += n
    if not total:
        return "no samples of the workers\n"
    out = [f"{total} samples ({total / 100:.1f} s at 100 Hz)", "",
           f"top {top} by deepest Python line -> native code under it:"]
    out += [f"  {100 * n / total:5.1f}%  {k}" for k, n in by_line.most_common(top)]
    out += ["", f"top {top} by Python function anywhere on the stack (below pyspark's worker):"]
    skip = ("<module>", "manager", "worker (", "_run_", "_FaulthandlerHelper", "main (")
    out += [f"  {100 * n / total:5.1f}%  {k}" for k, n in by_function.most_common()
            if not k.startswith(skip)][:top]
    return "\n".join(out) + "\n"


# -- the run -------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, out_dir: Path) -> None:
        self.args = args
        self.out_dir = out_dir
        self.runs: list[dict] = []
        self.notes: dict = {}
        self.profiles: dict[str, str] = {}

    def record(self, row: str, round_: int, metrics: dict) -> None:
        self.runs.append({"row": row, "round": round_, "metrics": metrics})
        m = metrics
        spark = (f": JVM {m['jvm_cpu_s']:.2f} (tasks {m['jvm_tasks_cpu_s']:.2f}, JIT "
                 f"{m['jvm_jit_cpu_s']:.2f}, GC {m['jvm_gc_cpu_s']:.2f}), Python workers "
                 f"{m['workers_cpu_s']:.2f}, driver {m['driver_cpu_s']:.2f}"
                 if m["spark"] else "")
        print(f"  {row}: {m['MBps']:.1f} MB/s ({m['seconds']:.2f} s; broker "
              f"{m['broker_cpu_s']:.2f} s CPU, client {m['client_cpu_s']:.2f} s{spark})",
              flush=True)

    def run(self) -> None:
        args = self.args
        broker = SemelTarget(args.flush_mode).start(self.out_dir / "logs")
        self.notes["broker"] = f"semel, log.flush.mode={args.flush_mode}"
        self.notes["broker_start_s"] = broker.startup_ready_s
        cpu = ClientCpu(broker.pid)
        measure = Measure(broker, cpu)
        spark = None
        local_dir = Path(tempfile.mkdtemp(prefix="semel-bench-spark-"))
        try:
            t0 = time.perf_counter()
            spark = start_spark(local_dir)
            self.notes["spark_session_s"] = time.perf_counter() - t0
            cpu.find_jvm()
            print(f"Spark session: {self.notes['spark_session_s']:.1f} s", flush=True)
            for size in args.record_sizes:
                mib = args.size_mb if size == args.record_sizes[0] else args.small_mb
                self.shape(spark, broker, measure, size, mib, first=size == args.record_sizes[0])
        finally:
            if spark is not None:
                spark.stop()
            broker.stop()
            shutil.rmtree(local_dir, ignore_errors=True)

    def shape(self, spark, broker: RunningBroker, measure: Measure, size: int, mib: int,
              first: bool) -> None:
        args, bs = self.args, broker.bootstrap
        records = mib * MIB // size
        value = os.urandom(size)
        tag = "1k" if size == 1024 else f"{size}b"
        topic = workloads.topic_name(f"spark-{tag}")
        workloads.create_topic(bs, topic, args.partitions)
        print(f"{tag}: filling {topic} with {records} records of {size} B "
              f"({records * size / MB:.0f} MB, {args.partitions} partitions)", flush=True)
        filled = measure(lambda: fill(bs, topic, value, records, args.partitions), spark=False)
        self.record(f"fill-{tag}", 0, filled)
        if first:
            self.warm_up(spark, bs, topic, value)
        parts = args.partitions
        reads: dict[str, Callable[[], dict]] = {
            f"read-{tag}-plain": lambda: plain_read(bs, topic, parts, records, {}),
            f"read-{tag}-spark-count": lambda: spark_count(spark, bs, topic, records, size, {}),
            f"read-{tag}-spark-sum": lambda: spark_sum(spark, bs, topic, records, size, {}),
        }
        if args.tuned:
            reads |= {
                f"read-{tag}-plain-tuned": lambda: plain_read(bs, topic, parts, records, TUNED),
                f"read-{tag}-spark-sum-tuned": lambda: spark_sum(spark, bs, topic, records,
                                                                 size, TUNED),
            }
        tasks = args.spark_partitions

        def writer(kind: str) -> Callable[[], dict]:
            def run() -> dict:
                out = workloads.topic_name(f"spark-w{tag}")
                workloads.create_topic(bs, out, parts)
                if kind == "spark":
                    result = spark_write(spark, bs, out, value, records, tasks)
                else:
                    result = plain_write(bs, out, value, records, tasks,
                                         transactional=kind == "txn")
                written = log_end_offsets(bs, out, parts)
                # control records: at most one marker per transaction and partition
                markers = tasks * parts if kind != "idempotent" else 0
                if not records <= written <= records + markers:
                    raise RuntimeError(f"{kind} write: {written} offsets for {records} records")
                workloads.delete_topic(bs, out)
                return result
            return run

        writes = {f"write-{tag}-{kind}": writer(kind)
                  for kind in ("spark", "idempotent", "txn")}
        for r in range(args.rounds):
            print(f"{tag}: round {r + 1} of {args.rounds}", flush=True)
            for table in (reads, writes):
                names = list(table) if r % 2 == 0 else list(reversed(table))
                for name in names:
                    self.record(name, r, measure(table[name], spark="spark" in name))
        if args.profile and first:
            self.profile(spark, broker, measure, topic, value, records)
        workloads.delete_topic(bs, topic)

    def warm_up(self, spark, bs: str, topic: str, value: bytes) -> None:
        """The first read and the first write start Spark's Python workers and import the
        connector there: timed apart, on a few records."""
        ending = json.dumps({topic: {str(p): 100 for p in range(self.args.partitions)}})
        t0 = time.perf_counter()
        spark_source(spark, bs, topic, {}, endingOffsets=ending).count()
        self.notes["first_read_s"] = time.perf_counter() - t0
        out = workloads.topic_name("spark-warm")
        workloads.create_topic(bs, out, self.args.partitions)
        t0 = time.perf_counter()
        spark_write(spark, bs, out, value, 1000, self.args.spark_partitions)
        self.notes["first_write_s"] = time.perf_counter() - t0
        workloads.delete_topic(bs, out)
        print(f"first Spark read (100 records a partition): {self.notes['first_read_s']:.1f} s; "
              f"first write (1000 records): {self.notes['first_write_s']:.1f} s", flush=True)

    # -- profiles ---------------------------------------------------------------------------

    def profile(self, spark, broker: RunningBroker, measure: Measure, topic: str, value: bytes,
                records: int) -> None:
        bs, cpu = broker.bootstrap, measure.cpu
        print("profiles", flush=True)
        daemon = cpu.worker_daemon()
        if py_spy_path() and daemon:
            self.profiles["py-spy: Spark read, sum(length(value))"] = self.py_spy(
                daemon, "read", lambda: spark_sum(spark, bs, topic, records, len(value), {}))
            out = workloads.topic_name("spark-wprof")
            workloads.create_topic(bs, out, self.args.partitions)
            self.profiles["py-spy: Spark write"] = self.py_spy(
                daemon, "write",
                lambda: spark_write(spark, bs, out, value, records, self.args.spark_partitions))
            workloads.delete_topic(bs, out)
        self.profiles["cProfile: read_range in-process, partition 0"] = self.cprofile_read(
            bs, topic, records // self.args.partitions, len(value))
        self.profiles["cProfile: TaskWriter.write in-process"] = self.cprofile_write(
            bs, value, records // self.args.partitions)

    def py_spy(self, daemon: int, name: str, fn: Callable[[], dict]) -> str:
        raw = self.out_dir / f"py-spy-{name}.txt"
        log = open(raw.with_suffix(".log"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [py_spy_path(), "record", "--pid", str(daemon), "--subprocesses", "--native",
             "--format", "raw", "--rate", "100", "--output", str(raw)],
            stdout=log, stderr=subprocess.STDOUT)
        time.sleep(1.0)  # py-spy attached before the query starts
        t0 = time.perf_counter()
        fn()
        seconds = time.perf_counter() - t0
        proc.send_signal(2)
        proc.wait(60)
        log.close()
        if not raw.exists():
            return f"py-spy wrote nothing (see {raw.with_suffix('.log').name})\n"
        text = (f"{seconds:.1f} s under py-spy (--native --subprocesses, 100 Hz, samples of "
                f"threads py-spy sees as active) of the Python workers\n\n"
                + worker_samples(raw))
        raw.with_suffix(".summary.txt").write_text(text + "\n" + summarize(raw))
        return text

    def cprofile_read(self, bs: str, topic: str, records: int, size: int) -> str:
        from semel.pipelines.spark.options import source_options
        from semel.pipelines.spark.source import KafkaRange, plan_batch, read_range

        options = source_options({"kafka.bootstrap.servers": bs, "subscribe": topic},
                                 streaming=False)
        part = next(r for r in plan_batch(options) if r.partition == 0)

        def run() -> dict:
            n = 0
            for batch in read_range(options, KafkaRange(topic, 0, part.start, part.end)):
                n += batch.num_rows
            return {"records": n, "bytes": n * size}

        return self._cprofile("read_range", run)

    def cprofile_write(self, bs: str, value: bytes, records: int) -> str:
        import pyarrow as pa

        from semel.pipelines.spark.options import sink_options
        from semel.pipelines.spark.sink import TaskWriter

        out = workloads.topic_name("spark-wcprof")
        workloads.create_topic(bs, out, self.args.partitions)
        options = sink_options({"kafka.bootstrap.servers": bs, "topic": out})
        batch_rows = 10_000  # spark.sql.execution.arrow.maxRecordsPerBatch
        column = pa.array([value] * batch_rows, pa.binary())
        schema = pa.schema([("value", pa.binary())])

        def batches():
            left = records
            while left > 0:
                n = min(batch_rows, left)
                yield pa.RecordBatch.from_arrays([column.slice(0, n)], schema=schema)
                left -= n

        def run() -> dict:
            # a token per run: a second write of the same token is skipped as a retry
            result = TaskWriter(options).write(batches(), f"bench-{out}", 0, uuid.uuid4().hex)
            return {"records": result.records, "bytes": result.records * len(value)}

        text = self._cprofile("TaskWriter.write", run)
        workloads.delete_topic(bs, out)
        return text

    def _cprofile(self, name: str, fn: Callable[[], dict]) -> str:
        # without the profiler first: its per-call cost inflates Python's share
        t0, c0 = time.perf_counter(), time.process_time()
        plain = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        profiler = cProfile.Profile()
        t0 = time.perf_counter()
        profiler.enable()
        fn()
        profiler.disable()
        profiled = time.perf_counter() - t0
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(14)
        body = stream.getvalue()
        body = body[body.index("ncalls"):] if "ncalls" in body else body
        text = (f"{plain['records']} records, {plain['bytes'] / MB:.0f} MB: "
                f"{plain['bytes'] / MB / wall:.0f} MB/s, {wall:.2f} s wall, {cpu:.2f} s CPU of "
                f"this process (all threads; without the profiler); {profiled:.2f} s under "
                f"cProfile\n\n{body}")
        (self.out_dir / f"cprofile-{name.replace('.', '-')}.txt").write_text(text)
        print(f"  {name}: {plain['bytes'] / MB / wall:.0f} MB/s in-process, "
              f"CPU {cpu:.2f} s of {wall:.2f} s", flush=True)
        return text


# -- the report ----------------------------------------------------------------------------------

LABELS = {
    "fill": "fill: 1 producer, acks=all, round-robin (not compared)",
    "read-plain": "read: confluent-kafka consumer, 1 process",
    "read-spark-count": "read: Spark count()",
    "read-spark-sum": "read: Spark sum(length(value))",
    "read-plain-tuned": "read: confluent-kafka consumer, fetch.queue.backoff.ms=10",
    "read-spark-sum-tuned": "read: Spark sum(length(value)), kafka.fetch.queue.backoff.ms=10",
    "write-spark": "write: Spark format(\"semel\"), exactly once",
    "write-idempotent": "write: confluent-kafka idempotent producer, 1 process",
    "write-txn": "write: confluent-kafka transactional producer, 1 process",
}
SHORT = {"read-plain": "consumer", "read-plain-tuned": "consumer, backoff 10 ms",
         "write-idempotent": "idempotent producer"}
BASELINE = {"read-spark-count": "read-plain", "read-spark-sum": "read-plain",
            "read-plain-tuned": "read-plain", "read-spark-sum-tuned": "read-plain-tuned",
            "write-spark": "write-idempotent", "write-txn": "write-idempotent"}


def _kind(row: str) -> tuple[str, str]:
    """``read-1k-spark-sum`` -> (``1k``, ``read-spark-sum``)."""
    verb, tag, *rest = row.split("-")
    return tag, "-".join([verb, *rest])


def aggregate(runs: list[dict]) -> dict[str, dict]:
    grouped: dict[str, list[dict]] = {}
    for r in runs:
        grouped.setdefault(r["row"], []).append(r["metrics"])
    out = {}
    for row, metrics in grouped.items():
        agg = {"n": len(metrics), "MBps_all": [m["MBps"] for m in metrics],
               "spark": metrics[0]["spark"]}
        for key, v in metrics[0].items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                agg[key] = statistics.median(m[key] for m in metrics)
        out[row] = agg
    return out


def table(agg: dict[str, dict]) -> str:
    """One line per row: MB/s, the ratio to its baseline, CPU seconds per GB of values."""
    lines = [("| row | MB/s (median) | runs | ratio | vs | broker CPU s/GB | client CPU s/GB "
              "| Spark JVM (tasks / JIT / GC) | Spark Py workers | driver |"),
             "|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for row, a in agg.items():
        tag, kind = _kind(row)
        base = BASELINE.get(kind)
        base_row = f"{kind.split('-')[0]}-{tag}-{base.split('-', 1)[1]}" if base else ""
        ratio, vs = "", ""
        if base_row in agg:
            ratio = f"{a['MBps'] / agg[base_row]['MBps']:.2f}"
            vs = SHORT[base]
        gb = a["bytes"] / 1e9
        spark = (f"{a['jvm_cpu_s'] / gb:.2f} ({a['jvm_tasks_cpu_s'] / gb:.2f} / "
                 f"{a['jvm_jit_cpu_s'] / gb:.2f} / {a['jvm_gc_cpu_s'] / gb:.2f}) | "
                 f"{a['workers_cpu_s'] / gb:.2f}" if a["spark"] else "— | —")
        lines.append(
            f"| {LABELS.get(kind, kind)} [{tag}, {a['records']:.0f} records] | {a['MBps']:.1f} "
            f"| {', '.join(f'{v:.0f}' for v in a['MBps_all'])} | {ratio} | {vs} | "
            f"{a['broker_cpu_s_per_GB']:.2f} | {a['client_cpu_s_per_GB']:.2f} | {spark} | "
            f"{a['driver_cpu_s'] / gb:.2f} |")
    return "\n".join(lines)


def markdown(bench: Bench, agg: dict, info: dict, started: str, command: str) -> str:
    n = bench.notes
    out = [
        "# The PySpark connector's speed (bench/bench_spark.py)", "",
        (f"`{command}` on {started} UTC. {bench.args.rounds} rounds, rows alternating order "
         "round by round; medians. MB/s = 10^6 value bytes per second of wall time; CPU "
         "seconds per GB of values: the broker's, and the client side's (this process: the "
         "Spark driver's Python side or the plain client with librdkafka's threads; Spark's "
         "JVM; Spark's Python workers). The ratio compares with the row named under 'vs'."), "",
        "## Machine and setup", "",
        (f"- CPU: {info['cpu_model']}, {info['cores']} cores; RAM {info['ram_gib']} GiB; "
         f"kernel {info['kernel']}; Python {info['python']}; {info['client']}; "
         f"pyspark {_pyspark_version()}"),
        f"- semel commit {info['semel_commit']}",
        f"- broker: {n['broker']} (the broker's default, durable mode)"
        if bench.args.flush_mode == "fsync" else f"- broker: {n['broker']}",
        (f"- topics: {bench.args.partitions} partitions; Spark local[2], "
         f"{bench.args.spark_partitions} tasks per write, one read task per partition "
         "(maxRecordsPerPartition 1,000,000)"),
        (f"- load average at start {info['loadavg_start']}, at end {info['loadavg_end']}; "
         f"CPU stolen by the hypervisor: {info['steal_pct']}%"),
        (f"- broker start {n['broker_start_s']:.1f} s; Spark session start "
         f"{n['spark_session_s']:.1f} s; first Spark read (Python workers start, 100 records "
         f"a partition) {n.get('first_read_s', 0):.1f} s; first Spark write (1000 records) "
         f"{n.get('first_write_s', 0):.1f} s (none of these counted in the rows)"), "",
        "## Results", "", table(agg), "",
    ]
    if bench.profiles:
        out += ["## Profiles", ""]
        for title, text in bench.profiles.items():
            out += [f"### {title}", "", "```", text.rstrip(), "```", ""]
    return "\n".join(out)


def _pyspark_version() -> str:
    import pyspark

    return pyspark.__version__


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="128 MiB, 2 rounds, 16 MiB of 100 B records if asked for")
    p.add_argument("--size-mb", type=int, default=None, help="MiB of 1 KiB records (1024)")
    p.add_argument("--small-mb", type=int, default=None,
                   help="MiB of the smaller records of --record-sizes (size-mb / 8)")
    p.add_argument("--record-sizes", default="1024,100",
                   help="comma-separated, e.g. 1024,100; the first at --size-mb")
    p.add_argument("--rounds", type=int, default=None, help="3 (--quick: 2)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--spark-partitions", type=int, default=4, help="tasks of a Spark write")
    p.add_argument("--flush-mode", choices=("fsync", "none"), default="fsync")
    p.add_argument("--no-tuned", dest="tuned", action="store_false")
    p.add_argument("--no-profile", dest="profile", action="store_false")
    args = p.parse_args()
    args.size_mb = args.size_mb or (128 if args.quick else 1024)
    args.small_mb = args.small_mb or max(1, args.size_mb // 8)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.record_sizes = [int(s) for s in args.record_sizes.split(",")]

    started = datetime.now(UTC)
    out_dir = ROOT / "bench" / "results" / f"{started:%Y%m%d-%H%M%S}-spark"
    out_dir.mkdir(parents=True)
    info = report.machine_info()
    ticks0 = report.cpu_ticks()
    command = shlex.join([".venv/bin/python", "bench/bench_spark.py", *sys.argv[1:]])
    bench = Bench(args, out_dir)
    t0 = time.perf_counter()
    bench.run()
    info["loadavg_start"] = " ".join(f"{x:.2f}" for x in info["loadavg"])
    info["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    steal = report.steal_pct(ticks0, report.cpu_ticks())
    info["steal_pct"] = f"{steal:.1f}" if steal is not None else "?"
    agg = aggregate(bench.runs)
    (out_dir / "results.json").write_text(json.dumps(
        {"args": vars(args), "info": info, "notes": bench.notes, "runs": bench.runs,
         "medians": agg}, indent=1, default=str))
    (out_dir / "RESULTS.md").write_text(markdown(bench, agg, info, f"{started:%Y-%m-%d %H:%M}",
                                                 command))
    print()
    print(table(agg))
    print(f"\n{time.perf_counter() - t0:.0f} s in all; {out_dir.relative_to(ROOT)}/RESULTS.md")


if __name__ == "__main__":
    main()
