"""The log cleaner (issue 14), two parts:

1. internal topics: after many offset commits and transactions, the sizes of
   __consumer_offsets and __transaction_state and the broker's start time (exec to ready
   line; the coordinators' own load times), before and after a cleaning; the cleaning's
   throughput and the cleaner process's peak memory. One partition each, 1 MiB segments
   (offsets.topic.segment.bytes, transaction.state.log.segment.bytes), log.flush.mode=none;
   clients: confluent-kafka (a consumer committing synchronously, a transactional producer
   of one record per transaction). The cleaning runs on demand (LogManager.run_cleaner_once
   until nothing is left to clean); the start times are of a broker subprocess, best of 3.
2. produce with the cleaner busy: on one durable broker (the defaults, as `make bench`'s
   semel column), pairs of runs of `make bench`'s produce row produce-1k-1p (librdkafka,
   1 KiB records; ``--record-size 100``: produce-100b-1p): one with the cleaner idle, one while it cleans a compacted topic
   pre-filled with ``--dirty-mb`` of keyed 100-byte records (its min.cleanable.dirty.ratio is
   1.0 while it is filled, then 0.01). Order alternates per pair; the ratio busy/idle of
   MB/s per pair, the cleaner process's CPU over the busy run, and whether it was still
   cleaning when the run ended (it must be, or the run was not "busy").

    .venv/bin/python bench/bench_cleaner.py [--commits 100000] [--transactions 20000]
        [--pairs 4] [--dirty-mb 300] [--produce-mb 128] [--record-size 1024]
        [--part internal|busy|both]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from semel.broker.testing import BrokerProcess, BrokerThread

OVERRIDES = {
    "log.cleaner.enable": "false",  # cleanings run on demand here
    "log.cleaner.max.cpu.share": "1.0",  # the cleaner's own speed, not its budgeted one
    "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
    "offsets.topic.segment.bytes": str(1 << 20),
    "transaction.state.log.segment.bytes": str(1 << 20),
    "log.flush.mode": "none", "group.initial.rebalance.delay.ms": "0",
}
INTERNAL = ("__consumer_offsets-0", "__transaction_state-0")


def sizes(data: Path) -> dict[str, int]:
    return {name: sum(f.stat().st_size for f in (data / name).iterdir()
                      if f.name.endswith(".log")) for name in INTERNAL}


LOADED = re.compile(r"loaded \d+ (?:groups|transactional ids) from (\S+) in (\d+) ms")


def start_ms(data: Path) -> tuple[float, dict[str, int]]:
    """Best of three: ms from exec to the ready line, and each coordinator's own load time
    (its "loaded ... in N ms" line; the coordinators load after the ready line)."""
    best, loads = float("inf"), {}
    for _ in range(3):
        t0 = time.perf_counter()
        broker = BrokerProcess(data, OVERRIDES).start()
        ready = (time.perf_counter() - t0) * 1000
        deadline = time.monotonic() + 60
        found: dict[str, int] = {}
        while len(found) < 2 and time.monotonic() < deadline:
            for line in list(broker.lines):
                if m := LOADED.search(line):
                    found[m.group(1)] = int(m.group(2))
            time.sleep(0.05)
        broker.stop()
        if ready < best:
            best, loads = ready, found
    return best, loads


def load(bootstrap: str, commits: int, transactions: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("data", 4)])["data"].result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False})
    for i in range(commits):
        consumer.commit(offsets=[TopicPartition("data", i % 4, i)], asynchronous=False)
    consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-tx",
                         "linger.ms": 0})
    producer.init_transactions(30)
    for i in range(transactions):
        producer.begin_transaction()
        producer.produce("data", value=b"%d" % i, partition=i % 4)
        producer.commit_transaction(30)


def internal_topics(args) -> None:
    data = Path(tempfile.mkdtemp(prefix="semel-cleaner-bench-")) / "data"
    with BrokerProcess(data, OVERRIDES) as broker:
        t0 = time.perf_counter()
        load(broker.bootstrap, args.commits, args.transactions)
        print(f"load: {args.commits} commits, {args.transactions} transactions in "
              f"{time.perf_counter() - t0:.1f} s")
    before = sizes(data)
    start_before = start_ms(data)

    with BrokerThread(data, OVERRIDES) as bt:
        async def clean_all():
            results = []
            t0 = time.process_time(), time.perf_counter()
            while (result := await bt.broker.log_manager.run_cleaner_once()) is not None:
                results.append(result)
            return results, time.process_time() - t0[0], time.perf_counter() - t0[1]

        results, cpu_s, wall_s = bt.call(clean_all(), timeout=3600)
    read = sum(r.bytes_before for r in results)
    worker_s = sum(r.worker_seconds for r in results)
    after = sizes(data)
    start_after = start_ms(data)
    print(f"cleanings: {len(results)}, {read / 1e6:.1f} MB of segments read in {wall_s:.2f} s "
          f"({read / 1e6 / wall_s:.1f} MB/s; in the cleaner process {worker_s:.2f} s, "
          f"{read / 1e6 / worker_s:.1f} MB/s; {cpu_s:.2f} s CPU of the broker process; "
          f"cleaner process peak RSS "
          f"{max(r.worker_max_rss_bytes for r in results) / 2**20:.0f} MiB, offset map "
          f"{max(r.map_entries for r in results)} keys)")
    for name in INTERNAL:
        print(f"{name}: {before[name] / 1e6:.2f} MB -> {after[name] / 1e6:.3f} MB")
    print(f"start (exec to ready line, best of 3): {start_before[0]:.0f} ms -> "
          f"{start_after[0]:.0f} ms")
    for topic in ("__consumer_offsets", "__transaction_state"):
        print(f"{topic} loaded by its coordinator in {start_before[1].get(topic, '?')} ms -> "
              f"{start_after[1].get(topic, '?')} ms")


# -- 2. produce with the cleaner busy ---------------------------------------------------------


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


class CleanerProcessWatch:
    """The broker's cleaner child process (started at its first cleaning) and its CPU."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid

    def cpu(self) -> float:
        from bench.broker_throughput import cpu_seconds

        return sum(cpu_seconds(c) for c in children(self.broker_pid))

    def busy(self, window_s: float = 1.5) -> bool:
        """Whether it used CPU in the next ``window_s`` (longer than the pauses its CPU
        budget, log.cleaner.max.cpu.share, makes: 0.7 s of every 1 s at 0.3)."""
        before = self.cpu()
        time.sleep(window_s)
        return self.cpu() - before > window_s * 0.02

    def wait_idle(self, timeout_s: float = 900) -> None:
        deadline = time.monotonic() + timeout_s
        while self.busy():
            if time.monotonic() > deadline:
                raise RuntimeError("the cleaner did not finish")


def fill_dirty(bootstrap: str, topic: str, mb: int) -> None:
    """A compacted topic of ``mb`` MB of keyed records of 100-byte values over 5,000 keys
    (the cleaner's cost is per record: small records keep it busy longest), not yet
    cleanable (min.cleanable.dirty.ratio 1.0)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={
        "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "1.0",
        "segment.bytes": str(16 << 20)})])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.size": 16384, "queue.buffering.max.kbytes": 1 << 20})
    value = os.urandom(100)
    for i in range(mb * 10_000):
        while True:
            try:
                producer.produce(topic, key=b"key-%d" % (i % 5000), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0


def make_cleanable(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.incremental_alter_configs([ConfigResource(
        ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(
            "min.cleanable.dirty.ratio", "0.01",
            incremental_operation=AlterConfigOpType.SET)])])
    for future in futures.values():
        future.result(30)


def produce_busy(args) -> None:
    import statistics

    from bench import workloads
    from bench.brokers import SemelTarget

    log_dir = Path(tempfile.mkdtemp(prefix="semel-cleaner-busy-"))
    broker = SemelTarget("fsync", ["log.cleaner.backoff.ms=200", *args.broker_set]
                         ).start(log_dir)
    watch = CleanerProcessWatch(broker.pid)
    ratios, shares = [], []
    try:
        for pair in range(args.pairs):
            topic = f"dirty-{pair}"
            fill_dirty(broker.bootstrap, topic, args.dirty_mb)
            watch.wait_idle()
            runs = {}
            for kind in (("idle", "busy") if pair % 2 == 0 else ("busy", "idle")):
                if kind == "busy":
                    make_cleanable(broker.bootstrap, topic)
                    deadline = time.monotonic() + 30
                    while not children(broker.pid) or not watch.busy():
                        assert time.monotonic() < deadline, "the cleaner did not start"
                else:
                    watch.wait_idle()
                cpu0, t0 = watch.cpu(), time.monotonic()
                runs[kind] = workloads.produce(broker, log_dir, size=args.record_size,
                                               producers=1, mb=args.produce_mb)
                runs[kind]["cleaner_cores"] = (watch.cpu() - cpu0) / (time.monotonic() - t0)
                if kind == "busy" and not watch.busy():
                    raise RuntimeError(f"pair {pair}: the cleaning ended before the busy run "
                                       "did (raise --dirty-mb)")
            ratio = runs["busy"]["MBps"] / runs["idle"]["MBps"]
            share = runs["busy"]["cleaner_cores"]
            ratios.append(ratio)
            shares.append(share)
            print(f"pair {pair}: idle {runs['idle']['MBps']:.1f} MB/s, busy "
                  f"{runs['busy']['MBps']:.1f} MB/s (ratio {ratio:.2f}); cleaner process "
                  f"{share:.2f} cores during the busy run, broker "
                  f"{runs['busy']['broker_cores']:.2f} cores (idle run: "
                  f"{runs['idle']['broker_cores']:.2f})", flush=True)
        row = "produce-1k-1p" if args.record_size == 1024 else f"produce-{args.record_size}b-1p"
        print(f"{row} with the cleaner busy / idle: median {statistics.median(ratios):.2f}"
              f" (pairs {', '.join(f'{r:.2f}' for r in ratios)}); cleaner process "
              f"{statistics.median(shares):.2f} cores (median) during the busy runs")
    finally:
        broker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=100_000)
    p.add_argument("--transactions", type=int, default=20_000)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--dirty-mb", type=int, default=300)
    p.add_argument("--produce-mb", type=int, default=128)
    p.add_argument("--record-size", type=int, default=1024,
                   help="1024: make bench's produce-1k-1p; 100: produce-100b-1p")
    p.add_argument("--broker-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker config for part 2 (e.g. log.cleaner.io.max.bytes.per.second)")
    p.add_argument("--part", choices=("internal", "busy", "both"), default="both")
    args = p.parse_args()
    if args.part in ("internal", "both"):
        internal_topics(args)
    if args.part in ("busy", "both"):
        produce_busy(args)


if __name__ == "__main__":
    main()
