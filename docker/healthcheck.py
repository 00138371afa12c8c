"""The container's HEALTHCHECK: does the broker in this container answer a client?

Reads the broker's configuration the way `semel serve` does (the config file given as the
first argument, default /opt/semel/conf/server.properties, then the SEMEL_* environment),
takes the first PLAINTEXT listener (a wildcard host is reached on the loopback address) and
runs the CLI's `semel topics list --bootstrap-server HOST:PORT` against it, in this process.
Exit status 0 when that succeeds, 1 otherwise (Docker's "unhealthy"), with one line saying
why. Without a PLAINTEXT listener (a client would need credentials) it checks that the first
listener accepts TCP connections.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import sys

from semel.broker.cli import main as semel
from semel.broker.config import ConfigError, load_config

DEFAULT_CONFIG = "/opt/semel/conf/server.properties"
TIMEOUT_MS = 4000  # under the Dockerfile's HEALTHCHECK --timeout
LOOPBACK = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def check(path: str | None) -> str:
    """The healthy line; raises RuntimeError with the reason when unhealthy."""
    try:
        config = load_config(path)
    except ConfigError as e:
        raise RuntimeError(str(e)) from None
    plain = [lsn for lsn in config.listeners if config.security_protocol(lsn.name) == "PLAINTEXT"]
    listener = plain[0] if plain else config.listeners[0]
    if listener.port == 0:
        raise RuntimeError(f"cannot check {listener}: its port is chosen at start")
    host = LOOPBACK.get(listener.host, listener.host)
    address = f"[{host}]:{listener.port}" if ":" in host else f"{host}:{listener.port}"
    where = f"{listener.name} on {address}"
    if not plain:
        try:
            socket.create_connection((host, listener.port), timeout=TIMEOUT_MS / 1000).close()
        except OSError as e:
            raise RuntimeError(f"{where}: {e.strerror or e}") from None
        return f"{where} accepts connections"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):  # the tool's errors stay on stderr, one line
            status = semel(["topics", "list", "--bootstrap-server", address,
                            "--timeout", str(TIMEOUT_MS), "--json"])
    except SystemExit as e:  # a usage error
        status = e.code
    if status != 0:
        raise RuntimeError(f"semel topics list --bootstrap-server {address} exited {status}")
    topics = json.loads(out.getvalue())["topics"]
    return f"{where} answers: {len(topics)} topics"


def main(argv: list[str]) -> int:
    path = argv[0] if argv else DEFAULT_CONFIG
    try:
        line = check(path if os.path.exists(path) else None)
    except RuntimeError as e:
        print(f"unhealthy: {e}")
        return 1
    print(f"healthy: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
