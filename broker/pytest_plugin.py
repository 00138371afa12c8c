"""pytest fixtures for a real semel broker, registered by ``pip install semel`` (entry point
``pytest11``: no conftest code needed). docs/TESTING.md has the guide.

- ``semel_broker``: a broker of this test alone (``semel.broker.testing.BrokerThread``): in
  this process, 127.0.0.1 on an ephemeral port, a temporary data directory removed after
  the test, virtual time (``advance``), fault injection (``faults``) and state inspection.
- ``semel_bootstrap``: its ``host:port``.
- ``semel_session_broker``: one broker for the whole session (one per pytest-xdist worker).
- ``semel_broker_factory``: ``semel_broker_factory(properties, subprocess=False,
  kill_points=False)`` starts more brokers (a ``BrokerProcess`` with ``subprocess=True``,
  for SIGKILL tests); all are stopped after the test.
- ``semel_broker_properties`` / ``semel_session_broker_properties``: the broker properties
  of the two brokers above; override them in a conftest or test module.

Every broker starts with ``TEST_DEFAULTS`` (no initial rebalance delay, no fsync) under
the properties given.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


def _data_dir(kind: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"semel-{kind}-"))


def _start_thread(properties: dict[str, str]):
    from semel.broker.testing import TEST_DEFAULTS, BrokerThread

    data = _data_dir("broker")
    broker = BrokerThread(data, {**TEST_DEFAULTS, **properties})
    try:
        broker.start()
    except BaseException:
        shutil.rmtree(data, ignore_errors=True)
        raise
    return broker


def _stop(broker) -> None:
    try:
        broker.stop()
    finally:
        shutil.rmtree(broker.data_dir, ignore_errors=True)


@pytest.fixture
def semel_broker_properties() -> dict[str, str]:
    """Broker properties of ``semel_broker`` (override to change them)."""
    return {}


@pytest.fixture(scope="session")
def semel_session_broker_properties() -> dict[str, str]:
    """Broker properties of ``semel_session_broker`` (override to change them)."""
    return {}


@pytest.fixture
def semel_broker(semel_broker_properties):
    """A running broker for this test alone; stopped and its data removed afterwards."""
    broker = _start_thread(semel_broker_properties)
    yield broker
    _stop(broker)


@pytest.fixture
def semel_bootstrap(semel_broker) -> str:
    """``semel_broker``'s bootstrap address, ``127.0.0.1:<port>``."""
    return semel_broker.bootstrap


@pytest.fixture(scope="session")
def semel_session_broker(semel_session_broker_properties):
    """One running broker for the session (per xdist worker); tests share its topics."""
    broker = _start_thread(semel_session_broker_properties)
    yield broker
    _stop(broker)


@pytest.fixture
def semel_broker_factory():
    """Start brokers with custom properties: ``semel_broker_factory({"num.partitions":
    "3"})`` in this process, ``subprocess=True`` as a child process (``BrokerProcess``,
    durable by default as ``semel serve`` is unless properties say otherwise),
    ``kill_points=True`` to arm SIGKILLs at named points. All stop after the test."""
    from semel.broker.testing import TEST_DEFAULTS, BrokerProcess

    started = []

    def start(properties: dict[str, str] | None = None, *, subprocess: bool = False,
              kill_points: bool = False):
        properties = dict(properties or {})
        if not subprocess:
            if kill_points:
                raise ValueError("kill points need subprocess=True")
            broker = _start_thread(properties)
        else:
            data = _data_dir("process")
            defaults = {k: v for k, v in TEST_DEFAULTS.items() if k != "log.flush.mode"}
            broker = BrokerProcess(data, {**defaults, **properties}, kill_points=kill_points)
            try:
                broker.start()
            except BaseException:
                shutil.rmtree(data, ignore_errors=True)
                raise
        started.append(broker)
        return broker

    yield start
    for broker in reversed(started):
        _stop(broker)
