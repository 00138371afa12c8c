"""RenewDelegationToken (key 39), v1-2, with delegation tokens off (see
``_delegation_tokens``): a connection that may not ask for tokens is
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED with expiry -1 (the broker's answer); any other
request reaches the controller, which has no token to renew: DELEGATION_TOKEN_AUTH_DISABLED,
expiry 0.
"""

from __future__ import annotations

from semel.broker.handlers._delegation_tokens import ERROR_TIMESTAMP, token_requests_allowed
from semel.protocol.errors import Error
from semel.protocol.messages.renew_delegation_token_request import RenewDelegationTokenRequest
from semel.protocol.messages.renew_delegation_token_response import (
    RenewDelegationTokenResponse,
)

API_KEY = 39


async def handle(ctx, req: RenewDelegationTokenRequest) -> RenewDelegationTokenResponse:
    if not token_requests_allowed(ctx):
        return error_response(req, Error.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return RenewDelegationTokenResponse(error_code=Error.DELEGATION_TOKEN_AUTH_DISABLED,
                                        expiry_timestamp_ms=0)


def error_response(req: RenewDelegationTokenRequest,
                   code: Error) -> RenewDelegationTokenResponse:
    return RenewDelegationTokenResponse(error_code=code, expiry_timestamp_ms=ERROR_TIMESTAMP)
