"""DescribeDelegationToken (key 41), v1-3, with delegation tokens off (see
``_delegation_tokens``): a connection that may not ask for tokens is
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, any other DELEGATION_TOKEN_AUTH_DISABLED (Kafka's
broker answers both itself); no tokens either way.
"""

from __future__ import annotations

from semel.broker.handlers._delegation_tokens import token_requests_allowed
from semel.protocol.errors import Error
from semel.protocol.messages.describe_delegation_token_request import (
    DescribeDelegationTokenRequest,
)
from semel.protocol.messages.describe_delegation_token_response import (
    DescribeDelegationTokenResponse,
)

API_KEY = 41


async def handle(ctx, req: DescribeDelegationTokenRequest) -> DescribeDelegationTokenResponse:
    if not token_requests_allowed(ctx):
        return error_response(req, Error.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    return error_response(req, Error.DELEGATION_TOKEN_AUTH_DISABLED)


def error_response(req: DescribeDelegationTokenRequest,
                   code: Error) -> DescribeDelegationTokenResponse:
    return DescribeDelegationTokenResponse(error_code=code, tokens=[])
