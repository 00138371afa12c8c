"""CreateAcls (key 30), v1-3.

Needs ALTER on the Cluster: otherwise every result is CLUSTER_AUTHORIZATION_FAILED. With the
authorizer off every result is SECURITY_DISABLED. Each creation is checked as Kafka 4.x
checks it (AclApis: the Cluster's name must be kafka-cluster, the name must not be empty;
AclControlManager.validateNewAcl: a concrete resource type, pattern LITERAL or PREFIXED, a
concrete operation and permission, a principal with a colon): INVALID_REQUEST with Kafka's
message. (Kafka's request parsing closes the connection for UNKNOWN codes and its binding
constructors fail the whole request for ANY/MATCH; semel answers INVALID_REQUEST per
creation for both.) The valid ones are written to disk (fsync) before the answer and are in
force from the next request; an ACL that already exists succeeds without being doubled. A
failed write is KAFKA_STORAGE_ERROR for every valid creation, nothing changed.
v1: PREFIXED patterns. v2: flexible. v3: the User resource type.
"""

from __future__ import annotations

from semel.broker.security import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from semel.broker.security.acl import AclBinding, from_code
from semel.protocol.errors import Error
from semel.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from semel.protocol.messages.create_acls_response import AclCreationResult, CreateAclsResponse

API_KEY = 30


async def handle(ctx, req: CreateAclsRequest) -> CreateAclsResponse:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _every(req, Error.CLUSTER_AUTHORIZATION_FAILED,
                      f"Principal {ctx.principal} is not authorized to ALTER the cluster.")
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _every(req, Error.SECURITY_DISABLED, "No Authorizer is configured.")
    errors = await authorizer.create_acls([binding(c) for c in req.creations])
    return CreateAclsResponse(results=[
        AclCreationResult(error_code=Error.NONE, error_message=None) if e is None
        else AclCreationResult(error_code=e.code, error_message=e.message)
        for e in errors])


def binding(creation: AclCreation) -> AclBinding:
    return AclBinding(
        from_code(ResourceType, creation.resource_type), creation.resource_name,
        from_code(PatternType, creation.resource_pattern_type), creation.principal,
        creation.host, from_code(AclOperation, creation.operation),
        from_code(AclPermissionType, creation.permission_type))


def _every(req: CreateAclsRequest, code: Error, message: str | None) -> CreateAclsResponse:
    return CreateAclsResponse(results=[AclCreationResult(error_code=code, error_message=message)
                                       for _ in req.creations])


def error_response(req: CreateAclsRequest, code: Error) -> CreateAclsResponse:
    return _every(req, code, None)
