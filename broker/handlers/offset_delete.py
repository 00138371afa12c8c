"""OffsetDelete (key 47), v0.

Deletes a group's committed offsets for some partitions (tombstones, answered once
durable). Top-level GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a group
with members that is not a consumer group; per partition GROUP_SUBSCRIBED_TO_TOPIC while the
group's members subscribe to the topic, UNKNOWN_TOPIC_OR_PARTITION for unknown partitions.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._groups import coordinator, partition_exists
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.offset_delete_request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestTopic,
)
from semel.protocol.messages.offset_delete_response import (
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

API_KEY = 47


async def handle(ctx, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, req.group_id):
        return OffsetDeleteResponse(error_code=Error.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(ctx)
    error = gc.check_available(req.group_id)
    if error:
        return OffsetDeleteResponse(error_code=error)
    denied = denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics))
    results: dict[tuple[str, int], int] = {}
    valid = []
    for topic in req.topics:
        known = []
        for p in topic.partitions:
            if topic.name in denied:
                results[(topic.name, p.partition_index)] = Error.TOPIC_AUTHORIZATION_FAILED
            elif partition_exists(ctx, topic.name, p.partition_index):
                known.append(p)
            else:
                results[(topic.name, p.partition_index)] = Error.UNKNOWN_TOPIC_OR_PARTITION
        if known:
            valid.append(OffsetDeleteRequestTopic(name=topic.name, partitions=known))
    response = await gc.delete_offsets(OffsetDeleteRequest(group_id=req.group_id, topics=valid))
    for t in response.topics:
        for p in t.partitions:
            results[(t.name, p.partition_index)] = p.error_code
    topics = []
    for t in req.topics:
        partitions = [OffsetDeleteResponsePartition(p.partition_index,
                                                    results[(t.name, p.partition_index)])
                      for p in t.partitions if (t.name, p.partition_index) in results]
        topics.append(OffsetDeleteResponseTopic(name=t.name, partitions=partitions))
    return OffsetDeleteResponse(error_code=response.error_code, topics=topics)


def error_response(req: OffsetDeleteRequest, code: Error) -> OffsetDeleteResponse:
    return OffsetDeleteResponse(error_code=code)
