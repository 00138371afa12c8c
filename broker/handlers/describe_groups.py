"""DescribeGroups (key 15), v0-6.

State, protocol type, selected protocol and members (client id and host, assignment; member
metadata only in Stable) of each classic group. A group that does not exist - or is a
consumer group (KIP-848) or a share group (KIP-932), which Kafka does not describe here -
is "Dead": with no error before v6, with GROUP_ID_NOT_FOUND and a message from v6
(KIP-1043). v3+: authorized_operations when asked (without an authorizer: READ, DELETE and
DESCRIBE). v4+: group_instance_id of members.
"""

from __future__ import annotations

from semel.broker.handlers._authz import authorized_operations
from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.coordinator.group.group_manager import GROUP_AUTHORIZED_OPERATIONS
from semel.protocol.errors import Error
from semel.protocol.messages.describe_groups_request import DescribeGroupsRequest
from semel.protocol.messages.describe_groups_response import DescribedGroup, DescribeGroupsResponse

API_KEY = 15


async def handle(ctx, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    gc = coordinator(ctx)
    include_operations = ctx.api_version >= 3 and req.include_authorized_operations
    groups = []
    for group_id in req.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            groups.append(_group_error(group_id, Error.GROUP_AUTHORIZATION_FAILED))
            continue
        error = gc.check_available(group_id)
        if error:
            groups.append(_group_error(group_id, error))
            continue
        share = ctx.broker.share_admin(create=False)
        if share is not None and share.exists(group_id):
            groups.append(_not_classic(group_id, ctx.api_version))
            continue
        described = gc.describe_group(group_id, ctx.api_version)
        if include_operations and not described.error_code:
            described.authorized_operations = authorized_operations(
                ctx, ResourceType.GROUP, group_id, GROUP_AUTHORIZED_OPERATIONS)
        groups.append(described)
    return DescribeGroupsResponse(groups=groups)


def _not_classic(group_id: str, api_version: int) -> DescribedGroup:
    if api_version >= 6:
        return DescribedGroup(group_id=group_id, group_state="Dead",
                              error_code=Error.GROUP_ID_NOT_FOUND,
                              error_message=f"Group {group_id} is not a classic group.")
    return DescribedGroup(group_id=group_id, group_state="Dead")


def _group_error(group_id: str, code: Error) -> DescribedGroup:
    return DescribedGroup(error_code=code, group_id=group_id)


def error_response(req: DescribeGroupsRequest, code: Error) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(groups=[_group_error(g, code) for g in req.groups])
