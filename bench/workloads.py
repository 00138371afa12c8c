"""The workloads, each measured the same way against any broker (``RunningBroker``).

A workload creates its topic(s) with the AdminClient, runs its client processes
(bench/clients.py) behind the start barrier, and returns flat metrics. Around the measured
part it reads the broker's CPU seconds (its process CPU clock: /proc/<pid>/stat's
user+system time, in ns) and samples its RSS, so every throughput figure comes with broker
and client CPU (``*_cores`` = CPU seconds per wall second: a client near 1.0 per process is
itself the bottleneck).

Client settings common to both brokers: acks=all, no compression, librdkafka's defaults
otherwise (linger.ms=5, batch.size=1000000, max.in.flight=1000000 for plain producers; 5
with idempotence), delivery reports only for errors. Each producer writes its own partition.
Consumers (``CONSUMER_CONFIG``): fetches of up to 50 MiB, 10 MiB per partition, and a 10 ms
pause (not librdkafka's 1 s) when the application lets the local queue fill up.
``produce(..., compression="lz4")`` and ``produce(..., java=True)`` send bench/values.py's
compressible values instead of one random value repeated; ``java=True`` runs Java
kafka-clients producers (bench/java/BenchProducer.java: its defaults, idempotent, batch.size
16 KiB, with acks=all and linger.ms=5).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from bench import values
from bench.brokers import PeakRss, RunningBroker
from bench.clients import NotMeasured, percentiles, run_group, span

MB = 1_000_000
# fetch.queue.backoff.ms: librdkafka stops fetching a partition for this long whenever its
# local queue is past its thresholds (queued.max.messages.kbytes 64 MiB, queued.min.messages
# 100000), that is whenever the broker is faster than the consumer application. At the 1 s
# default one such pause took more than half of a 512 MB round, in some rounds and not in
# others, though the queue drains in ~50 ms. Java's consumer fetches again as soon as the
# buffered records are taken; 10 ms comes close to that. Both brokers get the same setting.
CONSUMER_CONFIG = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                   "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 10}


@dataclass
class Sizes:
    """How much each workload does (the --quick/--full/--smoke profiles set these)."""

    produce_mb_1k: int = 512
    produce_mb_100b: int = 128
    java_mb_1k: int = 256  # the Java producer's 16 KiB batches make it the slower client
    java_mb_100b: int = 64
    consume_mb: int = 1024
    consumers: int = 2
    txn_mb: int = 512
    tiny_txn_s: float = 15.0
    endtxn_count: int = 5000
    e2e_s: float = 20.0
    e2e_rate: int = 1000
    e2e_size: int = 1024
    produce_mb_16k: int = 256  # librdkafka with Java's 16 KiB batches: many more requests per MB
    request_cost_requests: int = 20_000  # Produce requests per run, 1 record of 10 B
    request_cost_requests_16k: int = 5_000  # Produce requests per run, 16 KiB batches
    request_cost_runs: int = 3  # runs of each shape per broker, alternated; the median counts
    request_cost_warm_up: int = 2_000  # tiny requests before the first run


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)], operation_timeout=30)[name].result(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
                p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.05)
    raise RuntimeError(f"topic {name} has no leaders after creation")


def delete_topic(bootstrap: str, name: str) -> None:
    """Drop a measured topic, so a long series of runs on one broker does not fill the disk."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name], operation_timeout=30)[name].result(60)


def topic_name(kind: str) -> str:
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


def measured(broker: RunningBroker, specs: list[dict], log_dir: Path) -> tuple[list, dict]:
    """Runs the client group; returns its results and the broker's CPU/RSS over it."""
    marks: dict = {}

    def on_go() -> None:
        marks["cpu0"] = broker.cpu_seconds()
        marks["t0"] = time.monotonic()

    with PeakRss(broker.pid) as rss:
        results = run_group(specs, log_dir=log_dir, on_go=on_go)
    wall = time.monotonic() - marks["t0"]
    stats: dict = {"window_s": wall}
    if broker.pid:
        stats["broker_cpu_s"] = broker.cpu_seconds() - marks["cpu0"]
        stats["broker_cores"] = stats["broker_cpu_s"] / wall
        stats["peak_rss_mib"] = rss.peak
        stats["rss_after_mib"] = broker.rss_mib()
    return results, stats


def _throughput(results: list, stats: dict) -> dict:
    nbytes = sum(r["bytes"] for r in results)
    records = sum(r["records"] for r in results)
    seconds = span(results)
    client_cpu = sum(r["cpu_s"] for r in results)
    out = {"MBps": nbytes / MB / seconds, "records_per_s": records / seconds,
           "seconds": seconds, "bytes": nbytes, "records": records,
           "errors": sum(r.get("errors", 0) for r in results),
           "client_cpu_s": client_cpu, "client_cores": client_cpu / seconds,
           "client_cpu_s_per_GB": client_cpu / (nbytes / 1e9), **stats}
    if "broker_cpu_s" in stats:
        out["broker_cpu_s_per_GB"] = stats["broker_cpu_s"] / (nbytes / 1e9)
    return out


def produce(broker: RunningBroker, log_dir: Path, *, size: int, producers: int, mb: int,
            config: dict | None = None, txn_ms: int = 0, topic: str | None = None,
            compression: str | None = None, java: bool = False) -> dict:
    """``producers`` processes, each ``mb / producers`` MB of ``size``-byte records into its own
    partition; ``txn_ms`` > 0 makes them transactional, committing every ``txn_ms``.
    ``compression`` (a compression.type) or ``java`` (Java kafka-clients producers instead of
    librdkafka): records carry bench/values.py's compressible values."""
    topic = topic or topic_name("java" if java else "produce")
    create_topic(broker.bootstrap, topic, producers)
    per = mb * MB // size // producers
    words = str(values.text_path()) if compression or java else None
    specs = []
    for i in range(producers):
        conf = dict(config or {})
        if txn_ms:
            conf["transactional.id"] = f"{topic}-{i}"
        spec = {"role": "java_produce" if java else "produce", "bootstrap": broker.bootstrap,
                "topic": topic, "partition": i, "records": per, "size": size, "config": conf,
                "txn_ms": txn_ms}
        if words:
            spec["values"] = words
        if java:
            spec["compression"] = compression or "none"
        elif compression:
            conf["compression.type"] = compression
        specs.append(spec)
    results, stats = measured(broker, specs, log_dir)
    out = _throughput(results, stats)
    out["topic"] = topic
    if txn_ms:
        out["transactions"] = sum(r["transactions"] for r in results)
        out["commit_ms_p50"] = max(r["commit_ms"]["p50"] for r in results)
        out["commit_ms_p99"] = max(r["commit_ms"]["p99"] for r in results)
    if out["errors"] or out["records"] < per * producers:
        raise RuntimeError(f"{out['errors']} delivery errors, {out['records']} of "
                           f"{per * producers} records acknowledged; first: "
                           f"{next((r['first_error'] for r in results if r['first_error']), '')}")
    return out


def consume(broker: RunningBroker, log_dir: Path, *, topic: str, partitions: int,
            records: int, consumers: int, isolation: str = "read_uncommitted") -> dict:
    """``consumers`` processes read ``topic`` from the beginning, partitions split among them."""
    group = f"bench-consume-{uuid.uuid4().hex[:8]}"
    assignment = [list(range(partitions))[i::consumers] for i in range(consumers)]
    per_partition = records // partitions
    specs = [{"role": "consume", "bootstrap": broker.bootstrap, "topic": topic, "group": group,
              "partitions": parts, "records": per_partition * len(parts),
              "config": {**CONSUMER_CONFIG, "isolation.level": isolation}}
             for parts in assignment if parts]
    results, stats = measured(broker, specs, log_dir)
    if not all(r["complete"] for r in results):
        got = sum(r["records"] for r in results)
        raise RuntimeError(f"consumers got {got} of {records} records")
    return _throughput(results, stats)


def consume_transactional(broker: RunningBroker, log_dir: Path, *, mb: int) -> dict:
    """A topic written by a transactional producer (100 ms transactions, 1 partition), then
    read from the beginning by one consumer with read_committed and one with
    read_uncommitted; the read_committed figures are the workload's, ``ru_MBps`` the other."""
    filled = produce(broker, log_dir, size=1024, producers=1, mb=mb, txn_ms=100,
                     config={"max.in.flight.requests.per.connection": 5})
    committed = consume(broker, log_dir, topic=filled["topic"], partitions=1,
                        records=filled["records"], consumers=1, isolation="read_committed")
    uncommitted = consume(broker, log_dir, topic=filled["topic"], partitions=1,
                          records=filled["records"], consumers=1)
    return {**committed, "ru_MBps": uncommitted["MBps"],
            "rc_over_ru": committed["MBps"] / uncommitted["MBps"]}


class FsyncProbe:
    """The disk's fsync latency during a workload, measured beside it: a thread appends
    100 B to a file of its own in ``directory`` (the broker's data directory; a temporary
    one for a broker without) and calls fdatasync, as semel's flusher does, every
    ``interval_s``. ``result()``: fsync_ms_p50/p99/max and the count. The disk of a shared VM
    stalls now and then; a commit p99 reads differently next to an fsync p99 of 0.3 ms or
    of 300 ms."""

    def __init__(self, directory: str | None, interval_s: float = 0.02) -> None:
        self.directory = directory
        self.interval_s = interval_s
        self.latencies_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fsync-probe", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with tempfile.TemporaryDirectory(prefix="fsync-probe-", dir=self.directory) as d:
            fd = os.open(os.path.join(d, "probe"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                payload = os.urandom(100)
                while not self._stop.wait(self.interval_s):
                    os.write(fd, payload)
                    t0 = time.perf_counter()
                    os.fdatasync(fd)
                    self.latencies_ms.append((time.perf_counter() - t0) * 1000)
            finally:
                os.close(fd)

    def result(self) -> dict:
        lat = percentiles(self.latencies_ms)
        return {"fsync_ms_p50": lat.get("p50"), "fsync_ms_p99": lat.get("p99"),
                "fsync_ms_max": lat.get("max"), "fsyncs": lat["n"]}


def tiny_txn(broker: RunningBroker, log_dir: Path, *, seconds: float) -> dict:
    """One producer, transactions of 10 records of 100 B on one partition, back to back;
    the disk's fsync latency measured beside it (``FsyncProbe``)."""
    topic = topic_name("tinytxn")
    create_topic(broker.bootstrap, topic, 1)
    specs = [{"role": "tiny_txn", "bootstrap": broker.bootstrap, "topic": topic,
              "partition": 0, "duration_s": seconds, "txn_records": 10, "size": 100,
              "config": {"transactional.id": topic}}]
    with FsyncProbe(broker.data_dir) as probe:
        (result,), stats = measured(broker, specs, log_dir)
    seconds = result["end"] - result["start"]
    return {"txn_per_s": result["transactions"] / seconds, "transactions": result["transactions"],
            "commit_ms_p50": result["commit_ms"]["p50"], "commit_ms_p99": result["commit_ms"]["p99"],
            "commit_ms_p999": result["commit_ms"]["p999"],
            "client_cores": result["cpu_s"] / seconds, "errors": result["errors"],
            **probe.result(), **stats}


def endtxn(broker: RunningBroker, log_dir: Path, *, transactions: int) -> dict:
    """EndTxn round trips on the wire (bench/endtxn_wire.py), 10-record transactions; the
    disk's fsync latency beside it (``FsyncProbe``)."""
    topic = topic_name("endtxn")
    create_topic(broker.bootstrap, topic, 1)
    specs = [{"role": "endtxn", "bootstrap": broker.bootstrap, "topic": topic,
              "transactions": transactions, "transactional_id": topic}]
    with FsyncProbe(broker.data_dir) as probe:
        (result,), stats = measured(broker, specs, log_dir)
    lat = result["endtxn_ms"]
    return {"endtxn_ms_p50": lat["p50"], "endtxn_ms_p99": lat["p99"],
            "endtxn_ms_p999": lat["p999"], "endtxn_ms_max": lat["max"], "samples": lat["n"],
            "txn_per_s": result["transactions"] / result["elapsed_s"],
            "add_partitions_retries": result["add_partitions_retries"], **probe.result(),
            **stats}


def e2e_latency(broker: RunningBroker, log_dir: Path, *, seconds: float, rate: int,
                size: int) -> dict:
    """A producer at ``rate`` records/s (linger.ms=0, acks=all) and a consumer tailing the
    partition; latency = receipt - send time carried in the record (same machine clock).
    The first second is warm-up and not counted."""
    topic = topic_name("e2e")
    create_topic(broker.bootstrap, topic, 1)
    specs = [{"role": "e2e_consume", "bootstrap": broker.bootstrap, "topic": topic,
              "group": topic, "duration_s": seconds, "warmup_s": 1.0,
              "config": {"fetch.wait.max.ms": 100, "fetch.min.bytes": 1}},
             {"role": "e2e_produce", "bootstrap": broker.bootstrap, "topic": topic,
              "rate": rate, "duration_s": seconds, "size": size, "config": {"linger.ms": 0}}]
    (consumer, producer), stats = measured(broker, specs, log_dir)
    if not consumer["complete"]:
        raise RuntimeError("the consumer did not see the end of the stream")
    lat = consumer["latency_ms"]
    return {"e2e_ms_p50": lat["p50"], "e2e_ms_p99": lat["p99"], "e2e_ms_p999": lat["p999"],
            "e2e_ms_max": lat["max"], "samples": lat["n"], "errors": producer["errors"],
            "client_cpu_s": consumer["cpu_s"] + producer["cpu_s"], **stats}


def startup(target, log_dir: Path, *, settle_s: float = 1.0) -> dict:
    """One launch: exec -> first TCP connect, exec -> ready line, RSS after ``settle_s``."""
    broker = target.start(log_dir)
    try:
        time.sleep(settle_s)
        return {"startup_connect_ms": broker.startup_connect_s * 1000,
                "startup_ready_ms": broker.startup_ready_s * 1000,
                "idle_rss_mib": broker.rss_mib()}
    finally:
        broker.stop()


def request_cost(broker: RunningBroker, log_dir: Path, *, requests: int, requests_16k: int,
                 runs: int, warm_up: int) -> dict:
    """The broker's CPU per Produce request (bench/bench_request_cost.py, in a client
    process): v11, idempotent, 5 in flight, one batch per request of 1 record of 10 B
    (``fixed_us_per_request``) or 16 records of 1 KiB (``us_per_request_16k``), and the
    difference per KiB (``per_kib_us``). NotMeasured when the broker does not serve those
    requests or its process is not known (a peer given by address)."""
    if not broker.pid:
        raise NotMeasured("no broker process to read CPU from (peer given by address)")
    spec = {"role": "request_cost", "bootstrap": broker.bootstrap, "pid": broker.pid,
            "requests": {"tiny": requests, "16k": requests_16k}, "runs": runs,
            "warm_up": warm_up}
    (result,) = run_group([spec], log_dir=log_dir)
    if "not_measured" in result:
        raise NotMeasured(result["not_measured"])
    tiny, big = result["tiny"], result["16k"]
    return {"fixed_us_per_request": result["fixed_us_per_request"],
            "us_per_request_16k": big["us_per_request"], "per_kib_us": result["per_kib_us"],
            "requests_per_s": tiny["requests_per_s"], "requests_per_s_16k": big["requests_per_s"],
            "broker_cpu_s_per_GB_16k": big["s_per_gb"],
            "broker_cores": tiny["broker_cores"], "client_cores": tiny["client_cores"],
            "broker_cores_16k": big["broker_cores"], "client_cores_16k": big["client_cores"]}
