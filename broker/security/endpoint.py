"""One listener as the server runs it: its TLS context, its SASL users, where it is bound
and what it advertises, and the security session of each connection it accepts.

Built once at start from the listener's resolved settings (``BrokerConfig.listener_security``);
``new_session`` is called by the connection when it is accepted (after the TLS handshake, so
a client certificate is known): PLAINTEXT connections act as ANONYMOUS, SSL ones as the
principal their certificate's subject maps to (``ssl.principal.mapping.rules``; ANONYMOUS
without one), SASL ones are unauthenticated until their SASL exchange completes.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from semel.broker.security import ANONYMOUS
from semel.broker.security.session import Session
from semel.broker.security.ssl_principal import principal_from_certificate

if TYPE_CHECKING:
    from semel.broker.security.credentials import ScramCredentialStore
    from semel.broker.security.listeners import ListenerSecurity


class AuthenticationRefused(Exception):
    """The connection cannot be given a principal (no mapping rule for its certificate)."""


class ListenerEndpoint:
    def __init__(self, security: ListenerSecurity, host: str, port: int,
                 scram_credentials: ScramCredentialStore | None) -> None:
        self.security = security
        self.name = security.name
        self.protocol = security.security_protocol
        self.host = host  # as configured ("" = every interface); the bound address is set
        self.port = port  # at start, with what the listener advertises
        self.advertised_host = ""
        self.advertised_port = 0
        self.ssl_context: ssl.SSLContext | None = None
        if security.uses_tls:
            # imported here: it pulls in cryptography (~30 ms), needless without TLS
            from semel.broker.security.tls import build_server_context

            self.ssl_context = build_server_context(security)
        self._plain_users: dict[str, str] | None = None
        self._sasl_server = None  # SaslServer on a SASL listener
        if security.uses_sasl:
            # imported here, as TLS above: a listener without SASL needs none of it
            from semel.broker.security.plain import parse_plain_jaas
            from semel.broker.security.sasl import PLAIN, SaslServer

            self._sasl_server = SaslServer
            if PLAIN in security.sasl_enabled_mechanisms:
                jaas = security.sasl_jaas_config.get(PLAIN)
                self._plain_users = parse_plain_jaas(jaas.value) if jaas is not None else {}
        self._scram_credentials = scram_credentials

    def new_session(self, client_host: str, ssl_object: ssl.SSLObject | None) -> Session:
        """The security state of a connection accepted on this listener."""
        security = self.security
        if security.uses_sasl:
            sasl = self._sasl_server(security.sasl_enabled_mechanisms, self._plain_users,
                              self._scram_credentials,
                              connections_max_reauth_ms=security.connections_max_reauth_ms)
            return Session(client_host, self.name, self.protocol, ANONYMOUS, sasl)
        principal = ANONYMOUS
        if ssl_object is not None:
            certificate = ssl_object.getpeercert(binary_form=True)
            if certificate is not None:
                try:
                    principal = principal_from_certificate(
                        certificate, security.principal_mapper or "DEFAULT")
                except Exception as e:  # noqa: BLE001 - any failure refuses the connection
                    raise AuthenticationRefused(
                        f"no principal for the client certificate: {e}") from None
        return Session(client_host, self.name, self.protocol, principal)
