"""Several named listeners with their own advertised addresses: Metadata, FindCoordinator and
DescribeCluster answer each client with the address of the listener it connected to (what a
container needs: an in-network name for its neighbours, a host name for the outside)."""

from __future__ import annotations

import pytest

from semel.broker.testing import BrokerProcess
from tests.kafka_wire import KafkaWire, message

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    props = {
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,"
                                          "EXTERNAL:PLAINTEXT",
        "advertised.listeners": "INTERNAL://semel:19092,EXTERNAL://broker.example.com:0",
        "log.flush.mode": "none",
    }
    with BrokerProcess(tmp_path_factory.mktemp("data"), props) as b:
        yield b


def answers(port: int) -> tuple:
    with KafkaWire("127.0.0.1", port) as wire:
        metadata = wire.request(METADATA, 12, message(METADATA, "request", topics=None))
        coordinator = wire.request(FIND_COORDINATOR, 4, message(
            FIND_COORDINATOR, "request", key_type=0, coordinator_keys=["g"]))
        cluster = wire.request(DESCRIBE_CLUSTER, 1, message(DESCRIBE_CLUSTER, "request"))
    [b] = metadata.brokers
    [c] = coordinator.coordinators
    [d] = cluster.brokers
    return (b.host, b.port), (c.host, c.port), (d.host, d.port)


def test_each_listener_advertises_its_own_address(broker):
    external = broker.ports["EXTERNAL"]
    assert answers(broker.ports["INTERNAL"]) == (("semel", 19092),) * 3
    # port 0 in advertised.listeners: the port the listener actually bound
    assert answers(external) == (("broker.example.com", external),) * 3
    # a listener advertised.listeners does not name advertises where it is bound
    assert answers(broker.port) == (("127.0.0.1", broker.port),) * 3
