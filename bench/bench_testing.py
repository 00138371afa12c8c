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


def start_stop(name: str, make, runs: int) -> None:
    """Median start-to-ready and stop of ``runs`` brokers ``make(data_dir)`` builds."""
    starts, stops = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            broker = make(Path(d) / "data")
            t0 = time.perf_counter()
            broker.start()
            t1 = time.perf_counter()
            broker.stop()
            t2 = time.perf_counter()
            starts.append(t1 - t0)
            stops.append(t2 - t1)
    summary(f"{name}: start to ready", starts)
    summary(f"{name}: stop", stops)


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
    from semel.broker.testing import TEST_DEFAULTS, BrokerProcess, BrokerThread

    start_stop("in-process broker", lambda d: BrokerThread(d, dict(TEST_DEFAULTS)), runs)
    start_stop("subprocess broker (exec)", lambda d: BrokerProcess(d, {"log.flush.mode": "none"}),
               runs)
    pytest_runs(max(3, runs // 2))


if __name__ == "__main__":
    main()
