"""DeleteGroups (key 42), v0-2.

Deletes empty groups and their committed offsets (tombstones in ``__consumer_offsets``,
answered once durable). GROUP_ID_NOT_FOUND for unknown groups, NON_EMPTY_GROUP for groups
with members. Repeated names are answered once. v2: flexible. A share group (KIP-932) is
deleted when empty with its share-partition state (coordinator/share/admin.py).
"""

from __future__ import annotations

from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.delete_groups_request import DeleteGroupsRequest
from semel.protocol.messages.delete_groups_response import (
    DeletableGroupResult,
    DeleteGroupsResponse,
)

API_KEY = 42


async def handle(ctx, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    gc = coordinator(ctx)
    results = []
    deletable = []
    share = ctx.broker.share_admin(create=False)
    for group_id in dict.fromkeys(req.groups_names):
        if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, group_id):
            error = Error.GROUP_AUTHORIZATION_FAILED
        else:
            error = gc.check_available(group_id)
        if error:
            results.append(DeletableGroupResult(group_id, error))
        elif share is not None and share.exists(group_id):
            results.append(DeletableGroupResult(group_id, await share.delete_group(group_id)))
        else:
            deletable.append(group_id)
    if deletable:
        results = await gc.delete_groups(deletable) + results
    return DeleteGroupsResponse(results=results)


def error_response(req: DeleteGroupsRequest, code: Error) -> DeleteGroupsResponse:
    return DeleteGroupsResponse(results=[DeletableGroupResult(g, code)
                                         for g in dict.fromkeys(req.groups_names)])
