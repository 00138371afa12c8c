"""ShareGroupHeartbeat (key 76), v1: share group membership (KIP-932).

Joins (epoch 0, with the subscribed topic names), heartbeats and leaves (epoch -1) a share
group; the answer carries the member epoch, the heartbeat interval and, when it changed or
the request was full, the member's assignment by topic id (coordinator/share/membership.py).
Kafka checks READ on the group and DESCRIBE on every subscribed topic name.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from semel.protocol.messages.share_group_heartbeat_response import ShareGroupHeartbeatResponse

API_KEY = 76


async def handle(ctx, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return ShareGroupHeartbeatResponse(error_code=Error.GROUP_AUTHORIZATION_FAILED)
    if req.subscribed_topic_names and ctx.broker.authorizer is not None:
        denied = denied_topics(ctx, AclOperation.DESCRIBE, req.subscribed_topic_names)
        if denied:
            return ShareGroupHeartbeatResponse(
                error_code=Error.TOPIC_AUTHORIZATION_FAILED,
                error_message=f"Unauthorized topics: {', '.join(sorted(denied))}")
    error = coordinator(ctx).check_available(req.group_id)
    if error:
        return ShareGroupHeartbeatResponse(error_code=error)
    return await ctx.broker.share_membership.heartbeat(
        ctx.header.client_id or "", f"/{ctx.client_host}", req)


def error_response(req: ShareGroupHeartbeatRequest, code: Error) -> ShareGroupHeartbeatResponse:
    return ShareGroupHeartbeatResponse(error_code=code)
