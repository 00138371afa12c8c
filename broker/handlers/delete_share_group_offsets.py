"""DeleteShareGroupOffsets (key 92), v0 (KIP-932): forget the share-partition state of
topics of an empty share group, over coordinator/share/admin.py (GROUP_ID_NOT_FOUND for a
group that is not a share group, NON_EMPTY_GROUP while it has members); the next fetch
starts those partitions again by ``share.auto.offset.reset``.

Needs DELETE on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED) and READ on
each topic: a topic not allowed answers TOPIC_AUTHORIZATION_FAILED and keeps its state.
"""

from __future__ import annotations

from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.delete_share_group_offsets_request import (
    DeleteShareGroupOffsetsRequest,
)
from semel.protocol.messages.delete_share_group_offsets_response import (
    DeleteShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponseTopic,
)

API_KEY = 92


async def handle(ctx, req: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    if not ctx.broker.share_manager.active:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return error_response(req, Error.GROUP_AUTHORIZATION_FAILED)
    names = [t.topic_name for t in req.topics]
    allowed = [n for n in names if ctx.authorize(AclOperation.READ, ResourceType.TOPIC, n)]
    response = await ctx.broker.share_admin().delete_offsets(req.group_id, allowed)
    if not response.error_code:
        response.responses += [DeleteShareGroupOffsetsResponseTopic(
            topic_name=n, error_code=Error.TOPIC_AUTHORIZATION_FAILED,
            error_message="Topic authorization failed.") for n in names if n not in allowed]
    return response


def error_response(req: DeleteShareGroupOffsetsRequest,
                   code: Error) -> DeleteShareGroupOffsetsResponse:
    return DeleteShareGroupOffsetsResponse(error_code=code)
