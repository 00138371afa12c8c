"""Brokers under test: semel (a subprocess, durable or ``log.flush.mode=none``), the peer
(Tansu started from its binary, memory storage) or a peer given by address.

Every launch is timed the same way: from just before ``exec`` to the first successful TCP
connect on the listener, and to the line containing ``ready`` on the broker's output.
Output is drained into a log file so a chatty broker never blocks on a full pipe. A started
peer is checked to listen on loopback only. ``RunningBroker`` gives the bootstrap address,
the pid (for CPU, RSS and py-spy) and ``stop()`` (SIGTERM, then SIGKILL after a grace).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from bench.broker_throughput import cpu_seconds, rss_mib

ROOT = Path(__file__).resolve().parents[1]

# Tansu reads these from the environment; the bench passes its own settings on the command line
TANSU_ENV_KEYS = ("LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID",
                  "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening_addresses(pid: int) -> list[str]:
    """``host:port`` of every listening TCP socket and bound UDP socket the process owns."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table, v6 in (("tcp", False), ("tcp6", True), ("udp", False), ("udp6", True)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if inode not in inodes or (table.startswith("tcp") and state != "0A"):
                continue
            host_hex, port_hex = local.split(":")
            raw = bytes.fromhex(host_hex)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                host = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                host = socket.inet_ntop(socket.AF_INET, raw[::-1])
            found.append(f"{host}:{int(port_hex, 16)}")
    return found


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return host.startswith("127.") or host in ("::1", "::ffff:127.0.0.1")


@dataclass
class RunningBroker:
    name: str
    bootstrap: str
    proc: subprocess.Popen | None = None
    startup_connect_s: float | None = None
    startup_ready_s: float | None = None
    data_dir: str | None = None
    log_path: Path | None = None
    _drain: threading.Thread | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def rss_mib(self) -> float | None:
        return rss_mib(self.pid) if self.pid else None

    def cpu_seconds(self) -> float | None:
        return cpu_seconds(self.pid) if self.pid else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._drain is not None:
            self._drain.join(5)
        if self.data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class Target:
    """One column of the results: something the bench can start (or reach) per run."""

    name: str
    label: str
    launched = True

    def start(self, log_dir: Path) -> RunningBroker:
        raise NotImplementedError

    def describe(self) -> str:
        return self.label


TOP_PACKAGES = ("broker", "protocol", "storage", "coordinator", "pipelines")


def import_root(root: Path) -> tuple[Path, str]:
    """(the directory to put first on PYTHONPATH, the package prefix) under which ``root``'s
    packages import. Trees that install them as ``semel.*`` (pyproject's package-dir) get a
    ``semel`` folder of links to their folders in ``root/.cache/semel-import``, so a baseline
    worktree's code is the one imported and not the editable install's; older trees import
    them at the top level from ``root``."""
    if 'semel.broker' not in (root / "pyproject.toml").read_text():
        return root, ""
    shim = root / ".cache" / "semel-import"
    (shim / "semel").mkdir(parents=True, exist_ok=True)
    for name in TOP_PACKAGES:
        link = shim / "semel" / name
        if not link.is_symlink() and (root / name).is_dir():
            link.symlink_to(root / name)
    return shim, "semel."


class SemelTarget(Target):
    """``python -m semel.broker serve`` from ``root`` (default: this tree; bench/bench_ab.py
    passes a git worktree of the baseline): run there, with ``root``'s packages first on
    PYTHONPATH (``import_root``), so its broker, protocol, storage and coordinator are the
    ones imported."""

    def __init__(self, flush_mode: str, extra_sets: list[str] = (), *, root: Path = ROOT,
                 name: str | None = None, label: str | None = None) -> None:
        self.flush_mode = flush_mode
        self.extra_sets = list(extra_sets)
        self.root = root
        self.name = name or f"semel-{flush_mode}"
        self.label = label or (
            f"semel ({'durable, fsync' if flush_mode == 'fsync' else 'flush none'})")

    def env(self) -> dict:
        env = dict(os.environ)
        path, _ = import_root(self.root)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(path), *filter(None, [os.environ.get("PYTHONPATH")])])
        return env

    def start(self, log_dir: Path) -> RunningBroker:
        data_dir = tempfile.mkdtemp(prefix="semel-bench-")
        sets = [f"log.flush.mode={self.flush_mode}", *self.extra_sets]
        for attempt in range(3):
            port = free_port()
            argv = [sys.executable, "-m", import_root(self.root)[1] + "broker", "serve", "--host", "127.0.0.1",
                    "--port", str(port), "--data-dir", data_dir, "--log-level", "WARNING"]
            for s in sets:
                argv += ["--set", s]
            try:
                running = launch(self.name, argv, port, log_dir, cwd=self.root,
                                 env=self.env())
            except RuntimeError:
                if attempt == 2:
                    shutil.rmtree(data_dir, ignore_errors=True)
                    raise
                continue
            running.data_dir = data_dir
            return running
        raise AssertionError("unreachable")


class TansuTarget(Target):
    def __init__(self, binary: Path, version: str = "") -> None:
        self.binary = binary
        self.version = version
        self.name = "tansu"
        self.label = "Tansu (memory)"

    def start(self, log_dir: Path) -> RunningBroker:
        env = {k: v for k, v in os.environ.items() if k not in TANSU_ENV_KEYS}
        for attempt in range(3):
            port = free_port()
            url = f"tcp://127.0.0.1:{port}"
            argv = [str(self.binary), "broker", "--listener-url", url,
                    "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
            try:
                running = launch(self.name, argv, port, log_dir, env=env)
            except RuntimeError:
                if attempt == 2:
                    raise
                continue
            bound = listening_addresses(running.pid)
            if not bound or not all(is_loopback(a) for a in bound):
                running.stop()
                raise RuntimeError(f"the peer listens beyond loopback: {bound}")
            return running
        raise AssertionError("unreachable")

    def describe(self) -> str:
        try:
            where = self.binary.resolve().relative_to(ROOT)
        except ValueError:
            where = self.binary
        return f"{self.version or 'tansu'} (memory storage), {where}"


class AddressTarget(Target):
    """A peer somebody else runs: no startup, RSS or CPU figures, topics named per run."""

    launched = False

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.name = "peer"
        self.label = f"peer at {bootstrap}"

    def start(self, log_dir: Path) -> RunningBroker:
        return RunningBroker(self.name, self.bootstrap)


def launch(name: str, argv: list[str], port: int, log_dir: Path, *,
           cwd: Path | None = None, env: dict | None = None,
           timeout_s: float = 60.0) -> RunningBroker:
    """Start ``argv``; time exec -> first TCP connect and exec -> ``ready`` line."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.log"
    ready_at: list[float] = []
    ready = threading.Event()
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, cwd=cwd, env=env)

    def drain() -> None:
        with open(log_path, "wb") as log:
            for line in proc.stdout:
                if not ready.is_set() and b"ready" in line:
                    ready_at.append(time.perf_counter())
                    ready.set()
                log.write(line)
                log.flush()
        ready.set()

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    connected_at = None
    deadline = t0 + timeout_s
    while connected_at is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                connected_at = time.perf_counter()
        except OSError:
            if proc.poll() is not None or time.perf_counter() > deadline:
                break
            time.sleep(0.001)
    if connected_at is not None:
        ready.wait(max(0.0, deadline - time.perf_counter()))
    if connected_at is None or not ready_at:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        drainer.join(5)
        tail = log_path.read_text(errors="replace")[-800:] if log_path.exists() else ""
        raise RuntimeError(f"{name} did not start (exit {proc.returncode}): {tail}")
    return RunningBroker(name, f"127.0.0.1:{port}", proc, connected_at - t0, ready_at[0] - t0,
                         log_path=log_path, _drain=drainer)


class PeakRss:
    """Samples a process's RSS every ``interval_s`` in a thread; ``peak`` in MiB."""

    def __init__(self, pid: int | None, interval_s: float = 0.1) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.peak: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                value = rss_mib(self.pid)
            except (OSError, AttributeError):
                return
            self.peak = value if self.peak is None else max(self.peak, value)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        if self.pid:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)
