"""``queued.max.request.bytes``: one bound on the request bytes held by all connections.

Bytes are charged as they move into request storage (``BufferedFrameReader``'s ``charge``:
a small frame copied out of a connection's read buffer, the bytes of a large frame as they
arrive) and released once the request has been answered or its connection is gone. A charge
is never refused (the bytes have been read already); instead, once the total reaches the
capacity, every connection stops reading until requests in progress have given back enough
(down to 7/8 of the capacity, so reading does not flap at the boundary). Request memory is
therefore bounded by the capacity plus one socket read, whatever the number of connections.

Frames only partly received when the bound is reached keep what they hold until they
complete or ``socket.request.read.timeout.ms`` closes their connection, so a client that
stalls halfway through a large request cannot hold the memory for longer than that.
"""

from __future__ import annotations

from collections.abc import Callable


class RequestMemory:
    __slots__ = ("_on_change", "capacity", "full", "peak", "resume_below", "used")

    def __init__(self, capacity: int | None, on_change: Callable[[], None]) -> None:
        """``capacity`` None: no bound. ``on_change()`` is called when ``full`` flips."""
        self.capacity = capacity
        self.resume_below = None if capacity is None else capacity - capacity // 8
        self.used = 0
        self.peak = 0
        self.full = False
        self._on_change = on_change

    def charge(self, nbytes: int) -> None:
        used = self.used = self.used + nbytes
        self.peak = max(self.peak, used)
        if not self.full and self.capacity is not None and used >= self.capacity:
            self.full = True
            self._on_change()

    def release(self, nbytes: int) -> None:
        used = self.used = self.used - nbytes
        if self.full and used < self.resume_below:
            self.full = False
            self._on_change()
