"""py-spy around one workload, and a text summary of the hottest frames.

``PySpy(pid, raw_path)`` records the process with ``py-spy record --native --format raw``
(collapsed stacks: ``frame;frame;...;leaf count`` per line, frames as ``function
(file:line)``, native ones from C files or as ``0xADDR (library)``) until ``stop()`` sends
SIGINT. ``summarize(raw_path)`` drops idle samples (the event loop in epoll, pool threads
waiting for work: py-spy's own idle detection does not see them here) and lists, as shares
of the busy samples, the deepest Python lines with the native code they were in ("self")
and the Python functions anywhere on the stack ("total").
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
    def __init__(self, pid: int, raw_path: Path, *, rate: int = 250, native: bool = True) -> None:
        exe = py_spy_path()
        if exe is None:
            raise RuntimeError("py-spy is not installed (pip install -e '.[bench]')")
        self.raw_path = raw_path
        self.log = open(raw_path.with_suffix(".log"), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate),
             "--output", str(raw_path), *(["--native"] if native else [])],
            stdout=self.log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def _split(frame: str) -> tuple[str, str]:
    """``name (where)`` -> (name, where), where keeps ``file:line``."""
    name, _, where = frame.partition(" (")
    return name, where.removesuffix(")")


def _is_python(frame: str) -> bool:
    where = _split(frame)[1].rsplit(":", 1)[0]
    return where.endswith(".py") or where.startswith("<")


def _short(frame: str, keep_line: bool = False) -> str:
    """``append (/x/y/storage/partition_log.py:120)`` -> ``append (storage/partition_log.py)``."""
    name, where = _split(frame)
    path, _, line = where.rpartition(":") if ":" in where else (where, "", "")
    root = str(ROOT) + "/"
    if path.startswith(root):
        path = path[len(root):]
    elif "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python" in path:
        path = "stdlib/" + path.split("/lib/python", 1)[1].split("/", 1)[-1]
    if keep_line and line:
        path = f"{path}:{line}"
    return f"{name} ({path})" if where else name


def _native_leaf(frames: list[str]) -> str | None:
    """The innermost native frame under the deepest Python frame, named by symbol or library."""
    if _is_python(frames[-1]):
        return None
    for frame in reversed(frames):
        if _is_python(frame):
            break
        name, _where = _split(frame)
        if not name.startswith("0x"):
            return name
    return _split(frames[-1])[1] or "native"


ENTRY_FRAMES = {"_run_module_as_main (<frozen runpy>)", "_run_code (<frozen runpy>)",
                "<module> (broker/__main__.py)", "main (broker/cli.py)",
                "run (uvloop/__init__.py)", "Runner.run (asyncio/runners.py)",
                "Thread._bootstrap (threading.py)", "Thread._bootstrap_inner (threading.py)",
                "Thread.run (threading.py)"}
IDLE_MARKERS = ("epoll_wait", "epoll_pwait", "PyThread_acquire_lock_timed", "take_gil",
                "_queue_SimpleQueue_get")


def _is_idle(frames: list[str]) -> bool:
    """Waiting, not working: the event loop in epoll, pool threads waiting for work."""
    tail = [_split(f)[0] for f in frames[-6:]]
    return any(m in name for name in tail for m in IDLE_MARKERS)


def summarize(raw_path: Path, top: int = 20) -> str:
    self_counts: Counter[str] = Counter()
    total_counts: Counter[str] = Counter()
    samples = idle = loop_thread = 0
    for line in raw_path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        python = [f for f in frames if _is_python(f)]
        if not python:
            continue
        if _is_idle(frames):
            idle += n
            continue
        samples += n
        if any(_split(f)[0] == "Runner.run" for f in python):
            loop_thread += n
        leaf = _short(python[-1], keep_line=True)
        native = _native_leaf(frames)
        self_counts[f"{leaf} -> {native}" if native else leaf] += n
        for f in {_short(f) for f in python}:
            total_counts[f] += n
    if not samples:
        return f"no samples in {raw_path.name}\n"
    out = [(f"{samples} busy samples ({idle} idle ones left out: epoll wait, threads waiting "
           f"on a lock); {100 * loop_thread / samples:.0f}% on the event loop thread, "
           f"{100 * (samples - loop_thread) / samples:.0f}% in other threads"), "",
           f"top {top} by self time (deepest Python line -> native code it was in):"]
    out += [f"  {100 * n / samples:5.1f}%  {f}" for f, n in self_counts.most_common(top)]
    out += ["", (f"top {top} by total time (Python function anywhere on the stack, below the "
            "entry frames of the threads):")]
    out += [f"  {100 * n / samples:5.1f}%  {f}" for f, n in total_counts.most_common()
            if f not in ENTRY_FRAMES][:top]
    return "\n".join(out) + "\n"
