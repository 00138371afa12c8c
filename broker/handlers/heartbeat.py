"""Heartbeat (key 12), v0-4.

Keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin,
ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID that it is out of the group.
While the group's partition is still loading the answer is NONE, as Kafka does.
v3+: group_instance_id.
"""

from __future__ import annotations

from semel.broker.handlers._groups import coordinator, request_info
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.heartbeat_request import HeartbeatRequest
from semel.protocol.messages.heartbeat_response import HeartbeatResponse

API_KEY = 12


async def handle(ctx, req: HeartbeatRequest) -> HeartbeatResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return HeartbeatResponse(error_code=Error.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(ctx)
    error = gc.check_available(req.group_id)
    if error == Error.COORDINATOR_LOAD_IN_PROGRESS:
        return HeartbeatResponse(error_code=Error.NONE)
    if error:
        return HeartbeatResponse(error_code=error)
    return HeartbeatResponse(error_code=gc.heartbeat(request_info(ctx), req))


def error_response(req: HeartbeatRequest, code: Error) -> HeartbeatResponse:
    return HeartbeatResponse(error_code=code)
