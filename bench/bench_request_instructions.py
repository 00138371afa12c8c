"""Instructions the broker executes per Produce request (or per tiny transaction), counted
by callgrind.

    .venv/bin/python bench/bench_request_instructions.py [--txn] [--requests N]
        [--warm-up N] [--durable] [--root DIR] [--keep DIR] [--repeat N]

CPU-time benchmarks (bench/bench_request_cost.py) move with the machine's load; the count
of instructions does not, so a change of a few per cent per request shows. The broker is
the real one: ``python -m semel.broker serve`` (uvloop, the Dispatcher, the produce fast
path, the log, log.flush.mode=none, or the default fsync mode with ``--durable``) under
``valgrind --tool=callgrind`` - only the broker: the client is this process, not traced.
The client is bench_request_cost's: pre-encoded Produce v11 frames as Java kafka-clients
sends them (acks=all, one idempotent batch of one 10-byte record per request, at most 5 in
flight), over a loopback socket. ``--txn``: per tiny transaction instead, the client
bench/endtxn_wire.py's (the classic flow, as librdkafka runs it: AddPartitionsToTxn v3 ->
Produce v9 with one transactional batch of 10 records of 100 B -> EndTxn v3 commit, back to
back on one connection after one InitProducerId), so the count covers the transaction
coordinator, its markers and its COMPLETE_* record; each figure also says how many
CONCURRENT_TRANSACTIONS retries the client needed (they cost instructions too).

Start-up and shut-down cost the same whatever the number of requests, so the broker runs
twice: ``warm-up + N`` and ``warm-up + 2N`` requests; (instructions of the second -
instructions of the first) / N is the cost of one request in steady state. The kernel's
part (socket writes, pwrite, fdatasync) is not counted - callgrind sees user space only.
The runs take about a minute each (Python under callgrind runs ~50x slower; the start-up
is most of it); ``--repeat`` runs the pair again and prints each figure and the median.

``--root DIR``: the broker of another tree (e.g. a snapshot ``git archive HEAD | tar -x``)
with that tree's packages first on PYTHONPATH (bench/brokers.py's ``import_root``), for
before/after figures on the same harness. ``--keep DIR``: keep the callgrind files
(``callgrind_annotate`` shows where the instructions went, by C function: the interpreter,
uvloop, crc32c, the record walker) and each run's stderr (valgrind's and the broker's log,
``*.log``). PYTHONHASHSEED is fixed so that two runs hash alike; two runs of the same tree
agree within about 0.1%. Byte-compile first (``python -m compileall``; the machine may set
PYTHONDONTWRITEBYTECODE), or every run compiles the edited modules again - the same in both
runs of a pair, so it cancels, but it makes them slower.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import endtxn_wire
from bench.bench_request_cost import check_last, frames, send_all
from bench.bench_request_cost import start_broker as start_broker_process
from bench.brokers import import_root
from semel.protocol import api
from tests.kafka_wire import KafkaWire, create_topic, message

INIT_PRODUCER_ID = 22
_TOTALS = re.compile(rb"^(?:totals|summary):\s*(\d+)", re.MULTILINE)


def start_broker(root: Path, data_dir: str, durable: bool,
                 out_file: Path) -> tuple[subprocess.Popen, str]:
    """The broker of ``root`` under callgrind; (process, bootstrap) once it is ready."""
    path, prefix = import_root(root)
    env = dict(os.environ, PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join([str(path), *filter(None, [env.get("PYTHONPATH")])])
    launcher = ("valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}",
                "--trace-children=no")
    with open(out_file.with_name(out_file.name + ".log"), "wb") as log:  # valgrind's, the broker's
        return start_broker_process(data_dir, durable, launcher=launcher,
                                    module=prefix + "broker", cwd=root, env=env, stderr=log)


def produce(bootstrap: str, warm_up: int, count: int) -> None:
    """A topic, a producer id, ``warm_up`` then ``count`` tiny requests (checked)."""
    topic = "instructions"
    with KafkaWire.connect(bootstrap) as wire:
        if create_topic(wire, topic, 1):
            raise RuntimeError("CreateTopics failed")
        response = wire.request(INIT_PRODUCER_ID, 4, message(
            INIT_PRODUCER_ID, "request", transactional_id=None, transaction_timeout_ms=60_000,
            producer_id=-1, producer_epoch=-1))
        if response.error_code:
            raise RuntimeError(f"InitProducerId failed: {response.error_code}")
        producer_id, epoch = response.producer_id, response.producer_epoch
    requests = frames(topic, producer_id, epoch, "tiny", warm_up + count, 0)
    _, last = send_all(bootstrap, requests[:warm_up])
    check_last(last, warm_up - 1)
    _, last = send_all(bootstrap, requests[warm_up:])
    check_last(last, warm_up + count - 1)


def transact(bootstrap: str, warm_up: int, count: int) -> int:
    """--txn: a topic, then ``warm_up`` and ``count`` committed transactions
    (bench/endtxn_wire.py's) under two transactional ids; returns the retries the client
    needed (CONCURRENT_TRANSACTIONS on the AddPartitionsToTxn after an EndTxn)."""
    topic = "instructions"
    with KafkaWire.connect(bootstrap) as wire:
        if create_topic(wire, topic, 1):
            raise RuntimeError("CreateTopics failed")
    retries = endtxn_wire.run(bootstrap, topic, warm_up,
                              transactional_id="warm-up")["add_partitions_retries"]
    return retries + endtxn_wire.run(bootstrap, topic, count,
                                     transactional_id="measured")["add_partitions_retries"]


def instructions(root: Path, durable: bool, warm_up: int, count: int, out_file: Path,
                 drive=produce) -> tuple[int, int | None]:
    """Instructions of one broker run serving ``warm_up + count`` requests (or transactions:
    ``drive``), and what ``drive`` returned."""
    with tempfile.TemporaryDirectory(prefix="semel-instr-") as d:
        proc, bootstrap = start_broker(root, str(Path(d) / "data"), durable, out_file)
        try:
            driven = drive(bootstrap, warm_up, count)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=300)
    found = _TOTALS.search(out_file.read_bytes())
    if found is None:
        raise RuntimeError(f"no totals in {out_file}")
    return int(found.group(1)), driven


def per_request(root: Path, durable: bool, warm_up: int, count: int, work: Path,
                tag: str, drive=produce) -> tuple[float, list]:
    """(instructions per request or transaction, what each ``drive`` returned)."""
    small, a = instructions(root, durable, warm_up, count, work / f"callgrind.{tag}.n", drive)
    large, b = instructions(root, durable, warm_up, 2 * count, work / f"callgrind.{tag}.2n",
                            drive)
    return (large - small) / count, [a, b]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txn", action="store_true",
                        help="per tiny transaction (default: per Produce request)")
    parser.add_argument("--requests", type=int,
                        help="N, requests or transactions (the runs: N and 2N; 2000, --txn 300)")
    parser.add_argument("--warm-up", type=int, help="500, --txn 100")
    parser.add_argument("--durable", action="store_true", help="fsync mode (default: none)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the tree whose broker runs")
    parser.add_argument("--keep", type=Path, help="keep the callgrind files here")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed")
    api.codec(0, "request")  # fail here, not in a broker run, if the codecs do not load
    drive, unit = (transact, "transaction") if args.txn else (produce, "request")
    count = args.requests or (300 if args.txn else 2000)
    warm_up = args.warm_up or (100 if args.txn else 500)
    work = args.keep or Path(tempfile.mkdtemp(prefix="semel-instr-"))
    work.mkdir(parents=True, exist_ok=True)
    mode = "durable" if args.durable else "none"
    figures = []
    try:
        for i in range(args.repeat):
            figure, driven = per_request(args.root.resolve(), args.durable, warm_up, count,
                                         work, f"{mode}.{i}", drive)
            figures.append(figure)
            retries = f" ({sum(driven)} client retries)" if args.txn else ""
            print(f"{mode}: {figure:,.0f} instructions/{unit}{retries}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if len(figures) > 1:
        print(f"{mode}: median {statistics.median(figures):,.0f} instructions/{unit}")


if __name__ == "__main__":
    main()
