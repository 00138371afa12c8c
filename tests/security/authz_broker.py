"""``python tests/security/authz_broker.py --data-dir D [--set k=v]...``: a semel broker on
127.0.0.1 (ephemeral port, ``log.flush.mode=fsync``) with the authorizer on, for the
restart tests, printing the CLI's ``ready on host:port`` line.

``authorizer.class.name`` is set to Kafka's StandardAuthorizer; the authorizer is opened
here from the ``--set`` properties (``super.users``, ``allow.everyone.if.no.acl.found``)
unless the broker already opened one itself in ``start()``: once broker.server does, this is
a plain ``serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from semel.broker.security.authorizer import Authorizer
from semel.broker.server import Broker
from semel.broker.testing import test_config

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


async def serve(data_dir: Path, overrides: dict[str, str]) -> None:
    config = test_config(data_dir, {"log.flush.mode": "fsync",
                                    "authorizer.class.name": STANDARD_AUTHORIZER, **overrides})
    broker = Broker(config)
    await broker.start()
    if broker.authorizer is None:
        broker.authorizer = Authorizer.open(
            config.log_dirs, config.super_users, config.allow_everyone_if_no_acl_found
        )
    print(f"ready on {broker.host}:{broker.port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    asyncio.run(serve(args.data_dir, overrides))


if __name__ == "__main__":
    main()
