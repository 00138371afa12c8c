"""The container image, built and run with podman: docker/build_image.sh (what `make image`
runs) builds it with no network inside the build, from the wheelhouse and the debootstrap
base; the container (host network, two named listeners on free ports of 127.0.0.1) serves a
real client on either listener, each advertising its own address; its HEALTHCHECK passes and
fails when the broker cannot be reached; SIGTERM stops it gracefully.

Skipped only where podman is not installed (.ci/run installs it, with debootstrap and runc).
Cold, about 2 minutes on 2 cores (debootstrap ~50 s, once per machine: the root file system is
cached under .cache/semel-base/ and the base image stays in podman's store); warm, about 40 s.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.packaging.roundtrip import roundtrip

ROOT = Path(__file__).resolve().parents[2]
PODMAN = str(ROOT / "docker" / "podman")
IMAGE = "localhost/semel:test"
BUILD_TIMEOUT_S = 1200  # a cold debootstrap from a slow mirror
READY_TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(
    shutil.which("podman") is None,
    reason="podman is not installed (apt-get install podman debootstrap runc; .ci/run does)")


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run([PODMAN, *args], capture_output=True, text=True, timeout=timeout,
                            check=False)
    if check:
        assert result.returncode == 0, (
            f"podman {' '.join(args)} exited {result.returncode}:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-3000:]}")
    return result


def logs_of(name: str) -> str:
    logs = podman("logs", name)
    return logs.stdout + logs.stderr


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def image() -> str:
    env = {**os.environ, "IMAGE": IMAGE, "PYTHON": sys.executable}
    build = subprocess.run([ROOT / "docker" / "build_image.sh"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    return IMAGE


@pytest.fixture
def container(image: str):
    """The container's name and its two listeners' ports; stopped and removed by name."""
    name = f"semel-test-{os.getpid()}"
    internal, host = free_ports(2)
    podman("rm", "-f", "-v", name, check=False)
    podman("run", "-d", "--name", name, "--network", "host",
           "-e", f"SEMEL_LISTENERS=INTERNAL://127.0.0.1:{internal},HOST://127.0.0.1:{host}",
           "-e", "SEMEL_LISTENER_SECURITY_PROTOCOL_MAP=INTERNAL:PLAINTEXT,HOST:PLAINTEXT",
           "-e", (f"SEMEL_ADVERTISED_LISTENERS=INTERNAL://127.0.0.1:{internal},"
                  f"HOST://127.0.0.1:{host}"),
           image)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            logs = logs_of(name)
            if "semel ready on" in logs:
                break
            running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            assert running == "true" and time.monotonic() < deadline, (
                f"the container did not become ready (running: {running}):\n"
                + logs[-3000:])
            time.sleep(0.2)
        yield name, internal, host
    finally:
        podman("stop", "-t", "30", name, check=False, timeout=60)
        podman("rm", "-f", "-v", name, check=False)


def test_container_serves_real_clients(container) -> None:
    from confluent_kafka.admin import AdminClient

    name, internal, host = container
    # each listener advertises its own address
    for port in (internal, host):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        brokers = admin.list_topics(timeout=30).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", port)]
    roundtrip(f"127.0.0.1:{host}", "container")

    # the image's HEALTHCHECK (docker format keeps it) passes while the broker serves
    check = podman("healthcheck", "run", name, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    status = podman("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()
    assert status == "healthy"
    ran = podman("exec", name, "/opt/semel/venv/bin/python", "/opt/semel/healthcheck.py")
    assert ran.stdout.startswith(f"healthy: INTERNAL on 127.0.0.1:{internal} answers: ")
    # ... and fails where no broker answers
    (dead,) = free_ports(1)
    failed = podman("exec", "-e", f"SEMEL_LISTENERS=PLAINTEXT://127.0.0.1:{dead}",
                    "-e", "SEMEL_LISTENER_SECURITY_PROTOCOL_MAP=PLAINTEXT:PLAINTEXT",
                    "-e", "SEMEL_ADVERTISED_LISTENERS=", name,
                    "/opt/semel/venv/bin/python", "/opt/semel/healthcheck.py", check=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert failed.stdout.startswith("unhealthy: ") and f"127.0.0.1:{dead}" in failed.stdout

    # the installed semel is the wheel's, with its C record walker when the wheel has one
    (wheel,) = (ROOT / "docker" / "wheelhouse").glob("semel-*.whl")
    with zipfile.ZipFile(wheel) as z:
        native = any("_recordwalk" in n and n.endswith(".so") for n in z.namelist())
    probe = podman("exec", name, "python", "-c",
                   "import importlib.util as u; print(u.find_spec('semel.protocol._recordwalk')"
                   " is not None, u.find_spec('broker') is None)")
    assert probe.stdout.split() == [str(native), "True"]

    podman("stop", "-t", "30", name, timeout=60)
    code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
    assert code == "0"  # SIGTERM: a graceful stop
    assert "stopped" in logs_of(name)
