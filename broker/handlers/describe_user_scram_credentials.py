"""DescribeUserScramCredentials (key 50), v0 (flexible).

Needs Cluster Describe (else CLUSTER_AUTHORIZATION_FAILED for the whole request, as Kafka's
KafkaApis). Lists each user's SCRAM mechanisms and iteration counts, never salts or keys. A
null or empty user list describes every user; a named user without credentials answers
RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE (once), as Kafka's ScramImage.
"""

from __future__ import annotations

from semel.broker.security import CLUSTER_NAME, AclOperation, ResourceType
from semel.broker.security.scram import MECHANISMS
from semel.protocol.errors import Error
from semel.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
)
from semel.protocol.messages.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)

API_KEY = 50


async def handle(ctx, req: DescribeUserScramCredentialsRequest
                 ) -> DescribeUserScramCredentialsResponse:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(req, Error.CLUSTER_AUTHORIZATION_FAILED)
    store = ctx.broker.scram_credentials
    if not req.users:
        found = store.describe(None)
        return DescribeUserScramCredentialsResponse(
            results=[_result(user, infos) for user, infos in found.items()])
    names = [u.name for u in req.users]
    found = store.describe(names)
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=Error.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a "
                              f"single request: {name}"))
        elif name not in found:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=Error.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: "
                              f"{name}"))
        else:
            results.append(_result(name, found[name]))
    return DescribeUserScramCredentialsResponse(results=results)


def _result(user: str, infos: list[tuple[str, int]]) -> DescribeUserScramCredentialsResult:
    return DescribeUserScramCredentialsResult(
        user=user, error_code=Error.NONE, error_message=None,
        credential_infos=[CredentialInfo(MECHANISMS[m].type, iterations)
                          for m, iterations in infos])


def error_response(req: DescribeUserScramCredentialsRequest,
                   code: Error) -> DescribeUserScramCredentialsResponse:
    message = _MESSAGES.get(code)
    return DescribeUserScramCredentialsResponse(
        error_code=code, error_message=message,
        results=[DescribeUserScramCredentialsResult(user=u.name, error_code=code,
                                                    error_message=message)
                 for u in (req.users or [])])


_MESSAGES = {Error.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed."}
