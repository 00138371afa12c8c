"""``queued.max.request.bytes``: one bound on the request bytes held by all connections.

Bytes are charged as they move into request storage (``BufferedFrameReader``'s ``charge``:
a small frame copied out of a connection's read buffer, the bytes of a large frame as they
arrive) and released once the request has been answered or its connection is gone. A charge
is never refused (the bytes have been read already); instead reading stops, in two tiers:

- ``large_full`` at 7/8 of the capacity: connections receiving a large request (one read
  into its own map, see protocol/frame.py) stop reading. Large requests are where memory
  goes and where a client can stall halfway, so they may only take 7/8;
- ``full`` at the capacity: every connection stops reading.

Each tier lifts again 1/16 of the capacity below where it set in, so reading does not flap at
the boundary. Request memory is therefore bounded by the capacity plus one socket read,
whatever the number of connections, and clients sending ordinary small requests keep being
served while half-sent large requests hold the rest. Those keep what they hold until they
complete or ``socket.request.read.timeout.ms`` closes their connection.
"""

from __future__ import annotations

from collections.abc import Callable


class RequestMemory:
    __slots__ = ("_large_off", "_large_on", "_off", "_on", "_on_change", "capacity", "full",
                 "large_full", "peak", "used")

    def __init__(self, capacity: int | None, on_change: Callable[[], None]) -> None:
        """``capacity`` None: no bound. ``on_change()`` is called when a tier flips."""
        self.capacity = capacity
        self.used = 0
        self.peak = 0
        self.full = False
        self.large_full = False
        self._on_change = on_change
        if capacity is not None:
            hysteresis = capacity // 16
            self._on, self._off = capacity, capacity - hysteresis
            self._large_on = capacity - capacity // 8
            self._large_off = self._large_on - hysteresis

    def charge(self, nbytes: int) -> None:
        used = self.used = self.used + nbytes
        if used > self.peak:  # noqa: PLR1730 - not max(): a call less per request
            self.peak = used
        if self.capacity is None or self.full:
            return
        if used >= self._large_on and not self.large_full:
            self.large_full = True
            self.full = used >= self._on
            self._on_change()
        elif used >= self._on:
            self.full = True
            self._on_change()

    def release(self, nbytes: int) -> None:
        used = self.used = self.used - nbytes
        if not self.large_full:
            return
        changed = False
        if self.full and used < self._off:
            self.full = False
            changed = True
        if used < self._large_off:
            self.large_full = False
            changed = True
        if changed:
            self._on_change()
