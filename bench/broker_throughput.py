"""Broker benchmark: startup, idle RSS, produce and fetch throughput with librdkafka.

Starts ``python -m semel.broker serve`` as a subprocess (durable ``fsync`` mode or
``log.flush.mode=none``), then runs confluent-kafka producers in separate processes
(1 KiB records, acks=all; ``--idempotent`` turns enable.idempotence on) and one consumer
reading everything back. Prints one line per figure; ``--json`` writes them to a file. Run:
``python bench/broker_throughput.py``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 1024


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = None


def _process_cpu_clock(pid: int) -> float | None:
    """The process's CPU clock (clock_getcpuclockid + clock_gettime): the same user+system
    time as /proc/<pid>/stat, every thread's, exited ones included, but in nanoseconds
    rather than 10 ms clock ticks, which a run of a second or two needs. None if refused."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        clock = ctypes.c_int()
        ts = _Timespec()
        if (_libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0
                or _libc.clock_gettime(clock, ctypes.byref(ts)) != 0):
            return None
    except (OSError, AttributeError):
        return None
    return ts.tv_sec + ts.tv_nsec / 1e9


def cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of process ``pid`` (all threads), ns resolution where the
    kernel gives it, else /proc/<pid>/stat's clock ticks."""
    precise = _process_cpu_clock(pid)
    if precise is not None:
        return precise
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_broker(data_dir: str, flush_mode: str) -> tuple[subprocess.Popen, int, float]:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "semel.broker", "serve", "--port", "0", "--data-dir", data_dir,
         "--set", f"log.flush.mode={flush_mode}", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    startup = time.perf_counter() - t0
    m = re.search(r"ready on [\d.]+:(\d+)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, int(m.group(1)), startup


def produce_worker(bootstrap: str, topic: str, partition: int, count: int, size: int,
                   out: mp.Queue, idempotent: bool = False) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
                  "compression.type": "none", "enable.idempotence": idempotent})
    value = os.urandom(size)
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)

    t0 = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                p.produce(topic, value, partition=partition, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    elapsed = time.perf_counter() - t0
    out.put((elapsed, len(errors), time.process_time()))


def consume_all(bootstrap: str, topic: str, partitions: int, total: int) -> tuple[float, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760,
                  "fetch.wait.max.ms": 100, "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    nbytes = 0
    t0 = time.perf_counter()
    deadline = t0 + 300
    while got < total and time.perf_counter() < deadline:
        for msg in c.consume(10000, 1.0):
            if msg.error() is None:
                got += 1
                nbytes += len(msg.value())
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed, nbytes


def run(flush_mode: str, producers: int, mib: int, size: int, idempotent: bool = False) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    data_dir = tempfile.mkdtemp(prefix="semel-bench-")
    proc, port, startup = start_broker(data_dir, flush_mode)
    bootstrap = f"127.0.0.1:{port}"
    try:
        time.sleep(0.5)
        idle = rss_mib(proc.pid)
        topic = "bench"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, producers)])[topic].result(30)
        per = (mib * 1024 * 1024) // size // producers
        q: mp.Queue = mp.Queue()
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.perf_counter()
        workers = [mp.Process(target=produce_worker,
                              args=(bootstrap, topic, i, per, size, q, idempotent))
                   for i in range(producers)]
        for w in workers:
            w.start()
        results = [q.get() for _ in workers]
        for w in workers:
            w.join()
        wall = time.perf_counter() - t0
        cpu_produce = cpu_seconds(proc.pid) - cpu0
        loaded = rss_mib(proc.pid)
        total = per * producers
        produced_mb = total * size / 1e6
        errors = sum(r[1] for r in results)
        client_cpu = sum(r[2] for r in results)
        c_elapsed, c_bytes = consume_all(bootstrap, topic, producers, total)
        return {
            "flush_mode": flush_mode, "idempotent": idempotent, "producers": producers,
            "record_bytes": size,
            "records": total, "errors": errors, "startup_s": round(startup, 3),
            "idle_rss_mib": round(idle, 1), "loaded_rss_mib": round(loaded, 1),
            "produce_MBps": round(produced_mb / wall, 1),
            "broker_cpu_s_per_GB": round(cpu_produce / (produced_mb / 1000), 1),
            "client_cpu_s": round(client_cpu, 1),
            "fetch_MBps": round(c_bytes / 1e6 / c_elapsed, 1),
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["rm", "-rf", data_dir], check=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--modes", default="none,fsync")
    parser.add_argument("--idempotent", action="store_true",
                        help="producers with enable.idempotence=true")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []
    for mode in args.modes.split(","):
        r = run(mode, args.producers, args.mib, args.size, args.idempotent)
        print(json.dumps(r), flush=True)
        results.append(r)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
