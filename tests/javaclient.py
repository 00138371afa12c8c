"""Run the real Java Kafka client (kafka-clients 3.9.1) from tests.

tests/java/SemelClient.java is compiled with javac into .cache/java-classes/<hash>/, where
<hash> covers the source and the jar names, against the jars in .cache/java-jars/ (fetched by
tests/tools/fetch_java_jars.py on first use). run_java("produce", "--bootstrap", b, ...)
returns the JSON objects the program printed, one per stdout line; a failed run raises
JavaClientError carrying the Java exception class and message. Other small programs of
tests/java/ (one per feature, e.g. SemelFeatures.java) are compiled the same way and run with
run_program(source, main_class, ...).

Without `java`/`javac` a test that calls this module is skipped; with SEMEL_REQUIRE_JAVA=1
(set by .ci/run) it fails instead, so CI cannot silently skip the Java tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "java" / "SemelClient.java"
MAIN_CLASS = "SemelClient"
CACHE = ROOT / ".cache"
JAR_DIR = CACHE / "java-jars"
CLASSES_ROOT = CACHE / "java-classes"
FETCH_SCRIPT = ROOT / "tests" / "tools" / "fetch_java_jars.py"
JAR_NAMES = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
# Short-lived JVMs on a small machine: one GC thread, C1 only.
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")
ERROR_MARKER = "SEMEL_CLIENT_ERROR "

_compile_lock = threading.Lock()
_classes_dir: Path | None = None


class JavaClientError(Exception):
    """SemelClient exited non-zero (or ran past its timeout).

    exception_class/message: the Java exception that ended the run ("" for usage errors and
    timeouts); root_class/root_message: its innermost cause (the same when it has none);
    results: the JSON lines printed before it failed; stderr: everything it wrote.
    """

    def __init__(
        self,
        args: tuple[str, ...],
        returncode: int | None,
        stderr: str,
        results: list[dict[str, Any]],
        error: dict[str, str] | None = None,
    ) -> None:
        error = error or {}
        self.args_used = args
        self.returncode = returncode
        self.stderr = stderr
        self.results = results
        self.exception_class = exception_class = error.get("class", "")
        self.message = message = error.get("message") or ""
        self.root_class = error.get("root_class", exception_class)
        self.root_message = error.get("root_message", message) or ""
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        what = f"{exception_class}: {message}" if exception_class else f"exit status {returncode}"
        if self.root_class != exception_class:
            what += f" (root cause {self.root_class}: {self.root_message})"
        super().__init__(f"SemelClient {' '.join(args)} failed: {what}\n{tail}")


def java_available() -> bool:
    """True when both `java` and `javac` are on PATH."""
    return shutil.which("java") is not None and shutil.which("javac") is not None


def require_java() -> None:
    """Skip the calling test without Java, or fail it when SEMEL_REQUIRE_JAVA=1."""
    if java_available():
        return
    reason = (
        "java/javac not found on PATH (install a JDK, e.g. apt-get install default-jdk-headless)"
    )
    if os.environ.get("SEMEL_REQUIRE_JAVA") == "1":
        pytest.fail(f"{reason}; SEMEL_REQUIRE_JAVA=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


def jar_paths() -> list[Path]:
    """The client jars, fetched into .cache/java-jars/ if any is missing."""
    paths = [JAR_DIR / f"{name}.jar" for name in JAR_NAMES]
    if not all(p.is_file() for p in paths):
        subprocess.run([sys.executable, str(FETCH_SCRIPT), str(JAR_DIR)], check=True)
    return paths


def _classpath(classes: Path) -> str:
    return os.pathsep.join([str(classes), *(str(p) for p in jar_paths())])


def compile_program(source: Path, main_class: str) -> Path:
    """Compile one Java source file against the client jars, once per source version (kept
    in .cache/java-classes/<hash>/); returns the classes directory."""
    require_java()
    digest = hashlib.sha256(source.read_bytes())
    digest.update(",".join(JAR_NAMES).encode())
    target = CLASSES_ROOT / digest.hexdigest()[:16]
    if (target / f"{main_class}.class").is_file():
        return target
    jars = os.pathsep.join(str(p) for p in jar_paths())
    CLASSES_ROOT.mkdir(parents=True, exist_ok=True)
    # compile beside the target and rename: concurrent runs never see half a build
    tmp = Path(tempfile.mkdtemp(prefix="build-", dir=CLASSES_ROOT))
    done = subprocess.run(
        ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(tmp), "-cp", jars, str(source)],
        check=False, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac failed for {source}:\n{done.stderr}")
    try:
        os.rename(tmp, target)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def compile_client() -> Path:
    """Compile SemelClient.java once per source version; returns the classes directory."""
    global _classes_dir
    with _compile_lock:
        if _classes_dir is None:
            _classes_dir = compile_program(SOURCE, MAIN_CLASS)
        return _classes_dir


def program_command(source: Path, main_class: str, *args: object) -> list[str]:
    """The command line that runs another program of tests/java/ (for subprocess.Popen)."""
    with _compile_lock:
        classes = compile_program(source, main_class)
    return ["java", *JVM_OPTIONS, "-cp", _classpath(classes), main_class, *map(str, args)]


def run_program(source: Path, main_class: str, *args: object,
                timeout: float = 120.0) -> list[dict[str, Any]]:
    """Compile and run another small Java program of tests/java/ (one that prints one JSON
    object per line); the objects it printed. A non-zero exit fails the calling test."""
    done = subprocess.run(program_command(source, main_class, *args),
                          check=False, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{main_class} {' '.join(map(str, args))} exited "
                    f"{done.returncode}:\n{done.stderr[-3000:]}", pytrace=False)
    return _parse_lines(done.stdout)


def java_command(*args: object) -> list[str]:
    """The command line that runs SemelClient with `args` (for subprocess.Popen users)."""
    classes = compile_client()
    return ["java", *JVM_OPTIONS, "-cp", _classpath(classes), MAIN_CLASS, *map(str, args)]


def run_java(*args: object, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run SemelClient with `args`; the JSON objects it printed, in order.

    Raises JavaClientError when it exits non-zero or runs longer than `timeout` seconds.
    Give the client its own `--timeout-ms` below `timeout` to get the Java exception.
    """
    cmd = java_command(*args)
    str_args = tuple(map(str, args))
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        raise JavaClientError(
            str_args, None, err + f"\n(killed after {timeout} s)", _parse_lines(out)
        ) from None
    results = _parse_lines(done.stdout)
    if done.returncode != 0:
        raise JavaClientError(
            str_args, done.returncode, done.stderr, results, _error_of(done.stderr)
        )
    return results


def _parse_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _error_of(stderr: str) -> dict[str, str]:
    for line in reversed(stderr.splitlines()):
        if line.startswith(ERROR_MARKER):
            return json.loads(line[len(ERROR_MARKER) :])
    return {}


# ------------------------------------------------------------------ the records `produce` sends


def produced_key(i: int, prefix: str | None) -> str | None:
    """Key of record i: "<prefix>-<i>", or None without a --key-prefix."""
    return None if prefix is None else f"{prefix}-{i}"


def produced_value(i: int, prefix: str = "value", size: int = 0) -> str:
    """Value of record i: "<prefix>-<i>" padded with '.' to `size` characters."""
    return f"{prefix}-{i}".ljust(size, ".")


def record_checksum(records: Iterable[tuple[bytes | str | None, bytes | str | None]]) -> int:
    """Sum of CRC32(key, 0x00, value) over (key, value) pairs: SemelClient's order-free checksum."""
    total = 0
    for key, value in records:
        k = key.encode() if isinstance(key, str) else key or b""
        v = value.encode() if isinstance(value, str) else value or b""
        total += zlib.crc32(k + b"\0" + v)
    return total


def expected_checksum(
    count: int,
    *,
    start: int = 0,
    key_prefix: str | None = None,
    value_prefix: str = "value",
    value_size: int = 0,
) -> int:
    """The checksum of the `count` records `produce` sends with these options."""
    return record_checksum(
        (produced_key(i, key_prefix), produced_value(i, value_prefix, value_size))
        for i in range(start, start + count)
    )
