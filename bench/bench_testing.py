"""Speed of the test kit (docs/TESTING.md): a fixture broker's start to ready and stop, in
process and as a subprocess, and what the pytest plugin adds to an empty test run.

    .venv/bin/python bench/bench_testing.py [--runs N]

Prints medians (and min/max) in milliseconds. Byte-compile first (the Makefile's targets
do) where PYTHONDONTWRITEBYTECODE is set, or start-up includes compiling."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def summary(name: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    print(f"{name:<44} median {statistics.median(ms):8.1f} ms   "
          f"(min {min(ms):.1f}, max {max(ms):.1f}, n={len(ms)})")


def thread_broker(runs: int) -> None:
    from semel.broker.testing import TEST_DEFAULTS, BrokerThread

    starts, stops = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            broker = BrokerThread(Path(d) / "data", dict(TEST_DEFAULTS))
            t0 = time.perf_counter()
            broker.start()
            t1 = time.perf_counter()
            broker.stop()
            t2 = time.perf_counter()
            starts.append(t1 - t0)
            stops.append(t2 - t1)
    summary("in-process broker: start to ready", starts)
    summary("in-process broker: stop", stops)


def process_broker(runs: int) -> None:
    from semel.broker.testing import BrokerProcess

    starts, stops = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            broker = BrokerProcess(Path(d) / "data", {"log.flush.mode": "none"})
            t0 = time.perf_counter()
            broker.start()
            t1 = time.perf_counter()
            broker.stop()
            t2 = time.perf_counter()
            starts.append(t1 - t0)
            stops.append(t2 - t1)
    summary("subprocess broker: exec to ready", starts)
    summary("subprocess broker: SIGTERM to exit", stops)


def pytest_runs(runs: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        Path(d, "test_empty.py").write_text("def test_empty():\n    pass\n")
        Path(d, "test_broker.py").write_text(
            "def test_broker(semel_broker):\n    assert semel_broker.bootstrap\n")
        cases = {
            "pytest, empty test, plugin disabled": ["-p", "no:semel", "test_empty.py"],
            "pytest, empty test, plugin loaded": ["test_empty.py"],
            "pytest, one test using semel_broker": ["test_broker.py"],
        }
        for name, args in cases.items():
            samples = []
            for _ in range(runs):
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                *args], cwd=d, check=True, capture_output=True)
                samples.append(time.perf_counter() - t0)
            summary(name, samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    thread_broker(runs)
    process_broker(runs)
    pytest_runs(max(3, runs // 2))


if __name__ == "__main__":
    main()
