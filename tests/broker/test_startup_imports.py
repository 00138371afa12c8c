"""What a broker imports before it is ready (issue 18): ``python -m semel.broker serve`` with
plain arguments reaches ``ready`` without argparse, the group coordinator's state and codecs,
the authorizer (none configured), the SCRAM module (no credentials stored), the log cleaner's
cleaning modules, any handler module or codec, the share-partition manager (no share state)
and msgspec (no metadata file to read); what was deferred loads on first use, and the share
manager and msgspec load at start once share state and metadata files are on disk. Also:
the command line's argparse-free parse of ``serve`` agrees with argparse, the garbage
collector is off while the broker starts and on from ``ready`` (or after a failed start),
and the pytest plugin's import loads nothing of the broker."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bench.bench_startup import launcher_source
from semel.broker.cli import _parser, _run_serve, _serve, _serve_arguments
from semel.broker.config import load_config
from semel.broker.server import listening_socket
from semel.broker.testing import BrokerThread
from tests.kafka_wire import KafkaWire, message

LIST_GROUPS = 16
READY = re.compile(r"semel ready on [^:]+:(\d+)")
IMPORTED = re.compile(r"import time:\s+\d+ \|\s+\d+ \| +(\S+)")

# ``python -m semel.broker serve`` whose stdout also lists sys.modules right after the ready
# line (-X importtime cannot: it misses modules loaded by importlib.import_module)
CHILD = launcher_source(r'self.out.write("\nmodules at ready: " + " ".join(sorted(sys.modules)))')

# loaded on first use, never at start (none of these features is configured or used)
DEFERRED = (
    "argparse", "difflib",
    "semel.coordinator.group.shard", "semel.coordinator.group.group_manager",
    "semel.coordinator.group.offset_manager", "semel.coordinator.group.records",
    "semel.coordinator.group.classic_group",
    "semel.broker.security.authorizer", "semel.broker.security.acl_store",
    "semel.broker.security.acl", "semel.broker.security.scram", "semel.broker.security.sasl",
    "semel.broker.security.tls",
    "semel.storage.cleaner.cleaner", "semel.storage.cleaner.process",
    "semel.storage.cleaner.worker",
    "prometheus_client", "cryptography", "crc32c",
    "msgspec", "semel.coordinator.share.manager", "semel.coordinator.share.config",
    "semel.coordinator.share.partition", "semel.coordinator.share.records",
    "semel.coordinator.share.store",
    "encodings.idna",  # the listener's host is an address: nothing to resolve
    "cramjam", "lz4", "zstandard",  # no compressed batch yet
)
DEFERRED_PACKAGES = ("semel.protocol.messages.", "semel.broker.handlers.")


class Broker:
    """The child above on an empty data directory, ephemeral port; every line it writes
    (stdout and stderr: the -X importtime report) kept in order."""

    def __init__(self, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-c", CHILD, "serve", "--port", "0",
             "--data-dir", str(data_dir), "--set", "log.flush.mode=none",
             "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self.port: int | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self.ready.wait(60) or self.port is None:
            self.stop()
            raise RuntimeError("no ready line:\n" + "".join(self.lines[-30:]))

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if (m := READY.match(line)) and not self.ready.is_set():
                self.port = int(m.group(1))
            if line.startswith("modules at ready: "):
                self.ready.set()
        self.ready.set()

    def modules_at_ready(self) -> set[str]:
        line = next(x for x in self.lines if x.startswith("modules at ready: "))
        return set(line.split(": ", 1)[1].split())

    def imported_after_ready(self) -> list[str]:
        i = next(i for i, x in enumerate(self.lines) if x.startswith("modules at ready: "))
        return [m.group(1) for x in self.lines[i:] if (m := IMPORTED.match(x))]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


@pytest.fixture
def broker(tmp_path: Path):
    b = Broker(tmp_path / "data")
    yield b
    b.stop()


def test_ready_without_the_deferred_modules(broker):
    at_ready = broker.modules_at_ready()
    assert {"semel.broker.server", "semel.coordinator.group.coordinator",
            "semel.storage.log_manager", "semel.broker.handlers"} <= at_ready
    assert not at_ready & set(DEFERRED)
    assert not [m for m in at_ready if m.startswith(DEFERRED_PACKAGES)]


def test_the_group_coordinators_state_loads_with_the_first_group_request(broker):
    with KafkaWire("127.0.0.1", broker.port) as wire:
        resp = wire.request(LIST_GROUPS, 4, message(LIST_GROUPS, "request", states_filter=[]))
    assert (resp.error_code, resp.groups) == (0, [])
    deadline = time.monotonic() + 30  # the output is read by a thread: wait for its lines
    while "semel.coordinator.group.shard" not in broker.imported_after_ready():
        assert time.monotonic() < deadline, "".join(broker.lines[-20:])
        time.sleep(0.05)
    assert {"semel.coordinator.group.group_manager", "semel.coordinator.group.records",
            "semel.protocol.messages.list_groups_response"} <= set(broker.imported_after_ready())


def test_share_state_and_metadata_files_on_disk_load_at_start(tmp_path):
    """The counterpart of the deferred list: with share-partition state in
    ``__share_group_state`` the manager is made and loaded before ready (a restart keeps the
    share state), and a client quotas file is read with msgspec."""
    data = tmp_path / "data"
    with BrokerThread(data) as b:
        async def share_state() -> None:
            info = b.broker.log_manager.create_topic("t", 1, {})
            assert not await b.broker.share_manager.alter_offsets("g", info.topic_id, 0, 0)

        b.call(share_state())
    (data / "__semel_client_quotas.json").write_text(
        '{"version": 1, "quotas": [{"entity": {"user": "alice"}, '
        '"values": {"producer_byte_rate": 1048576.0}}]}')
    broker = Broker(data)
    try:
        at_ready = broker.modules_at_ready()
    finally:
        broker.stop()
    assert {"msgspec", "semel.coordinator.share.manager"} <= at_ready


def test_an_address_listener_is_bound_without_resolving():
    v4 = listening_socket("127.0.0.1", 0)
    v6 = listening_socket("::1", 0)
    try:
        assert (v4.family, v6.family) == (socket.AF_INET, socket.AF_INET6)
        assert v4.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR)
        assert v6.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
        v4.listen()
        with pytest.raises(OSError) as taken:
            listening_socket("127.0.0.1", v4.getsockname()[1])
        assert taken.value.errno == errno.EADDRINUSE
    finally:
        v4.close()
        v6.close()
    assert listening_socket("localhost", 0) is None  # a name: create_server resolves it


@pytest.mark.parametrize("argv", [
    [],
    ["--port", "0", "--data-dir", "/tmp/d", "--set", "a=1", "--set", "b=c=d"],
    ["--port=9092", "--host=::1", "--config=/etc/semel.properties", "--log-level=debug"],
    ["--set=x.y=z", "--port", "1", "--port", "2", "--data-dir", "d1", "--data-dir=d2"],
    ["--port", " 7"],  # int() strips, as argparse's type=int does
    # argparse's business: abbreviations, help, bad or missing values, unknown options
    ["--po", "0"], ["--data", "d"], ["-h"], ["--help"], ["--port", "x"], ["--port", "-1"],
    ["--port"], ["--set", "--port"], ["--host="], ["--host", ""], ["--bogus", "1"],
    ["extra"], ["--", "--port", "1"], ["--set", "-x=1"],
])
def test_the_serve_fast_path_parses_as_argparse_or_leaves_it_to_argparse(argv):
    fast = _serve_arguments(argv)
    if fast is None:
        return
    assert vars(fast) == vars(_parser().parse_args(["serve", *argv]))


def test_plain_serve_arguments_take_the_fast_path():
    assert _serve_arguments(["--port", "0", "--set", "log.flush.mode=none"]) is not None
    assert _serve_arguments(["--po", "0"]) is None


def test_the_collector_is_off_while_starting_and_on_from_ready(tmp_path):
    seen = {}

    def prepare(broker) -> None:  # started, not yet ready
        seen["starting"] = gc.isenabled()

        def after_ready() -> None:
            seen["ready"] = gc.isenabled()
            os.kill(os.getpid(), signal.SIGTERM)  # _serve's handler: a graceful stop

        asyncio.get_running_loop().call_soon(after_ready)

    config = load_config(None, ["log.flush.mode=none"], {}, port=0,
                         data_dir=str(tmp_path / "data"))
    gc.disable()  # as _run_serve leaves it for _serve
    try:
        assert asyncio.run(_serve(config, prepare=prepare, enable_gc=True)) == 0
    finally:
        gc.enable()
    assert seen == {"starting": False, "ready": True}


def test_a_failed_start_turns_the_collector_back_on(tmp_path):
    args = _serve_arguments(["--set", "no.such.key=1", "--data-dir", str(tmp_path)])
    assert gc.isenabled()
    assert _run_serve(args) == 2
    assert gc.isenabled()


def test_the_pytest_plugin_imports_nothing_of_the_broker():
    code = ("import sys, semel.broker.pytest_plugin\n"
            "print(' '.join(m for m in sys.modules if m.startswith('semel')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert set(done.stdout.split()) == {"semel", "semel.broker", "semel.broker.pytest_plugin"}
