"""What a handler sees of the broker for one request: its header and the broker's services."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from protocol.frame import RequestHeader

if TYPE_CHECKING:
    from broker.server import Broker


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    broker: Broker
    client_host: str

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def config(self):
        return self.broker.config

    @property
    def log_manager(self):
        return self.broker.log_manager
