"""Coroutines started in the caller's turn of the loop, finished in a task only if they
suspend.

``coro.send(None)`` runs a coroutine up to its first suspension without a task; a request
that never waits (the common case: an answer from memory, or a log write with
log.flush.mode=none) is then done in the turn it arrived, with no task created and no hop
of the loop. When it does suspend, ``Resume(coro, yielded)`` is what a task awaits to drive
it on from there: it hands the awaitable the coroutine yielded to the task, and passes
the task's results, exceptions and cancellation back in, as if the coroutine had run in
that task from the start. (Python 3.12's eager task factory does this for whole tasks;
3.11 has none.)
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any


class Resume:
    """Awaitable: the rest of ``coro``, which yielded ``yielded`` at its first suspension
    (from ``coro.send(None)``). Awaited once."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded

    def __await__(self):
        coro, value = self.coro, self.yielded
        self.coro = self.yielded = None
        while True:
            try:
                sent = yield value
            except BaseException as exc:  # noqa: BLE001 - cancellation etc., passed on
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value
