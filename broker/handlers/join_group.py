"""JoinGroup (key 11), v0-9.

Delegates to the group coordinator; the response is parked until the rebalance's join
phase completes (``group.initial.rebalance.delay.ms`` for a group coming from Empty, else
until every member has rejoined or the rebalance timeout). v0: the rebalance timeout is the
session timeout. v4+: a new dynamic member first gets MEMBER_ID_REQUIRED with its member id
(KIP-394). v5+: group_instance_id (static membership, KIP-345). v7+: protocol_type and a
nullable protocol_name (null rather than ""); before v7 "" stands for none. v8: reason.
v9: skip_assignment for a static leader rejoining a stable group.
"""

from __future__ import annotations

from semel.broker.handlers._groups import coordinator, request_info
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.join_group_request import JoinGroupRequest
from semel.protocol.messages.join_group_response import JoinGroupResponse

API_KEY = 11


async def handle(ctx, req: JoinGroupRequest) -> JoinGroupResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return error_response(req, Error.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(ctx)
    error = gc.check_available(req.group_id)
    if error:
        # Kafka echoes the member id only when the coordinator is not running at all
        member_id = req.member_id if error == Error.COORDINATOR_NOT_AVAILABLE else ""
        response = JoinGroupResponse(error_code=error, member_id=member_id)
    else:
        if ctx.api_version == 0:
            req.rebalance_timeout_ms = req.session_timeout_ms
        response = await gc.join_group(request_info(ctx), req)
    return _for_version(response, ctx.api_version)


def _for_version(response: JoinGroupResponse, version: int) -> JoinGroupResponse:
    if version < 7 and response.protocol_name is None:
        response.protocol_name = ""
    elif version >= 7 and response.protocol_name == "":
        response.protocol_name = None
    return response


def error_response(req: JoinGroupRequest, code: Error) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, member_id=req.member_id, protocol_name=None)
