"""Running `semel dump-log` from tests: in-process through the CLI's main (fast), or as the
installed `semel` script in a subprocess (the real command line)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from semel.broker import cli


@dataclass
class Dump:
    rc: int
    out: str
    err: str

    @property
    def objects(self) -> list[dict[str, Any]]:
        """The JSON Lines of a --json run."""
        return [json.loads(line) for line in self.out.splitlines()]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]


def dump(*args: object) -> Dump:
    """`semel dump-log ARGS` in this process (through semel.broker.cli.main)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = cli.main(["dump-log", *map(str, args)])
        except SystemExit as exc:  # argparse usage errors
            rc = int(exc.code or 0)
    return Dump(rc, out.getvalue(), err.getvalue())


def semel_command() -> list[str]:
    """The installed `semel` console script (beside this interpreter), else `-m`."""
    script = Path(sys.executable).parent / "semel"
    if script.is_file():
        return [str(script)]
    found = shutil.which("semel")
    return [found] if found else [sys.executable, "-m", "semel.broker.cli"]


def dump_cli(*args: object) -> Dump:
    """`semel dump-log ARGS` as a separate process."""
    done = subprocess.run([*semel_command(), "dump-log", *map(str, args)], capture_output=True,
                          text=True, timeout=120, check=False)
    return Dump(done.returncode, done.stdout, done.stderr)


def data_records(batches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of the non-control batches of a --json --print-data dump."""
    return [r for b in batches if not b["isControl"] for r in b["records"]]
