"""The protocol layer's share of one Produce request's fixed cost (plain script).

    .venv/bin/python bench/bench_produce_parse.py            # ns per request, C and Python
    .venv/bin/python bench/bench_produce_parse.py --callgrind  # instructions per request

One tiny Produce v11 frame as Java kafka-clients 3.9.1 sends it (acks=all, one idempotent
batch of one 10-byte record, as bench/bench_request_cost.py builds them), put through the
protocol calls the broker's produce fast path makes per request (broker/handlers/produce.py
``fast_path`` and storage/partition_log.py ``append_client_batch``): ``produce_fast.parse``,
the batch header (``read_header``, else ``BatchHeader``; magic, codec, size, transactional bit), the client
batch checks with the CRC (``is_valid_client_batch``), the record walk
(``validator.quick_summary`` with the topic's timestamp bounds) and the producer's last
sequence. The broker's own work around them (logs, producer state, the response) is not
included.

ns: best of several repeats (other load on the machine only inflates them), per
implementation: the optional C accelerator (protocol/_recordwalk.c) when built, and pure
Python. ``--callgrind``: instructions per request, from valgrind's instruction counts of N
and 2N requests (the difference over N, so start-up cancels), repeatable under load.

2026-11-25, 2-core VM, Python 3.11: the code before the C versions of parse, BatchHeader,
its getters, is_valid_client_batch and quick_summary (pure Python around the C record
walker) took 80,800 instructions and 8.6 us per request; with them 15,700 and 1.6 us (pure
Python alone: 83,400 and 8.8 us).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from semel.protocol import api, produce_fast, records, validator
from semel.protocol.records import build_batch
from tests.kafka_wire import produce_request

PRODUCE, VERSION = 0, 11
BEFORE_MS = 2**63 - 1  # message.timestamp.before.max.ms / after: Kafka's defaults
AFTER_MS = 3_600_000
CAP = 64 * 1024 * 1024


def tiny_frame() -> memoryview:
    """The frame (header included, size prefix not) in a writable buffer, as the broker
    reads it."""
    now = int(time.time() * 1000)
    batch = build_batch([(None, b"0123456789", None, now)], producer_id=1000, producer_epoch=0,
                        base_sequence=42)
    body = produce_request("bench-topic", 0, batch, acks=-1)
    return memoryview(bytearray(api.encode_request(PRODUCE, VERSION, 1, "producer-1", body)))[4:]


def request(frame: memoryview, now: int) -> int:
    """The protocol calls of one request on the fast path; the appended record count."""
    read_header = getattr(records, "read_header", records.BatchHeader)
    parsed = produce_fast.parse(frame, VERSION)
    appended = 0
    for topic in parsed.topics:
        for partition in topic.partitions:
            data = partition.records
            header = read_header(data, 0)
            if (header.magic != 2 or header.compression == 4 and VERSION < 7
                    or 0 < header.size < len(data) or header.is_transactional):
                raise AssertionError("not the fast path's batch")
            if not records.is_valid_client_batch(data, header):
                raise AssertionError("invalid batch")
            summary = validator.quick_summary(
                data, header, require_keys=False,
                timestamp_bounds=(now - BEFORE_MS, now + AFTER_MS), max_uncompressed=CAP)
            if summary is None or header.last_sequence != 42:
                raise AssertionError("not walked")
            appended += summary.record_count
    return appended


def use(accelerated: bool) -> None:
    """Switch every accelerated function between C and pure Python."""
    validator._use_accelerator(accelerated)
    setter = getattr(records, "_use_accelerator", None)
    if setter is not None:
        setter(accelerated)
    setter = getattr(produce_fast, "_use_accelerator", None)
    if setter is not None:
        setter(accelerated)


def loop(n: int, accelerated: bool) -> None:
    use(accelerated)
    frame = tiny_frame()
    now = int(time.time() * 1000)
    for _ in range(n):
        request(frame, now)


def instructions(n: int, accelerated: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                   sys.executable, __file__, "--loop", str(n)]
        if not accelerated:
            command.append("--python")
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        match = re.search(r"Collected : (\d+)", result.stderr)
        return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", type=int, help="(internal) run N requests and exit")
    parser.add_argument("--python", action="store_true", help="(with --loop) pure Python")
    parser.add_argument("--callgrind", action="store_true", help="instructions per request")
    parser.add_argument("-n", type=int, default=2000, help="requests per callgrind run (N)")
    args = parser.parse_args()
    if args.loop is not None:
        loop(args.loop, not args.python)
        return
    kinds = [("C", True)] if validator._recordwalk is not None else []
    kinds.append(("python", False))
    frame = tiny_frame()
    print(f"Produce v{VERSION} frame of {len(frame)} bytes, python {sys.version.split()[0]}")
    if args.callgrind:
        for name, accelerated in kinds:
            per = (instructions(2 * args.n, accelerated) - instructions(args.n, accelerated))
            print(f"{name:7s} {per / args.n:10.0f} instructions/request")
        return
    now = int(time.time() * 1000)
    for name, accelerated in kinds:
        use(accelerated)
        assert request(frame, now) == 1
        number = 20_000
        best = min(timeit.repeat(lambda: request(frame, now), number=number, repeat=9))
        print(f"{name:7s} {best / number * 1e9:10.0f} ns/request")
    use(True)


if __name__ == "__main__":
    main()
