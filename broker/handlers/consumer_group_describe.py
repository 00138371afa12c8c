"""ConsumerGroupDescribe (key 69), v0-1: consumer groups (KIP-848) as Kafka describes them.

Per group: state (Empty, Assigning, Reconciling, Stable), group and assignment epochs, the
assignor, and per member its subscription, current and target assignments (topic ids and
names). A group that does not exist, or is a classic group, is GROUP_ID_NOT_FOUND. Needs
DESCRIBE on the group. v1 (KIP-1099): member type (1: consumer protocol).
"""

from __future__ import annotations

from semel.broker.handlers._authz import authorized_operations
from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.coordinator.group.group_manager import GROUP_AUTHORIZED_OPERATIONS
from semel.protocol.errors import Error
from semel.protocol.messages.consumer_group_describe_request import ConsumerGroupDescribeRequest
from semel.protocol.messages.consumer_group_describe_response import (
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)

API_KEY = 69


async def handle(ctx, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
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
        described = gc.consumer_group_describe(group_id, False)
        if req.include_authorized_operations and not described.error_code:
            described.authorized_operations = authorized_operations(
                ctx, ResourceType.GROUP, group_id, GROUP_AUTHORIZED_OPERATIONS)
        groups.append(described)
    return ConsumerGroupDescribeResponse(groups=groups)


def _group_error(group_id: str, code: Error) -> DescribedGroup:
    return DescribedGroup(error_code=code, group_id=group_id)


def error_response(req: ConsumerGroupDescribeRequest,
                   code: Error) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(groups=[_group_error(g, code) for g in req.group_ids])
