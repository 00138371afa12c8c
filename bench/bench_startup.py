"""Start-up of a broker process: exec of ``python -m semel.broker serve`` to its ``ready``
line, and the idle resident set size of the ready broker (``VmRSS`` of /proc/PID/status).

    .venv/bin/python bench/bench_startup.py [--runs 20] [--importtime]

Each run starts a fresh broker on an empty data directory (``log.flush.mode=none``, port 0),
waits for ``ready``, reads its RSS, and stops it with SIGTERM. Prints median and p90 in
milliseconds and MiB. ``--importtime`` also prints the 15 slowest imports (cumulative) of one
extra start (``-X importtime``) made before its ready line; imports after it (a background
task's, say) are left out. Byte-compile first where PYTHONDONTWRITEBYTECODE is set
(``python -m compileall -q broker protocol storage coordinator``), or start-up includes
compiling."""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY = re.compile(rb"ready on (\S+):(\d+)")


def _command(data_dir: str, *extra: str) -> list[str]:
    return [sys.executable, *extra, "-m", "semel.broker", "serve", "--port", "0",
            "--data-dir", data_dir, "--set", "log.flush.mode=none", "--log-level", "WARNING"]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def one_start(extra: tuple[str, ...] = ()) -> tuple[float, float, bytes]:
    """(seconds exec -> ready, idle RSS in MiB, stderr)."""
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        proc = subprocess.Popen(_command(str(Path(d) / "data"), *extra),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = proc.stdout.readline()
            elapsed = time.perf_counter() - t0
            if not READY.search(line):
                raise RuntimeError(f"no ready line: {line!r} {proc.stderr.read()!r}")
            time.sleep(0.2)  # idle: whatever the loop does right after ready has happened
            rss = _rss_kib(proc.pid) / 1024
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    return elapsed, rss, err


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--importtime", action="store_true")
    args = parser.parse_args()
    one_start()  # warm the page cache
    times, rss = [], []
    for _ in range(args.runs):
        t, r, _ = one_start()
        times.append(t * 1000)
        rss.append(r)
    print(f"exec -> ready   median {statistics.median(times):6.1f} ms   "
          f"p90 {_pct(times, 0.9):6.1f} ms   (min {min(times):.1f}, max {max(times):.1f}, "
          f"n={len(times)})")
    print(f"idle RSS        median {statistics.median(rss):6.1f} MiB  "
          f"p90 {_pct(rss, 0.9):6.1f} MiB")
    if args.importtime:
        for cum, name in sorted(imports_before_ready(), reverse=True)[:15]:
            print(f"{cum / 1000:8.1f} ms  {name}")


def imports_before_ready() -> list[tuple[int, str]]:
    """(cumulative microseconds, name) of each import a start makes before its ready line:
    ``-X importtime`` writes to stderr, merged here into stdout so that the order holds."""
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(_command(str(Path(d) / "data"), "-X", "importtime"),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        rows = []
        try:
            for line in proc.stdout:
                if READY.search(line):
                    return rows
                m = re.match(rb"import time:\s+(\d+) \|\s+(\d+) \| (.*)", line)
                if m:
                    rows.append((int(m.group(2)), m.group(3).decode().rstrip()))
            raise RuntimeError("no ready line")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)


if __name__ == "__main__":
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("(PYTHONDONTWRITEBYTECODE is set: byte-compile first, see the docstring)",
              file=sys.stderr)
    main()
