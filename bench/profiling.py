"""py-spy around one workload, and a text summary of the hottest frames.

``PySpy(pid, raw_path)`` records the process with ``py-spy record --format raw`` (collapsed
stacks: ``frame;frame;...;leaf count`` per line, frames as ``function (file:line)``) until
``stop()`` sends SIGINT. ``summarize(raw_path)`` folds line numbers away and lists the
functions with the most samples on top of the stack ("self") and anywhere in it
("total"), as shares of all samples; idle threads (waiting in epoll) are not sampled.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def py_spy_path() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


class PySpy:
    def __init__(self, pid: int, raw_path: Path, *, rate: int = 100) -> None:
        exe = py_spy_path()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
        self.raw_path = raw_path
        self.log = open(raw_path.with_suffix(".log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate),
             "--output", str(raw_path)], stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _short(frame: str) -> str:
    """``append (/x/y/storage/partition_log.py:120)`` -> ``append (storage/partition_log.py)``."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    root = str(ROOT) + "/"
    if path.startswith(root):
        path = path[len(root):]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python" in path:
        path = "stdlib/" + path.split("/lib/python", 1)[1].split("/", 1)[-1]
    return f"{name} ({path})" if where else name


def summarize(raw_path: Path, top: int = 20) -> str:
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = 0
    for line in raw_path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_short(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        samples += n
        self_counts[frames[-1]] += n
        for f in set(frames):
            total_counts[f] += n
    if not samples:
        return f"no samples in {raw_path.name}\n"
    out = [f"{samples} samples (non-idle) from {raw_path.name}", "",
           f"top {top} by self time (leaf frame):"]
    out += [f"  {100 * n / samples:5.1f}%  {f}" for f, n in self_counts.most_common(top)]
    out += ["", f"top {top} by total time (frame anywhere on the stack):"]
    out += [f"  {100 * n / samples:5.1f}%  {f}" for f, n in total_counts.most_common(top)]
    return "\n".join(out) + "\n"
