"""semel for tests: a real broker in-process or as a subprocess, with virtual time, fault
injection and state inspection. The pytest plugin (``semel.broker.pytest_plugin``) builds
its fixtures on this module; docs/TESTING.md shows both.

``BrokerThread`` runs a ``Broker`` on its own uvloop event loop in a daemon thread, bound to
127.0.0.1 on an ephemeral port, so blocking clients (confluent-kafka, kafka-python, Java)
talk to it from the test's thread. It runs on a ``VirtualClock``: ``advance(seconds)`` moves
the broker's time ahead and runs every job that depends on it (transaction timeouts, group
session timeouts, producer and transactional id expiry, retention, the cleaner) before it
returns. ``faults`` (``semel.broker.faults.Faults``) injects errors, delays, dropped
responses, disconnects, fsync and disk-full failures, and holds transactions between
PREPARE and COMPLETE. ``partitions()``, ``producers()``, ``transactions()`` and
``groups()`` return the broker's state as plain objects (``semel.broker.state``).

``BrokerProcess`` runs ``python -m semel.broker serve`` and waits for its ``ready`` line;
with ``kill_at`` (or ``arm_kill``) it runs ``python -m semel.broker.testing serve``
instead, which SIGKILLs itself at a named point. Both are stopped by their own handle only.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Self

from semel.broker.config import load_config
from semel.broker.state import (
    GroupState,
    PartitionState,
    ProducerState,
    TransactionState,
)

__all__ = ["TEST_DEFAULTS", "BrokerProcess", "BrokerThread", "GroupState", "PartitionState",
           "ProducerState", "TransactionState", "VirtualClock", "test_config"]

READY = re.compile(r"ready on (\S+):(\d+)")
OTHER_LISTENER = re.compile(r", (\w+) \w+ on \S+:(\d+)")
log = logging.getLogger("semel.testing")

#: what a test broker changes from the broker's defaults (testcontainers' choices for Kafka):
#: no initial rebalance delay (a new group's first join is answered at once, not after 3 s)
#: and no fsync per write (the data directory is thrown away anyway)
TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": "0", "log.flush.mode": "none"}


def test_config(data_dir: Path, overrides: dict[str, str] | None = None, port: int = 0):
    """A BrokerConfig for tests: 127.0.0.1, an ephemeral port, log.flush.mode=none."""
    settings = {"log.flush.mode": "none", **(overrides or {})}
    return load_config(None, [f"{k}={v}" for k, v in settings.items()], env={},
                       host="127.0.0.1", port=port, data_dir=str(Path(data_dir).resolve()))


test_config.__test__ = False  # not a test where a test module imports it


class VirtualClock:
    """The broker's clock in tests: wall-clock milliseconds plus an offset that only moves
    forward, when the test says so. Real time still passes, so a test that never advances
    it sees the ordinary clock."""

    def __init__(self) -> None:
        self.offset_ms = 0

    def __call__(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms


class BrokerThread:
    """A broker in this process, on its own event loop thread.

    ``overrides``: broker properties (Kafka's names). The data directory is the caller's
    (relative paths against the current directory); it is not removed here."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, *,
                 port: int = 0, **broker_kw):
        self.data_dir = Path(data_dir).resolve()
        self.overrides = overrides
        self.port = port
        self.broker_kw = broker_kw
        self.broker = None
        self.faults = None
        self.clock: VirtualClock | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def start(self) -> BrokerThread:
        import uvloop

        from semel.broker.faults import Faults, InjectableFileSystem
        from semel.broker.server import Broker

        config = test_config(self.data_dir, self.overrides, self.port)
        kw = dict(self.broker_kw)
        if "clock" not in kw:
            self.clock = kw["clock"] = VirtualClock()
        kw.setdefault("fs", InjectableFileSystem())
        self._started.clear()
        self._error = None

        def run() -> None:
            self.loop = uvloop.new_event_loop()
            asyncio.set_event_loop(self.loop)
            try:
                self.broker = Broker(config, **kw)
                self.faults = Faults(self.broker, self.loop)
                self.loop.run_until_complete(self.broker.start())
            except BaseException as e:  # noqa: BLE001 - reported to the starting thread
                self._error = e
                self._started.set()
                return
            self._started.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

        self._thread = threading.Thread(target=run, name="semel-broker", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def call(self, coro, timeout: float = 30):
        """Run a coroutine on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _read(self, fn, *args):
        async def read():
            return fn(self.broker, *args)
        return self.call(read())

    def stop(self) -> None:
        if self.loop is None or self.broker is None:
            return
        if self.faults is not None:
            self.faults.clear()  # a held transaction must not hold up the stop
        self.call(self.broker.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.broker = None

    def restart(self) -> BrokerThread:
        """Stop and start again on the same data directory and port (clients reconnect);
        the virtual clock keeps its offset."""
        port, clock = self.broker.port, self.clock
        self.stop()
        self.port = port
        if clock is not None:
            self.broker_kw["clock"] = clock
        self.start()
        self.clock = clock
        return self

    # -- virtual time ---------------------------------------------------------------------

    def advance(self, seconds: float = 0, *, ms: int = 0) -> None:
        """Move the broker's clock ``seconds`` (plus ``ms``) ahead and run what that made
        due: transaction timeouts (the aborts complete before this returns), group member
        session and rebalance timeouts, producer id and transactional id expiry, retention,
        the log cleaner (dirty ratio and compaction lags are measured on this clock).
        Connection idle timeouts stay on real time."""
        if self.clock is None:
            raise RuntimeError("this broker runs on a clock the test gave it: move that one")
        step = round(seconds * 1000) + ms
        if step < 0:
            raise ValueError("time only moves forward")

        async def move() -> None:
            self.clock.offset_ms += step
            log.warning("virtual time: the broker's clock moved %d ms ahead (%+d ms from the "
                        "wall clock)", step, self.clock.offset_ms)
            await self.broker.run_time_jobs()
        self.call(move(), timeout=120)

    # -- state ----------------------------------------------------------------------------

    def partitions(self, topic: str | None = None, *,
                   internal: bool = False) -> list[PartitionState]:
        """Every partition (of ``topic``): log start, high watermark, LSO, log end, size.
        Internal topics only with ``internal`` (or when named)."""
        from semel.broker import state
        return self._read(state.partitions, topic, internal)

    def partition(self, topic: str, partition: int) -> PartitionState:
        found = [p for p in self.partitions(topic) if p.partition == partition]
        if not found:
            raise KeyError(f"no partition {topic}-{partition}")
        return found[0]

    def producers(self, topic: str, partition: int) -> list[ProducerState]:
        """The producer state of one partition (idempotent and transactional producers)."""
        from semel.broker import state
        return self._read(state.producers, topic, partition)

    def transactions(self) -> list[TransactionState]:
        """Every transactional id the coordinator knows, with its state."""
        from semel.broker import state
        return self._read(state.transactions)

    def transaction(self, transactional_id: str) -> TransactionState:
        found = [t for t in self.transactions() if t.transactional_id == transactional_id]
        if not found:
            raise KeyError(f"no transactional id {transactional_id!r}")
        return found[0]

    def groups(self) -> list[GroupState]:
        """Every group, with its members and committed offsets."""
        from semel.broker import state
        return self._read(state.groups)

    def group(self, group_id: str) -> GroupState:
        found = [g for g in self.groups() if g.group_id == group_id]
        if not found:
            raise KeyError(f"no group {group_id!r}")
        return found[0]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BrokerProcess:
    """``python -m semel.broker serve`` as a child process (for SIGKILL/restart tests).

    ``kill_at``: a named point where the broker SIGKILLs itself (``arm_kill``); the
    process then runs ``python -m semel.broker.testing serve``, which takes such commands
    on its standard input."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 port: int = 0, *, kill_at: str | None = None, kill_points: bool = False,
                 log_level: str | None = None) -> None:
        self.data_dir = Path(data_dir).resolve()  # relative to the caller's directory
        self.overrides = {"log.flush.mode": "fsync", **(overrides or {})}
        self.port = port  # the first listener's
        self.ports: dict[str, int] = {}  # the other listeners', by name
        self.kill_points = kill_points or kill_at is not None
        self.kill_at = kill_at
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self._acks: list[threading.Event] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        module = "semel.broker.testing" if self.kill_points else "semel.broker"
        args = [sys.executable, "-m", module, "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if self.log_level:
            args += ["--log-level", self.log_level]
        for k, v in self.overrides.items():
            args += ["--set", f"{k}={v}"]
        if self.kill_at:
            args += ["--kill-at", self.kill_at]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.PIPE if self.kill_points else subprocess.DEVNULL)
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = READY.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    self.ports = {name: int(port) for name, port in OTHER_LISTENER.findall(line)}
                    ready.set()
                if line.startswith("fault injection: armed") and self._acks:
                    self._acks.pop(0).set()
            ready.set()
            for ack in self._acks:
                ack.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("broker did not become ready:\n" + "".join(self.lines[-30:]))
        return self

    def arm_kill(self, point: str, *, skip: int = 0, timeout: float = 10) -> None:
        """SIGKILL the broker at ``point`` (after ``skip`` earlier hits): "txn.prepared",
        "txn.markers-written", "request:<Api>" (as it arrives) or "response:<Api>" (run,
        not answered). Needs ``kill_points=True`` (or ``kill_at``) at construction."""
        if not self.kill_points:
            raise RuntimeError("start the BrokerProcess with kill_points=True to arm kills")
        ack = threading.Event()
        self._acks.append(ack)
        self.proc.stdin.write(f"kill-at {point} {skip}\n")
        self.proc.stdin.flush()
        if not ack.wait(timeout) or self.proc.poll() is not None:
            raise RuntimeError(f"the broker did not arm {point}:\n" + "".join(self.lines[-10:]))

    def wait_killed(self, timeout: float = 30) -> int:
        """Until the process is gone (after a kill point); its exit status (-9)."""
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self, timeout: float = 30) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- python -m semel.broker.testing serve: a broker that can SIGKILL itself at named points ---

def _control(faults, stdin) -> None:
    """Commands from the parent, one per line: ``kill-at POINT [SKIP]``."""
    for line in stdin:
        words = line.split()
        if len(words) in (2, 3) and words[0] == "kill-at":
            try:
                faults.kill_at(words[1], skip=int(words[2]) if len(words) == 3 else 0)
            except ValueError as e:
                print(f"fault injection: refused: {e}", flush=True)
                continue
            print(f"fault injection: armed SIGKILL at {words[1]}", flush=True)


def main(argv: list[str] | None = None) -> int:
    from semel.broker.cli import _check_data_dir, _serve
    from semel.broker.config import ConfigError
    from semel.broker.faults import Faults, InjectableFileSystem

    parser = argparse.ArgumentParser(prog="python -m semel.broker.testing")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="semel serve, with kill points for tests")
    serve.add_argument("--set", action="append", default=[], dest="overrides")
    serve.add_argument("--port", type=int)
    serve.add_argument("--host")
    serve.add_argument("--data-dir")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument("--kill-at", action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(None, args.overrides, host=args.host, port=args.port,
                             data_dir=args.data_dir)
        _check_data_dir(config.log_dirs)
    except ConfigError as e:
        print(f"semel: {e}", file=sys.stderr)
        return 2

    def prepare(broker) -> None:
        faults = Faults(broker, asyncio.get_running_loop())
        for point in args.kill_at:
            faults.kill_at(point)
        threading.Thread(target=_control, args=(faults, sys.stdin), daemon=True).start()

    import uvloop

    return uvloop.run(_serve(config, fs=InjectableFileSystem(), prepare=prepare))


if __name__ == "__main__":
    sys.exit(main())
