"""Polling for a condition that another thread (a ``BrokerThread``'s loop, say) brings about."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout: float = 30.0) -> bool:
    """Whether ``predicate()`` became true within ``timeout`` seconds (asked every 10 ms and
    once more at the end); the caller asserts it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def until(predicate: Callable[[], object], timeout: float = 30.0) -> None:
    """``wait_for`` that fails the test (AssertionError) if ``predicate()`` never became true."""
    if not wait_for(predicate, timeout):
        raise AssertionError("condition not reached")
