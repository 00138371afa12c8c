"""The container's configuration without a container: the SEMEL_* environment of
docker/Dockerfile and docker/compose.yaml is a configuration the broker accepts, compose's
published port and advertised addresses agree with its listeners, and docker/healthcheck.py
tells a live broker from a dead port. A few seconds."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from semel.broker.config import load_config
from semel.broker.testing import BrokerThread

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"


def compose_environment() -> dict[str, str]:
    """The `environment:` mapping of compose.yaml's service (KEY: value lines, no YAML library)."""
    text = (DOCKER / "compose.yaml").read_text()
    block = re.search(r"^ {4}environment:\n((?: {6}\S.*\n)+)", text, re.MULTILINE)
    assert block is not None, "compose.yaml: no environment block"
    return dict(re.findall(r"^ {6}(\w+): *(.*?) *$", block.group(1), re.MULTILINE))


def dockerfile_environment() -> dict[str, str]:
    """SEMEL_* of the Dockerfile's ENV instruction (KEY=value pairs continued with '\\')."""
    text = (DOCKER / "Dockerfile").read_text().replace("\\\n", " ")
    return dict(re.findall(r"\b(SEMEL_\w+)=(\S+)", "\n".join(
        line for line in text.splitlines() if line.startswith("ENV "))))


def test_dockerfile_environment_is_a_valid_configuration() -> None:
    env = dockerfile_environment()
    assert set(env) >= {"SEMEL_LISTENERS", "SEMEL_ADVERTISED_LISTENERS", "SEMEL_LOG_DIRS"}
    config = load_config(None, env=env)
    (listener,) = config.listeners
    assert (listener.host, listener.port) == ("0.0.0.0", 9092)  # every interface: -p 9092:9092
    assert config.log_dirs == "/data"


def test_compose_listeners_agree_with_ports_and_advertised_addresses() -> None:
    env = compose_environment()
    assert all(key.startswith("SEMEL_") for key in env)
    config = load_config(None, env=env)
    bound = {lsn.name: lsn for lsn in config.listeners}
    advertised = {lsn.name: lsn for lsn in config.advertised_listeners}
    assert set(bound) == set(advertised) == {"INTERNAL", "HOST"}
    assert {config.security_protocol(name) for name in bound} == {"PLAINTEXT"}
    assert all(lsn.host == "0.0.0.0" for lsn in bound.values())
    # in the network: the service's name and the bound port
    compose = (DOCKER / "compose.yaml").read_text()
    service = re.search(r"^services:\n {2}(\w+):", compose, re.MULTILINE)
    assert (advertised["INTERNAL"].host, advertised["INTERNAL"].port) == (
        service.group(1), bound["INTERNAL"].port)
    # from the host: the published port leads to the HOST listener, advertised as localhost
    published = re.findall(r'^ {6}- "(?:127\.0\.0\.1:)?(\d+):(\d+)"$', compose, re.MULTILINE)
    assert [(int(h), int(c)) for h, c in published] == [
        (advertised["HOST"].port, bound["HOST"].port)]
    assert advertised["HOST"].host == "localhost"


def healthcheck(tmp_path: Path, listeners: str) -> subprocess.CompletedProcess:
    env = {"SEMEL_LISTENERS": listeners, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, DOCKER / "healthcheck.py", tmp_path / "none"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_healthcheck_tells_live_from_dead(tmp_path: Path) -> None:
    with BrokerThread(tmp_path / "data") as broker:
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        live = healthcheck(tmp_path, f"PLAINTEXT://0.0.0.0:{port}")  # wildcard: via loopback
    assert live.returncode == 0, live.stdout + live.stderr
    assert live.stdout.startswith(f"healthy: PLAINTEXT on 127.0.0.1:{port} answers")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    dead = healthcheck(tmp_path, f"PLAINTEXT://127.0.0.1:{dead_port}")
    assert dead.returncode == 1 and dead.stdout.startswith("unhealthy: ")
    bad = healthcheck(tmp_path, "PLAINTEXT://127.0.0.1:notaport")
    assert bad.returncode == 1 and "listeners" in bad.stdout
