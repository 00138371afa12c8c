"""Loading Kafka's JSON message specifications from the pinned spec sources.

Two sources, both read at generation time and never committed:
- ``kafka-python`` 3.0.12, which ships Apache Kafka 4.x specs as package resources
  (``kafka/protocol/schemas/resources/*.json``);
- Java ``kafka-clients`` 3.9.1 (``common/message/*.json`` inside the jar), for the APIs the
  first source lacks (ConsumerGroupHeartbeat, ConsumerGroupDescribe,
  GetTelemetrySubscriptions).

The spec files are JSON with ``//`` comment lines.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import zipfile
from pathlib import Path

KAFKA_PYTHON_VERSION = "3.0.12"
KAFKA_CLIENTS_VERSION = "3.9.1"
REPO_ROOT = Path(__file__).resolve().parents[2]


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


class SpecSource:
    """Reads ``<Name>.json`` preferring the Kafka 4.x specs, falling back to the jar."""

    def __init__(self) -> None:
        self._dir = kafka_python_dir()
        self._jar = zipfile.ZipFile(kafka_clients_jar())

    def load(self, name: str) -> tuple[dict, str]:
        path = self._dir / f"{name}.json"
        if path.is_file():
            return parse_spec(path.read_text()), f"kafka-python {KAFKA_PYTHON_VERSION}"
        data = self._jar.read(f"common/message/{name}.json").decode()
        return parse_spec(data), f"kafka-clients {KAFKA_CLIENTS_VERSION}"
