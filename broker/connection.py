"""One client connection: the only code that touches sockets.

An ``asyncio.BufferedProtocol``: the socket reads into ``protocol.frame.BufferedFrameReader``
buffers (a large request lands in its own buffer without being joined or copied, and only
the bytes that arrived occupy memory).

One request at a time: a connection runs one request and takes the next frame only when
that one is done - as Kafka, which mutes a connection while a request of it is in progress -
so a client pipelining hundreds of requests cannot crowd out other clients: each connection
has at most one request runnable on the event loop. The exception keeps acks=all produce
fast: a handler may hand the turn on early (``RequestContext.release_connection``, which
produce calls once its appends are done and only the disk is awaited), so the next request
starts while the earlier one waits; at most ``connection.max.inflight.requests`` requests of
a connection are started and unanswered. Responses leave strictly in request order (Kafka
requires it): every request takes a slot in a FIFO and the head is written once filled.
A request starts eagerly, inside the callback that made it ready, and needs a task only
if it suspends (most never do; an acks=all Produce of the fast path waiting for the disk
does not either: its answer comes through a future, ``Dispatcher.dispatch``'s ``defer_on``).
Requests a client pipelined run back to back while each is done at once, for at most
``BURST_NS`` (200 µs) of the loop per round; what is still ready then waits for
``call_soon``, the next round, so every connection gets its turn in each round and one
holds the loop for about one burst. The answers of a burst leave in one write, and so do
those answered in one round of the loop outside a burst (the requests one fsync made
durable): the write waits for the end of the round (``_flush``).

Back-pressure: reading stops while the frames waiting for their turn fill the connection's
64 KiB read buffer (or a whole large frame waits), while the bytes of
requests in flight plus responses not yet flushed exceed ``connection.max.pending.bytes``,
while the transport's write buffer is full, or while the broker's request memory
(``queued.max.request.bytes``, broker/request_memory.py) is full - for a connection in the
middle of a large request already at 7/8 of it. A frame larger than
``socket.request.max.bytes`` closes the connection before it is buffered.

Time: ``last_active`` (monotonic ms) moves when responses are flushed - every request ends
there, an unanswered acks=0 one too, and a connection is only idle with none in flight, so
it is never earlier than the last request's arrival - never for a trickled byte;
``partial_since`` is when the unfinished request now being received began; ``close_at`` is
when a connection whose authentication failed is closed
(``connection.failed.authentication.delay.ms`` after the answer). The server closes a
connection idle past ``connections.max.idle.ms``, with a request unfinished past
``socket.request.read.timeout.ms``, or past its ``close_at``. A request's queue time (the
``semel_request_queue_time_seconds`` histogram) runs from the read that completed its frame
to its start.

Zero copy: a Fetch response's records may be a file region (storage/file_region.py) among
its buffers. Without TLS, once the transport's write buffer is empty, the connection writes
the response itself on a duplicate of the socket's descriptor - its buffers with
``os.writev``, the region with ``os.sendfile`` from the segment file, so the bytes go from the
page cache to the socket - and whatever follows a region, until no region is left; then the
transport takes over again. When the socket is full it waits for it to be writable
(``loop.add_writer`` on the duplicate: uvloop and asyncio both refuse a transport's own
descriptor, and uvloop has no ``loop.sendfile``). Meanwhile reading pauses, as when the
transport's buffer is full. A region is released (its segment unpinned) once sent, or when
the connection is lost; ``close()`` lets what was answered go out first, as
``transport.close()`` does. Where sendfile cannot be used (TLS, a transport without a
socket) the region is read into memory and written like any buffer.

Throttling (client quotas, KIP-219): a response whose client exceeded a quota is sent at
once with its throttle time; then the connection is muted for that long - it starts no
further request and stops reading - until ``throttled_until`` on the broker's monotonic clock
(``throttle``; a timer looks again, as ``close_if_due`` does).

Bad input (framing errors, malformed or unsupported requests, timeouts) closes the
connection, is counted in ``semel_bad_input_total{reason}`` and logged once per connection
through a rate limit, without a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import types
from bisect import bisect_left
from collections import deque
from itertools import islice
from time import perf_counter_ns
from typing import TYPE_CHECKING

from semel.broker.dispatch import CloseConnection
from semel.broker.security.endpoint import AuthenticationRefused
from semel.broker.security.session import Session
from semel.coordinator.eager import Resumed
from semel.protocol.errors import ProtocolError
from semel.protocol.frame import BufferedFrameReader
from semel.storage.file_region import FileRegion

# how long one connection may run requests back to back in one round of the event loop
BURST_NS = 200_000
IOV_MAX = 1024  # buffers per writev (Linux's UIO_MAXIOV)
_FUTURE = asyncio.Future
_COROUTINE = types.CoroutineType

if TYPE_CHECKING:
    from semel.broker.security.endpoint import ListenerEndpoint
    from semel.broker.server import Broker

log = logging.getLogger("broker.connection")


class _Slot:
    """One request's place in the connection's FIFO of responses."""

    __slots__ = ("conn", "data", "done", "holds_turn", "size")

    def __init__(self, conn: Connection, size: int) -> None:
        self.conn = conn
        self.done = False
        self.data: list | None = None  # the response frame's buffers
        self.size = size
        self.holds_turn = True

    def release(self) -> None:
        """The request hands the connection's turn on (``RequestContext.release``): a bound
        method, not a closure made per request."""
        if self.holds_turn:
            self.holds_turn = False
            conn = self.conn
            conn.running = False
            conn._pump()

    def task_done(self, task: asyncio.Task) -> None:
        conn = self.conn
        conn.tasks.discard(task)
        if task.cancelled() or task.result() is None:  # else: answer_done finishes it
            conn._finished(self)

    def answer_done(self, answer: asyncio.Future) -> None:
        """The answer of a request that waited without a task (``Dispatcher.dispatch``'s
        ``defer_on``) is ready, failed or cancelled: as the end of ``_run`` and
        ``task_done`` for one that waited in a task."""
        conn = self.conn
        conn.tasks.discard(answer)
        if not answer.cancelled():
            exc = answer.exception()
            if exc is None:
                self.data = answer.result()
                conn._answered(self)
            else:
                conn.broker.bad_input_log.exception(
                    f"closing {conn.peer}: unexpected error while handling a request")
                conn.close()
        conn.memory.release(self.size)  # conn._finished(self), inline
        if self.holds_turn:
            self.release()


class Connection(asyncio.BufferedProtocol):
    def __init__(self, broker: Broker, endpoint: ListenerEndpoint | None = None) -> None:
        config = broker.config
        self.broker = broker
        self.endpoint = endpoint
        self.dispatcher = broker.dispatcher
        self.memory = broker.request_memory
        self.reader = BufferedFrameReader(config.socket_request_max_bytes,
                                          charge=self.memory.charge)
        self.max_pending = config.connection_max_pending_bytes
        self.max_inflight = config.connection_max_inflight_requests
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # set once connected
        self.peer = "?"
        self.ip = "?"
        self.admitted = False
        self.slots: deque[_Slot] = deque()
        self.pending_bytes = 0
        self.tasks: set[asyncio.Task] = set()
        self.running = False  # a request of this connection holds its turn
        self.pumping = False  # _pump is starting a request (re-entered from it)
        self.flush_deferred = False  # responses of the current burst wait for its end
        self.write_scheduled = False  # responses answered outside a burst: written soon
        self.pump_scheduled = False
        self.reading_paused = False
        self.writing_paused = False
        self.closed = False
        self.bad_input_seen = False
        self.last_active = broker.monotonic_ms()
        self.partial_since: int | None = None
        # request queue time (perf_counter ns): when the next frame to start was read whole
        # (None: no whole frame waiting), and when the last bytes arrived
        self.ready_ns: int | None = None
        self.read_ns = 0
        self.close_at: int | None = None  # failed authentication: closed at this monotonic ms
        self.throttled_until: int | None = None  # muted by a quota until this monotonic ms
        self.session = Session(self.ip)
        # zero copy: the socket's descriptor (None: regions are read and written as bytes);
        # what is written directly, from the first region on (buffers and regions), bytes of
        # its head already sent, regions in it, and the duplicate descriptor written to
        self.socket_fd: int | None = None
        self.out: deque = deque()
        self.out_sent = 0
        self.out_regions = 0
        self.out_fd: int | None = None
        self.out_waiting = False  # add_writer(out_fd) is on
        self.close_when_sent = False

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # cached: get_running_loop() looks at the process id on each call
        self.loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if peer:
            self.ip = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"
        refusal = self.broker.admit(self)
        if refusal is not None:
            self.closed = True
            self.bad_input("connection_limit", refusal)
            transport.abort()
            return
        self.admitted = True
        self.socket_fd = _sendfile_socket(transport, self.broker.config)
        if self.endpoint is not None:
            try:
                self.session = self.endpoint.new_session(
                    self.ip, transport.get_extra_info("ssl_object"))
            except AuthenticationRefused as e:
                self.bad_input("authentication_failed", f"closing {self.peer}: {e}")
                self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.admitted:
            self.admitted = False
            self.broker.forget(self)
        self.memory.release(self.reader.partial_stored)
        self.reader.close()
        for task in self.tasks:
            task.cancel()
        self._drop_out()
        for slot in self.slots:
            if slot.data is not None:
                _release_regions(slot.data)

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.reader.buffer_updated(nbytes)
        self.read_ns = perf_counter_ns()
        if self.ready_ns is None and self.reader.ready:
            self.ready_ns = self.read_ns
        self._pump()

    # -- requests -----------------------------------------------------------------------

    def _pump(self) -> None:
        """Start the next request if the connection's turn is free; track partial frames."""
        if self.closed or self.pumping:
            return  # called from a request run eagerly by the loop below: it goes on
        self.pumping = True
        try:
            self._start_ready()
        finally:
            self.pumping = False
        if self.flush_deferred:  # the burst's responses, in one write
            self.flush_deferred = False
            if self._write_done() and self.reader.ready and not self.pump_scheduled:
                self.pump_scheduled = True  # the burst ended on a full window: next round
                self.loop.call_soon(self._scheduled_pump)
        reader = self.reader
        if reader.buffered and not reader.ready:
            if self.partial_since is None:
                self.partial_since = self.broker.monotonic_ms()
        else:
            self.partial_since = None
        self._update_reading()

    def _start_ready(self) -> None:
        """Start the ready requests the connection may, one after another while each is
        done at once, for at most BURST_NS of the loop's time; what is still ready then
        starts in the loop's next round, after every other connection's turn in this one.
        However many requests a client pipelines, it holds the loop for about one burst
        per round."""
        reader = self.reader
        slots = self.slots
        session = self.session
        queue_time = self.broker.metrics.queue_time
        started = 0
        while not (self.running or self.closed or len(slots) >= self.max_inflight
                   or session.close_after_ms is not None
                   or self.throttled_until is not None):
            now = perf_counter_ns()  # one clock reading: the burst's and the queue time's
            if started == 0:
                started = now
            elif now - started > BURST_NS:
                if reader.ready and not self.pump_scheduled:
                    self.pump_scheduled = True
                    self.loop.call_soon(self._scheduled_pump)
                return
            try:
                frame = reader.next_frame()
            except ProtocolError as e:
                self.bad_input("framing", f"closing {self.peer}: {e}")
                self.close()
                return
            if frame is None:
                return
            # the request queue time of the frame starting now: since the read that
            # completed it; for a frame that arrived whole behind others, since the latest
            # read (its own may have been earlier: a lower bound)
            ready = self.ready_ns
            if ready is not None:  # queue_time.observe, inline
                seconds = (now - ready) / 1e9
                queue_time.counts[bisect_left(queue_time.bounds, seconds)] += 1
                queue_time.sum += seconds
            self.ready_ns = self.read_ns if reader.ready else None
            self._start(frame)

    def _scheduled_pump(self) -> None:
        self.pump_scheduled = False
        self._pump()

    def _start(self, frame: memoryview) -> None:
        """Run the request eagerly: up to its first suspension inside this call (most
        requests never suspend, and then need no task and no extra loop iteration); a
        request that suspends goes on in a task."""
        size = len(frame)
        slot = _Slot(self, size)
        self.slots.append(slot)
        self.pending_bytes += size
        self.running = True
        try:
            data = self.dispatcher.dispatch(
                frame, self.session, slot.release, self.throttle, defer_on=self.loop)
        except Exception as e:  # noqa: BLE001 - as in _run
            self._failed(e)
            self._finished(slot)
            return
        cls = data.__class__
        if cls is _FUTURE:  # a fast produce waiting for the disk: answered by the future
            self.tasks.add(data)
            data.add_done_callback(slot.answer_done)
            return
        if cls is not _COROUTINE:  # answered without a coroutine (fast produce)
            slot.data = data
            if self.session.close_after_ms is not None:
                self._answered(slot)
                self._finished(slot)
                return
            # _answered and _finished, inline (called from _start_ready's burst: _pump
            # would return at once, _flush defer the write to the burst's end)
            slot.done = True
            slot.holds_turn = self.running = False
            self.flush_deferred = True
            self.memory.release(size)
            return
        coro = self._run(data, slot)
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            if stop.value is None:  # else: answered later, by the future (answer_done)
                self._finished(slot)
            return
        task = self.loop.create_task(Resumed(coro, yielded))
        self.tasks.add(task)
        task.add_done_callback(slot.task_done)

    async def _run(self, pending, slot: _Slot) -> asyncio.Future | None:
        """Run the handler of a request (``pending``, what dispatch returned) and answer it;
        or, for an answer that will come later without a task, the future that brings it."""
        try:
            data = await pending
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - a fault of ours: close this connection, keep serving
            self._failed(e)
            return None
        return self._settle(data, slot)

    def _failed(self, e: Exception) -> None:
        """Dispatching the request raised: CloseConnection (bad input, counted), or a fault
        of ours (logged with its traceback); either closes the connection."""
        if isinstance(e, CloseConnection):
            self.bad_input(e.reason, f"closing {self.peer}: {e}")
        else:
            self.broker.bad_input_log.exception(
                f"closing {self.peer}: unexpected error while handling a request")
        self.close()

    def _settle(self, data, slot: _Slot) -> asyncio.Future | None:
        """The answer of a request: its buffers (or None: no answer), or the future that
        brings them (returned: the slot is finished by ``answer_done``)."""
        if data.__class__ is _FUTURE:
            self.tasks.add(data)
            data.add_done_callback(slot.answer_done)
            return data
        slot.data = data
        self._answered(slot)
        return None

    def _answered(self, slot: _Slot) -> None:
        slot.done = True
        close_after_ms = self.session.close_after_ms
        if close_after_ms is not None:  # failed authentication: answer, then close
            self.bad_input("authentication_failed",
                           f"failed authentication with {self.peer} on {self.session.listener}")
            self._update_reading()
            self.close_at = self.broker.monotonic_ms() + close_after_ms
            self.loop.call_later(close_after_ms / 1000, self.close_if_due)
        if slot.holds_turn:  # (slot.release() would look too)
            slot.release()
        self._flush()

    def close_if_due(self) -> None:
        """Close once the broker's clock reaches ``close_at``. The loop's timer may fire a
        little early (libuv rounds to whole ms) and a test's clock moves only when told to:
        not yet due, look again when it should be."""
        if self.closed or self.close_at is None:
            return
        left = self.close_at - self.broker.monotonic_ms()
        if left <= 0:
            self.close()
        else:
            self.loop.call_later(left / 1000, self.close_if_due)

    def throttle(self, ms: int) -> None:
        """Mute the connection for ``ms`` (a client quota was exceeded): responses already
        due still go out, no request starts and nothing is read until the time has passed."""
        until = self.broker.monotonic_ms() + ms
        if self.throttled_until is not None and self.throttled_until >= until:
            return
        first = self.throttled_until is None
        self.throttled_until = until
        self._update_reading()
        if first:
            self.loop.call_later(ms / 1000, self._unthrottle_if_due)

    def _unthrottle_if_due(self) -> None:
        if self.closed or self.throttled_until is None:
            return
        left = self.throttled_until - self.broker.monotonic_ms()
        if left > 0:
            self.loop.call_later(left / 1000, self._unthrottle_if_due)
            return
        self.throttled_until = None
        self._pump()

    def _finished(self, slot: _Slot) -> None:
        """Every request ends here, also when cancelled before it ran: its frame's memory is
        given back and the turn passes on."""
        self.memory.release(slot.size)
        if slot.holds_turn:
            slot.release()

    def _flush(self) -> None:
        """Write the answered requests at the head, several together: in a burst (``_pump``
        running them) once the burst ends; else (requests resumed when the disk caught up,
        say) once the loop's current round has run the rest of what was ready - so the
        answers of the acks=all requests one fsync made durable leave in one write."""
        if self.pumping:
            self.flush_deferred = True
        elif not self.write_scheduled:
            self.write_scheduled = True
            self.loop.call_soon(self._scheduled_write)

    def _scheduled_write(self) -> None:
        self.write_scheduled = False
        if self._write_done():
            self._pump()

    def _write_done(self) -> bool:
        slots = self.slots
        if not slots or not slots[0].done:
            return False
        buffers = []
        while slots and slots[0].done:
            slot = slots.popleft()
            self.pending_bytes -= slot.size
            if slot.data is not None:
                buffers += slot.data
        if buffers:
            if self.closed:
                _release_regions(buffers)
            else:
                self._write(buffers)
        self.last_active = self.broker.monotonic_ms()
        return True

    # -- writing, file regions with sendfile ----------------------------------------------

    def _write(self, buffers: list) -> None:
        """Write response buffers in order: through the transport, unless a file region is
        among them or still on its way; then they go out on the socket (``_send_out``)."""
        regions = 0
        for i, item in enumerate(buffers):
            if item.__class__ is FileRegion:
                if self.socket_fd is None:  # TLS: the bytes, read now
                    buffers[i] = item.read()
                    item.release()
                else:
                    regions += 1
        if not regions and not self.out:
            self.transport.writelines(buffers)
            return
        self.out.extend(buffers)
        self.out_regions += regions
        if not self.out_waiting:  # else the socket is full: sent when it is writable
            self._send_out()

    def _send_out(self) -> None:
        """Send ``out`` on the socket while it holds a region: buffers with writev, regions
        with sendfile, all on a duplicate of the socket's descriptor (the transport's own
        may be closed and its number reused before ``connection_lost`` comes). First the
        transport's buffer must be empty; while it is not, or the socket is full, wait
        until the socket is writable. Then the transport takes the rest."""
        if self.transport is None or (self.out_fd is None and not self._open_out()):
            return
        out, fd = self.out, self.out_fd
        try:
            while self.out_regions:
                if self.transport.get_write_buffer_size():
                    self._wait_writable()
                    return
                head = out[0]
                if head.__class__ is FileRegion:
                    sent = self.out_sent
                    n = os.sendfile(fd, head.fd, head.position + sent, head.size - sent)
                    if n == 0:  # the file ends before the region: never, unless truncated
                        raise OSError(f"{head!r} ended after {sent} bytes")
                    if sent + n < head.size:  # the socket is full
                        self.out_sent = sent + n
                        self._wait_writable()
                        return
                    out.popleft()
                    head.release()
                    self.out_regions -= 1
                    self.out_sent = 0
                else:
                    self._writev(fd)
        except BlockingIOError:
            self._wait_writable()
            return
        except OSError as exc:
            log.info("closing %s: sending a fetch response failed: %s", self.peer, exc)
            self.transport.abort()
            self._drop_out()
            return
        self._close_out()
        if out:
            rest = list(out)
            if self.out_sent:
                rest[0] = memoryview(rest[0])[self.out_sent:]
            out.clear()
            self.out_sent = 0
            self.transport.writelines(rest)
        self.last_active = self.broker.monotonic_ms()
        if self.close_when_sent:
            self.transport.close()
        else:
            self._update_reading()

    def _writev(self, fd: int) -> None:
        """Write the buffers at the head of ``out``, up to the next region, as far as the
        socket takes them; raises BlockingIOError when it takes nothing."""
        out = self.out
        buffers = []
        for item in islice(out, IOV_MAX):
            if item.__class__ is FileRegion:
                break
            buffers.append(item)
        sent = self.out_sent
        if sent:
            buffers[0] = memoryview(buffers[0])[sent:]
        n = os.writev(fd, buffers)
        while out and out[0].__class__ is not FileRegion:
            left = len(out[0]) - sent
            if n < left:
                sent += n
                break
            n -= left
            out.popleft()
            sent = 0
        self.out_sent = sent

    def _open_out(self) -> bool:
        """Duplicate the socket's descriptor for ``out``; not once the transport is closing:
        its descriptor may be closed, its number already someone else's."""
        if self.transport.is_closing():
            self._drop_out()
            return False
        try:
            self.out_fd = os.dup(self.socket_fd)
        except OSError as exc:
            log.info("closing %s: no descriptor to send a fetch response: %s", self.peer, exc)
            self.transport.abort()
            self._drop_out()
            return False
        return True

    def _wait_writable(self) -> None:
        if not self.out_waiting:
            self.loop.add_writer(self.out_fd, self._send_out)
            self.out_waiting = True

    def _close_out(self) -> None:
        fd, self.out_fd = self.out_fd, None
        if fd is not None:
            if self.out_waiting:
                self.out_waiting = False
                self.loop.remove_writer(fd)
            os.close(fd)

    def _drop_out(self) -> None:
        """The connection is gone: release the regions not sent, stop waiting."""
        self._close_out()
        _release_regions(self.out)
        self.out.clear()
        self.out_sent = self.out_regions = 0

    def _update_reading(self) -> None:
        if self.closed or self.transport is None:
            return
        memory = self.memory
        should_pause = (self.reader.full or self.writing_paused or self.out
                        or self.session.close_after_ms is not None
                        or self.throttled_until is not None
                        or self.pending_bytes > self.max_pending
                        or (memory.large_full and (memory.full or self.reader.receiving_large)))
        if should_pause and not self.reading_paused:
            self.transport.pause_reading()
            self.reading_paused = True
        elif not should_pause and self.reading_paused:
            self.transport.resume_reading()
            self.reading_paused = False

    def memory_changed(self) -> None:
        """The broker's request memory filled up or drained: pause or resume reading."""
        self._update_reading()

    # -- state the server looks at --------------------------------------------------------

    @property
    def idle(self) -> bool:
        return not self.slots and not self.out and not self.reader.buffered

    def bad_input(self, reason: str, message: str) -> None:
        """Count bad input from this client; log it once per connection (rate-limited)."""
        self.broker.metrics.bad_input(reason)
        if not self.bad_input_seen:
            self.bad_input_seen = True
            self.broker.bad_input_log.warning(message)

    def close(self) -> None:
        """Close once what was answered has gone out (the transport's buffer, and a region
        being sent with what follows it)."""
        if not self.closed:
            if self.transport is not None:
                self._write_done()  # answers waiting for the end of a burst or round
            self.closed = True
            if self.transport is not None:
                if self.out:
                    self.close_when_sent = True
                else:
                    self.transport.close()


def _sendfile_socket(transport: asyncio.BaseTransport, config) -> int | None:
    """The descriptor file regions are sent to with sendfile: a plain socket's, with
    ``socket.sendfile.enable``; None under TLS or on a transport without a socket."""
    if (not config.socket_sendfile_enable or not hasattr(os, "sendfile")
            or transport.get_extra_info("ssl_object") is not None):
        return None
    sock = transport.get_extra_info("socket")
    fd = sock.fileno() if sock is not None else -1
    return fd if fd >= 0 else None


def _release_regions(buffers) -> None:
    for item in buffers:
        if item.__class__ is FileRegion:
            item.release()


class RateLimitedLog:
    """At most ``burst`` lines per ``interval_ms`` (on the broker's monotonic clock); the
    lines dropped are counted and reported in the next line that gets through."""

    def __init__(self, logger: logging.Logger, monotonic_ms, burst: int = 10,
                 interval_ms: int = 10_000) -> None:
        self.logger = logger
        self.monotonic_ms = monotonic_ms
        self.burst = burst
        self.interval_ms = interval_ms
        self.window_start = monotonic_ms()
        self.in_window = 0
        self.suppressed = 0

    def _admit(self) -> str | None:
        now = self.monotonic_ms()
        if now - self.window_start >= self.interval_ms:
            self.window_start, self.in_window = now, 0
        if self.in_window >= self.burst:
            self.suppressed += 1
            return None
        self.in_window += 1
        note, self.suppressed = (f" ({self.suppressed} similar lines suppressed)"
                                 if self.suppressed else ""), 0
        return note

    def warning(self, message: str) -> None:
        note = self._admit()
        if note is not None:
            self.logger.warning("%s%s", message, note)

    def exception(self, message: str) -> None:
        """For faults of our own (a bug, not the client's input): with the traceback."""
        note = self._admit()
        if note is not None:
            self.logger.exception("%s%s", message, note)
