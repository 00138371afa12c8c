"""Kafka request/response framing and headers (sans-IO: bytes in, frames and values out).

On the wire every request and response is ``size int32`` followed by ``size`` bytes.

Request header (the header version follows from the API key and version):
    v0: api_key int16, api_version int16, correlation_id int32
    v1: v0 + client_id nullable string (int16 length, -1 = null; non-compact even in v2)
    v2: v1 + tagged fields (unsigned varint count; per field: unsigned varint tag,
        unsigned varint size, bytes)
Response header:
    v0: correlation_id int32
    v1: v0 + tagged fields (we send none: one 0x00 byte)

``FrameDecoder`` refuses a frame whose size is negative or above ``max_frame_size`` as
soon as the 4 size bytes arrive, before buffering any of its body (Kafka's
``socket.request.max.bytes``); after that error the stream cannot be resynchronised and
the connection must be closed.
"""

from __future__ import annotations

import mmap
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from semel.protocol.errors import ProtocolError
from semel.protocol.primitives import read_uvarint as read_unsigned_varint
from semel.protocol.primitives import skip_tagged_fields

__all__ = [
    "BufferedFrameReader",
    "FrameDecoder",
    "FrameTooLarge",
    "RequestHeader",
    "decode_response_header",
    "encode_request_header",
    "encode_response_header",
    "frame_response",
    "parse_request_header",
    "peek_api_key_version",
    "read_unsigned_varint",
    "size_prefix",
    "skip_tagged_fields",
]

DEFAULT_MAX_FRAME_SIZE = 104857600  # Kafka's socket.request.max.bytes default (100 MiB)

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# private anonymous memory, no swap reserved up front (Linux MAP_NORESERVE: 0x4000)
_MAP_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(
    mmap, "MAP_NORESERVE", 0x4000 if sys.platform.startswith("linux") else 0)


class FrameTooLarge(ProtocolError):
    """A frame size prefix that is negative or larger than the decoder's maximum."""

    def __init__(self, size: int, max_frame_size: int) -> None:
        if size < 0:
            message = f"invalid frame size {size}"
        else:
            message = f"frame of {size} bytes exceeds the maximum of {max_frame_size}"
        super().__init__(message)
        self.size = size
        self.max_frame_size = max_frame_size


class FrameDecoder:
    """Splits a byte stream into frames (bodies without the 4-byte size).

    ``feed(data)`` returns every frame completed by ``data``. A frame that arrives whole
    inside one ``bytes`` chunk is returned as a zero-copy memoryview slice of it; a frame
    spread over several chunks is collected as a list of pieces and joined once when it
    completes, so each byte is copied at most once however small the chunks are. Pieces
    of a ``bytes`` chunk are referenced, not copied; other buffer types (which the caller
    may reuse) are copied when kept.
    """

    __slots__ = ("_have", "_need", "_pieces", "_size_bytes", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._size_bytes = b""  # a size prefix split across feeds (< 4 bytes)
        self._need = -1  # body size of the frame being collected, -1 between frames
        self._pieces: list[bytes | memoryview] = []
        self._have = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as part of a frame (size prefix included)."""
        if self._need >= 0:
            return 4 + self._have
        return len(self._size_bytes)

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        keep_refs = isinstance(data, bytes)
        frames: list[memoryview] = []
        end = len(view)
        pos = 0
        max_size = self.max_frame_size
        while pos < end:
            if self._need < 0:
                # between frames: read the size prefix
                if not self._size_bytes and end - pos >= 4:
                    size = _SIZE.unpack_from(view, pos)[0]
                    pos += 4
                else:
                    take = min(4 - len(self._size_bytes), end - pos)
                    self._size_bytes += bytes(view[pos : pos + take])
                    pos += take
                    if len(self._size_bytes) < 4:
                        break
                    size = _SIZE.unpack(self._size_bytes)[0]
                    self._size_bytes = b""
                if size < 0 or size > max_size:
                    raise FrameTooLarge(size, max_size)
                if end - pos >= size:
                    frame = view[pos : pos + size]  # whole in this chunk: no copy of bytes
                    frames.append(frame if keep_refs else memoryview(bytes(frame)))
                    pos += size
                    continue
                self._need = size
                self._have = 0
            # collecting the body of a frame that spans chunks
            take = min(self._need - self._have, end - pos)
            piece = view[pos : pos + take]
            self._pieces.append(piece if keep_refs else bytes(piece))
            self._have += take
            pos += take
            if self._have == self._need:
                frames.append(memoryview(b"".join(self._pieces)))
                self._pieces.clear()
                self._need = -1
                self._have = 0
        return frames


class BufferedFrameReader:
    """Frames for an ``asyncio.BufferedProtocol``: the socket reads straight into our buffers.

    ``get_buffer()`` hands out where the next bytes go and ``buffer_updated(n)`` records that
    ``n`` arrived; ``next_frame()`` then returns one complete frame at a time, or None while
    more bytes are needed, so the caller takes a frame only when it is ready to run it (and
    stops reading while one is waiting: ``frame_ready``).

    Small frames are read into a scratch buffer and copied out once (scratch buffers are
    lent from a shared spare list while bytes are in them and handed back when drained, so
    an idle connection holds none). A frame larger than half the scratch buffer gets its own
    anonymous memory map of exactly its size and the socket reads the rest of it directly
    there: the frame is never joined or copied, it is writable (the log rewrites base
    offsets in place), and the memory it occupies grows with the bytes that actually
    arrive (untouched pages of a map are not allocated), so a size prefix alone pins
    nothing. ``charge(n)``, if given, is called with the bytes each time request bytes move
    into frame storage (a small frame copied out, bytes of a large frame arriving), for a
    broker-wide bound on request memory; ``partial_stored`` is what an unfinished large frame
    holds. Size limits as ``FrameDecoder``: checked before anything is allocated for a frame.
    """

    __slots__ = ("_charge", "_end", "_frame", "_have", "_scratch", "_scratch_size", "_start",
                 "max_frame_size", "ready")

    _spares: ClassVar[list[bytearray]] = []  # drained scratch buffers, shared by all readers
    MAX_SPARES = 64

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 scratch_size: int = 65536, charge: Callable[[int], None] | None = None) -> None:
        self.max_frame_size = max_frame_size
        self._scratch_size = scratch_size
        self._scratch: bytearray | None = None
        self._start = 0  # unparsed bytes are _scratch[_start:_end]
        self._end = 0
        self._frame: mmap.mmap | None = None  # a large frame being filled in place
        self._have = 0
        self._charge = charge
        # frame_ready, kept up to date by buffer_updated and next_frame (the only calls that
        # change it): an attribute read for the connection, which asks after each request
        self.ready = False

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as part of a frame."""
        return self._have if self._frame is not None else self._end - self._start

    @property
    def partial_stored(self) -> int:
        """Bytes of an unfinished large frame (charged, not yet returned)."""
        return self._have if self._frame is not None else 0

    @property
    def full(self) -> bool:
        """No more bytes can be taken until a frame is: a whole large frame waits, a size
        prefix would be refused, or the scratch buffer holds nothing but unparsed frames."""
        if self._frame is not None or self._end - self._start < 4:
            return self.ready
        size = _SIZE.unpack_from(self._scratch, self._start)[0]
        return (not 0 <= size <= self.max_frame_size
                or self._end - self._start == len(self._scratch))

    @property
    def receiving_large(self) -> bool:
        """An unfinished frame is being read into its own map."""
        return self._frame is not None and self._have < len(self._frame)

    @property
    def frame_ready(self) -> bool:
        """``next_frame()`` would not return None: a whole frame is buffered (or a size prefix
        it would refuse). Reading should wait while this holds."""
        if self._frame is not None:
            return self._have == len(self._frame)
        if self._end - self._start < 4:
            return False
        size = _SIZE.unpack_from(self._scratch, self._start)[0]
        return not 0 <= size <= self.max_frame_size or size <= self._end - self._start - 4

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._have:]
        scratch = self._scratch
        if scratch is None:
            scratch = self._scratch = self._take_spare()
        if self._start == self._end:
            self._start = self._end = 0
        elif self._move_to_own_map():  # the partial frame is large: read on into its map
            return memoryview(self._frame)[self._have:]
        elif len(scratch) - self._end < 4096:  # move the partial frame to the front
            n = self._end - self._start
            scratch[:n] = scratch[self._start:self._end]
            self._start, self._end = 0, n
        return memoryview(scratch)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._have += nbytes
            self.ready = self._have == len(self._frame)
            if self._charge is not None:
                self._charge(nbytes)
        else:
            self._end += nbytes
            if not self.ready:  # (more bytes never make a whole frame less whole)
                self.ready = self.frame_ready

    def next_frame(self) -> memoryview | None:
        """The next whole frame (a writable memoryview), or None until more bytes arrive.

        Raises FrameTooLarge for a negative or oversized size prefix; the stream cannot be
        resynchronised after it.
        """
        frame = self._frame
        if frame is not None:
            if self._have < len(frame):
                return None
            self._frame = None
            self._have = 0
            self.ready = False
            return memoryview(frame)
        start = self._start
        end = self._end
        available = end - start
        if available < 4:
            if available == 0:
                self._give_back_scratch()
            return None
        scratch = self._scratch
        size = _SIZE.unpack_from(scratch, start)[0]
        max_size = self.max_frame_size
        if size < 0 or size > max_size:
            raise FrameTooLarge(size, max_size)
        body = start + 4
        available -= 4
        if available >= size:
            start = self._start = body + size
            if start == end:
                self._give_back_scratch()
                self.ready = False
            elif end - start < 4:
                self.ready = False
            else:  # frame_ready, inline: the next frame is whole, or its size is refused
                n = _SIZE.unpack_from(scratch, start)[0]
                self.ready = not 0 <= n <= max_size or n <= end - start - 4
            if self._charge is not None:
                self._charge(size)
            return memoryview(scratch[body:body + size])  # one copy, small
        self._move_to_own_map()
        return None

    def _move_to_own_map(self) -> bool:
        """If the unfinished frame at the front of the scratch buffer is larger than half
        of it, move it into a map of its own (its pages are only backed by memory once bytes
        are written to them). Done as soon as its size is known, whether or not the caller
        is taking frames, so the scratch buffer never fills up with one frame."""
        start = self._start
        available = self._end - start - 4
        if available < 0:
            return False
        scratch = self._scratch
        size = _SIZE.unpack_from(scratch, start)[0]
        if not len(scratch) // 2 < size <= self.max_frame_size or available >= size:
            return False
        frame = mmap.mmap(-1, size, flags=_MAP_FLAGS)
        frame[:available] = scratch[start + 4:self._end]
        self._frame, self._have = frame, available
        self._give_back_scratch()
        if self._charge is not None:
            self._charge(available)
        return True

    def close(self) -> None:
        """Drop what is buffered (the connection is gone); the scratch buffer is handed back."""
        self._frame = None
        self._have = 0
        self.ready = False
        self._start = self._end = 0
        self._give_back_scratch()

    def _take_spare(self) -> bytearray:
        try:
            scratch = self._spares.pop()  # atomic: brokers in several threads share the list
        except IndexError:
            return bytearray(self._scratch_size)
        return scratch if len(scratch) == self._scratch_size else bytearray(self._scratch_size)

    def _give_back_scratch(self) -> None:
        scratch = self._scratch
        if scratch is not None:
            self._scratch = None
            self._start = self._end = 0
            if len(self._spares) < self.MAX_SPARES:
                self._spares.append(scratch)


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def peek_api_key_version(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the fields every header version starts with."""
    if len(frame) < 8:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    return _KEY_VERSION_CORRELATION.unpack_from(frame, 0)


def parse_request_header(
    frame: bytes | bytearray | memoryview, header_version: int
) -> tuple[RequestHeader, int]:
    """Decode a request header; returns it and the offset where the request body starts."""
    api_key, api_version, correlation_id = peek_api_key_version(frame)
    pos = 8
    client_id = None
    if header_version >= 1:
        if len(frame) < pos + 2:
            raise ProtocolError("request header ends before the client id length")
        length = _INT16.unpack_from(frame, pos)[0]
        pos += 2
        if length >= 0:
            if len(frame) < pos + length:
                raise ProtocolError(f"client id of {length} bytes runs past the end of the frame")
            client_id = bytes(frame[pos : pos + length]).decode("utf-8", "replace")
            pos += length
        elif length != -1:
            raise ProtocolError(f"invalid client id length {length}")
    if header_version >= 2:
        pos = skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def encode_request_header(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    header_version: int,
) -> bytes:
    """A request header (client side; used by tests and tools)."""
    out = _KEY_VERSION_CORRELATION.pack(api_key, api_version, correlation_id)
    if header_version >= 1:
        if client_id is None:
            out += _INT16.pack(-1)
        else:
            raw = client_id.encode("utf-8")
            out += _INT16.pack(len(raw)) + raw
    if header_version >= 2:
        out += b"\x00"
    return out


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    """v0: correlation id; v1: + an empty tagged-field section."""
    if header_version >= 1:
        return _INT32.pack(correlation_id) + b"\x00"
    return _INT32.pack(correlation_id)


def decode_response_header(
    frame: bytes | bytearray | memoryview, header_version: int
) -> tuple[int, int]:
    """(correlation_id, offset of the response body) — client side, for tests."""
    if len(frame) < 4:
        raise ProtocolError(f"response of {len(frame)} bytes is shorter than its header")
    correlation_id = _INT32.unpack_from(frame, 0)[0]
    pos = 4
    if header_version >= 1:
        pos = skip_tagged_fields(frame, pos)
    return correlation_id, pos


def recv_frame(sock, max_bytes: int = 2**31 - 1) -> bytes:
    """One size-prefixed frame from a blocking socket, without its size (a client reading a
    response). ConnectionError when the peer closes; ProtocolError for a size past
    ``max_bytes``."""
    (size,) = _SIZE.unpack(_recv_exactly(sock, 4))
    if not 0 <= size <= max_bytes:
        raise ProtocolError(f"a frame of {size} bytes (at most {max_bytes})")
    return _recv_exactly(sock, size)


def _recv_exactly(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def size_prefix(length: int) -> bytes:
    """The int32 size that precedes a frame of ``length`` bytes (for ``writelines``)."""
    return _SIZE.pack(length)


def frame_response(header: bytes, body: bytes | bytearray | memoryview) -> bytes:
    """size + header + body as one bytes object."""
    return b"".join((_SIZE.pack(len(header) + len(body)), header, body))
