"""Load-generating client processes (librdkafka through confluent-kafka, Java kafka-clients
and the raw EndTxn client), one OS process each, started together behind a barrier.

Parent side: ``run_group(specs)`` starts ``python -m bench.clients '<json spec>'`` per spec
(a JVM for ``java_produce``),
waits until every client has printed ``READY`` (connected, metadata fetched, producer ids
initialised), calls ``on_go()``, writes ``GO`` to every client, and returns each client's
result: the JSON object on its last stdout line. Times are ``time.monotonic()`` (one
system-wide clock), so the parent can take the group's span from the clients' own
``start``/``end``. ``cpu_s`` is the client's own user+system CPU (all librdkafka threads)
during the measured part.

Roles: ``produce`` (plain, idempotent or 100 ms transactions, per ``config``/``txn_ms``;
with ``values``, plain only, every record its own value cut from that file, bench/values.py),
``java_produce`` (the same produce from Java kafka-clients: bench/java/BenchProducer.java,
bench/javabench.py),
``consume`` (from the beginning, until ``records`` arrive), ``tiny_txn`` (begin, 10 records
to one partition, commit; per-commit latency), ``e2e_produce``/``e2e_consume`` (fixed rate,
send time in the value, latency at receipt), ``endtxn`` (bench/endtxn_wire.py),
``request_cost`` (the broker's CPU per Produce request, bench/bench_request_cost.py; it
reads the broker's CPU clock itself, so the spec carries the broker's pid).
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class ClientFailed(RuntimeError):
    pass


class NotMeasured(RuntimeError):
    """A broker cannot be measured on a workload (it does not offer a request version the
    workload sends, or its process is not known); the message says why in a few words,
    and the report shows it in that broker's cell instead of a figure."""


# how long a client group may run before its clients are killed ("client timed out"); the A/B
# mode (bench/bench_ab.py) lowers it, so a broker that stalls costs minutes, not a quarter hour
GROUP_TIMEOUT_S = 900.0


# -- parent side ----------------------------------------------------------------------------------


def run_group(specs: list[dict], *, log_dir: Path, timeout_s: float | None = None,
              on_go=None) -> list[dict]:
    timeout_s = timeout_s or GROUP_TIMEOUT_S
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    logs = []
    for i, spec in enumerate(specs):
        log = open(log_dir / f"client-{spec['role']}-{i}.log", "ab")  # noqa: SIM115
        logs.append(log)
        procs.append(subprocess.Popen(client_command(spec),
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=log, cwd=ROOT, text=True))
    expired = threading.Event()

    def watchdog() -> None:
        expired.set()
        for p in procs:
            if p.poll() is None:
                p.kill()

    timer = threading.Timer(timeout_s, watchdog)
    timer.daemon = True
    timer.start()
    try:
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "READY":
                raise ClientFailed(_failure(p, line, expired))
        if on_go is not None:
            on_go()
        for p in procs:
            p.stdin.write("GO\n")
            p.stdin.flush()
        results = []
        for p in procs:
            line = p.stdout.readline()
            p.wait(60)
            try:
                result = json.loads(line)
            except ValueError:
                raise ClientFailed(_failure(p, line, expired)) from None
            if "error" in result:
                raise ClientFailed(f"{result.get('role')}: {result['error']}")
            results.append(result)
        return results
    finally:
        timer.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        for log in logs:
            log.close()


def client_command(spec: dict) -> list[str]:
    """This module's ``main`` for the Python roles; the JVM for ``java_produce``."""
    if spec["role"] == "java_produce":
        from bench import javabench

        return javabench.command(spec)
    return [sys.executable, "-m", "bench.clients", json.dumps(spec)]


def _failure(p: subprocess.Popen, line: str, expired: threading.Event) -> str:
    if expired.is_set():
        return "client timed out"
    try:
        return json.loads(line).get("error", line)
    except ValueError:
        p.wait(10)
        return f"client exited {p.returncode}: {line.strip()[:300]}"


def span(results: list[dict]) -> float:
    """Seconds from the first client's start to the last client's end."""
    return max(r["end"] for r in results) - min(r["start"] for r in results)


def percentiles(values: list[float]) -> dict:
    """p50/p90/p99/p99.9/max by nearest rank; ``n`` samples."""
    if not values:
        return {"n": 0}
    s = sorted(values)

    def rank(q: float) -> float:
        return s[min(len(s) - 1, max(0, int(q * len(s) + 0.999999) - 1))]

    return {"n": len(s), "p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99),
            "p999": rank(0.999), "max": s[-1]}


# -- client side ----------------------------------------------------------------------------------


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _ready_and_wait() -> None:
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "GO":
        raise SystemExit(0)


def _producer(spec: dict):
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    conf = {"bootstrap.servers": spec["bootstrap"], "acks": "all", "compression.type": "none",
            "delivery.report.only.error": True, "on_delivery": on_delivery,
            **spec.get("config", {})}
    return Producer(conf), errors


def _warm_up(p, topic: str, partition: int, transactional: bool, errors: list) -> None:
    """One acknowledged record before the barrier: connections, metadata and (idempotent
    producers) the producer id are in place when the measured part starts."""
    p.list_topics(topic, 30)
    if transactional:
        p.begin_transaction()
    p.produce(topic, b"warm-up", partition=partition)
    if transactional:
        p.commit_transaction(60)
    if p.flush(60) or errors:
        raise RuntimeError(f"warm-up record not acknowledged: {errors[:1]}")


def role_produce(spec: dict) -> dict:
    p, errors = _producer(spec)
    topic, partition = spec["topic"], spec["partition"]
    count, value = spec["records"], os.urandom(spec["size"])
    if spec.get("values"):  # bench/values.py's text: every record its own compressible value
        return _produce_values(p, errors, spec)
    txn_s = spec.get("txn_ms", 0) / 1000
    if txn_s:
        p.init_transactions(60)
    _warm_up(p, topic, partition, bool(txn_s), errors)
    _ready_and_wait()
    produce, poll, monotonic = p.produce, p.poll, time.monotonic
    commit_ms = []
    cpu0, t0 = _cpu(), monotonic()
    sent = 0
    if txn_s:
        while sent < count:
            p.begin_transaction()
            close_at = monotonic() + txn_s
            while sent < count:
                try:
                    produce(topic, value, partition=partition)
                except BufferError:
                    poll(0.005)
                    continue
                sent += 1
                if not sent & 255 and monotonic() >= close_at:
                    break
            c0 = monotonic()
            p.commit_transaction(120)
            commit_ms.append((monotonic() - c0) * 1000)
    else:
        while sent < count:
            try:
                produce(topic, value, partition=partition)
            except BufferError:
                poll(0.005)
                continue
            sent += 1
    left = p.flush(300)
    t1 = monotonic()
    result = {"records": sent - left, "bytes": (sent - left) * len(value), "errors": len(errors),
              "first_error": errors[0] if errors else None, "start": t0, "end": t1,
              "cpu_s": _cpu() - cpu0}
    if txn_s:
        result["transactions"] = len(commit_ms)
        result["commit_ms"] = percentiles(commit_ms)
    return result


def _produce_values(p, errors: list, spec: dict) -> dict:
    """Plain produce of ``records`` values cut from the ``values`` file, cycling."""
    from bench.values import values as cut

    topic, partition, count = spec["topic"], spec["partition"], spec["records"]
    pool = cut(spec["size"], Path(spec["values"]))
    _warm_up(p, topic, partition, False, errors)
    _ready_and_wait()
    produce, poll, monotonic = p.produce, p.poll, time.monotonic
    cpu0, t0 = _cpu(), monotonic()
    sent = 0
    for value in itertools.islice(itertools.cycle(pool), count):
        while True:
            try:
                produce(topic, value, partition=partition)
                break
            except BufferError:
                poll(0.005)
        sent += 1
    left = p.flush(300)
    t1 = monotonic()
    size = spec["size"]
    return {"records": sent - left, "bytes": (sent - left) * size, "errors": len(errors),
            "first_error": errors[0] if errors else None, "start": t0, "end": t1,
            "cpu_s": _cpu() - cpu0}


def role_consume(spec: dict) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  **spec.get("config", {})})
    topic = spec["topic"]
    c.list_topics(topic, 30)
    _ready_and_wait()
    cpu0, t0 = _cpu(), time.monotonic()
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in spec["partitions"]])
    want, got, nbytes, errors = spec["records"], 0, 0, 0
    deadline = t0 + spec.get("timeout_s", 600)
    consume = c.consume
    while got < want and time.monotonic() < deadline:
        # consume() waits for as many messages as asked for (or the timeout)
        for m in consume(min(10000, want - got), 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
            else:
                errors += 1
    t1 = time.monotonic()
    cpu = _cpu() - cpu0
    c.close()
    return {"records": got, "bytes": nbytes, "errors": errors, "start": t0, "end": t1,
            "cpu_s": cpu, "complete": got >= want}


def role_tiny_txn(spec: dict) -> dict:
    p, errors = _producer(spec)
    topic, partition = spec["topic"], spec["partition"]
    value = os.urandom(spec.get("size", 100))
    records = spec.get("txn_records", 10)
    p.init_transactions(60)
    _warm_up(p, topic, partition, True, errors)
    _ready_and_wait()
    commit_ms = []
    cpu0, t0 = _cpu(), time.monotonic()
    stop_at = t0 + spec["duration_s"]
    while time.monotonic() < stop_at:
        p.begin_transaction()
        for _ in range(records):
            p.produce(topic, value, partition=partition)
        c0 = time.monotonic()
        p.commit_transaction(60)
        commit_ms.append((time.monotonic() - c0) * 1000)
    t1 = time.monotonic()
    return {"transactions": len(commit_ms), "records": len(commit_ms) * records,
            "errors": len(errors), "start": t0, "end": t1, "cpu_s": _cpu() - cpu0,
            "commit_ms": percentiles(commit_ms)}


STAMP = struct.Struct(">q")
END = b"END"


def role_e2e_produce(spec: dict) -> dict:
    p, errors = _producer(spec)
    topic, rate, duration = spec["topic"], spec["rate"], spec["duration_s"]
    pad = os.urandom(spec["size"] - STAMP.size)
    _warm_up(p, topic, 0, False, errors)
    _ready_and_wait()
    cpu0, t0 = _cpu(), time.monotonic()
    total = int(rate * duration)
    for i in range(total):
        due = t0 + i / rate
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        p.produce(topic, STAMP.pack(time.monotonic_ns()) + pad, partition=0)
        p.poll(0)
    p.produce(topic, END, partition=0)
    p.flush(60)
    t1 = time.monotonic()
    return {"records": total, "errors": len(errors), "start": t0, "end": t1,
            "cpu_s": _cpu() - cpu0}


def role_e2e_consume(spec: dict) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                  "enable.auto.commit": False, **spec.get("config", {})})
    topic = spec["topic"]
    c.assign([TopicPartition(topic, 0, 0)])
    c.poll(1.0)  # the fetcher is running before the producer starts
    _ready_and_wait()
    cpu0, t0 = _cpu(), time.monotonic()
    skip_before = time.monotonic_ns() + int(spec.get("warmup_s", 1.0) * 1e9)
    latencies_ms = []
    deadline = t0 + spec["duration_s"] + 60
    done = False
    while not done and time.monotonic() < deadline:
        m = c.poll(0.5)  # returns as soon as one record is there
        now = time.monotonic_ns()
        if m is None or m.error() is not None:
            continue
        value = m.value()
        if value == END:
            done = True
        elif len(value) >= STAMP.size:
            sent = STAMP.unpack_from(value)[0]
            if sent >= skip_before:
                latencies_ms.append((now - sent) / 1e6)
    t1 = time.monotonic()
    cpu = _cpu() - cpu0
    c.close()
    return {"latency_ms": percentiles(latencies_ms), "complete": done, "start": t0, "end": t1,
            "cpu_s": cpu}


def role_endtxn(spec: dict) -> dict:
    from bench import endtxn_wire

    cpu0 = [0.0]

    def ready() -> None:
        _ready_and_wait()
        cpu0[0] = _cpu()

    out = endtxn_wire.run(spec["bootstrap"], spec["topic"], spec["transactions"],
                          records=spec.get("txn_records", 10), value_size=spec.get("size", 100),
                          transactional_id=spec["transactional_id"], ready=ready)
    latencies = out.pop("latencies_ms")
    out["endtxn_ms"] = percentiles(latencies)
    out["cpu_s"] = _cpu() - cpu0[0]
    return out


def role_request_cost(spec: dict) -> dict:
    """bench/bench_request_cost.py's measure() on the broker whose pid the spec gives; a
    broker that does not serve its requests gives ``{"not_measured": why}``."""
    from bench import bench_request_cost

    _ready_and_wait()
    try:
        return bench_request_cost.measure(spec["bootstrap"], spec["pid"], spec["requests"],
                                          spec["runs"], warm_up=spec["warm_up"])
    except bench_request_cost.Unsupported as e:
        return {"not_measured": str(e)}


ROLES = {"produce": role_produce, "consume": role_consume, "tiny_txn": role_tiny_txn,
         "e2e_produce": role_e2e_produce, "e2e_consume": role_e2e_consume,
         "endtxn": role_endtxn, "request_cost": role_request_cost}


def main() -> None:
    spec = json.loads(sys.argv[1])
    try:
        result = ROLES[spec["role"]](spec)
    except Exception as e:  # noqa: BLE001 - reported to the parent as this client's failure
        print(json.dumps({"role": spec["role"], "error": f"{type(e).__name__}: {e}"}),
              flush=True)
        raise SystemExit(1) from None
    result["role"] = spec["role"]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
