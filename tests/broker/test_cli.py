"""The CLI contract: one ready line with the bound address; a bad configuration exits
non-zero with a one-line reason; SIGTERM stops the broker gracefully (clean-shutdown
marker, exit 0) and the data is there after the restart."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from semel.broker.testing import BrokerProcess
from tests.kafka_wire import KafkaWire, create_topic, fetch_request, produce_request, records_batch

ROOT = Path(__file__).resolve().parents[2]


def serve(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEMEL_")}
    return subprocess.run([sys.executable, "-m", "semel.broker", "serve", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, env=env,
                          check=False)


@pytest.mark.parametrize(("args", "reason"), [
    (["--set", "log.segment.byts=10"], "unknown property 'log.segment.byts'"),
    (["--set", "log.segment.bytes=abc"], "log.segment.bytes"),
    (["--set", "log.flush.mode=sometimes"], "log.flush.mode"),
    (["--port", "70000"], "--port"),
])
def test_bad_configuration_is_one_line_and_non_zero(tmp_path: Path, args, reason) -> None:
    result = serve("--data-dir", str(tmp_path / "d"), *args)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("semel: ") and reason in lines[0]
    assert "ready" not in result.stdout


def test_unwritable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = serve("--data-dir", str(blocker / "data"), "--port", "0")
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1 and "log.dirs" in result.stderr


def test_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve("--data-dir", str(tmp_path / "d"), "--host", "127.0.0.1",
                       "--port", str(port))
    assert result.returncode != 0
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("semel: ")]
    assert str(port) in line and "in use" in line


def test_ready_line_sigterm_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "d"
    proc = BrokerProcess(data).start()
    try:
        ready = [line for line in proc.lines if line.startswith("semel ready on ")]
        assert len(ready) == 1 and f"127.0.0.1:{proc.port}" in ready[0]
        with KafkaWire.connect(proc.bootstrap) as wire:
            assert create_topic(wire, "t") == 0
            resp = wire.request(0, 9, produce_request("t", 0, records_batch([b"x", b"y"])))
            assert resp.responses[0].partition_responses[0].error_code == 0
        assert proc.stop() == 0  # SIGTERM: graceful
        assert any("stopped" in line for line in proc.lines)
    finally:
        proc.kill()
    assert (data / ".kafka_cleanshutdown").exists()  # written by a graceful stop only
    again = BrokerProcess(data, port=proc.port).start()
    try:
        with KafkaWire.connect(again.bootstrap) as wire:
            resp = wire.request(1, 12, fetch_request([("t", 0, 0)]))
            assert resp.responses[0].partitions[0].high_watermark == 2
    finally:
        again.stop()


@pytest.mark.parametrize(("name", "damage", "reason"), [
    ("__semel_topics.json", lambda b: b[: len(b) // 2], "unreadable topic metadata"),
    ("__semel_topics.json", lambda b: b'{"version": 1, "topics": [{"name": 5}]}',
     "unreadable topic metadata"),
    ("producer_id_block.json", lambda b: b[:-3], "producer ids could repeat"),
    ("meta.properties", lambda b: b"\xff\xfe" + b, "meta.properties"),
    ("meta.properties", lambda b: b"version=1\n", "cluster.id"),
])
def test_damaged_metadata_file_is_one_line_and_kept(tmp_path: Path, name, damage,
                                                     reason) -> None:
    """A metadata file torn by a crash on lying hardware (or edited by hand): the broker
    refuses to start with a one-line reason naming the file, and leaves the file and the
    data as they were for the operator."""
    data = tmp_path / "d"
    proc = BrokerProcess(data).start()
    try:
        with KafkaWire.connect(proc.bootstrap) as wire:
            assert create_topic(wire, "t") == 0
        assert proc.stop() == 0
    finally:
        proc.kill()
    path = data / name
    damaged = damage(path.read_bytes())
    path.write_bytes(damaged)
    segment = data / "t-0" / "00000000000000000000.log"
    before = segment.read_bytes()
    result = serve("--data-dir", str(data), "--port", "0")
    assert result.returncode == 1
    lines = [x for x in result.stderr.strip().splitlines() if "Traceback" in x
             or x.startswith("semel: ")]
    assert len(lines) == 1 and lines[0].startswith("semel: "), result.stderr
    assert name in lines[0] and reason in lines[0]
    assert "ready" not in result.stdout
    assert path.read_bytes() == damaged and segment.read_bytes() == before
