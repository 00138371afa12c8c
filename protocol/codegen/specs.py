"""Loading Kafka's JSON message specifications from the pinned spec sources.

Two sources, both read at generation time and never committed:
- ``kafka-python`` 3.0.12, which ships Apache Kafka 4.x specs as package resources
  (``kafka/protocol/schemas/resources/*.json``);
- Java ``kafka-clients`` 3.9.1 (``common/message/*.json`` inside the jar), for the APIs the
  first source lacks (GetTelemetrySubscriptions);
- Apache Kafka's sources at a pinned commit (``git show KAFKA_SOURCE_COMMIT:<path>`` in the
  repository named by ``KAFKA_SOURCE_REPO``), for the KIP-848 APIs at Kafka 4.x's versions
  (``KAFKA_SOURCE_SPECS``: ConsumerGroupHeartbeat v1 and ConsumerGroupDescribe v1 are newer
  than kafka-clients 3.9.1's v0).

The spec files are JSON with ``//`` comment lines.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

KAFKA_PYTHON_VERSION = "3.0.12"
KAFKA_CLIENTS_VERSION = "3.9.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
# a commit of a repository that follows Apache Kafka trunk (4.2 development; its message specs
# are Kafka's), on the machine that generated the codecs; KAFKA_SOURCE_REPO names another
# clone. Without it generation of these messages fails (the freshness test checks the rest).
KAFKA_SOURCE_COMMIT = "b1fcb5f6f7849e4203af0cfefe6d226175b43af0"
KAFKA_SOURCE_DEFAULT_REPO = "/work/.mirror/aiven+inkless/repo"
KAFKA_SOURCE_SPECS = frozenset({
    "ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse",
    "ConsumerGroupDescribeRequest", "ConsumerGroupDescribeResponse",
    # share groups (KIP-932): v1 (Kafka 4.1's stable version) is not in the other sources
    "ShareFetchRequest", "ShareFetchResponse",
    "ShareAcknowledgeRequest", "ShareAcknowledgeResponse",
    "ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResponse",
    "ShareGroupDescribeRequest", "ShareGroupDescribeResponse",
    "DescribeShareGroupOffsetsRequest", "DescribeShareGroupOffsetsResponse",
    "AlterShareGroupOffsetsRequest", "AlterShareGroupOffsetsResponse",
    "DeleteShareGroupOffsetsRequest", "DeleteShareGroupOffsetsResponse",
})


class SpecSourceMissing(Exception):
    pass


def _strip_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))


def parse_spec(text: str) -> dict:
    return json.loads(_strip_comments(text))


def kafka_python_dir() -> Path:
    try:
        version = importlib.metadata.version("kafka-python")
    except importlib.metadata.PackageNotFoundError:
        raise SpecSourceMissing("kafka-python is not installed") from None
    if version != KAFKA_PYTHON_VERSION:
        raise SpecSourceMissing(f"kafka-python {version} installed, specs pinned to "
                                f"{KAFKA_PYTHON_VERSION}")
    import kafka.protocol

    path = Path(kafka.protocol.__file__).parent / "schemas" / "resources"
    if not path.is_dir():
        raise SpecSourceMissing(f"no spec resources in {path}")
    return path


def kafka_clients_jar() -> Path:
    candidates = []
    if os.environ.get("KAFKA_CLIENTS_JAR"):
        candidates.append(Path(os.environ["KAFKA_CLIENTS_JAR"]))
    candidates.append(REPO_ROOT / ".cache" / "java-jars" / "kafka-clients.jar")
    for path in candidates:
        if path.is_file():
            with zipfile.ZipFile(path) as jar:
                props = jar.read("kafka/kafka-version.properties").decode()
            m = re.search(r"^version=(.+)$", props, re.MULTILINE)
            if not m or m.group(1).strip() != KAFKA_CLIENTS_VERSION:
                raise SpecSourceMissing(f"{path} is not kafka-clients {KAFKA_CLIENTS_VERSION}")
            return path
    raise SpecSourceMissing("kafka-clients.jar not found (run tests/tools/fetch_java_jars.sh "
                            "or set KAFKA_CLIENTS_JAR)")


def kafka_source_spec(name: str) -> str:
    """``<name>.json`` of Kafka's sources at ``KAFKA_SOURCE_COMMIT``."""
    repo = os.environ.get("KAFKA_SOURCE_REPO", KAFKA_SOURCE_DEFAULT_REPO)
    path = f"clients/src/main/resources/common/message/{name}.json"
    try:
        done = subprocess.run(["git", "-C", repo, "show", f"{KAFKA_SOURCE_COMMIT}:{path}"],
                              capture_output=True, check=False)
    except OSError as e:
        raise SpecSourceMissing(f"git unavailable: {e}") from None
    if done.returncode != 0:
        raise SpecSourceMissing(f"{path} at {KAFKA_SOURCE_COMMIT} not in {repo} (set "
                                f"KAFKA_SOURCE_REPO to a clone of Apache Kafka)")
    return done.stdout.decode()


class SpecSource:
    """Reads ``<Name>.json`` preferring the Kafka 4.x specs, falling back to the jar; the
    KIP-848 specs come from Kafka's sources at the pinned commit."""

    def __init__(self) -> None:
        self._dir = kafka_python_dir()
        self._jar = zipfile.ZipFile(kafka_clients_jar())

    def load(self, name: str) -> tuple[dict, str]:
        if name in KAFKA_SOURCE_SPECS:
            return (parse_spec(kafka_source_spec(name)),
                    f"Apache Kafka {KAFKA_SOURCE_COMMIT[:12]}")
        path = self._dir / f"{name}.json"
        if path.is_file():
            return parse_spec(path.read_text()), f"kafka-python {KAFKA_PYTHON_VERSION}"
        data = self._jar.read(f"common/message/{name}.json").decode()
        return parse_spec(data), f"kafka-clients {KAFKA_CLIENTS_VERSION}"
