"""OffsetFetch (key 9), v1-9.

Committed offsets of a group (-1 and empty metadata where none is committed; a group that
does not exist has none). ``topics`` null asks for every partition with an offset.
require_stable (v7+, KIP-447): partitions with a pending transactional offset commit answer
UNSTABLE_OFFSET_COMMIT, and commits still being written are waited for first. v2+: a
top-level error; before it a group error goes on the partitions. v5+: leader epoch.
v8+: several groups per request, each with its own error (COORDINATOR_LOAD_IN_PROGRESS
while its partition loads).
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._groups import coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.offset_fetch_request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from semel.protocol.messages.offset_fetch_response import (
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)

API_KEY = 9


def _groups(req: OffsetFetchRequest, version: int) -> list[OffsetFetchRequestGroup]:
    if version >= 8:
        return req.groups
    topics = None if req.topics is None else [
        OffsetFetchRequestTopics(name=t.name, partition_indexes=t.partition_indexes)
        for t in req.topics]
    return [OffsetFetchRequestGroup(group_id=req.group_id, topics=topics)]


async def handle(ctx, req: OffsetFetchRequest) -> OffsetFetchResponse:
    gc = coordinator(ctx)
    version = ctx.api_version
    require_stable = version >= 7 and req.require_stable
    results = []
    for group in _groups(req, version):
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group.group_id):
            error = Error.GROUP_AUTHORIZATION_FAILED
        else:
            error = gc.check_available(group.group_id)
        if error:
            results.append(OffsetFetchResponseGroup(group_id=group.group_id, error_code=error))
        elif ctx.broker.authorizer is None:
            results.append(await gc.fetch_offsets(group, require_stable))
        else:
            results.append(await _fetch_describable(ctx, gc, group, require_stable))
    if version >= 8:
        return OffsetFetchResponse(groups=results)
    return _single_group_response(results[0], version)


async def _fetch_describable(ctx, gc, group: OffsetFetchRequestGroup,
                             require_stable: bool) -> OffsetFetchResponseGroup:
    """Kafka: offsets of topics without Describe are left out of an all-topics answer, and
    named ones get TOPIC_AUTHORIZATION_FAILED (committed offset -1)."""
    if group.topics is None:
        result = await gc.fetch_offsets(group, require_stable)
        if not result.error_code:
            denied = denied_topics(ctx, AclOperation.DESCRIBE, (t.name for t in result.topics))
            result.topics = [t for t in result.topics if t.name not in denied]
        return result
    denied = denied_topics(ctx, AclOperation.DESCRIBE, (t.name for t in group.topics))
    allowed = OffsetFetchRequestGroup(
        group_id=group.group_id, member_id=group.member_id, member_epoch=group.member_epoch,
        topics=[t for t in group.topics if t.name not in denied])
    result = await gc.fetch_offsets(allowed, require_stable)
    if not result.error_code:
        result.topics.extend(OffsetFetchResponseTopics(name=t.name, partitions=[
            OffsetFetchResponsePartitions(partition_index=p, committed_offset=-1,
                                          error_code=Error.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partition_indexes]) for t in group.topics if t.name in denied)
    return result


def _single_group_response(group: OffsetFetchResponseGroup, version: int) -> OffsetFetchResponse:
    topics = []
    for t in group.topics:
        partitions = []
        for p in t.partitions:
            if version < 2 and group.error_code:
                partitions.append(OffsetFetchResponsePartition(
                    p.partition_index, -1, -1, "", group.error_code))
            else:
                partitions.append(OffsetFetchResponsePartition(
                    p.partition_index, p.committed_offset, p.committed_leader_epoch,
                    p.metadata, p.error_code))
        topics.append(OffsetFetchResponseTopic(name=t.name, partitions=partitions))
    return OffsetFetchResponse(topics=topics, error_code=group.error_code)


def error_response(req: OffsetFetchRequest, code: Error) -> OffsetFetchResponse:
    return OffsetFetchResponse(
        error_code=code,
        groups=[OffsetFetchResponseGroup(group_id=g.group_id, error_code=code)
                for g in req.groups])
