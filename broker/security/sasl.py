"""The SASL server of one connection: Kafka's SaslServerAuthenticator states, without sockets.

The connection feeds it the mechanism of a SaslHandshake (``handshake``) and then each client
token (``step``: the ``auth_bytes`` of a SaslAuthenticate, or a raw size-delimited frame after
SaslHandshake v0), and sends back what it returns. States and transitions (one table):

    HANDSHAKE        --handshake ok-->        AUTHENTICATE
    AUTHENTICATE     --step, more to come-->  AUTHENTICATE
    AUTHENTICATE     --step, done-->          COMPLETE
    COMPLETE         --reset_for_reauth-->    REAUTH_HANDSHAKE   (KIP-368)
    REAUTH_HANDSHAKE --handshake ok-->        AUTHENTICATE, or REAUTH_BAD_MECHANISM when the
                                              mechanism differs from the first one (Kafka
                                              answers the handshake, then fails the token)
    any failure                        -->    FAILED (the connection is closed after the answer)

A SaslHandshake or SaslAuthenticate outside these transitions answers ILLEGAL_SASL_STATE; on an
authenticated connection that is not re-authenticating the connection stays usable (Kafka's
KafkaApis answers those), otherwise it fails. A re-authentication must end as the same
principal. Error messages are Kafka's and never contain a password or a client token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from semel.broker.security import Principal
from semel.broker.security.plain import PlainAuthenticationError, PlainServer
from semel.broker.security.scram import (
    MECHANISMS as SCRAM_MECHANISMS,
)
from semel.broker.security.scram import (
    ScramAuthenticationError,
    ScramCredential,
    ScramServer,
)
from semel.protocol.errors import Error

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)


class CredentialLookup(Protocol):
    def get(self, user: str, mechanism: str) -> ScramCredential | None: ...


class SaslState(Enum):
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    REAUTH_HANDSHAKE = "REAUTH_HANDSHAKE"
    REAUTH_BAD_MECHANISM = "REAUTH_BAD_MECHANISM"
    FAILED = "FAILED"


# which input each state accepts; anything else is ILLEGAL_SASL_STATE
ACCEPTS_HANDSHAKE = {SaslState.HANDSHAKE, SaslState.REAUTH_HANDSHAKE}
ACCEPTS_TOKEN = {SaslState.AUTHENTICATE, SaslState.REAUTH_BAD_MECHANISM}


@dataclass(frozen=True, slots=True)
class SaslStep:
    """The answer to one client token. ``challenge`` goes back to the client (SaslAuthenticate
    ``auth_bytes`` or a raw frame); ``done`` with ``principal`` on success; ``error`` and
    ``error_message`` on failure (``fatal``: send the answer, then close the connection)."""

    challenge: bytes = b""
    done: bool = False
    principal: Principal | None = None
    error: Error = Error.NONE
    error_message: str | None = None
    session_lifetime_ms: int = 0  # SaslAuthenticate v1+ ``session_lifetime_ms`` when done
    fatal: bool = False


class SaslServer:
    """SASL for one connection. ``enabled_mechanisms`` is ``sasl.enabled.mechanisms``;
    ``plain_users`` the JAAS users for PLAIN, ``scram_credentials`` the SCRAM store (anything
    with ``get(user, mechanism)``). ``connections_max_reauth_ms`` > 0 is the session lifetime
    given to the client on success (KIP-368; 0: sessions do not expire)."""

    def __init__(self, enabled_mechanisms: Sequence[str], plain_users: Mapping[str, str] | None,
                 scram_credentials: CredentialLookup | None, *,
                 connections_max_reauth_ms: int = 0) -> None:
        unknown = [m for m in enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"unsupported SASL mechanisms {unknown}; supported: "
                             f"{', '.join(SUPPORTED_MECHANISMS)}")
        if not enabled_mechanisms:
            raise ValueError("no SASL mechanism is enabled")
        self.enabled_mechanisms = list(dict.fromkeys(enabled_mechanisms))
        self._plain_users = plain_users or {}
        self._scram_credentials = scram_credentials
        self.connections_max_reauth_ms = connections_max_reauth_ms
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: Principal | None = None
        self._server: PlainServer | ScramServer | None = None
        self._reauth_from: tuple[str, Principal] | None = None  # (mechanism, principal)
        self._bad_mechanism_message = ""

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def failed(self) -> bool:
        return self.state is SaslState.FAILED

    @property
    def reauthenticating(self) -> bool:
        return self._reauth_from is not None

    def _text(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    def handshake(self, mechanism: str) -> tuple[Error, list[str]]:
        """SaslHandshake: the error code and the enabled mechanisms to answer with."""
        if self.state not in ACCEPTS_HANDSHAKE:
            if self.state is not SaslState.COMPLETE:
                self._set_failed()
            return Error.ILLEGAL_SASL_STATE, list(self.enabled_mechanisms)
        if mechanism not in self.enabled_mechanisms:
            self._set_failed()
            return Error.UNSUPPORTED_SASL_MECHANISM, list(self.enabled_mechanisms)
        if self._reauth_from is not None and mechanism != self._reauth_from[0]:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._reauth_from[0]}'")
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return Error.NONE, list(self.enabled_mechanisms)
        self.mechanism = mechanism
        self._server = self._mechanism_server(mechanism)
        self.state = SaslState.AUTHENTICATE
        return Error.NONE, list(self.enabled_mechanisms)

    def step(self, token: bytes) -> SaslStep:
        """One client token (SaslAuthenticate ``auth_bytes`` or a v0 raw frame)."""
        if self.state not in ACCEPTS_TOKEN:
            if self.state is SaslState.COMPLETE:  # Kafka's KafkaApis answer; connection lives
                return SaslStep(error=Error.ILLEGAL_SASL_STATE,
                                error_message="SaslAuthenticate request received after "
                                              "successful authentication")
            self._set_failed()
            return SaslStep(error=Error.ILLEGAL_SASL_STATE, fatal=True,
                            error_message="Unexpected SaslAuthenticate request during SASL "
                                          "handshake")
        if self.state is SaslState.REAUTH_BAD_MECHANISM:
            return self._fail(self._bad_mechanism_message)
        server = self._server
        assert server is not None and self.mechanism is not None
        try:
            challenge = server.evaluate(token)
        except PlainAuthenticationError as e:
            return self._fail(e.client_message)
        except ScramAuthenticationError as e:
            return self._fail(e.client_message or
                              f"Authentication failed during {self._text()} due to invalid "
                              f"credentials with SASL mechanism {self.mechanism}")
        if not server.complete:
            return SaslStep(challenge=challenge)
        assert server.username is not None
        principal = Principal("User", server.username)
        if self._reauth_from is not None and principal != self._reauth_from[1]:
            before = self._reauth_from[1]
            return self._fail(f"Cannot change principals during re-authentication from "
                              f"{before.type}.{before.name}: {principal.type}.{principal.name}")
        self._server = None
        self._reauth_from = None
        self.principal = principal
        self.state = SaslState.COMPLETE
        return SaslStep(challenge=challenge, done=True, principal=principal,
                        session_lifetime_ms=max(0, self.connections_max_reauth_ms))

    def reset_for_reauth(self) -> None:
        """Begin a KIP-368 re-authentication of a COMPLETE session: the next ``handshake``
        must name the same mechanism and the exchange must end as the same principal. The
        connection decides whether to allow it (Kafka: only with a session lifetime, and not
        twice within a second) and calls this before passing the SaslHandshake on."""
        if self.state is not SaslState.COMPLETE:
            raise RuntimeError(f"re-authentication needs a complete session, not {self.state}")
        assert self.mechanism is not None and self.principal is not None
        self._reauth_from = (self.mechanism, self.principal)
        self.state = SaslState.REAUTH_HANDSHAKE

    def _set_failed(self) -> None:
        self._server = None
        self.principal = None  # a failed re-authentication leaves no principal to act as
        self.state = SaslState.FAILED

    def _fail(self, message: str) -> SaslStep:
        self._set_failed()
        return SaslStep(error=Error.SASL_AUTHENTICATION_FAILED, error_message=message,
                        fatal=True)

    def _mechanism_server(self, mechanism: str) -> PlainServer | ScramServer:
        if mechanism == PLAIN:
            return PlainServer(self._plain_users)
        store = self._scram_credentials

        def lookup(user: str) -> ScramCredential | None:
            return None if store is None else store.get(user, mechanism)

        return ScramServer(SCRAM_MECHANISMS[mechanism], lookup)
