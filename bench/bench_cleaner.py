"""The log cleaner on semel's own internal topics (issue 14): after many offset commits and
transactions, the sizes of __consumer_offsets and __transaction_state and the broker's start
time (exec to ready line: the coordinators load those topics), before and after a cleaning;
and the cleaning's throughput.

    .venv/bin/python bench/bench_cleaner.py [--commits 100000] [--transactions 20000]

One partition each, 1 MiB segments (offsets.topic.segment.bytes,
transaction.state.log.segment.bytes), log.flush.mode=none; clients: confluent-kafka (a
consumer committing synchronously, a transactional producer of one record per transaction).
The cleaning runs in-process (LogManager.run_cleaner_once until nothing is left to clean),
timed; the start times are of a broker subprocess, best of three.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from broker.testing import BrokerProcess, BrokerThread

OVERRIDES = {
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=100_000)
    p.add_argument("--transactions", type=int, default=20_000)
    args = p.parse_args()
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
    after = sizes(data)
    start_after = start_ms(data)
    print(f"cleanings: {len(results)}, {read / 1e6:.1f} MB of segments read in {wall_s:.2f} s "
          f"({read / 1e6 / wall_s:.1f} MB/s; {cpu_s:.2f} s CPU of the broker process)")
    for name in INTERNAL:
        print(f"{name}: {before[name] / 1e6:.2f} MB -> {after[name] / 1e6:.3f} MB")
    print(f"start (exec to ready line, best of 3): {start_before[0]:.0f} ms -> "
          f"{start_after[0]:.0f} ms")
    for topic in ("__consumer_offsets", "__transaction_state"):
        print(f"{topic} loaded by its coordinator in {start_before[1].get(topic, '?')} ms -> "
              f"{start_after[1].get(topic, '?')} ms")


if __name__ == "__main__":
    main()
