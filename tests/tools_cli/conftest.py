"""One broker for the CLI tests: the authorizer on with User:ANONYMOUS (every PLAINTEXT
connection) a super user, so ACLs can be administered and nothing else is refused, and
transaction.partition.verification.enable=false, so a test can leave a hanging transaction.
Each test uses its own topic, group and transactional id names."""

from __future__ import annotations

import pytest

from semel.broker.testing import BrokerThread

OVERRIDES = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "transaction.partition.verification.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="package")
def cli_broker(tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("cli-data"), OVERRIDES) as b:
        yield b
