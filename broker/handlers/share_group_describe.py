"""ShareGroupDescribe (key 77), v1: share groups (KIP-932) as Kafka describes them.

Per group: state (Empty, Stable), group and assignment epochs, the assignor ("simple"), and
per member its client, subscription and assignment (topic ids and names). A group that does
not exist, or is not a share group, is GROUP_ID_NOT_FOUND. Needs DESCRIBE on the group.
"""

from __future__ import annotations

from semel.broker.handlers._authz import authorized_operations
from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.coordinator.group.group_manager import GROUP_AUTHORIZED_OPERATIONS
from semel.protocol.errors import Error
from semel.protocol.messages.share_group_describe_request import ShareGroupDescribeRequest
from semel.protocol.messages.share_group_describe_response import (
    DescribedGroup,
    ShareGroupDescribeResponse,
)

API_KEY = 77


async def handle(ctx, req: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    gc = coordinator(ctx)
    groups = []
    for group_id in req.group_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_group_error(group_id, Error.GROUP_AUTHORIZATION_FAILED))
            continue
        error = gc.check_available(group_id)
        if error:
            groups.append(_group_error(group_id, error))
            continue
        described = ctx.broker.share_membership.describe(group_id)
        if req.include_authorized_operations and not described.error_code:
            described.authorized_operations = authorized_operations(
                ctx, ResourceType.GROUP, group_id, GROUP_AUTHORIZED_OPERATIONS)
        groups.append(described)
    return ShareGroupDescribeResponse(groups=groups)


def _group_error(group_id: str, code: Error) -> DescribedGroup:
    return DescribedGroup(error_code=code, group_id=group_id)


def error_response(req: ShareGroupDescribeRequest, code: Error) -> ShareGroupDescribeResponse:
    return ShareGroupDescribeResponse(groups=[_group_error(g, code) for g in req.group_ids])
