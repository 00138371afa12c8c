"""The broker's cost of one Produce request, apart from its bytes.

    .venv/bin/python bench/bench_request_cost.py [--requests 20000] [--runs 3]
        [--bootstrap HOST:PORT --pid PID] [--durable] [--json FILE]

A raw client (one connection, Kafka frames built with semel's codecs before the clock
starts) sends Produce v11 requests as Java kafka-clients 3.9.1 does at its defaults: acks=all,
one idempotent batch per request (producer id from InitProducerId, sequences in order), at
most 5 requests in flight. Two shapes, alternated run by run:

- ``tiny``: one record of 10 bytes per batch - all of its cost is the request's fixed cost;
- ``16k``: 16 records of 1 KiB (a batch of about 16.5 KB, Java's batch.size).

The broker's CPU time (utime + stime of /proc/PID/stat, every thread) over the sent requests
gives microseconds per request and, for 16k, seconds per GB of record values. The fixed cost
is what a request costs before its bytes: the tiny shape's CPU per request; the per-byte
cost is the difference to the 16k shape, per KiB. The client is cheap (pre-encoded frames,
responses counted, not decoded), so the broker, not the client, is what is measured - the
output shows both processes' cores.

By default a fresh broker (``python -m semel.broker serve``, log.flush.mode=none unless
``--durable``) is started and stopped; ``--bootstrap`` with ``--pid`` measures a running
broker (a peer, for instance) whose process id is given.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from semel.protocol import api
from semel.protocol.records import build_batch
from tests.kafka_wire import KafkaWire, create_topic, message, produce_request

PRODUCE, INIT_PRODUCER_ID = 0, 22
PRODUCE_VERSION = 11  # what Java kafka-clients 3.9.1 sends
IN_FLIGHT = 5  # Java's max.in.flight.requests.per.connection
READY = re.compile(rb"ready on (\S+):(\d+)")
SHAPES = {"tiny": (1, 10), "16k": (16, 1024)}  # records per batch, value bytes
_SIZE = struct.Struct(">i")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, every thread, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def start_broker(data_dir: str, durable: bool) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "semel.broker", "serve", "--port", "0", "--data-dir",
               data_dir, "--log-level", "WARNING"]
    if not durable:
        command += ["--set", "log.flush.mode=none"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT)
    line = proc.stdout.readline()
    found = READY.search(line)
    if not found:
        proc.kill()
        raise RuntimeError(f"the broker did not start: {line!r}")
    return proc, f"{found.group(1).decode()}:{found.group(2).decode()}"


def frames(topic: str, producer_id: int, epoch: int, shape: str, count: int,
           first_sequence: int) -> list[bytes]:
    """``count`` Produce request frames, one batch each, sequences from ``first_sequence``."""
    records, size = SHAPES[shape]
    value = os.urandom(size)
    now = int(time.time() * 1000)
    out = []
    for i in range(count):
        batch = build_batch([(None, value, None, now)] * records, producer_id=producer_id,
                            producer_epoch=epoch, base_sequence=first_sequence + i * records)
        body = produce_request(topic, 0, batch, acks=-1)
        out.append(bytes(api.encode_request(PRODUCE, PRODUCE_VERSION, i, "producer-1", body)))
    return out


def send_all(bootstrap: str, requests: list[bytes]) -> float:
    """Send with at most IN_FLIGHT unanswered; returns the seconds from first send to last
    response. Responses are counted by their size prefixes, not decoded."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray()
    sent = answered = 0
    total = len(requests)
    started = time.perf_counter()
    try:
        while answered < total:
            while sent < total and sent - answered < IN_FLIGHT:
                sock.sendall(requests[sent])
                sent += 1
            chunk = sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buffer += chunk
            while len(buffer) >= 4:
                (size,) = _SIZE.unpack_from(buffer)
                if len(buffer) < 4 + size:
                    break
                del buffer[:4 + size]
                answered += 1
        return time.perf_counter() - started
    finally:
        sock.close()


def measure(bootstrap: str, pid: int, requests_per_run: int, runs: int) -> dict:
    topic = f"request-cost-{os.getpid()}-{int(time.time())}"
    with KafkaWire.connect(bootstrap) as wire:
        create_topic(wire, topic, 1)
        response = wire.request(INIT_PRODUCER_ID, 4, message(
            INIT_PRODUCER_ID, "request", transactional_id=None, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        producer_id, epoch = response.producer_id, response.producer_epoch
    sequence = 0
    samples: dict[str, list[dict]] = {shape: [] for shape in SHAPES}
    send_all(bootstrap, frames(topic, producer_id, epoch, "tiny", 2000, sequence))  # warm up
    sequence += 2000
    for _ in range(runs):
        for shape, (records, size) in SHAPES.items():
            batch = frames(topic, producer_id, epoch, shape, requests_per_run, sequence)
            sequence += requests_per_run * records
            cpu0, client0 = cpu_seconds(pid), time.process_time()
            wall = send_all(bootstrap, batch)
            cpu, client = cpu_seconds(pid) - cpu0, time.process_time() - client0
            samples[shape].append({
                "us_per_request": cpu / requests_per_run * 1e6,
                "requests_per_s": requests_per_run / wall,
                "s_per_gb": cpu / (requests_per_run * records * size / 1e9),
                "broker_cores": cpu / wall, "client_cores": client / wall})
    result = {shape: {key: statistics.median(s[key] for s in runs_)
                      for key in runs_[0]} for shape, runs_ in samples.items()}
    tiny, big = result["tiny"], result["16k"]
    result["fixed_us_per_request"] = tiny["us_per_request"]
    result["per_kib_us"] = ((big["us_per_request"] - tiny["us_per_request"])
                            / (SHAPES["16k"][0] * SHAPES["16k"][1] / 1024))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="requests per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap", help="a running broker (with --pid)")
    parser.add_argument("--pid", type=int, help="the running broker's process id")
    parser.add_argument("--durable", action="store_true", help="fsync mode (default: none)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    if args.bootstrap:
        if args.pid is None:
            parser.error("--bootstrap needs --pid")
        result = measure(args.bootstrap, args.pid, args.requests, args.runs)
    else:
        with tempfile.TemporaryDirectory() as d:
            proc, bootstrap = start_broker(str(Path(d) / "data"), args.durable)
            try:
                result = measure(bootstrap, proc.pid, args.requests, args.runs)
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
    for shape in SHAPES:
        r = result[shape]
        print(f"{shape:>5}: {r['us_per_request']:7.1f} us/request  "
              f"{r['requests_per_s']:8.0f} requests/s  {r['s_per_gb']:6.2f} s/GB  "
              f"broker {r['broker_cores']:.2f} / client {r['client_cores']:.2f} cores")
    print(f"fixed cost {result['fixed_us_per_request']:.1f} us/request, "
          f"per KiB {result['per_kib_us']:.2f} us")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
