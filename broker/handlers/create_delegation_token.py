"""CreateDelegationToken (key 38), v1-3, with delegation tokens off (see
``_delegation_tokens``).

In Kafka's order: a connection that may not ask for tokens is
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED; a token for another owner (v3+ ``owner_principal_*``)
without CreateTokens on that user is DELEGATION_TOKEN_AUTHORIZATION_FAILED; a renewer that
is not a ``User`` INVALID_PRINCIPAL_TYPE (these three with the timestamps -1, as the broker
answers them); anything else reaches the controller and is DELEGATION_TOKEN_AUTH_DISABLED
(timestamps 0). The owner and (v3+) the requester are echoed.
"""

from __future__ import annotations

from semel.broker.handlers._delegation_tokens import ERROR_TIMESTAMP, token_requests_allowed
from semel.broker.security import AclOperation, Principal, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.create_delegation_token_request import CreateDelegationTokenRequest
from semel.protocol.messages.create_delegation_token_response import (
    CreateDelegationTokenResponse,
)

API_KEY = 38
USER_TYPE = "User"


async def handle(ctx, req: CreateDelegationTokenRequest) -> CreateDelegationTokenResponse:
    requester = ctx.principal
    owner = requester
    if req.owner_principal_name:
        owner = Principal(req.owner_principal_type or "", req.owner_principal_name)
    if not token_requests_allowed(ctx):
        error = Error.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    elif owner != requester and not ctx.authorize(AclOperation.CREATE_TOKENS,
                                                  ResourceType.USER, str(owner)):
        error = Error.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    elif any(r.principal_type != USER_TYPE for r in req.renewers):
        error = Error.INVALID_PRINCIPAL_TYPE
    else:
        return _response(Error.DELEGATION_TOKEN_AUTH_DISABLED, owner, requester, 0)
    return _response(error, owner, requester, ERROR_TIMESTAMP)


def _response(error: Error, owner: Principal, requester: Principal,
              timestamp: int) -> CreateDelegationTokenResponse:
    return CreateDelegationTokenResponse(
        error_code=error, principal_type=owner.type, principal_name=owner.name,
        token_requester_principal_type=requester.type,
        token_requester_principal_name=requester.name, issue_timestamp_ms=timestamp,
        expiry_timestamp_ms=timestamp, max_timestamp_ms=timestamp, token_id="", hmac=b"")


def error_response(req: CreateDelegationTokenRequest,
                   code: Error) -> CreateDelegationTokenResponse:
    return CreateDelegationTokenResponse(error_code=code, issue_timestamp_ms=ERROR_TIMESTAMP,
                                         expiry_timestamp_ms=ERROR_TIMESTAMP,
                                         max_timestamp_ms=ERROR_TIMESTAMP)
