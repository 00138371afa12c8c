"""SyncGroup (key 14), v0-5.

The leader's request carries the assignment, which is persisted to ``__consumer_offsets``
(a GroupMetadata record) before any member is answered; followers' requests are parked
until then. v3+: group_instance_id. v5+: protocol_type and protocol_name are mandatory
(INCONSISTENT_GROUP_PROTOCOL without them, as Kafka) and are echoed back.
"""

from __future__ import annotations

from semel.broker.handlers._groups import coordinator, request_info
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.sync_group_request import SyncGroupRequest
from semel.protocol.messages.sync_group_response import SyncGroupResponse

API_KEY = 14


async def handle(ctx, req: SyncGroupRequest) -> SyncGroupResponse:
    if ctx.api_version >= 5 and (req.protocol_type is None or req.protocol_name is None):
        return SyncGroupResponse(error_code=Error.INCONSISTENT_GROUP_PROTOCOL)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return SyncGroupResponse(error_code=Error.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(ctx)
    error = gc.check_available(req.group_id)
    if error:
        return SyncGroupResponse(error_code=error)
    return await gc.sync_group(request_info(ctx), req)


def error_response(req: SyncGroupRequest, code: Error) -> SyncGroupResponse:
    return SyncGroupResponse(error_code=code)
