"""A TCP proxy in front of the broker (asyncio on its own thread, loopback only).

Clients connect to the proxy (the broker advertises the proxy's address); each connection
gets its own upstream connection and two pumps, client->broker and broker->client. Bytes
are forwarded unchanged and in order, so Kafka's framing is never disturbed; faults act on
whole connections:

  delay(s)          every chunk in both directions waits s seconds (latency, not throughput)
  slow_one(s)       one established connection's client->broker bytes wait s seconds while
                    every other connection proceeds: requests sent on it reach the broker
                    after requests sent later on other connections (KAFKA-17754's reordering);
                    preferably a connection that carried Produce requests
  blackhole()       nothing is forwarded any more (bytes are swallowed), on old and new
                    connections: clients see requests time out; heal() resets them
  reset_all()       every connection is closed with a TCP RST
  heal()            delays off, blackholed connections reset

All methods are thread-safe; they run on the proxy's loop.

With `request_log` (a path), every request and response frame is logged as one line
("<time> c<connection> > <api> v<version> corr=<id> bytes=<n>" and "... < corr=<id>"), which
tells a client's hang from a broker's silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

CHUNK = 1 << 16
_HEADER = struct.Struct(">ihhi")  # size, api key, api version, correlation id


class _FrameTap:
    """Finds frame starts in one direction of a Kafka stream, for the request log: yields
    (size, the frame's first 8 bytes, zero-padded) per frame."""

    def __init__(self) -> None:
        self.skip = 0  # bytes of the current frame still to pass
        self.head = b""
        self.want = 4  # bytes of head still needed (4 for the size, then up to 8 more)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        frames = []
        i = 0
        while i < len(data):
            if self.skip:
                n = min(self.skip, len(data) - i)
                self.skip -= n
                i += n
                continue
            take = data[i:i + self.want]
            self.head += take
            i += len(take)
            self.want -= len(take)
            if self.want:
                break
            size = struct.unpack_from(">i", self.head)[0]
            if len(self.head) == 4 and size > 0:
                self.want = min(size, 8)
                continue
            frames.append((size, self.head.ljust(12, b"\0")))
            self.skip = max(0, size - (len(self.head) - 4))
            self.head, self.want = b"", 4
        return frames


@dataclass(eq=False)
class _Conn:
    cid: int
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    extra_delay: float = 0.0  # client->broker only (slow_one)
    blackholed: bool = False
    tasks: list[asyncio.Task] = field(default_factory=list)
    api_keys: set[int] = field(default_factory=set)  # request kinds seen on it


def _rst(writer: asyncio.StreamWriter | None) -> None:
    if writer is None:
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Proxy:
    def __init__(self, upstream_port: int = 0, request_log: str | None = None) -> None:
        self.upstream_port = upstream_port
        self.request_log = open(request_log, "a") if request_log else None  # noqa: SIM115
        self.port = 0
        self.delay_s = 0.0
        self.blackholed = False
        self.conns: dict[int, _Conn] = {}
        self.stats = {"connections": 0, "resets": 0, "slowed": 0}
        self._ids = 0
        self._tasks: set[asyncio.Task] = set()  # the loop keeps only weak references
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> Proxy:
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, "127.0.0.1", 0, reuse_address=True))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        self._thread = threading.Thread(target=run, name="chaos-proxy", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is None:
            return

        async def shutdown() -> None:
            self._server.close()
            for conn in list(self.conns.values()):
                self._close(conn, rst=True)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None
        if self.request_log is not None:
            self.request_log.close()

    def _call(self, fn, *args):
        fut = asyncio.run_coroutine_threadsafe(self._run(fn, *args), self._loop)
        return fut.result(10)

    async def _run(self, fn, *args):
        return fn(*args)

    # -- faults ----------------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        self._call(setattr, self, "delay_s", seconds)

    def slow_one(self, seconds: float, rng: random.Random,
                 prefer_api: int | None = None) -> int | None:
        """Hold back one connection's requests; one that carried `prefer_api` requests
        (e.g. Produce) if there is such a connection."""
        def pick() -> int | None:
            live = [c for c in self.conns.values() if c.upstream is not None]
            preferred = [c for c in live if prefer_api in c.api_keys]
            live = preferred or live
            if not live:
                return None
            conn = rng.choice(sorted(live, key=lambda c: c.cid))
            conn.extra_delay = seconds
            self.stats["slowed"] += 1
            return conn.cid

        return self._call(pick)

    def blackhole(self) -> None:
        def on() -> None:
            self.blackholed = True
            for conn in self.conns.values():
                conn.blackholed = True

        self._call(on)

    def reset_all(self) -> int:
        def reset() -> int:
            n = 0
            for conn in list(self.conns.values()):
                self._close(conn, rst=True)
                n += 1
            self.stats["resets"] += n
            return n

        return self._call(reset)

    def heal(self) -> None:
        def heal() -> None:
            self.delay_s = 0.0
            self.blackholed = False
            for conn in list(self.conns.values()):
                conn.extra_delay = 0.0
                if conn.blackholed:
                    self._close(conn, rst=True)
                    self.stats["resets"] += 1

        self._call(heal)

    # -- forwarding ------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._ids += 1
        self.stats["connections"] += 1
        conn = _Conn(self._ids, writer, blackholed=self.blackholed)
        self.conns[conn.cid] = conn
        if self.request_log is not None:
            self.request_log.write(f"{time.time():.3f} c{conn.cid} open "
                                   f"{writer.get_extra_info('peername')}\n")
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            self._close(conn, rst=False)
            return
        conn.upstream = up_writer
        conn.tasks = [
            self._task(self._pump(conn, reader, up_writer, upstream=True)),
            self._task(self._pump(conn, up_reader, writer, upstream=False)),
        ]

    def _task(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _pump(self, conn: _Conn, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter, *, upstream: bool) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        sender = self._task(self._send(conn, queue, writer))
        conn.tasks.append(sender)  # cancelled with the pumps when the connection closes
        last_due = 0.0
        tap = _FrameTap() if upstream or self.request_log is not None else None
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if tap is not None:
                    self._log_frames(conn, tap.feed(data), upstream)
                if conn.blackholed:
                    continue
                delay = self.delay_s + (conn.extra_delay if upstream else 0.0)
                due = max(time.monotonic() + delay, last_due)  # never reorder one stream
                last_due = due
                queue.put_nowait((due, data))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            queue.put_nowait((0.0, None))
            with contextlib.suppress(Exception):
                await sender
            self._close(conn, rst=False)

    async def _send(self, conn: _Conn, queue: asyncio.Queue,
                    writer: asyncio.StreamWriter) -> None:
        while True:
            due, data = await queue.get()
            if data is None:
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if conn.blackholed:
                continue
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                return

    def _log_frames(self, conn: _Conn, frames, upstream: bool) -> None:
        from semel.protocol.api import BY_KEY

        now = time.time()
        for size, head in frames:
            if upstream:
                _, key, version, corr = _HEADER.unpack(head)
                conn.api_keys.add(key)
                if self.request_log is None:
                    continue
                name = BY_KEY[key].name if key in BY_KEY else f"api{key}"
                self.request_log.write(f"{now:.3f} c{conn.cid} > {name} v{version} "
                                       f"corr={corr} bytes={size}"
                                       f"{' (blackholed)' if conn.blackholed else ''}\n")
            elif self.request_log is not None:
                corr = struct.unpack_from(">i", head, 4)[0]
                self.request_log.write(f"{now:.3f} c{conn.cid} < corr={corr} bytes={size}\n")

    def _close(self, conn: _Conn, *, rst: bool) -> None:
        if self.conns.pop(conn.cid, None) is None:
            return
        if self.request_log is not None:
            self.request_log.write(f"{time.time():.3f} c{conn.cid} closed"
                                   f"{' (reset)' if rst else ''}\n")
        for writer in (conn.client, conn.upstream):
            if writer is None:
                continue
            if rst:
                _rst(writer)
            else:
                writer.close()
        for task in conn.tasks:
            task.cancel()
