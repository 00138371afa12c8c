"""The broker's cost of one Produce request, apart from its bytes.

    .venv/bin/python bench/bench_request_cost.py [--requests 20000] [--requests-16k N]
        [--runs 3] [--bootstrap HOST:PORT --pid PID] [--durable] [--json FILE]

A raw client (one connection, Kafka frames built with semel's codecs before the clock
starts) sends Produce v11 requests as Java kafka-clients 3.9.1 does at its defaults: acks=all,
one idempotent batch per request (producer id from InitProducerId, sequences in order), at
most 5 requests in flight. Two shapes, alternated run by run:

- ``tiny``: one record of 10 bytes per batch - all of its cost is the request's fixed cost;
- ``16k``: 16 records of 1 KiB (a batch of about 16.5 KB, Java's batch.size).

The broker's CPU time (its process CPU clock: user + system time of every thread, in ns)
over the sent requests gives microseconds per request and, for 16k, seconds per GB of record
values. The fixed cost is what a request costs before its bytes: the tiny shape's CPU per
request; the per-byte cost is the difference to the 16k shape, per KiB. The client is cheap
(pre-encoded frames, responses counted, only the last of a run decoded: no error, and its
base offset says every record before it was appended once), so the broker, not the client,
is what is measured - the output shows both processes' cores.

A broker that does not offer the versions used (ApiVersions: Produce v11, InitProducerId
v4, CreateTopics v7) or refuses the requests raises ``Unsupported`` saying which, so a
caller comparing brokers (bench/run.py's ``request-cost`` workload) can show that instead
of a figure.

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

from bench.broker_throughput import cpu_seconds
from semel.protocol import api
from semel.protocol.records import build_batch
from tests.kafka_wire import API_VERSIONS, KafkaWire, create_topic, message, produce_request

PRODUCE, INIT_PRODUCER_ID, CREATE_TOPICS = 0, 22, 19
PRODUCE_VERSION = 11  # what Java kafka-clients 3.9.1 sends
# (api key, version) of every request measure() sends, for the ApiVersions check
NEEDED = {PRODUCE: PRODUCE_VERSION, INIT_PRODUCER_ID: 4, CREATE_TOPICS: 7}
API_NAMES = {PRODUCE: "Produce", INIT_PRODUCER_ID: "InitProducerId", CREATE_TOPICS: "CreateTopics"}
WARM_UP = 2000  # tiny requests before the first measured run
IN_FLIGHT = 5  # Java's max.in.flight.requests.per.connection
READY = re.compile(rb"ready on (\S+):(\d+)")
SHAPES = {"tiny": (1, 10), "16k": (16, 1024)}  # records per batch, value bytes
_SIZE = struct.Struct(">i")


class Unsupported(RuntimeError):
    """The broker does not serve the requests measured (a version it does not offer, an
    error answer); the message says which, in a few words."""


def start_broker(data_dir: str, durable: bool, *, launcher: tuple[str, ...] = (),
                 module: str = "semel.broker", cwd: Path = ROOT, env: dict | None = None,
                 stderr=None) -> tuple[subprocess.Popen, str]:
    """A broker (``python -m module serve``, behind ``launcher`` such as valgrind) on an
    ephemeral port; (process, bootstrap) once it has printed its ready line."""
    command = [*launcher, sys.executable, "-m", module, "serve", "--port", "0", "--data-dir",
               data_dir, "--log-level", "WARNING"]
    if not durable:
        command += ["--set", "log.flush.mode=none"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd, env=env)
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


def send_all(bootstrap: str, requests: list[bytes]) -> tuple[float, bytes]:
    """Send with at most IN_FLIGHT unanswered; returns the seconds from first send to last
    response and the last response's frame. Responses are counted by their size prefixes,
    not decoded."""
    host, port = bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffer = bytearray()
    sent = answered = 0
    total = len(requests)
    last = b""
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
                answered += 1
                if answered == total:
                    last = bytes(buffer[4:4 + size])
                del buffer[:4 + size]
        return time.perf_counter() - started, last
    finally:
        sock.close()


def check_versions(wire: KafkaWire) -> None:
    """Unsupported unless the broker offers every (api key, version) of ``NEEDED``."""
    offered = {k.api_key: (k.min_version, k.max_version)
               for k in wire.request(API_VERSIONS, 0, message(API_VERSIONS, "request")).api_keys}
    for key, version in NEEDED.items():
        low, high = offered.get(key, (None, None))
        if low is None:
            raise Unsupported(f"{API_NAMES[key]} not offered")
        if not low <= version <= high:
            raise Unsupported(f"{API_NAMES[key]} v{version} not offered (v{low}-{high})")


def check_last(frame: bytes, expected_base_offset: int) -> None:
    """The last Produce response of a run: no error, and the batch appended where every
    record sent before it puts it (none lost, none twice)."""
    if not frame:
        raise RuntimeError("no Produce response")
    _, response = api.decode_response(PRODUCE, PRODUCE_VERSION, frame)
    partition = response.responses[0].partition_responses[0]
    if partition.error_code:
        raise Unsupported(f"Produce v{PRODUCE_VERSION} answered with error code "
                          f"{partition.error_code}")
    if partition.base_offset != expected_base_offset:
        raise RuntimeError(f"last batch at offset {partition.base_offset}, expected "
                           f"{expected_base_offset}: records lost or appended twice")


def measure(bootstrap: str, pid: int, requests_per_run: int | dict[str, int], runs: int, *,
            warm_up: int = WARM_UP) -> dict:
    """``runs`` x (tiny, 16k), alternated, into one new partition from one idempotent
    producer; ``requests_per_run`` is a count for both shapes or one per shape. Returns the
    medians per shape, ``fixed_us_per_request`` and ``per_kib_us``."""
    counts = (requests_per_run if isinstance(requests_per_run, dict)
              else dict.fromkeys(SHAPES, requests_per_run))
    topic = f"request-cost-{os.getpid()}-{int(time.time())}"
    with KafkaWire.connect(bootstrap) as wire:
        check_versions(wire)
        error = create_topic(wire, topic, 1)
        if error:
            raise Unsupported(f"CreateTopics v7 answered with error code {error}")
        response = wire.request(INIT_PRODUCER_ID, 4, message(
            INIT_PRODUCER_ID, "request", transactional_id=None, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        if response.error_code:
            raise Unsupported(f"InitProducerId v4 answered with error code {response.error_code}")
        producer_id, epoch = response.producer_id, response.producer_epoch
    sequence = 0  # = the partition's next offset: one producer, one partition, empty topic
    samples: dict[str, list[dict]] = {shape: [] for shape in SHAPES}
    _, last = send_all(bootstrap, frames(topic, producer_id, epoch, "tiny", warm_up, sequence))
    sequence += warm_up
    check_last(last, sequence - 1)
    for _ in range(runs):
        for shape, (records, size) in SHAPES.items():
            count = counts[shape]
            batch = frames(topic, producer_id, epoch, shape, count, sequence)
            sequence += count * records
            cpu0, client0 = cpu_seconds(pid), time.process_time()
            wall, last = send_all(bootstrap, batch)
            cpu, client = cpu_seconds(pid) - cpu0, time.process_time() - client0
            check_last(last, sequence - records)
            samples[shape].append({
                "us_per_request": cpu / count * 1e6,
                "requests_per_s": count / wall,
                "s_per_gb": cpu / (count * records * size / 1e9),
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
    parser.add_argument("--requests-16k", type=int,
                        help="requests per run of the 16k shape (default: --requests)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--bootstrap", help="a running broker (with --pid)")
    parser.add_argument("--pid", type=int, help="the running broker's process id")
    parser.add_argument("--durable", action="store_true", help="fsync mode (default: none)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    counts = {"tiny": args.requests, "16k": args.requests_16k or args.requests}
    if args.bootstrap:
        if args.pid is None:
            parser.error("--bootstrap needs --pid")
        result = measure(args.bootstrap, args.pid, counts, args.runs)
    else:
        with tempfile.TemporaryDirectory() as d:
            proc, bootstrap = start_broker(str(Path(d) / "data"), args.durable)
            try:
                result = measure(bootstrap, proc.pid, counts, args.runs)
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
