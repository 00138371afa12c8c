"""Start-up of a broker process: exec of ``python -m semel.broker serve`` to its ``ready``
line, and the idle resident set size of the ready broker (``VmRSS`` of /proc/PID/status).

    .venv/bin/python bench/bench_startup.py [--runs 20] [--importtime]
    .venv/bin/python bench/bench_startup.py --callgrind [--top 25] [--keep DIR]

Each run starts a fresh broker on an empty data directory (``log.flush.mode=none``, port 0),
waits for ``ready``, reads its RSS, and stops it with SIGTERM. Prints median and p90 in
milliseconds and MiB. ``--importtime`` also prints the 15 slowest imports (cumulative) of one
extra start (``-X importtime``) made before its ready line; imports after it (a background
task's, say) are left out. Byte-compile first where PYTHONDONTWRITEBYTECODE is set
(``python -m compileall -q broker protocol storage coordinator``), or start-up includes
compiling.

``--callgrind``: instead of the timed runs, the instructions of one start, exec to ready, counted
by ``valgrind --tool=callgrind`` (wall-clock figures swing by 20% on a busy machine; this count
moves by about 0.1% between runs of the same tree). The process is ``python -c LAUNCHER serve
...`` with the same arguments: the launcher runs ``semel.broker`` as ``-m`` does (runpy) with
stdout wrapped, and ends the process (``os._exit``) once the ready line is written, so nothing
after ready is counted and the broker has no benchmark-only code path. PYTHONHASHSEED is fixed
so that two runs hash alike. ``--top N`` also prints the N C functions with the most
instructions, inclusive of their callees (``callgrind_annotate --inclusive=yes``: mostly the
interpreter's, naming the import machinery, the compiler and unmarshal, uvloop, ...);
``--keep DIR`` keeps the callgrind file. Python-level attribution comes from ``--importtime``
or cProfile, not from this count."""

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
_TOTALS = re.compile(rb"^(?:totals|summary):\s*(\d+)", re.MULTILINE)

_LAUNCHER = """
import os, runpy, sys

class Out:
    def __init__(self, out):
        self.out = out
    def write(self, text):
        self.out.write(text)
        if text.startswith("semel ready on "):
AT_READY
        return len(text)
    def flush(self):
        self.out.flush()

sys.stdout = Out(sys.stdout)
sys.argv[0] = "semel.broker"
runpy.run_module("semel.broker", run_name="__main__", alter_sys=True)
"""


def launcher_source(*at_ready: str) -> str:
    """Source for ``python -c SOURCE serve ...``: ``python -m semel.broker`` as ``-m`` runs it
    (runpy), its stdout wrapped so that the statements ``at_ready`` run once the ready line is
    written (``self.out``: the real stdout; ``os`` and ``sys`` are imported). The broker has no
    such code path. tests/broker/test_startup_imports.py uses it too."""
    return _LAUNCHER.replace("AT_READY", "\n".join(" " * 12 + line for line in at_ready))


# ends the process once the ready line is written (--callgrind: nothing after ready counted)
LAUNCHER = launcher_source("self.out.flush()", "os._exit(0)")


def _command(data_dir: str, *extra: str, launcher: tuple[str, ...] = ("-m", "semel.broker"),
             ) -> list[str]:
    return [sys.executable, *extra, *launcher, "serve", "--port", "0",
            "--data-dir", data_dir, "--set", "log.flush.mode=none", "--log-level", "WARNING"]


def instructions_to_ready(keep: Path | None = None, top: int = 0) -> int:
    """Instructions of one start, exec to ready, under callgrind (see the docstring); with
    ``top``, also prints the ``top`` C functions by inclusive count."""
    with tempfile.TemporaryDirectory() as d:
        out = (keep or Path(d)) / "callgrind.startup"
        out.parent.mkdir(parents=True, exist_ok=True)
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                   *_command(str(Path(d) / "data"), launcher=("-c", LAUNCHER))]
        env = dict(os.environ, PYTHONHASHSEED="0")
        done = subprocess.run(command, capture_output=True, env=env, timeout=600, check=False)
        if done.returncode or not READY.search(done.stdout):
            raise RuntimeError(f"no ready line (exit {done.returncode}): {done.stdout!r} "
                               f"{done.stderr[-2000:]!r}")
        found = _TOTALS.search(out.read_bytes())
        if found is None:
            raise RuntimeError(f"no totals in {out}")
        if top:
            report = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)],
                                    capture_output=True, text=True, check=True).stdout
            rows = [line for line in report.splitlines()
                    if re.match(r"\s*[\d,]+ \(", line)][1:top + 1]  # first row: the total
            print("\n".join(rows))
        return int(found.group(1))


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
    parser.add_argument("--callgrind", action="store_true",
                        help="instructions of one start, exec to ready (valgrind)")
    parser.add_argument("--top", type=int, default=0, metavar="N",
                        help="with --callgrind: the N C functions with the most instructions")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="with --callgrind: keep the callgrind file here")
    args = parser.parse_args()
    if args.callgrind:
        print(f"exec -> ready   {instructions_to_ready(args.keep, args.top):,} instructions")
        return
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
