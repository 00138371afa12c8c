"""Helpers shared by the record tests: the Java fixtures' records and a Java runner.

``fixture_records()`` is the Python mirror of the record set in fixtures/JavaRecords.java
(a deterministic function of the index); the java_*.bin files were written by that
program with kafka-clients 3.9.1, the jars ``make jars`` puts in .cache/java-jars/:
``java -cp <jars> tests/protocol/fixtures/JavaRecords.java generate tests/protocol/fixtures``.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

from tests.javaclient import JVM_OPTIONS, jar_paths, require_java

FIXTURES = Path(__file__).parent / "fixtures"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
COUNT = 60


def fixture_timestamp(i: int) -> int:
    return 1700000000000 + ((i * 37) % 11) * 1000 - i


def fixture_key(i: int) -> bytes | None:
    return None if i % 7 == 3 else f"key-{i}".encode()


def fixture_value(i: int) -> bytes | None:
    if i % 13 == 5:
        return None
    return bytes((i * 31 + (j // 4) * 7) % 251 for j in range((i * 97) % 3000))


def fixture_headers(i: int) -> list[tuple[str, bytes | None]]:
    if i % 3 == 0:
        return [("h1", f"v{i}".encode()), ("h2", None)]
    if i % 3 == 1:
        return [("\u00fcn\u00ef", b"\x00\x01\x02")]
    return []


def fixture_records() -> list[tuple[bytes | None, bytes | None, list, int]]:
    """(key, value, headers, timestamp) for offsets 0..COUNT-1."""
    return [
        (fixture_key(i), fixture_value(i), fixture_headers(i), fixture_timestamp(i))
        for i in range(COUNT)
    ]


def java_read(paths: list[Path]) -> list[str]:
    """Kafka's own reader over batch files: ensureValid() + one line per batch/record.

    Skips the calling test without Java (fails it under SEMEL_REQUIRE_JAVA=1).
    """
    require_java()
    classpath = os.pathsep.join(str(p) for p in jar_paths())
    result = subprocess.run(
        ["java", *JVM_OPTIONS, "-cp", classpath, str(FIXTURES / "JavaRecords.java"), "read",
         *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line[:2] in ("B ", "R ")]


def describe(headers_and_records) -> list[str]:
    """The lines JavaRecords.java prints, computed from our own decoding."""
    lines = []
    for h, records in headers_and_records:
        lines.append(
            f"B {h.base_offset} {h.last_offset} {h.record_count} {h.compression} "
            f"{h.timestamp_type} {h.max_timestamp} {h.producer_id} {h.producer_epoch} "
            f"{h.base_sequence} {str(h.is_transactional).lower()} "
            f"{str(h.is_control).lower()} {h.partition_leader_epoch}"
        )
        for r in records:
            key = "null" if r.key is None else r.key.hex()
            if r.value is None:
                value = "null"
            else:
                value = f"{len(r.value)}:{zlib.crc32(r.value):x}"
            hdrs = "".join(
                f" {k.encode().hex()}={'null' if v is None else v.hex()}" for k, v in r.headers
            )
            lines.append(f"R {r.offset} {r.timestamp} {key} {value}{hdrs}")
    return lines
