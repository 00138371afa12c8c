"""Long-poll fetch: parked fetches wait for data on any of their partitions.

A fetch that found fewer than ``min_bytes`` registers one future under each partition it
reads; when a partition's high watermark (or, with transactions, its last stable offset)
moves, every future registered there is resolved and the fetch re-reads. Timeouts are the
fetch's own ``max_wait_ms`` (asyncio.wait_for around the future).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class FetchWaiters:
    def __init__(self) -> None:
        self._by_partition: dict[tuple[str, int], set[asyncio.Future]] = {}

    def register(self, partitions: Iterable[tuple[str, int]]) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        keys = list(partitions)
        for key in keys:
            self._by_partition.setdefault(key, set()).add(fut)

        def _unregister(_f: asyncio.Future) -> None:
            for key in keys:
                waiters = self._by_partition.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._by_partition[key]

        fut.add_done_callback(_unregister)
        return fut

    def notify(self, partition_log) -> None:
        """Listener for LogManager: ``partition_log.topic_partition`` gained readable data."""
        if not self._by_partition:  # no fetch parked (a producer's every append asks)
            return
        tp = partition_log.topic_partition
        waiters = self._by_partition.get((tp.topic, tp.partition))
        if waiters:
            for fut in list(waiters):
                if not fut.done():
                    fut.set_result(None)

    def wake_all(self) -> None:
        for waiters in list(self._by_partition.values()):
            for fut in list(waiters):
                if not fut.done():
                    fut.set_result(None)
