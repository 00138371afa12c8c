"""Shared fixtures: an in-process broker on an ephemeral port with a temporary data dir."""

from __future__ import annotations

import pytest

from semel.broker.testing import BrokerThread


@pytest.fixture
def broker(tmp_path):
    """A running broker (log.flush.mode=none) for blocking clients; stopped after the test."""
    with BrokerThread(tmp_path / "data") as b:
        yield b


@pytest.fixture
def bootstrap(broker) -> str:
    return broker.bootstrap
