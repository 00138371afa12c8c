"""``semel --version`` and what the command line imports: the version is pyproject's, and
neither ``--version`` nor a tool loads the broker, an event loop, prometheus or codecs it does
not use."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from semel.broker import __version__
from tests.tools_cli.semel_cli import semel

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("asyncio", "uvloop", "prometheus_client", "semel.broker.server",
         "semel.broker.config", "semel.storage", "semel.coordinator", "semel.broker.handlers")


def pyproject_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def modules_after(argv: list[str]) -> tuple[int, set[str]]:
    """Run ``main(argv)`` in a fresh interpreter; its exit code and the modules it loaded."""
    code = ("import sys\nfrom semel.broker.cli import main\nrc = main(sys.argv[1:])\n"
            "print('\\n'.join(sys.modules), file=sys.stderr)\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, *argv], check=False,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    return proc.returncode, set(proc.stderr.split())


def test_version_is_pyprojects():
    assert __version__ == pyproject_version()
    result = semel("--version")
    assert (result.returncode, result.stdout) == (0, f"semel {pyproject_version()}\n")


def test_version_loads_nothing_of_the_broker():
    rc, modules = modules_after(["--version"])
    assert rc == 0
    loaded = {m for m in modules if m.startswith(("semel.", "argparse", *HEAVY))}
    assert loaded == {"semel.broker", "semel.broker.cli"}


def test_a_tool_loads_only_what_it_uses(cli_broker):
    rc, modules = modules_after(["topics", "list", "--bootstrap-server", cli_broker.bootstrap])
    assert rc == 0
    assert not {m for m in modules if m.startswith(HEAVY)}
    assert {m for m in modules if m.startswith("semel.protocol.messages.")} == {
        f"semel.protocol.messages.{name}_{kind}" for name in ("api_versions", "metadata")
        for kind in ("request", "response")}


def test_help_lists_every_tool():
    result = semel("--help")
    assert result.returncode == 0
    for tool in ("serve", "scram", "topics", "configs", "groups", "transactions", "acls",
                 "dump-log"):
        assert tool in result.stdout
    for tool in ("topics", "configs", "groups", "transactions", "acls", "dump-log"):
        assert semel(tool, "--help").returncode == 0, tool
