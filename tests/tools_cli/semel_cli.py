"""Run ``semel <tool> ...`` in a subprocess, as a user would (the installed console script
when there is one, else ``python -m semel.broker.cli``)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(sys.executable).with_name("semel")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "semel.broker.cli"]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def json(self):
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)

    @property
    def error_line(self) -> str:
        """The one line a failed command prints (asserting it is one line, no traceback)."""
        lines = self.stderr.splitlines()
        assert len(lines) == 1, self.stderr
        assert "Traceback" not in self.stderr
        return lines[0]


def semel(*args: object, bootstrap: str | None = None, json_output: bool = False,
          stdin: str | None = None, timeout: float = 60) -> Result:
    argv = [*COMMAND, *map(str, args)]
    if bootstrap is not None:
        argv += ["--bootstrap-server", bootstrap]
    if json_output:
        argv.append("--json")
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout,
                          input=stdin if stdin is not None else "")
    return Result(proc.returncode, proc.stdout, proc.stderr)
