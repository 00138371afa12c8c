"""The security state of one connection: its listener, who it is, and where its SASL
authentication stands.

Made by the connection when it is accepted (``broker/connection.py``), read by dispatch (what
may be sent before authentication, KIP-368's expired sessions) and by handlers through
``RequestContext`` (the principal, the authorizer's per-connection decision cache). On a
PLAINTEXT or SSL listener the connection is authenticated from the start: as ANONYMOUS, or on
SSL with a client certificate as the principal its subject maps to. On a SASL listener it is
not, until SaslAuthenticate (or a raw token after SaslHandshake v0) completes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from semel.broker.security import ANONYMOUS, AclOperation, Principal, ResourceType

if TYPE_CHECKING:
    from semel.broker.security.authorizer import Authorizer, AuthorizerCache
    from semel.broker.security.sasl import SaslServer

# requests a SASL connection may send before it has authenticated (Kafka's
# SaslServerAuthenticator): ApiVersions and SaslHandshake, then SaslAuthenticate
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class Session:
    __slots__ = ("_authorizer", "_cache", "authenticated", "client_host", "close_after_ms",
                 "expires_ms", "listener", "principal", "protocol", "raw_tokens",
                 "reauth_started_ms", "sasl")

    def __init__(self, client_host: str, listener: str = "PLAINTEXT",
                 protocol: str = "PLAINTEXT", principal: Principal = ANONYMOUS,
                 sasl: SaslServer | None = None) -> None:
        self.client_host = client_host
        self.listener = listener
        self.protocol = protocol
        self.principal = principal
        self.sasl = sasl
        self.authenticated = sasl is None
        self.raw_tokens = False  # after SaslHandshake v0: frames are bare SASL tokens
        self.expires_ms: int | None = None  # KIP-368: re-authenticate before this
        self.reauth_started_ms: int | None = None
        self.close_after_ms: int | None = None  # failed authentication: close after the answer
        self._authorizer: Authorizer | None = None
        self._cache: AuthorizerCache | None = None

    def authenticated_as(self, principal: Principal, lifetime_ms: int, now_ms: int) -> None:
        self.principal = principal
        self.authenticated = True
        self.expires_ms = now_ms + lifetime_ms if lifetime_ms > 0 else None
        self._cache = None

    def expired(self, now_ms: int) -> bool:
        return self.expires_ms is not None and now_ms >= self.expires_ms

    def _decisions(self, authorizer: Authorizer) -> AuthorizerCache:
        cache = self._cache
        if cache is None or self._authorizer is not authorizer:
            cache = self._cache = authorizer.cache_for(self.principal, self.client_host)
            self._authorizer = authorizer
        return cache

    def authorize(self, authorizer: Authorizer, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        return self._decisions(authorizer).authorize(operation, resource_type, name)

    def authorize_by_resource_type(self, authorizer: Authorizer, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        return self._decisions(authorizer).authorize_by_resource_type(operation, resource_type)
