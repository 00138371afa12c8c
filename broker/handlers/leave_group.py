"""LeaveGroup (key 13), v0-5.

Removes members and rebalances the rest. v0-2 name one member (member_id) and report its
error at the top level; v3+ batch ``members`` (by member id, or by group instance id only
for an administrative removal of a static member) with an error each. v5: reason.
"""

from __future__ import annotations

from semel.broker.handlers._groups import coordinator, request_info
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.leave_group_request import LeaveGroupRequest, MemberIdentity
from semel.protocol.messages.leave_group_response import LeaveGroupResponse

API_KEY = 13


async def handle(ctx, req: LeaveGroupRequest) -> LeaveGroupResponse:
    version = ctx.api_version
    if version <= 2:
        req.members = [MemberIdentity(member_id=req.member_id)]
    gc = coordinator(ctx)
    error = Error.GROUP_AUTHORIZATION_FAILED if not ctx.authorize(
        AclOperation.READ, ResourceType.GROUP, req.group_id) else gc.check_available(req.group_id)
    response = LeaveGroupResponse(error_code=error) if error \
        else gc.leave_group(request_info(ctx), req)
    if version <= 2:
        code = response.error_code or next(
            (m.error_code for m in response.members if m.error_code), Error.NONE)
        return LeaveGroupResponse(error_code=code)
    return response


def error_response(req: LeaveGroupRequest, code: Error) -> LeaveGroupResponse:
    return LeaveGroupResponse(error_code=code)
