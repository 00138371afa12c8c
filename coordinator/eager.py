"""Coroutines started in the caller's turn of the loop, finished in a task only if they
suspend.

``coro.send(None)`` runs a coroutine up to its first suspension without a task; a request
that never waits (the common case: an answer from memory, or a log write with
log.flush.mode=none) is then done in the turn it arrived, with no task created and no hop
of the loop. When it does suspend, ``loop.create_task(Resumed(coro, yielded))`` drives it on
from there: ``Resumed`` is the task's coroutine itself, so the task's first step hands it
the awaitable the coroutine yielded, and every later result, exception and cancellation
goes straight in, as if the coroutine had run in that task from the start - a task
cancelled before its first step too (a coroutine wrapping an ``await`` would then never
start, and the one it carries would be dropped without its cleanup running). Python
3.12's eager task factory does this for whole tasks; 3.11 has none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

_SENT = object()  # Resumed's first awaitable is handed out


class Resumed:
    """A coroutine (for ``loop.create_task``): the rest of ``coro``, which yielded
    ``yielded`` at its first suspension (from ``coro.send(None)``).

    ``ended(result, exception)``, if given, is called as ``coro`` ends - in the step that
    ends it, before the task is done: with its result, or with the exception it raised
    (a CancelledError included), which the task then does not raise (a cancellation still
    cancels the task)."""

    __slots__ = ("_coro", "_ended", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any,
                 ended: Callable[[Any, BaseException | None], None] | None = None) -> None:
        self._coro = coro
        self._first = yielded
        self._ended = ended

    def send(self, value: Any) -> Any:
        first = self._first
        if first is not _SENT:  # the task's first step
            self._first = _SENT
            return first
        return self._step(self._coro.send, value)

    def throw(self, exc, value=None, traceback=None) -> Any:
        self._first = _SENT
        if value is not None:  # the (type, value, traceback) form
            exc = value
        return self._step(self._coro.throw, exc)

    def close(self) -> None:
        self._coro.close()

    def _step(self, method, arg) -> Any:
        ended = self._ended
        if ended is None:
            return method(arg)
        try:
            return method(arg)
        except StopIteration as stop:
            ended(stop.value, None)
            raise
        except asyncio.CancelledError as exc:
            ended(None, exc)
            raise
        except Exception as exc:  # noqa: BLE001 - handed to ``ended``
            ended(None, exc)
            raise StopIteration(None) from None


Coroutine.register(Resumed)  # for asyncio.iscoroutine: a task's coroutine (not awaitable)
