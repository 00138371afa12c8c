"""ListGroups (key 16), v0-5.

Every group this broker coordinates, with its protocol type. v4+: group_state and a states
filter (case-insensitive: "Stable", "empty", ...). v5+: group_type ("classic", or
"consumer" for KIP-848 groups, whose protocol type is "consumer", or "share" for KIP-932
share groups, protocol type "share": coordinator/share/admin.py) and a types filter.
COORDINATOR_LOAD_IN_PROGRESS while ``__consumer_offsets`` is still being loaded.
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows, denied
from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.list_groups_request import ListGroupsRequest
from semel.protocol.messages.list_groups_response import ListedGroup, ListGroupsResponse

API_KEY = 16


async def handle(ctx, req: ListGroupsRequest) -> ListGroupsResponse:
    gc = coordinator(ctx)
    if not gc.active:
        return ListGroupsResponse(error_code=Error.COORDINATOR_NOT_AVAILABLE)
    if gc.loading:
        return ListGroupsResponse(error_code=Error.COORDINATOR_LOAD_IN_PROGRESS)
    groups = gc.list_groups(req.states_filter, req.types_filter)
    share = ctx.broker.share_admin(create=False)
    if share is not None:
        groups += [ListedGroup(group_id, "share", state, "share")
                   for group_id, state in share.list_groups(req.states_filter,
                                                            req.types_filter)]
    if not cluster_allows(ctx, AclOperation.DESCRIBE):  # else only describable groups
        hidden = denied(ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                        (g.group_id for g in groups))
        groups = [g for g in groups if g.group_id not in hidden]
    return ListGroupsResponse(groups=groups)


def error_response(req: ListGroupsRequest, code: Error) -> ListGroupsResponse:
    return ListGroupsResponse(error_code=code)
