"""Idempotent vs plain produce throughput (target: idempotent >= 0.95 x plain).

Each measurement alternates plain and idempotent runs (`--rounds` each) and reports the
ratio idempotent/plain of medians (and, for the noisy end-to-end runs, of the best runs and
of the broker's lowest CPU cost per GB: on a shared machine noise only ever slows a run):

1. append: `PartitionLog.append` in-process (flush mode none) of pre-built v2 batches,
   plain (no producer id) vs one idempotent producer (producer id, epoch 0, consecutive
   sequences): the producer-state bookkeeping alone. 1-record batches are its worst case.
2. wire: `python -m semel.broker serve` fed pre-encoded Produce v9 requests (acks=-1, one
   `--records`-record batch of 1 KiB records each) over one connection, five in flight as
   an idempotent client keeps them; MB/s and the broker's CPU seconds per GB, per flush
   mode. The client does no work while measuring, so this is the broker's throughput.
3. librdkafka (`--librdkafka`): bench/broker_throughput.py with enable.idempotence off/on.
   On a small machine this mostly measures librdkafka: its idempotence bookkeeping about
   doubles the client's CPU, which competes with the broker for the same cores.
4. paired librdkafka (`--paired N`): one broker per flush mode, N pairs of back-to-back runs
   (A B, then B A) of a plain producer with max.in.flight=1 and an idempotent producer
   (librdkafka keeps one Produce request in flight per partition when idempotent,
   librdkafka#4989, so both pipeline alike). Each pair's ratio is taken from two runs
   seconds apart, which cancels the slow drift of a shared VM (CPU steal comes and goes
   over minutes); the median of the pair ratios is reported, with broker CPU per GB too.
   `--paired N --java` does the same with Java kafka-clients, whose idempotent producer
   keeps five requests in flight like its plain one.

Run: ``python bench/bench_idempotent.py [--rounds 5] [--requests 1500] [--librdkafka]``, or
``python bench/bench_idempotent.py --paired 15 [--java] [--mib 256] [--modes none,fsync]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.broker_throughput import cpu_seconds
from bench.broker_throughput import run as librdkafka_run
from semel.protocol import api
from semel.protocol.frame import encode_request_header
from semel.protocol.records import build_batch
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.recovery import open_partition_log
from semel.storage.topic_partition import TopicPartition
from tests.kafka_wire import KafkaWire, create_topic, message, produce_request

PRODUCE, INIT_PRODUCER_ID = 0, 22


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- 1. append ----------------------------------------------------------------------------------


def append_rate(idempotent: bool, records_per_batch: int, batches: int, value_size: int) -> float:
    """Records per second through PartitionLog.append."""
    value = b"x" * value_size
    now = now_ms()
    built = []
    for n in range(batches):
        kw = {}
        if idempotent:
            kw = {"producer_id": 7, "producer_epoch": 0, "base_sequence": n * records_per_batch}
        built.append(bytearray(build_batch([(None, value, None, now)] * records_per_batch, **kw)))
    with tempfile.TemporaryDirectory() as tmp:
        plog = open_partition_log(
            RealFileSystem(),
            tmp,
            TopicPartition("b", 0),
            LogConfig(),
            clock=now_ms,
            clean_shutdown=True,
            durable=False,
        )
        t0 = time.perf_counter()
        for data in built:
            plog.append(data)
        elapsed = time.perf_counter() - t0
        plog.close(flush=False)
    return batches * records_per_batch / elapsed


# -- 2. wire --------------------------------------------------------------------------------------


def produce_frames(producer_id: int | None, requests: int, records: int) -> list[bytes]:
    value = os.urandom(1024)
    now = now_ms()
    frames = []
    for n in range(requests):
        kw = {}
        if producer_id is not None:
            kw = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": n * records}
        batch = build_batch([(None, value, None, now)] * records, **kw)
        payload = bytearray(
            encode_request_header(
                PRODUCE, 9, n + 1, "bench", api.request_header_version(PRODUCE, 9)
            )
        )
        api.codec(PRODUCE, "request").encode(9, produce_request("bench", 0, batch), payload)
        frames.append(len(payload).to_bytes(4, "big") + bytes(payload))
    return frames


def wire_run(idempotent: bool, flush_mode: str, requests: int, records: int) -> dict:
    data_dir = tempfile.mkdtemp(prefix="semel-bench-")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--port",
            "0",
            "--data-dir",
            data_dir,
            "--set",
            f"log.flush.mode={flush_mode}",
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        m = re.search(r"ready on [\d.]+:(\d+)", proc.stdout.readline())
        if not m:
            raise SystemExit("broker did not start")
        with KafkaWire("127.0.0.1", int(m.group(1)), timeout=120) as wire:
            create_topic(wire, "bench")
            producer_id = None
            if idempotent:
                producer_id = wire.request(
                    INIT_PRODUCER_ID,
                    4,
                    message(
                        INIT_PRODUCER_ID,
                        "request",
                        transactional_id=None,
                        transaction_timeout_ms=-1,
                    ),
                ).producer_id
            frames = produce_frames(producer_id, requests, records)
            cpu0 = cpu_seconds(proc.pid)
            t0 = time.perf_counter()
            in_flight = 0
            for frame in frames:
                wire.sock.sendall(frame)
                in_flight += 1
                if in_flight == 5:
                    wire.read_frame()
                    in_flight -= 1
            for _ in range(in_flight):
                wire.read_frame()
            elapsed = time.perf_counter() - t0
            cpu = cpu_seconds(proc.pid) - cpu0
        gb = requests * records * 1024 / 1e9
        return {"MBps": gb * 1000 / elapsed, "cpu_s_per_GB": cpu / gb}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run(["rm", "-rf", data_dir], check=False)


# -- 4. paired runs: librdkafka or Java --------------------------------------------------------


def paired(flush_mode: str, pairs: int, mb: int, *, java: bool = False) -> dict:
    """`pairs` back-to-back plain / idempotent pairs on one broker (A B, then B A); the
    median of the pair ratios, with each side's median MB/s and CPU per GB."""
    from bench.brokers import SemelTarget

    log_dir = Path(tempfile.mkdtemp(prefix="semel-bench-logs-"))
    broker = SemelTarget(flush_mode).start(log_dir)
    run = _java_run if java else _librdkafka_run
    ratios, cpu_ratios, runs = [], [], {False: [], True: []}
    try:
        for n in range(pairs):
            pair = {}
            for idempotent in (False, True) if n % 2 == 0 else (True, False):
                os.sync()
                pair[idempotent] = run(broker, log_dir, idempotent, mb)
                runs[idempotent].append(pair[idempotent])
            ratios.append(pair[True]["MBps"] / pair[False]["MBps"])
            cpu_ratios.append(pair[False]["broker_cpu_s_per_GB"]
                              / pair[True]["broker_cpu_s_per_GB"])
    finally:
        broker.stop()
        subprocess.run(["rm", "-rf", str(log_dir)], check=False)

    def median_of(idempotent: bool, key: str) -> float | None:
        values = [r[key] for r in runs[idempotent] if key in r]
        return round(statistics.median(values), 2) if values else None

    return {
        "bench": "java-paired" if java else "librdkafka-paired", "flush_mode": flush_mode,
        "pairs": pairs, "mb": mb,
        "plain_MBps_median": median_of(False, "MBps"),
        "idempotent_MBps_median": median_of(True, "MBps"),
        "ratio_median_of_pairs": round(statistics.median(ratios), 3),
        "ratio_quartiles": [round(q, 3) for q in statistics.quantiles(ratios, n=4)],
        "broker_cpu_s_per_GB_plain": median_of(False, "broker_cpu_s_per_GB"),
        "broker_cpu_s_per_GB_idempotent": median_of(True, "broker_cpu_s_per_GB"),
        "cpu_ratio_median_of_pairs": round(statistics.median(cpu_ratios), 3),
        "client_cpu_s_per_GB_plain": median_of(False, "client_cpu_s_per_GB"),
        "client_cpu_s_per_GB_idempotent": median_of(True, "client_cpu_s_per_GB"),
    }


def _librdkafka_run(broker, log_dir: Path, idempotent: bool, mb: int) -> dict:
    """One librdkafka producer process; plain at max.in.flight=1 (librdkafka's idempotent
    producer keeps one Produce in flight per partition, librdkafka#4989)."""
    from bench import workloads

    config = ({"max.in.flight.requests.per.connection": 5, "enable.idempotence": True}
              if idempotent else {"max.in.flight.requests.per.connection": 1})
    result = workloads.produce(broker, log_dir, size=1024, producers=1, mb=mb, config=config)
    workloads.delete_topic(broker.bootstrap, result["topic"])
    return result


def _java_run(broker, _log_dir: Path, idempotent: bool, mb: int) -> dict:
    """One Java kafka-clients producer (tests/java/SemelClient.java `produce`, client
    defaults: batch.size 16 KiB, linger.ms 5, max.in.flight 5 for both - the Java idempotent
    producer does keep five in flight); MB/s over the client's own first-send to
    last-acknowledgement time, so JVM start-up is not counted."""
    from bench import workloads
    from tests.javaclient import run_java

    topic = workloads.topic_name("java")
    workloads.create_topic(broker.bootstrap, topic, 1)
    count = mb * 1_000_000 // 1024
    cpu0 = cpu_seconds(broker.pid)
    (summary,) = [r for r in run_java(
        "produce", "--bootstrap", broker.bootstrap, "--topic", topic, "--count", count,
        "--value-size", 1024, "--partition", 0, "--idempotent", str(idempotent).lower(),
        "--timeout-ms", 120_000, timeout=600) if r.get("type") == "produce_summary"]
    cpu = cpu_seconds(broker.pid) - cpu0
    workloads.delete_topic(broker.bootstrap, topic)
    if summary["acked"] != count:
        raise RuntimeError(f"java producer: {summary}")
    gb = count * 1024 / 1e9
    return {"MBps": gb * 1000 / (summary["elapsed_ms"] / 1000), "broker_cpu_s_per_GB": cpu / gb}


# -- driver ---------------------------------------------------------------------------------------


def alternate(measure, rounds: int) -> tuple[list, list]:
    """A B B A ...: neither side always runs second. Dirty pages are written back before
    every run (os.sync, untimed), so one run's writeback never lands on the next."""
    results: dict[bool, list] = {False: [], True: []}
    for n in range(rounds):
        for idempotent in (False, True) if n % 2 == 0 else (True, False):
            os.sync()
            results[idempotent].append(measure(idempotent))
    return results[False], results[True]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--modes", default="none,fsync")
    parser.add_argument("--librdkafka", action="store_true")
    parser.add_argument("--mib", type=int, default=256, help="librdkafka run size")
    parser.add_argument("--paired", type=int, metavar="N",
                        help="only the paired librdkafka measurement, N pairs per mode")
    parser.add_argument("--java", action="store_true",
                        help="with --paired: Java kafka-clients instead of librdkafka")
    parser.add_argument("--json")
    args = parser.parse_args()
    results = []

    def emit(r: dict) -> None:
        print(json.dumps(r), flush=True)
        results.append(r)

    if args.paired:
        for mode in args.modes.split(","):
            emit(paired(mode, args.paired, args.mib, java=args.java))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        return

    for records_per_batch, value_size, batches in ((1, 100, 100_000), (100, 1024, 4_000)):
        plain, idem = alternate(
            lambda i, r=records_per_batch, v=value_size, b=batches: append_rate(i, r, b, v),
            args.rounds,
        )
        p, i = statistics.median(plain), statistics.median(idem)
        emit(
            {
                "bench": "append",
                "records_per_batch": records_per_batch,
                "value_bytes": value_size,
                "plain_records_per_s": round(p),
                "idempotent_records_per_s": round(i),
                "ratio_median": round(i / p, 3),
                "ratio_best": round(max(idem) / max(plain), 3),
            }
        )
    for mode in args.modes.split(","):
        plain, idem = alternate(
            lambda i, m=mode: wire_run(i, m, args.requests, args.records), args.rounds
        )
        p = statistics.median(r["MBps"] for r in plain)
        i = statistics.median(r["MBps"] for r in idem)
        pb = max(r["MBps"] for r in plain)
        ib = max(r["MBps"] for r in idem)
        pc = min(r["cpu_s_per_GB"] for r in plain)
        ic = min(r["cpu_s_per_GB"] for r in idem)
        emit(
            {
                "bench": "wire",
                "flush_mode": mode,
                "records_per_request": args.records,
                "plain_MBps_median": round(p, 1),
                "idempotent_MBps_median": round(i, 1),
                "ratio_median": round(i / p, 3),
                "plain_MBps_best": round(pb, 1),
                "idempotent_MBps_best": round(ib, 1),
                "ratio_best": round(ib / pb, 3),
                "plain_cpu_s_per_GB_min": round(pc, 2),
                "idempotent_cpu_s_per_GB_min": round(ic, 2),
                "cpu_ratio": round(pc / ic, 3),
            }
        )
    if args.librdkafka:
        for mode in args.modes.split(","):
            plain, idem = alternate(
                lambda i, m=mode: librdkafka_run(m, 1, args.mib, 1024, i), args.rounds
            )
            p = statistics.median(r["produce_MBps"] for r in plain)
            i = statistics.median(r["produce_MBps"] for r in idem)
            emit(
                {
                    "bench": "librdkafka",
                    "flush_mode": mode,
                    "mib": args.mib,
                    "plain_MBps": p,
                    "idempotent_MBps": i,
                    "ratio": round(i / p, 3),
                    "plain_client_cpu_s": statistics.median(r["client_cpu_s"] for r in plain),
                    "idempotent_client_cpu_s": statistics.median(r["client_cpu_s"] for r in idem),
                }
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
