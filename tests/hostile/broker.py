"""The broker under attack: `python -m semel.broker serve` (the real CLI) as a subprocess.

Its output goes straight into `<out>/broker.log` (a file, not a pipe: a broker logging a
warning per hostile connection must never block on a slow reader). The first start binds an
ephemeral port on 127.0.0.1; a restart reuses it and the data directory. `kill()` is
SIGKILL. `RssSampler` reads VmRSS (and the kernel's peak, VmHWM) from /proc/<pid>/status.
`scan_log` finds ERROR lines and tracebacks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"ready on (\S+):(\d+)")


class BrokerProc:
    def __init__(self, data_dir: Path, log_path: Path, overrides: dict[str, str]) -> None:
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.overrides = dict(overrides)
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.exits: list[str] = []  # exits we did not cause

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self, timeout: float = 60.0) -> None:
        args = [sys.executable, "-m", "semel.broker", "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            args += ["--set", f"{k}={v}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        deadline = time.monotonic() + timeout
        while True:
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                log.write(f"---- start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n"
                          .encode())
                log.flush()
                self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                             env=env, cwd=ROOT)
            port = self._wait_ready(offset, deadline)
            if port is not None:
                self.port = port
                self.starts += 1
                return
            tail = self._tail_from(offset)
            self.kill()
            if time.monotonic() > deadline or "in use" not in tail:
                raise RuntimeError(f"broker did not become ready:\n{tail[-3000:]}")
            time.sleep(0.2)  # the old socket may linger for a moment after a SIGKILL

    def _wait_ready(self, offset: int, deadline: float) -> int | None:
        while time.monotonic() < deadline:
            m = READY.search(self._tail_from(offset))
            if m:
                return int(m.group(2))
            if self.proc.poll() is not None:
                return None
            time.sleep(0.05)
        return None

    def _tail_from(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read(1 << 20).decode(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def proc_status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class RssSampler:
    """Samples the broker's VmRSS every `interval_s`; tracks the peak per phase and overall
    (and VmHWM, the kernel's own peak, read whenever a sample is taken). `on_sample(mib)`
    lets the runner act on runaway memory."""

    def __init__(self, broker: BrokerProc, interval_s: float = 0.25, on_sample=None) -> None:
        self.broker = broker
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.phase = "start"
        self.peak_kib: Counter = Counter()  # phase -> peak VmRSS
        self.hwm_kib = 0
        self.timeline: list[tuple[float, str, int]] = []  # (t, phase, rss MiB) every ~2 s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._started = time.monotonic()

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def sample_now(self) -> int | None:
        pid = self.broker.pid
        if pid is None or not self.broker.alive():
            return None
        rss = proc_status_kib(pid, "VmRSS")
        hwm = proc_status_kib(pid, "VmHWM")
        if hwm is not None:
            self.hwm_kib = max(self.hwm_kib, hwm)
        if rss is not None:
            self.peak_kib[self.phase] = max(self.peak_kib[self.phase], rss)
        return rss

    def _run(self) -> None:
        last_mark = 0.0
        while not self._stop.wait(self.interval_s):
            rss = self.sample_now()
            if rss is None:
                continue
            now = time.monotonic() - self._started
            if now - last_mark >= 2.0:
                self.timeline.append((round(now, 1), self.phase, rss // 1024))
                last_mark = now
            if self.on_sample is not None:
                self.on_sample(rss / 1024)

    @property
    def peak_mib(self) -> float:
        return max([self.hwm_kib, *self.peak_kib.values()], default=0) / 1024


_LINE = re.compile(r"^\S+ \S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+): (.*)$")
_NOISE = re.compile(r"127\.0\.0\.\d+:\d+|\d+")


def scan_log(path: Path, max_examples: int = 8) -> dict:
    """ERROR/CRITICAL lines and tracebacks in the broker's log, and the most frequent
    WARNING messages (numbers and addresses masked)."""
    errors: list[str] = []
    tracebacks = 0
    error_lines = 0
    warnings: Counter = Counter()
    levels: Counter = Counter()
    traceback_examples: list[str] = []
    if not path.exists():
        return {}
    with open(path, errors="replace") as f:
        current_tb: list[str] | None = None
        prev = ""
        for line in f:
            if current_tb is not None:
                if line.startswith((" ", "Traceback", "\t")) or not _LINE.match(line) and \
                        not line.startswith("----"):
                    if len(current_tb) < 40:
                        current_tb.append(line.rstrip())
                    continue
                if len(traceback_examples) < max_examples:
                    traceback_examples.append("\n".join(current_tb))
                current_tb = None
            if line.startswith("Traceback"):
                tracebacks += 1
                current_tb = [prev.rstrip()[:300], line.rstrip()]
                continue
            m = _LINE.match(line)
            if not m:
                continue
            prev = line  # the log record a traceback below belongs to
            level, logger, msg = m.groups()
            levels[level] += 1
            if level in ("ERROR", "CRITICAL"):
                error_lines += 1
                if len(errors) < 200:
                    errors.append(f"{level} {logger}: {msg}"[:300])
            elif level == "WARNING":
                warnings[f"{logger}: {_NOISE.sub('N', msg)[:120]}"] += 1
        if current_tb is not None and len(traceback_examples) < max_examples:
            traceback_examples.append("\n".join(current_tb))
    distinct: Counter = Counter(_NOISE.sub("N", e) for e in errors)
    return {"levels": dict(levels), "error_lines": error_lines, "tracebacks": tracebacks,
            "errors": [f"{n}x {e}" for e, n in distinct.most_common(max_examples)],
            "traceback_examples": traceback_examples,
            "top_warnings": [f"{n}x {w}" for w, n in warnings.most_common(max_examples)]}
