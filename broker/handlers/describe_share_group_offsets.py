"""DescribeShareGroupOffsets (key 90), v0-1 (KIP-932): each share group's share-partition
start offsets, over coordinator/share/admin.py. v1 (KIP-1226): the lag of each partition.

Needs DESCRIBE on the group (else that group is GROUP_AUTHORIZATION_FAILED) and DESCRIBE on
each topic: a requested topic not allowed answers TOPIC_AUTHORIZATION_FAILED per partition;
with topics null (every partition with state) topics not allowed are left out, as Kafka.
"""

from __future__ import annotations

from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.describe_share_group_offsets_request import (
    DescribeShareGroupOffsetsRequest,
)
from semel.protocol.messages.describe_share_group_offsets_response import (
    DescribeShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponseGroup,
    DescribeShareGroupOffsetsResponsePartition,
    DescribeShareGroupOffsetsResponseTopic,
)

API_KEY = 90
_DENIED = "Topic authorization failed."


async def handle(ctx, req: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    if not ctx.broker.share_manager.active:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    admin = ctx.broker.share_admin()
    groups = []
    for group in req.groups:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
            groups.append(_group_error(group.group_id, Error.GROUP_AUTHORIZATION_FAILED))
            continue
        if group.topics is None:
            answer = admin.describe_offsets(group.group_id, None)
            answer.topics = [t for t in answer.topics if ctx.authorize(
                AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name)]
            groups.append(answer)
            continue
        allowed = [t for t in group.topics
                   if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic_name)]
        answer = admin.describe_offsets(group.group_id,
                                        [(t.topic_name, t.partitions) for t in allowed])
        answer.topics += [DescribeShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, partitions=[DescribeShareGroupOffsetsResponsePartition(
                partition_index=p, error_code=Error.TOPIC_AUTHORIZATION_FAILED,
                error_message=_DENIED) for p in t.partitions])
            for t in group.topics if t not in allowed]
        groups.append(answer)
    return DescribeShareGroupOffsetsResponse(groups=groups)


def _group_error(group_id: str, code: Error) -> DescribeShareGroupOffsetsResponseGroup:
    return DescribeShareGroupOffsetsResponseGroup(group_id=group_id, error_code=code)


def error_response(req: DescribeShareGroupOffsetsRequest,
                   code: Error) -> DescribeShareGroupOffsetsResponse:
    return DescribeShareGroupOffsetsResponse(
        groups=[_group_error(g.group_id, code) for g in req.groups])
