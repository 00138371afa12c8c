"""What a handler sees of the broker for one request: its header and the broker's services."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from semel.broker.security import AclOperation, Principal, ResourceType
from semel.broker.security.session import Session
from semel.protocol.frame import RequestHeader

if TYPE_CHECKING:
    from semel.broker.server import Broker


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    broker: Broker
    session: Session
    # set by the connection: lets its next request start before this one is answered
    release: Callable[[], None] | None = None

    def release_connection(self) -> None:
        """The rest of this request need not hold up the connection's next request (its
        response still leaves in order); e.g. an acks=all produce waiting for the disk."""
        if self.release is not None:
            self.release()

    @property
    def client_host(self) -> str:
        return self.session.client_host

    @property
    def principal(self) -> Principal:
        """Who sent it: the connection's authenticated principal (ANONYMOUS without SASL or
        a client certificate)."""
        return self.session.principal

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether this request's principal may do ``operation`` on the resource; always
        True while the authorizer is off (``authorizer.class.name`` empty)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        return self.session.authorize(authorizer, operation, resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of this type allows ``operation`` to this principal, as
        Kafka's ``authorizeByResourceType`` (IdempotentWrite via Write on any topic)."""
        authorizer = self.broker.authorizer
        if authorizer is None:
            return True
        return self.session.authorize_by_resource_type(authorizer, operation, resource_type)

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def config(self):
        return self.broker.config

    @property
    def log_manager(self):
        return self.broker.log_manager
