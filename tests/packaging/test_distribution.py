"""The distribution as a user gets it: the sdist and the wheel (`python -m build`, the wheel
built both from the tree and from the unpacked sdist) hold every module of the five package
folders under the one import name `semel` and nothing else; the wheel installed into a fresh
virtual environment (dependencies from the package index) runs from a directory outside the
repository, claims no generic top-level names, and its `semel serve` serves a real client.

One sdist, two wheels and one virtual environment per module: about a minute on 2 cores,
mostly the two isolated builds and the dependencies' install (from pip's cache when warm).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.packaging.roundtrip import roundtrip

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
FOLDERS = ("broker", "protocol", "storage", "coordinator", "pipelines")
NATIVE = "semel/protocol/_recordwalk"  # + .cpython-311-x86_64-linux-gnu.so, when built
# setuptools' include-package-data also ships the extension's source (harmless, unused)
SHIPPED_SOURCE = {NATIVE + ".c"}
GENERIC_NAMES = ("broker", "protocol", "storage", "coordinator", "pipelines")
READY = re.compile(r"ready on (\S+):(\d+)")
BUILD_TIMEOUT_S = 600


def _package_folders() -> dict[str, Path]:
    """Every package the folders hold, by its installed name: each folder with an __init__.py."""
    found = {}
    for name, folder in SETUPTOOLS["package-dir"].items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            found[".".join((name, *rel.parts))] = init.parent
    return found


def _expected_wheel_modules() -> set[str]:
    return {
        "/".join((*name.split("."), py.name))
        for name, folder in _package_folders().items()
        for py in folder.glob("*.py")
    }


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no SEMEL_ properties, nothing on PYTHONPATH."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("SEMEL_") and k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(args: list, **kw) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                            check=False, **kw)
    assert result.returncode == 0, (
        f"{' '.join(map(str, args))} exited {result.returncode}:\n"
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def test_package_dir_maps_the_five_folders() -> None:
    assert SETUPTOOLS["package-dir"] == {f"semel.{f}": f for f in FOLDERS}


def test_packages_list_names_every_package_folder() -> None:
    # a subpackage missing from pyproject's list would be left out of the wheel silently
    assert sorted(SETUPTOOLS["packages"]) == sorted(_package_folders())
    # and a folder of modules without an __init__.py would be missed by both lists
    orphans = sorted(
        str(py.parent.relative_to(ROOT))
        for folder in FOLDERS for py in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in py.parts and not (py.parent / "__init__.py").exists())
    assert orphans == []


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """sdist, the wheel built from it, and the wheel built from the tree."""
    out = tmp_path_factory.mktemp("dist")
    # python -m build's default: the sdist, then a wheel from the unpacked sdist
    _run([sys.executable, "-m", "build", "--outdir", out / "release", ROOT],
         timeout=BUILD_TIMEOUT_S)
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", out / "tree", ROOT],
         timeout=BUILD_TIMEOUT_S)
    (sdist,) = (out / "release").glob("*.tar.gz")
    (wheel,) = (out / "release").glob("*.whl")
    (tree_wheel,) = (out / "tree").glob("*.whl")
    return {"sdist": sdist, "wheel": wheel, "tree_wheel": tree_wheel}


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


@pytest.mark.parametrize("which", ["wheel", "tree_wheel"])
def test_wheel_holds_semel_only(dist, which: str) -> None:
    names = _wheel_names(dist[which])
    assert {n.split("/")[0] for n in names} == {"semel", f"semel-{VERSION}.dist-info"}
    modules = {n for n in names if n.startswith("semel/")}
    native = {n for n in modules if n.startswith(NATIVE + ".") and n.endswith(".so")}
    assert modules - native - SHIPPED_SOURCE == _expected_wheel_modules()
    if shutil.which("cc") or shutil.which("gcc"):
        assert len(native) == 1, "the C record walker was not built into the wheel"
    with zipfile.ZipFile(dist[which]) as z:
        entry_points = z.read(f"semel-{VERSION}.dist-info/entry_points.txt").decode()
    assert re.search(r"^semel\s*=\s*semel\.broker\.cli:main$", entry_points, re.MULTILINE)


def test_sdist_is_complete(dist) -> None:
    with tarfile.open(dist["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    # what the build needs: the project file, the readme it names, the C source
    assert {"pyproject.toml", "README.md", "protocol/_recordwalk.c"} <= names
    assert {f"{f}/__init__.py" for f in FOLDERS} <= names
    # the wheel made from the sdist is the wheel made from the tree: nothing was left behind
    assert sorted(_wheel_names(dist["wheel"])) == sorted(_wheel_names(dist["tree_wheel"]))


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A fresh virtual environment with the released wheel installed (deps from the index)."""
    home = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", home / "venv"], timeout=120)
    python = home / "venv" / "bin" / "python"
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", dist["wheel"]],
         timeout=BUILD_TIMEOUT_S, env=_clean_env())
    return home / "venv"


def test_installed_names(venv: Path, tmp_path: Path) -> None:
    script = (
        "import importlib, importlib.util, json, sys\n"
        f"generic = {list(GENERIC_NAMES)!r}\n"
        "import semel.broker.cli, semel.protocol.validator\n"
        "print(json.dumps({\n"
        "  'found': [n for n in generic if importlib.util.find_spec(n) is not None],\n"
        "  'semel': list(importlib.import_module('semel').__path__),\n"
        "  'cli': semel.broker.cli.__file__,\n"
        "  'native': importlib.util.find_spec('semel.protocol._recordwalk') is not None,\n"
        "}))\n")
    out = _run([venv / "bin" / "python", "-c", script], cwd=tmp_path, env=_clean_env(),
               timeout=60)
    facts = json.loads(out.stdout)
    assert facts["found"] == []  # `import broker` and the like fail
    site = str(venv / "lib")
    assert all(p.startswith(site) for p in facts["semel"]), facts["semel"]
    assert facts["cli"].startswith(site)
    if shutil.which("cc") or shutil.which("gcc"):
        assert facts["native"]
    fails = subprocess.run([venv / "bin" / "python", "-c", "import broker"], cwd=tmp_path,
                           env=_clean_env(), capture_output=True, text=True, timeout=60,
                           check=False)
    assert fails.returncode != 0 and "ModuleNotFoundError" in fails.stderr


def test_console_script(venv: Path, tmp_path: Path) -> None:
    out = _run([venv / "bin" / "semel", "--version"], cwd=tmp_path, env=_clean_env(),
               timeout=60)
    assert out.stdout.strip() == f"semel {VERSION}"
    out = _run([venv / "bin" / "semel", "serve", "--help"], cwd=tmp_path, env=_clean_env(),
               timeout=60)
    assert "--data-dir" in out.stdout and "--config" in out.stdout


def test_installed_broker_serves_a_real_client(venv: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [venv / "bin" / "semel", "serve", "--port", "0", "--data-dir", tmp_path / "data"],
        cwd=tmp_path, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    lines: list[str] = []
    ready = threading.Event()
    address: list[str] = []

    def pump() -> None:
        for line in proc.stdout:
            lines.append(line)
            m = READY.search(line)
            if m and not ready.is_set():
                address.append(f"{m.group(1)}:{m.group(2)}")
                ready.set()
        ready.set()  # the broker ended

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(60) and address, "no ready line:\n" + "".join(lines[-30:])
        roundtrip(address[0], "installed")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, "".join(lines[-30:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert (tmp_path / "data" / "installed-0").is_dir()
