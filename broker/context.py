"""What a handler sees of the broker for one request: its header and the broker's services."""

from __future__ import annotations

from collections.abc import Callable
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
    # set by the connection: lets its next request start before this one is answered
    release: Callable[[], None] | None = None

    def release_connection(self) -> None:
        """The rest of this request need not hold up the connection's next request (its
        response still leaves in order); e.g. an acks=all produce waiting for the disk."""
        if self.release is not None:
            self.release()

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def config(self):
        return self.broker.config

    @property
    def log_manager(self):
        return self.broker.log_manager
