"""The Java load generator: bench/java/BenchProducer.java, compiled with javac against the
kafka-clients jars of the Java client tests (.cache/java-jars/, fetched by
tests/tools/fetch_java_jars.py when missing) into .cache/java-classes/bench-<hash>/.

``command(spec)`` is the command line bench/clients.py's ``run_group`` starts for a
``java_produce`` spec; the process speaks the same READY/GO barrier and prints one JSON
result line like the Python clients. The JVM runs with the serial collector (one GC thread
on a 2-core machine) and its default JIT; its CPU time counts every JVM thread.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "bench" / "java" / "BenchProducer.java"
MAIN_CLASS = "BenchProducer"
JAR_DIR = ROOT / ".cache" / "java-jars"
CLASSES_ROOT = ROOT / ".cache" / "java-classes"
FETCH_SCRIPT = ROOT / "tests" / "tools" / "fetch_java_jars.py"
JAR_NAMES = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
JVM_OPTIONS = ("-XX:+UseSerialGC", "-Xmx1g", "-Xshare:auto")

_lock = threading.Lock()
_classes: Path | None = None


def available() -> bool:
    return shutil.which("java") is not None and shutil.which("javac") is not None


def jar_paths() -> list[Path]:
    paths = [JAR_DIR / f"{name}.jar" for name in JAR_NAMES]
    if not all(p.is_file() for p in paths):
        subprocess.run([sys.executable, str(FETCH_SCRIPT), str(JAR_DIR)], check=True,
                       stdout=subprocess.DEVNULL)
    return paths


def compile_producer() -> Path:
    """The classes directory, compiled once per source version."""
    global _classes
    with _lock:
        if _classes is not None:
            return _classes
        if not available():
            raise RuntimeError("java/javac not found on PATH: the Java rows need a JDK")
        jars = jar_paths()
        digest = hashlib.sha256(SOURCE.read_bytes())
        digest.update(",".join(JAR_NAMES).encode())
        target = CLASSES_ROOT / f"bench-{digest.hexdigest()[:16]}"
        if not (target / f"{MAIN_CLASS}.class").is_file():
            CLASSES_ROOT.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix="build-", dir=CLASSES_ROOT))
            done = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(tmp),
                                   "-cp", os.pathsep.join(map(str, jars)), str(SOURCE)],
                                  check=False, capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise RuntimeError(f"javac failed for {SOURCE}:\n{done.stderr}")
            try:
                os.rename(tmp, target)
            except OSError:  # a concurrent run finished first
                shutil.rmtree(tmp, ignore_errors=True)
        _classes = target
        return target


def command(spec: dict) -> list[str]:
    classes = compile_producer()
    classpath = os.pathsep.join([str(classes), *map(str, jar_paths())])
    argv = ["java", *JVM_OPTIONS, "-cp", classpath, MAIN_CLASS,
            "--bootstrap", spec["bootstrap"], "--topic", spec["topic"],
            "--partition", str(spec["partition"]), "--records", str(spec["records"]),
            "--size", str(spec["size"]), "--values", spec["values"],
            "--compression", spec.get("compression", "none")]
    for key, value in spec.get("config", {}).items():
        argv += ["--prop", f"{key}={value}"]
    return argv


def version() -> str:
    """e.g. 'kafka-clients 3.9.1 on OpenJDK 17.0.15'."""
    client = "kafka-clients"
    try:
        import zipfile

        with zipfile.ZipFile(JAR_DIR / "kafka-clients.jar") as jar:
            text = jar.read("kafka/kafka-version.properties").decode()
        client += " " + next(line.split("=", 1)[1] for line in text.splitlines()
                             if line.startswith("version="))
    except (OSError, KeyError, StopIteration):
        pass
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30,
                              check=False)
        first = done.stderr.splitlines()[0] if done.stderr else ""
        jdk = first.split('"')[1] if '"' in first else first
        return f"{client} on JDK {jdk}"
    except (OSError, IndexError, subprocess.SubprocessError):
        return client
