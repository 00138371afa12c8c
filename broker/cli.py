"""The command line: ``semel serve`` (also ``python -m semel.broker serve``) and ``semel scram``.

Prints exactly one line containing ``ready`` and the bound ``host:port`` once the broker
accepts connections; exits non-zero with a one-line reason when the configuration is bad
(unknown key, wrong type, unwritable data directory, port in use). SIGTERM and SIGINT stop
the broker gracefully.

``semel scram --data-dir DIR --add 'SCRAM-SHA-256=[name=alice,password=alice-secret]'`` stores
SCRAM credentials in a data directory before the broker starts (Kafka's ``kafka-storage format
--add-scram``; same argument syntax, ``iterations=`` optional); it refuses a directory a running
broker holds. Errors are one line, exit code 2.

The admin tools, ``semel topics|configs|groups|transactions|acls ACTION
--bootstrap-server HOST:PORT ...``, talk to any Kafka-compatible broker over the wire
(``broker/tools/``, docs/CLI.md); Kafka's flag style (``semel topics --list ...``) is accepted
too. ``semel dump-log`` prints log segment files. ``semel --version`` prints the version. Each
tool's module is imported only when it runs, so ``--version`` and the tools start without
importing the broker. ``semel serve`` with plain arguments (``--name value``, ``--name=value``)
is parsed without argparse (start-up time); anything else goes through argparse.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (start-up time)
if TYPE_CHECKING:
    import argparse

    from semel.broker.config import BrokerConfig

# semel <tool>: the module (imported when the tool runs) and its one-line help
TOOLS = {
    "topics": ("semel.broker.tools.topics", "create, list, describe, alter and delete topics"),
    "configs": ("semel.broker.tools.configs", "describe and alter topic and broker configs"),
    "groups": ("semel.broker.tools.groups",
               "list, describe (with lag), reset offsets of and delete consumer groups"),
    "transactions": ("semel.broker.tools.transactions",
                     "list, describe, find hanging and abort transactions"),
    "acls": ("semel.broker.tools.acls", "list, add and remove ACLs"),
    "dump-log": ("semel.broker.tools.dump_log", "print the contents of log segment files"),
}

# semel serve's options: flag -> (dest, metavar, help); --set appends, --port is an int
SERVE_OPTIONS = {
    "--config": ("config", "FILE", "server.properties file"),
    "--set": ("overrides", "KEY=VALUE", "override one property (repeatable)"),
    "--port": ("port", None, "listener port (0 = ephemeral)"),
    "--host": ("host", None, "listener host"),
    "--data-dir": ("data_dir", "DIR", "data directory (log.dirs)"),
    "--log-level": ("log_level", None, None),
}


def _parser() -> argparse.ArgumentParser:
    from semel.broker import __version__
    from semel.broker.tools.common import OneLineParser

    parser = OneLineParser(prog="semel", description="semel: a Kafka-protocol broker")
    parser.add_argument("--version", action="version", version=f"semel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    defaults = vars(_serve_defaults())
    for flag, (dest, metavar, text) in SERVE_OPTIONS.items():
        serve.add_argument(flag, dest=dest, metavar=metavar, help=text, default=defaults[dest],
                           action="append" if dest == "overrides" else "store",
                           type=int if dest == "port" else None)
    scram = sub.add_parser("scram", help="add or update SCRAM credentials in a data directory "
                                         "while no broker runs on it")
    scram.add_argument("--data-dir", metavar="DIR", required=True, help="data directory")
    scram.add_argument("--add", metavar="'MECHANISM=[name=N,password=P]'", action="append",
                       required=True, help="credential to add or update (repeatable)")
    for name, (_, text) in TOOLS.items():  # listed for --help; run by _run_tool
        sub.add_parser(name, help=text, add_help=False)
    return parser


def _serve_defaults():
    from types import SimpleNamespace

    return SimpleNamespace(command="serve", config=None, overrides=[], port=None, host=None,
                           data_dir=None,
                           log_level=os.environ.get("SEMEL_LOG_LEVEL", "INFO"))


def _serve_arguments(argv: list[str]):
    """``semel serve ARGS`` parsed as argparse would, without importing it (argparse and the
    parser it builds are ~5 ms of a broker's start-up): only ``--name value`` and
    ``--name=value`` of SERVE_OPTIONS' flags, spelled in full. None for anything else (help,
    an abbreviation, an unknown flag, a missing, empty or dash-led value, a port that is not
    an int): argparse then parses, with its own messages."""
    args = _serve_defaults()
    overrides: list[str] = []
    i = 0
    while i < len(argv):
        flag, sep, value = argv[i].partition("=")
        if flag not in SERVE_OPTIONS:
            return None
        if not sep:
            i += 1
            if i == len(argv):
                return None
            value = argv[i]
        i += 1
        if not value or value.startswith("-"):
            return None
        dest = SERVE_OPTIONS[flag][0]
        if dest == "overrides":
            overrides.append(value)
            continue
        if dest == "port":
            try:
                value = int(value)
            except ValueError:
                return None
        setattr(args, dest, value)
    args.overrides = overrides
    return args


def _run_tool(name: str, argv: list[str]) -> int:
    """``semel <tool> ...``: the tool's own parser (``add_arguments``), then ``run``."""
    import argparse
    import importlib

    from semel.broker.tools.common import OneLineParser

    module_name, text = TOOLS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        print(f"semel {name}: not available in this installation", file=sys.stderr)
        return 2
    parser = OneLineParser(prog=f"semel {name}", description=text)
    module.add_arguments(parser)
    # argparse has no public way to read a parser's sub-commands
    actions = next((a.choices for a in parser._actions
                    if isinstance(a, argparse._SubParsersAction)), None)
    if actions:
        argv = _kafka_flag_style(argv, actions)
    return module.run(parser.parse_args(argv))


def _kafka_flag_style(argv: list[str], actions) -> list[str]:
    """Kafka's tools name the action as a flag (``kafka-topics.sh --list``): when no action
    word leads, the first ``--<action>`` becomes it."""
    if not argv or argv[0] in actions or argv[0] in ("-h", "--help"):
        return argv
    for i, arg in enumerate(argv):
        if arg.startswith("--") and arg[2:] in actions:
            return [arg[2:], *argv[:i], *argv[i + 1:]]
    return argv


def _scram(data_dir: str, additions: list[str]) -> int:
    import fcntl

    from semel.broker.config import ConfigError
    from semel.broker.security.credentials import ScramCredentialStore, parse_scram_argument
    from semel.storage.fs import MetadataFileError
    from semel.storage.log_manager import LOCK_FILE

    try:
        parsed = [parse_scram_argument(a) for a in additions]
        _check_data_dir(data_dir)
    except (ValueError, ConfigError) as e:
        print(f"semel scram: {e}", file=sys.stderr)
        return 2
    fd = os.open(Path(data_dir) / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print(f"semel scram: {data_dir} is in use by a running broker (stop it, or use "
                  "AlterUserScramCredentials)", file=sys.stderr)
            return 2
        store = ScramCredentialStore.open(data_dir)
        store.alter(upsertions=parsed)
    except (MetadataFileError, OSError) as e:
        print(f"semel scram: {e}", file=sys.stderr)
        return 2
    finally:
        os.close(fd)  # releases the lock
    for user, mechanism, credential in parsed:
        print(f"semel scram: stored {mechanism} credential for {user!r} "
              f"({credential.iterations} iterations) in {data_dir}")
    return 0


def _check_data_dir(path: str) -> None:
    from semel.broker.config import ConfigError

    d = Path(path)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"log.dirs: cannot create {path!r}: {e.strerror}") from None
    if not os.access(d, os.W_OK | os.X_OK):
        raise ConfigError(f"log.dirs: {path!r} is not writable")


async def _serve(config: BrokerConfig, *, fs=None, prepare=None,
                 enable_gc: bool = False) -> int:
    """Run a broker until SIGTERM/SIGINT. Tests' fault injection (``python -m
    semel.broker.testing serve``) gives its file system seam and ``prepare(broker)``, run
    once the broker has started, before ``ready``. ``enable_gc``: turn the garbage
    collector (off while starting, see _run_serve) on once ready."""
    import asyncio
    import logging
    import signal

    from semel.broker.server import Broker
    from semel.storage.fs import MetadataFileError

    log = logging.getLogger("broker")

    broker = Broker(config, fs=fs)
    try:
        await broker.start()
        if prepare is not None:
            prepare(broker)
    except OSError as e:
        print(f"semel: {e.strerror or e}", file=sys.stderr)
        return 1
    except MetadataFileError as e:
        print(f"semel: {e}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    others = "".join(f", {e.name} {e.protocol} on {e.host}:{e.port}"
                     for e in broker.endpoints[1:])
    print(f"semel ready on {broker.address} (advertised {broker.advertised_host}:"
          f"{broker.advertised_port}, data {config.log_dirs}, flush {config.log_flush_mode}"
          f"{others})", flush=True)
    if enable_gc:
        import gc

        gc.enable()
    await stop.wait()
    log.info("shutting down")
    await broker.stop()
    log.info("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv in (["--version"], ["-V"]):  # the fast path: no argparse, nothing of the broker
        from semel.broker import __version__

        print(f"semel {__version__}")
        return 0
    if argv and argv[0] in TOOLS:
        return _run_tool(argv[0], argv[1:])
    args = _serve_arguments(argv[1:]) if argv[:1] == ["serve"] else None
    if args is None:
        args = _parser().parse_args(argv)
    if args.command == "scram":
        return _scram(args.data_dir, args.add)
    return _run_serve(args)


def _run_serve(args) -> int:
    """``semel serve``: the configuration, then the broker on uvloop until stopped. The
    garbage collector is off until the broker is ready: start-up creates long-lived objects
    and next to no garbage (some 75 collections used to free ~850 objects of ~30,000), so
    collecting meanwhile is wasted work (~7 ms of a start of ~130)."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        return _configure_and_serve(args, collecting)
    finally:
        if collecting:
            gc.enable()


def _configure_and_serve(args, enable_gc: bool) -> int:
    import asyncio
    import logging

    from semel.broker.config import ConfigError, load_config

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, args.overrides, host=args.host, port=args.port,
                             data_dir=args.data_dir)
        _check_data_dir(config.log_dirs)
    except ConfigError as e:
        print(f"semel: {e}", file=sys.stderr)
        return 2
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; stay usable without it
        return asyncio.run(_serve(config, enable_gc=enable_gc))
    return uvloop.run(_serve(config, enable_gc=enable_gc))


if __name__ == "__main__":
    sys.exit(main())
