"""What every ``semel <tool>`` shares: the argument parser whose errors are one line, the
connection options (``--bootstrap-server``, ``--command-config``, ``--timeout``), ``--json``,
text tables, and the mapping of failures to exit codes (0 ok, 1 the broker answered an error,
2 usage or connection problems; one line on stderr, no traceback unless SEMEL_DEBUG is set).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (exit code 2)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


class UsageError(Exception):
    """A bad combination of arguments found after parsing (exit code 2)."""


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection and output")
    group.add_argument("--bootstrap-server", metavar="HOST:PORT", required=True,
                       help="broker(s) to connect to, comma-separated")
    group.add_argument("--command-config", metavar="FILE",
                       help="client properties: security.protocol, ssl.*, sasl.* "
                            "(see docs/CLI.md)")
    group.add_argument("--timeout", metavar="MS", type=int, default=30_000,
                       help="give up after this many milliseconds (default 30000)")
    group.add_argument("--json", action="store_true", help="print one JSON document")


def subcommands(parser: argparse.ArgumentParser, commands: Sequence[tuple[str, str]]
                ) -> dict[str, argparse.ArgumentParser]:
    """One sub-parser per ``(name, help)``, each with the connection options."""
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    out = {}
    for name, text in commands:
        p = sub.add_parser(name, help=text, description=text)
        add_connection_arguments(p)
        out[name] = p
    return out


def admin(args: argparse.Namespace):
    from semel.broker.tools.client import Admin

    security = None
    if args.command_config:
        from semel.broker.tools.security import Security

        security = Security.from_file(args.command_config)
    if args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    return Admin(args.bootstrap_server, security=security, timeout_ms=args.timeout)


def run_action(prog: str, fn: Callable[[argparse.Namespace], int | None],
        args: argparse.Namespace) -> int:
    """Run a tool's action, mapping failures to one line and an exit code."""
    from semel.broker.tools.client import ToolError

    try:
        return fn(args) or 0
    except UsageError as e:
        print(f"{prog}: {e} (see {prog} --help)", file=sys.stderr)
        return 2
    except ToolError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `semel topics list | head -1`
        sys.stderr.close()
        return 0
    except Exception as e:  # a bug: still one line unless debugging
        if os.environ.get("SEMEL_DEBUG"):
            raise
        print(f"{prog}: internal error: {type(e).__name__}: {e} (SEMEL_DEBUG=1 shows the "
              "traceback)", file=sys.stderr)
        return 2


def emit(args: argparse.Namespace, document: Any, text: Callable[[], str | None]) -> None:
    """``--json``: the document; else the text (nothing when it is empty or None)."""
    if args.json:
        import json

        print(json.dumps(document, indent=2))
    else:
        out = text()
        if out:
            print(out)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns left-aligned, two spaces apart; None prints as ``-``."""
    cells = [list(headers)] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()
                     for row in cells)


def key_values(items: Iterable[str], option: str) -> dict[str, str]:
    """``k=v`` arguments (each may also be a comma-separated list, ``[a,b]`` keeping its
    commas, as kafka-configs' --add-config) to a dict."""
    out: dict[str, str] = {}
    for item in items:
        for part in split_config_list(item):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"{option}: {part!r} is not key=value")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key.strip()] = value
    return out


def split_config_list(text: str) -> list[str]:
    """Split on commas outside square brackets: ``a=1,b=[x,y]`` -> ``a=1``, ``b=[x,y]``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (p.strip() for p in parts) if p]


def partition_list(text: str, option: str) -> list[int]:
    """``0,2,5-7`` -> [0, 2, 5, 6, 7]."""
    out: list[int] = []
    for part in text.split(","):
        low, sep, high = part.strip().partition("-")
        try:
            if sep:
                out.extend(range(int(low), int(high) + 1))
            else:
                out.append(int(low))
        except ValueError:
            raise UsageError(f"{option}: {text!r} is not a list of partitions") from None
    return out
