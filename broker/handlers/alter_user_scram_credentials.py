"""AlterUserScramCredentials (key 51), v0 (flexible).

Needs Cluster Alter (else CLUSTER_AUTHORIZATION_FAILED for every user named, as Kafka's
controller). Validation as Kafka's ScramControlManager, per user: a user named twice in the
request (deletions and upsertions together) DUPLICATE_RESOURCE; an empty name or iterations
outside 4096..16384 UNACCEPTABLE_CREDENTIAL; an unknown mechanism UNSUPPORTED_SASL_MECHANISM;
deleting a credential that does not exist RESOURCE_NOT_FOUND. An upsertion carries the salt and
SaltedPassword the client computed; the store keeps StoredKey and ServerKey derived from it
(also UNACCEPTABLE_CREDENTIAL: an empty salt or salted password, where Kafka fails
unhelpfully). The valid changes are written in one durable step, then answered.
"""

from __future__ import annotations

import logging

from semel.broker.security import CLUSTER_NAME, AclOperation, ResourceType
from semel.broker.security.scram import (
    BY_TYPE,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    credential_from_salted_password,
)
from semel.protocol.errors import Error
from semel.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from semel.protocol.messages.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)

API_KEY = 51
log = logging.getLogger("broker.handlers.alter_user_scram_credentials")
DUPLICATE = "A user credential cannot be altered twice in the same request"


async def handle(ctx, req: AlterUserScramCredentialsRequest
                 ) -> AlterUserScramCredentialsResponse:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(req, Error.CLUSTER_AUTHORIZATION_FAILED)
    store = ctx.broker.scram_credentials
    errors: dict[str, tuple[Error, str]] = {}
    deletions: dict[str, str] = {}  # user -> mechanism name
    upsertions: dict[str, ScramCredentialUpsertion] = {}
    for d in req.deletions:
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (Error.DUPLICATE_RESOURCE, DUPLICATE)
            continue
        error = _check_name_and_mechanism(d.name, d.mechanism)
        if error is None and store.get(d.name, BY_TYPE[d.mechanism].name) is None:
            error = (Error.RESOURCE_NOT_FOUND,
                     "Attempt to delete a user credential that does not exist")
        if error is None:
            deletions[d.name] = BY_TYPE[d.mechanism].name
        else:
            errors[d.name] = error
    for u in req.upsertions:
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = (Error.DUPLICATE_RESOURCE, DUPLICATE)
            continue
        error = _check_upsertion(u)
        if error is None:
            upsertions[u.name] = u
        else:
            errors[u.name] = error
    changes = [(u.name, BY_TYPE[u.mechanism].name,
                credential_from_salted_password(BY_TYPE[u.mechanism], u.salt, u.salted_password,
                                                u.iterations))
               for u in upsertions.values()]
    try:
        store.alter(upsertions=changes, deletions=list(deletions.items()))
    except OSError as e:
        log.error("could not write SCRAM credentials to %s: %s", store.path, e)
        for user in [*deletions, *upsertions]:
            errors[user] = (Error.UNKNOWN_SERVER_ERROR,
                            "The SCRAM credentials could not be written to disk")
        deletions.clear()
        upsertions.clear()
    results = [AlterUserScramCredentialsResult(user=user, error_code=Error.NONE,
                                               error_message=None)
               for user in [*deletions, *upsertions]]
    results += [AlterUserScramCredentialsResult(user=user, error_code=code, error_message=msg)
                for user, (code, msg) in errors.items()]
    return AlterUserScramCredentialsResponse(results=results)


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[Error, str] | None:
    if not name:
        return Error.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in BY_TYPE:
        return Error.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _check_upsertion(u: ScramCredentialUpsertion) -> tuple[Error, str] | None:
    error = _check_name_and_mechanism(u.name, u.mechanism)
    if error is not None:
        return error
    if u.iterations < MIN_ITERATIONS:
        return Error.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
    if u.iterations > MAX_ITERATIONS:
        return Error.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    if not u.salt:
        return Error.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
    if not u.salted_password:
        return Error.UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty"
    return None


def error_response(req: AlterUserScramCredentialsRequest,
                   code: Error) -> AlterUserScramCredentialsResponse:
    message = "Cluster authorization failed." if code == Error.CLUSTER_AUTHORIZATION_FAILED \
        else None
    users = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
    return AlterUserScramCredentialsResponse(results=[
        AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
        for user in users])
