"""SaslHandshake (key 17), v0-1.

Picks the connection's SASL mechanism from ``sasl.enabled.mechanisms`` of its listener and
answers with the enabled list. v1: the tokens follow in SaslAuthenticate requests; v0: they
follow as bare size-prefixed frames (the connection reads them as such). On an authenticated
connection with a session lifetime (``connections.max.reauth.ms``, KIP-368) a handshake
starts re-authentication, at most once a second; otherwise, and on a listener without SASL,
it is answered ILLEGAL_SASL_STATE. An unsupported mechanism or a handshake out of turn
during authentication fails it: the connection is closed after the answer.
"""

from __future__ import annotations

from semel.protocol.errors import Error
from semel.protocol.messages.sasl_handshake_request import SaslHandshakeRequest
from semel.protocol.messages.sasl_handshake_response import SaslHandshakeResponse

API_KEY = 17
REAUTH_MIN_INTERVAL_MS = 1000


async def handle(ctx, req: SaslHandshakeRequest) -> SaslHandshakeResponse:
    session = ctx.session
    sasl = session.sasl
    if sasl is None:
        return SaslHandshakeResponse(Error.ILLEGAL_SASL_STATE, [])
    if sasl.complete and session.expires_ms is not None:
        now = ctx.broker.monotonic_ms()
        last = session.reauth_started_ms
        if last is None or now - last >= REAUTH_MIN_INTERVAL_MS:
            sasl.reset_for_reauth()
            session.reauth_started_ms = now
    error, mechanisms = sasl.handshake(req.mechanism)
    if error == Error.NONE and ctx.api_version == 0:
        session.raw_tokens = True
    if sasl.failed:
        session.close_after_ms = 0
    return SaslHandshakeResponse(error, mechanisms)


def error_response(req: SaslHandshakeRequest, code: Error) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(code, [])
