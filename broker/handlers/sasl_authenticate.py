"""SaslAuthenticate (key 36), v0-2.

One SASL token of the mechanism SaslHandshake chose, answered with the server's next token.
On success the connection acts as the authenticated principal from its next request; a
failure answers SASL_AUTHENTICATION_FAILED (or ILLEGAL_SASL_STATE) with Kafka's message and
closes the connection after ``connection.failed.authentication.delay.ms``, as Kafka does.
v1: ``session_lifetime_ms``, the time left before the client must re-authenticate (KIP-368).
v2: flexible.
"""

from __future__ import annotations

from semel.protocol.errors import Error
from semel.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest
from semel.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse

API_KEY = 36


async def handle(ctx, req: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    session = ctx.session
    sasl = session.sasl
    if sasl is None:
        return SaslAuthenticateResponse(
            Error.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful "
            "authentication")
    step = sasl.step(bytes(req.auth_bytes))
    if step.error != Error.NONE:
        if step.fatal:
            session.close_after_ms = ctx.config.connection_failed_authentication_delay_ms
        return SaslAuthenticateResponse(step.error, step.error_message)
    lifetime = 0
    if step.done:
        assert step.principal is not None
        session.authenticated_as(step.principal, step.session_lifetime_ms,
                                 ctx.broker.monotonic_ms())
        lifetime = step.session_lifetime_ms
    return SaslAuthenticateResponse(Error.NONE, None, step.challenge, lifetime)


def error_response(req: SaslAuthenticateRequest, code: Error) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(code, None)
