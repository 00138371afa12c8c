"""OffsetCommit (key 8), v2-9.

Partitions of unknown topics (or past a topic's partition count) get
UNKNOWN_TOPIC_OR_PARTITION; the rest go to the group coordinator, which validates the
member and generation (generation -1 without a member id: a "simple" commit, accepted when
the group is empty and creating it when missing), writes one record per partition and
answers once it is durable. A problem with the whole commit is reported on every partition.
v2-4: retention_time_ms (-1 = the broker's offsets.retention.minutes). v6+: leader epoch.
v7+: group_instance_id. v8: flexible. v9: GROUP_ID_NOT_FOUND instead of ILLEGAL_GENERATION
for an unknown group.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._groups import coordinator, partition_exists, request_info
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.offset_commit_request import (
    OffsetCommitRequest,
    OffsetCommitRequestTopic,
)
from semel.protocol.messages.offset_commit_response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

API_KEY = 8


async def handle(ctx, req: OffsetCommitRequest) -> OffsetCommitResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return error_response(req, Error.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(ctx)
    error = gc.check_available(req.group_id)
    if error:
        return error_response(req, error)
    denied = denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics))
    results: dict[tuple[str, int], int] = {}
    valid: list[OffsetCommitRequestTopic] = []
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
            valid.append(OffsetCommitRequestTopic(name=topic.name, topic_id=topic.topic_id,
                                                  partitions=known))
    if valid:
        req.topics, all_topics = valid, req.topics
        for topic in await gc.commit_offsets(request_info(ctx), req):
            for p in topic.partitions:
                results[(topic.name, p.partition_index)] = p.error_code
        req.topics = all_topics
    return OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            OffsetCommitResponsePartition(p.partition_index, results[(t.name, p.partition_index)])
            for p in t.partitions])
        for t in req.topics])


def error_response(req: OffsetCommitRequest, code: Error) -> OffsetCommitResponse:
    return OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            OffsetCommitResponsePartition(p.partition_index, code) for p in t.partitions])
        for t in req.topics])
