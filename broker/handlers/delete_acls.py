"""DeleteAcls (key 31), v1-3.

Needs ALTER on the Cluster (else every filter result is CLUSTER_AUTHORIZATION_FAILED); with
the authorizer off every result is SECURITY_DISABLED. Deletes every ACL some filter matches
(Kafka's AclBindingFilter rules, as DescribeAcls) and answers, per filter, the ACLs it
matched in the set as it was before the request (an ACL two filters match is listed under
both). A filter with an UNKNOWN field gets INVALID_REQUEST ("Unknown patternFilter." /
"Unknown entryFilter.", AclControlManager.validateFilter). The deletion is on disk (fsync)
before the answer and in force from the next request; a failed write is KAFKA_STORAGE_ERROR
for every filter, nothing deleted. v1: pattern type filter. v2: flexible. v3: the User
resource type.
"""

from __future__ import annotations

from semel.broker.security import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from semel.broker.security.acl import AclBinding, AclBindingFilter, from_code
from semel.protocol.errors import Error
from semel.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from semel.protocol.messages.delete_acls_response import (
    DeleteAclsFilterResult,
    DeleteAclsMatchingAcl,
    DeleteAclsResponse,
)

API_KEY = 31


async def handle(ctx, req: DeleteAclsRequest) -> DeleteAclsResponse:
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _every(req, Error.CLUSTER_AUTHORIZATION_FAILED,
                      f"Principal {ctx.principal} is not authorized to ALTER the cluster.")
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _every(req, Error.SECURITY_DISABLED, "No Authorizer is configured.")
    outcomes = await authorizer.delete_acls([binding_filter(f) for f in req.filters])
    results = []
    for outcome in outcomes:
        if isinstance(outcome, list):
            results.append(DeleteAclsFilterResult(
                error_code=Error.NONE, error_message=None,
                matching_acls=[_matching(b) for b in outcome]))
        else:
            results.append(DeleteAclsFilterResult(error_code=outcome.code,
                                                  error_message=outcome.message))
    return DeleteAclsResponse(filter_results=results)


def binding_filter(f: DeleteAclsFilter) -> AclBindingFilter:
    return AclBindingFilter(
        from_code(ResourceType, f.resource_type_filter), f.resource_name_filter,
        from_code(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
        from_code(AclOperation, f.operation), from_code(AclPermissionType, f.permission_type))


def _matching(b: AclBinding) -> DeleteAclsMatchingAcl:
    return DeleteAclsMatchingAcl(
        error_code=Error.NONE, error_message=None, resource_type=b.resource_type,
        resource_name=b.resource_name, pattern_type=b.pattern_type, principal=b.principal,
        host=b.host, operation=b.operation, permission_type=b.permission_type)


def _every(req: DeleteAclsRequest, code: Error, message: str | None) -> DeleteAclsResponse:
    return DeleteAclsResponse(filter_results=[
        DeleteAclsFilterResult(error_code=code, error_message=message) for _ in req.filters])


def error_response(req: DeleteAclsRequest, code: Error) -> DeleteAclsResponse:
    return _every(req, code, None)
