"""DescribeAcls (key 29), v1-3.

Needs DESCRIBE on the Cluster (implied by ALTER; else the top-level error is
CLUSTER_AUTHORIZATION_FAILED); with the authorizer off the answer is SECURITY_DISABLED.
Answers the ACLs the filter matches (Kafka's AclBindingFilter rules: ANY / null match
anything; pattern type MATCH also finds the wildcard ``*`` and the PREFIXED ACLs that apply
to the name), grouped by resource pattern, sorted. A filter with an UNKNOWN field is
INVALID_REQUEST (Kafka's parser closes the connection instead). v1: pattern type filter.
v2: flexible. v3: the User resource type.
"""

from __future__ import annotations

from itertools import groupby

from semel.broker.security import (
    CLUSTER_NAME,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from semel.broker.security.acl import AclBindingFilter, from_code
from semel.protocol.errors import Error
from semel.protocol.messages.describe_acls_request import DescribeAclsRequest
from semel.protocol.messages.describe_acls_response import (
    AclDescription,
    DescribeAclsResource,
    DescribeAclsResponse,
)

API_KEY = 29


async def handle(ctx, req: DescribeAclsRequest) -> DescribeAclsResponse:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return _error(Error.CLUSTER_AUTHORIZATION_FAILED,
                      f"Principal {ctx.principal} is not authorized to DESCRIBE the cluster.")
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return _error(Error.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    acl_filter = AclBindingFilter(
        from_code(ResourceType, req.resource_type_filter), req.resource_name_filter,
        from_code(PatternType, req.pattern_type_filter), req.principal_filter, req.host_filter,
        from_code(AclOperation, req.operation), from_code(AclPermissionType, req.permission_type))
    if acl_filter.unknown_reason() is not None:
        return _error(Error.INVALID_REQUEST, "DescribeAcls filter contains UNKNOWN elements")
    resources = [
        DescribeAclsResource(resource_type=rtype, resource_name=name, pattern_type=pattern,
                             acls=[AclDescription(principal=b.principal, host=b.host,
                                                  operation=b.operation,
                                                  permission_type=b.permission_type)
                                   for b in group])
        for (rtype, name, pattern), group in groupby(
            authorizer.acls(acl_filter), key=lambda b: b[:3])]
    return DescribeAclsResponse(error_code=Error.NONE, error_message=None, resources=resources)


def _error(code: Error, message: str | None) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=code, error_message=message, resources=[])


def error_response(req: DescribeAclsRequest, code: Error) -> DescribeAclsResponse:
    return _error(code, None)
