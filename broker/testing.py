"""Running a broker for tests: in-process on a background thread, or as a subprocess.

``BrokerThread`` starts a ``Broker`` on its own uvloop event loop in a daemon thread, bound
to 127.0.0.1 on an ephemeral port with a temporary data directory, so blocking clients
(confluent-kafka, kafka-python, Java) can talk to it from the test thread.
``BrokerProcess`` runs ``python -m semel.broker serve`` and waits for its ``ready`` line; tests
that SIGKILL the broker use it. Both are stopped by their own pid/handle only.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Self

from semel.broker.config import load_config

READY = re.compile(r"ready on (\S+):(\d+)")
OTHER_LISTENER = re.compile(r", (\w+) \w+ on \S+:(\d+)")


def test_config(data_dir: Path, overrides: dict[str, str] | None = None):
    """A BrokerConfig for tests: 127.0.0.1, an ephemeral port, log.flush.mode=none."""
    settings = {"log.flush.mode": "none", **(overrides or {})}
    return load_config(None, [f"{k}={v}" for k, v in settings.items()], env={},
                       host="127.0.0.1", port=0, data_dir=str(Path(data_dir).resolve()))


test_config.__test__ = False  # not a test where a test module imports it


class BrokerThread:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None, **broker_kw):
        self.data_dir = Path(data_dir).resolve()  # relative to the caller's directory
        self.overrides = overrides
        self.broker_kw = broker_kw
        self.broker = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"

    def start(self) -> BrokerThread:
        import uvloop

        from semel.broker.server import Broker

        config = test_config(self.data_dir, self.overrides)

        def run() -> None:
            self.loop = uvloop.new_event_loop()
            asyncio.set_event_loop(self.loop)
            try:
                self.broker = Broker(config, **self.broker_kw)
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

    def stop(self) -> None:
        if self.loop is None or self.broker is None:
            return
        self.call(self.broker.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)
        self.broker = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class BrokerProcess:
    """``python -m semel.broker serve`` as a child process (for SIGKILL/restart tests)."""

    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None,
                 port: int = 0) -> None:
        self.data_dir = Path(data_dir).resolve()  # relative to the caller's directory
        self.overrides = {"log.flush.mode": "fsync", **(overrides or {})}
        self.port = port  # the first listener's
        self.ports: dict[str, int] = {}  # the other listeners', by name
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        args = [sys.executable, "-m", "semel.broker", "serve", "--host", "127.0.0.1",
                "--port", str(self.port), "--data-dir", str(self.data_dir)]
        for k, v in self.overrides.items():
            args += ["--set", f"{k}={v}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stdout:
                self.lines.append(line)
                m = READY.search(line)
                if m and not ready.is_set():
                    self.port = int(m.group(2))
                    self.ports = {name: int(port) for name, port in OTHER_LISTENER.findall(line)}
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or self.proc.poll() is not None:
            self.kill()
            raise RuntimeError("broker did not become ready:\n" + "".join(self.lines[-30:]))
        return self

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
