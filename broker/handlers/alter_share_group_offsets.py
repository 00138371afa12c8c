"""AlterShareGroupOffsets (key 91), v0 (KIP-932): start share-partitions of an empty share
group afresh at given offsets, over coordinator/share/admin.py (NON_EMPTY_GROUP while it
has members; an unknown group becomes an empty share group, as Kafka).

Needs READ on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED) and READ on
each topic: the partitions of a topic not allowed answer TOPIC_AUTHORIZATION_FAILED and are
not altered.
"""

from __future__ import annotations

from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.alter_share_group_offsets_request import (
    AlterShareGroupOffsetsRequest,
)
from semel.protocol.messages.alter_share_group_offsets_response import (
    AlterShareGroupOffsetsResponse,
    AlterShareGroupOffsetsResponsePartition,
    AlterShareGroupOffsetsResponseTopic,
)

API_KEY = 91


async def handle(ctx, req: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    if not ctx.broker.share_manager.active:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return error_response(req, Error.GROUP_AUTHORIZATION_FAILED)
    allowed = [t for t in req.topics
               if ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.topic_name)]
    response = await ctx.broker.share_admin().alter_offsets(
        req.group_id, [(t.topic_name, [(p.partition_index, p.start_offset)
                                       for p in t.partitions]) for t in allowed])
    if not response.error_code:
        response.responses += [AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, partitions=[AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index,
                error_code=Error.TOPIC_AUTHORIZATION_FAILED,
                error_message="Topic authorization failed.") for p in t.partitions])
            for t in req.topics if t not in allowed]
    return response


def error_response(req: AlterShareGroupOffsetsRequest,
                   code: Error) -> AlterShareGroupOffsetsResponse:
    return AlterShareGroupOffsetsResponse(error_code=code)
