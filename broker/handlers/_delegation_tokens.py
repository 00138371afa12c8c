"""Shared by the delegation-token handlers (CreateDelegationToken, RenewDelegationToken,
ExpireDelegationToken, DescribeDelegationToken): semel runs as a Kafka 4.x broker without
``delegation.token.secret.key``, i.e. with delegation tokens off.

Kafka's broker first refuses token requests on connections that may not ask for tokens
(``KafkaApis.allowTokenRequests``): PLAINTEXT ones, and SSL ones without a client
certificate (ANONYMOUS); semel authenticates no connection with a token. What passes is
forwarded to the controller, whose ``DelegationTokenControlManager`` answers
DELEGATION_TOKEN_AUTH_DISABLED while tokens are off.
"""

from __future__ import annotations

from semel.broker.security import ANONYMOUS

# KafkaApis: the expiry timestamp of a refused renew or expire
ERROR_TIMESTAMP = -1


def token_requests_allowed(ctx) -> bool:
    session = ctx.session
    if session.protocol == "PLAINTEXT":
        return False
    return not (session.protocol == "SSL" and session.principal == ANONYMOUS)
