"""ExpireDelegationToken (key 40), v1-2, with delegation tokens off (see
``_delegation_tokens``): a connection that may not ask for tokens is
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED with expiry -1 (the broker's answer); any other
request reaches the controller, which has no token to expire: DELEGATION_TOKEN_AUTH_DISABLED,
expiry 0.
"""

from __future__ import annotations

from semel.broker.handlers._delegation_tokens import ERROR_TIMESTAMP, token_requests_allowed
from semel.protocol.errors import Error
from semel.protocol.messages.expire_delegation_token_request import ExpireDelegationTokenRequest
from semel.protocol.messages.expire_delegation_token_response import (
    ExpireDelegationTokenResponse,
)

API_KEY = 40


async def handle(ctx, req: ExpireDelegationTokenRequest) -> ExpireDelegationTokenResponse:
    if not token_requests_allowed(ctx):
        return error_response(req, Error.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return ExpireDelegationTokenResponse(error_code=Error.DELEGATION_TOKEN_AUTH_DISABLED,
                                         expiry_timestamp_ms=0)


def error_response(req: ExpireDelegationTokenRequest,
                   code: Error) -> ExpireDelegationTokenResponse:
    return ExpireDelegationTokenResponse(error_code=code, expiry_timestamp_ms=ERROR_TIMESTAMP)
