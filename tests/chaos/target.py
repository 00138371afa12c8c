"""The broker under test: a subprocess behind the proxy, with the faults the nemesis uses.

`Target(data_dir, history, faulty=True)` runs `python -m tests.chaos.faulty_broker serve`
(faulty=False: the real CLI, `python -m semel.broker serve`) on 127.0.0.1. The first start binds an
ephemeral port; restarts reuse it. The broker advertises the proxy's address, so clients
(bootstrapping at `bootstrap`) always go through the proxy; `direct` is the broker itself
(final reads). Broker output goes to `<out>/broker.log`.

Every fault is recorded in the history as {"f": "fault", "fault": ...}; a power loss also
as {"f": "power_loss", before, after} with the log end offsets on each side. An exit the
nemesis did not cause (`check_alive`) is recorded as fault "crash" with the log's tail, and
the broker is restarted. `bugs` (faulty broker only) are injected into every broker process
(faulty_broker.py's inject_bug: mutation tests of the suite itself).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.chaos.history import History
from tests.chaos.proxy import Proxy

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"ready on (\S+):(\d+)")
CONTROL = re.compile(r"chaos control on 127\.0\.0\.1:(\d+)")
RECOVERED = re.compile(r"chaos recovered (\{.*\})")

# settings of every chaos broker: small segments (rolls, multi-segment reads, snapshots),
# fast transaction timeouts and cleanup, no initial rebalance delay, the log cleaner on and
# looking for work 5 times a second (it compacts only topics with cleanup.policy=compact:
# the compacted workload's, and the internal topics once a segment of theirs rolls)
BASE_OVERRIDES = {
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "200",
    "log.segment.bytes": "262144",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "num.partitions": "3",
}


class BrokerGone(Exception):
    pass


class Target:
    def __init__(self, data_dir: Path, history: History, *, out_dir: Path,
                 faulty: bool = True, flush_mode: str = "fsync",
                 overrides: dict[str, str] | None = None, request_log: bool = False,
                 bugs: tuple[str, ...] = ()) -> None:
        self.data_dir = Path(data_dir)
        self.history = history
        self.out_dir = Path(out_dir)
        self.faulty = faulty
        self.flush_mode = flush_mode
        self.overrides = {**BASE_OVERRIDES, "log.flush.mode": flush_mode, **(overrides or {})}
        self.proxy = Proxy(request_log=str(self.out_dir / "requests.log")
                           if request_log else None).start()
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.control_port: int | None = None
        self.recovered: dict[str, int] = {}
        self.ready_t = 0.0
        self.bugs = tuple(bugs)  # faulty_broker inject_bug, into every broker process
        self.expect_exit = False
        self.paused = False
        self.starts = 0
        self.crashes: list[str] = []
        self._lines: list[str] = []
        self._log = open(self.out_dir / "broker.log", "a")  # noqa: SIM115
        self._lock = threading.RLock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    @property
    def direct(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- process -------------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        with self._lock:
            module = "tests.chaos.faulty_broker" if self.faulty else "broker"
            args = [sys.executable, "-m", module, "serve", "--host", "127.0.0.1",
                    "--port", str(self.port), "--data-dir", str(self.data_dir),
                    "--set", f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.proxy.port}"]
            for k, v in self.overrides.items():
                args += ["--set", f"{k}={v}"]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            deadline = time.monotonic() + timeout
            while True:
                self.proc = subprocess.Popen(args, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True, env=env,
                                             cwd=ROOT)
                ready = threading.Event()
                self._lines = []
                threading.Thread(target=self._pump, args=(self.proc, ready),
                                 daemon=True).start()
                ready.wait(max(1.0, deadline - time.monotonic()))
                if self.proc.poll() is None and ready.is_set():
                    break
                # the old socket may linger for a moment after a SIGKILL
                self._kill_proc()
                tail = "".join(self._lines[-20:])
                if time.monotonic() > deadline or "in use" not in tail:
                    raise RuntimeError(f"broker did not become ready:\n{tail}")
                time.sleep(0.2)
            for bug in self.bugs:
                self.control("inject_bug", bug=bug)
            self.proxy.upstream_port = self.port
            self.expect_exit = False
            self.paused = False
            self.starts += 1
            self.history.record("nemesis", "info", "fault",
                                fault="start" if self.starts == 1 else "restart",
                                recovered=self.recovered or None)

    def _pump(self, proc: subprocess.Popen, ready: threading.Event) -> None:
        for line in proc.stdout:
            self._log.write(line)
            self._lines.append(line)
            if len(self._lines) > 400:
                del self._lines[:200]
            if m := CONTROL.search(line):
                self.control_port = int(m.group(1))
            elif m := RECOVERED.search(line):
                self.recovered = json.loads(m.group(1))
            elif (m := READY.search(line)) and not ready.is_set():
                self.ready_t = time.time()
                self.port = int(m.group(2))
                ready.set()
        self._log.flush()
        ready.set()

    def _kill_proc(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            if self.paused:
                os.kill(proc.pid, signal.SIGCONT)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> bool:
        """Restart the broker if it exited on its own (recorded as a crash); True if it did."""
        with self._lock:
            if self.alive() or self.expect_exit:
                return False
            code = self.proc.returncode if self.proc else None
            tail = "".join(self._lines[-15:])
            self.crashes.append(f"exit {code}:\n{tail}")
            self.history.record("nemesis", "info", "fault", fault="crash", code=code,
                                tail=tail[-2000:])
            self.start()
            return True

    def kill(self, why: str = "kill") -> None:
        with self._lock:
            self.history.record("nemesis", "info", "fault", fault=why)
            self.expect_exit = True
            self._kill_proc()
            self.start()

    def restart_after_exit(self, why: str, wait_s: float) -> bool:
        """Wait up to wait_s for an expected exit (kill at prepare), then restart."""
        deadline = time.monotonic() + wait_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._lock:
            if self.alive():
                return False
            self.history.record("nemesis", "info", "fault", fault=why)
            self.start()
            return True

    def pause(self, seconds: float, stop_event: threading.Event | None = None) -> None:
        with self._lock:
            if not self.alive():
                return
            self.history.record("nemesis", "info", "fault", fault="pause", seconds=seconds)
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True
        try:
            if stop_event is not None:
                stop_event.wait(seconds)
            else:
                time.sleep(seconds)
        finally:
            with self._lock:
                if self.alive():
                    os.kill(self.proc.pid, signal.SIGCONT)
                self.paused = False
                self.history.record("nemesis", "info", "fault", fault="resume")

    def stop(self) -> None:
        with self._lock:
            self.expect_exit = True
            if self.alive():
                if self.paused:
                    os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:
                    self._kill_proc()
        self.proxy.stop()
        self._log.close()

    # -- the control socket (faulty broker only) --------------------------------------------

    def control(self, cmd: str, timeout: float = 10, **kw) -> dict:
        if not self.faulty or self.control_port is None:
            raise BrokerGone("no control socket")
        try:
            with socket.create_connection(("127.0.0.1", self.control_port), timeout=timeout) as s:
                s.sendall(json.dumps({"cmd": cmd, **kw}).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    data += chunk
        except OSError as e:
            raise BrokerGone(str(e)) from e
        if not data:
            raise BrokerGone("control socket closed")
        return json.loads(data)

    def disk_fault(self, name: str, **faults) -> None:
        self.history.record("nemesis", "info", "fault", fault=name, **faults)
        self.control("fault", **faults)

    def clear_disk_faults(self, *, record: bool = True) -> None:
        try:
            self.control("clear")
            if record:
                self.history.record("nemesis", "info", "fault", fault="disk clear")
        except BrokerGone:
            pass

    def arm_kill_at_prepare(self, delay_ms: int) -> None:
        self.history.record("nemesis", "info", "fault", fault="arm kill_at_prepare",
                            delay_ms=delay_ms)
        with self._lock:
            self.expect_exit = True
        self.control("kill_at_prepare", delay_ms=delay_ms, commit_only=False)

    def disarm(self) -> None:
        with self._lock:
            try:
                self.control("disarm")
            except BrokerGone:
                pass
            if self.alive():
                self.expect_exit = False

    def power_loss(self) -> None:
        """Cut the files back to what was fsynced, as a power loss would, and restart."""
        with self._lock:
            self.expect_exit = True
            reply = self.control("power_loss", timeout=30)
            self.proc.wait(30)
            self.start()
            # dated when the restarted broker became ready: everything observed before came
            # from the broker that lost power (the restart event is recorded just after)
            self.history.record("nemesis", "info", "power_loss", t=self.ready_t,
                                flush_mode=self.flush_mode, before=reply["before"],
                                after=self.recovered)
