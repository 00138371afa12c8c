"""Test-only broker entry point that parks transaction completion at the commit point.

    python -m tests.integration.paused_broker PAUSE_FILE [the options of `semel serve`]

Builds the broker as `semel serve` does and installs the transaction coordinator's
`before_markers` hook: the first time a transaction reaches PREPARE_COMMIT or PREPARE_ABORT
(durable, client already answered, no marker written yet), the hook writes
"<transactional id> <state>" to PAUSE_FILE and parks that completion forever; the rest of the
broker keeps serving. A test then SIGKILLs the process at exactly that point. Production code
has no hook of its own for this.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from broker.cli import _check_data_dir, _parser
from broker.config import ConfigError, load_config


async def _serve(config, pause_file: Path) -> int:
    from broker.server import Broker

    broker = Broker(config)
    await broker.start()
    coordinator = broker.txn_coordinator

    async def park(transactional_id: str, md) -> None:
        coordinator.before_markers = None  # only the first completion parks
        tmp = pause_file.with_suffix(".tmp")
        tmp.write_text(f"{transactional_id} {md.state.name}\n")
        tmp.rename(pause_file)
        await asyncio.Event().wait()

    coordinator.before_markers = park
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"semel ready on {broker.address} (paused completions, data {config.log_dirs})",
          flush=True)
    await stop.wait()
    await broker.stop()
    return 0


def main(argv: list[str]) -> int:
    pause_file = Path(argv[0])
    args = _parser().parse_args(argv[1:])
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        config = load_config(args.config, args.overrides, host=args.host, port=args.port,
                             data_dir=args.data_dir)
        _check_data_dir(config.log_dirs)
    except ConfigError as e:
        print(f"semel: {e}", file=sys.stderr)
        return 2
    import uvloop

    return uvloop.run(_serve(config, pause_file))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
