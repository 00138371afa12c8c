"""The fault proxy on its own, in front of a loopback echo server: it forwards both ways,
a reset reaches the client, new connections work after it, and stopping it leaves no task
of its own behind (it holds them itself: the loop keeps only weak references)."""

from __future__ import annotations

import contextlib
import gc
import socket
import threading

import pytest

from tests.chaos.proxy import Proxy


@pytest.fixture
def echo_port():
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the proxy resets its upstream side too
            while data := conn.recv(65536):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_forwards_resets_and_stops_clean(echo_port):
    proxy = Proxy(echo_port).start()
    try:
        payload = bytes(range(256)) * 1024
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as a, \
                socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as b:
            a.sendall(payload)
            assert recv_exactly(a, len(payload)) == payload
            assert proxy.reset_all() == 2
            with pytest.raises((ConnectionError, OSError)):
                b.sendall(b"x" * 65536)
                recv_exactly(b, 1)
        gc.collect()
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as c:
            c.sendall(b"after the reset")
            assert recv_exactly(c, 15) == b"after the reset"
    finally:
        proxy.stop()
    assert not proxy._tasks
