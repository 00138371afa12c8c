"""One client connection: the only code that touches sockets.

An ``asyncio.BufferedProtocol``: the socket reads into ``protocol.frame.BufferedFrameReader``
buffers (a large request lands in its own buffer without being joined or copied); each
complete frame is dispatched as its own task so a long-poll fetch does not hold up a
metadata call behind it, but responses leave strictly in request order (Kafka requires it):
every request takes a slot in a FIFO and the head of the FIFO is written as soon as it is
filled. Handlers do their synchronous work (e.g. the log append) before their first await,
and tasks start in creation order, so requests on one connection also take effect in order.

Back-pressure: reading pauses while the bytes of requests in flight plus responses not yet
flushed exceed ``connection.max.pending.bytes``, or while the transport's write buffer is
full. A frame larger than ``socket.request.max.bytes`` closes the connection before it is
buffered. ``last_active`` (monotonic ms) lets the server close idle connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from broker.dispatch import CloseConnection
from protocol.errors import ProtocolError
from protocol.frame import BufferedFrameReader

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger("broker.connection")


class _Slot:
    __slots__ = ("data", "done", "size")

    def __init__(self, size: int) -> None:
        self.done = False
        self.data: list | None = None  # the response frame's buffers
        self.size = size


class Connection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.dispatcher = broker.dispatcher
        self.reader = BufferedFrameReader(broker.config.socket_request_max_bytes)
        self.max_pending = broker.config.connection_max_pending_bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.slots: deque[_Slot] = deque()
        self.pending_bytes = 0
        self.tasks: set[asyncio.Task] = set()
        self.reading_paused = False
        self.writing_paused = False
        self.closed = False
        self.last_active = broker.monotonic_ms()

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.broker.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.broker.connections.discard(self)
        for task in self.tasks:
            task.cancel()

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = self.broker.monotonic_ms()
        try:
            frames = self.reader.buffer_updated(nbytes)
        except ProtocolError as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        for frame in frames:
            slot = _Slot(len(frame))
            self.slots.append(slot)
            self.pending_bytes += slot.size
            task = asyncio.get_running_loop().create_task(self._run(frame, slot))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        self._update_reading()

    # -- requests -----------------------------------------------------------------------

    async def _run(self, frame: memoryview, slot: _Slot) -> None:
        try:
            slot.data = await self.dispatcher.dispatch(frame, self.peer)
        except CloseConnection as e:
            log.warning("closing %s: %s", self.peer, e)
            self.close()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing %s: unexpected error while handling a request", self.peer)
            self.close()
            return
        slot.done = True
        self._flush()

    def _flush(self) -> None:
        slots = self.slots
        transport = self.transport
        while slots and slots[0].done:
            slot = slots.popleft()
            self.pending_bytes -= slot.size
            if slot.data is not None and not self.closed:
                transport.writelines(slot.data)
        self.last_active = self.broker.monotonic_ms()
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        should_pause = self.writing_paused or self.pending_bytes > self.max_pending
        if should_pause and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        elif not should_pause and self.reading_paused:
            self.transport.resume_reading()
            self.reading_paused = False

    @property
    def idle(self) -> bool:
        return not self.slots

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()
