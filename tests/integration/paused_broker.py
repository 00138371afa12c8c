"""Test-only broker entry point that parks transaction completion at the commit point.

    python -m tests.integration.paused_broker MODE PAUSE_FILE [the options of `semel serve`]

Builds the broker as `semel serve` does and parks the first transaction completion:

- MODE `prepare`: the transaction coordinator's `before_markers` hook, once the transaction's
  PREPARE_COMMIT or PREPARE_ABORT is durable (client already answered), before any marker.
- MODE `first-marker`: the coordinator's marker writer is wrapped; for the first completion
  it writes the marker of the transaction's lowest partition only, then parks.

Either writes "<transactional id> <state>" to PAUSE_FILE and parks that completion forever;
the rest of the broker keeps serving. A test then SIGKILLs the process at exactly that
point. Production code has no hook of its own for this.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from semel.broker.cli import _check_data_dir, _parser
from semel.broker.config import ConfigError, load_config


async def _serve(config, mode: str, pause_file: Path) -> int:
    from semel.broker.server import Broker

    broker = Broker(config)
    await broker.start()
    coordinator = broker.txn_coordinator

    def announce(text: str) -> None:
        tmp = pause_file.with_suffix(".tmp")
        tmp.write_text(text + "\n")
        tmp.rename(pause_file)

    async def park(transactional_id: str, md) -> None:
        coordinator.before_markers = None  # only the first completion parks
        announce(f"{transactional_id} {md.state.name}")
        await asyncio.Event().wait()

    write_markers = coordinator.write_markers

    async def write_first_marker(transactional_id, producer_id, producer_epoch,
                                 coordinator_epoch, commit, partitions, **kw):
        coordinator.write_markers = write_markers  # only the first completion parks
        first = min(partitions, key=lambda tp: (tp.topic, tp.partition))
        await write_markers(transactional_id, producer_id, producer_epoch, coordinator_epoch,
                            commit, frozenset([first]), **kw)
        announce(f"{transactional_id} {'PREPARE_COMMIT' if commit else 'PREPARE_ABORT'}")
        await asyncio.Event().wait()

    if mode == "prepare":
        coordinator.before_markers = park
    else:
        coordinator.write_markers = write_first_marker
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
    mode, pause_file = argv[0], Path(argv[1])
    if mode not in ("prepare", "first-marker"):
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv[2:])
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    try:
        config = load_config(args.config, args.overrides, host=args.host, port=args.port,
                             data_dir=args.data_dir)
        _check_data_dir(config.log_dirs)
    except ConfigError as e:
        print(f"semel: {e}", file=sys.stderr)
        return 2
    import uvloop

    return uvloop.run(_serve(config, mode, pause_file))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
