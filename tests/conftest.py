"""Shared fixtures: an in-process broker on an ephemeral port with a temporary data dir."""

from __future__ import annotations

import pytest

from semel.broker.testing import BrokerThread

# tests/plugin runs pytest inside pytest to try the plugin as a user's suite would
pytest_plugins = ["pytester"]


@pytest.fixture
def broker(tmp_path):
    """A running broker (log.flush.mode=none) for blocking clients; stopped after the test."""
    with BrokerThread(tmp_path / "data") as b:
        yield b


@pytest.fixture
def bootstrap(broker) -> str:
    return broker.bootstrap
