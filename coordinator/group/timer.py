"""Keyed timers for the coordinator state machines.

``schedule(key, delay_ms, fn)`` replaces any timer with the same key (Kafka's coordinator
timer does the same: one heartbeat-expiration timer per member, one join timer per group);
``cancel(key)`` drops it. ``ManualTimer`` runs on an injected clock that tests advance, so
timeouts are tested without sleeping; the broker's event-loop timer lives in the shell
(``coordinator.group.coordinator``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Protocol

# the offsets retention check's key (GroupCoordinatorShard.schedule_cleanup); here so that the
# shell can schedule the first check before it has made the shard
CLEANUP_KEY = "cleanup-group-metadata"


class Timer(Protocol):
    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None: ...

    def cancel(self, key: str) -> None: ...


class ManualClock:
    """A millisecond clock that only moves when told to."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class ManualTimer:
    """Timers on a ManualClock; ``advance(ms)`` fires what falls due, in deadline order."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, str]] = []
        self._live: dict[str, tuple[int, Callable[[], None]]] = {}  # key -> (seq, fn)
        self._seq = itertools.count()

    def schedule(self, key: str, delay_ms: int, fn: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._live[key] = (seq, fn)
        heapq.heappush(self._heap, (self.clock.now_ms + max(delay_ms, 0), seq, key))

    def cancel(self, key: str) -> None:
        self._live.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._live

    def deadline(self, key: str) -> int | None:
        live = self._live.get(key)
        if live is None:
            return None
        return next(d for d, s, k in self._heap if k == key and s == live[0])

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms``, firing due timers at their deadlines."""
        target = self.clock.now_ms + ms
        fired = 0
        while self._heap and self._heap[0][0] <= target:
            deadline, seq, key = heapq.heappop(self._heap)
            live = self._live.get(key)
            if live is None or live[0] != seq:
                continue  # cancelled or rescheduled
            del self._live[key]
            self.clock.now_ms = max(self.clock.now_ms, deadline)
            live[1]()
            fired += 1
        self.clock.now_ms = target
        return fired
