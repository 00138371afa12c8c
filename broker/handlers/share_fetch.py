"""ShareFetch (key 78), v1: a share group member's fetch (KIP-932), over
``ShareService.share_fetch`` (coordinator/share/service.py: share sessions, piggybacked
acknowledgements, acquisition).

Kafka checks READ on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED) and
READ on each topic: the partitions of a topic not allowed answer TOPIC_AUTHORIZATION_FAILED
and are left out of the session.

Long poll: an answer that acquired nothing, with max_wait_ms > 0 and the session not being
closed, parks on ``broker.fetch_waiters`` for the session's partitions (woken when one's high
watermark moves) up to max_wait_ms, then acquires once more (``ShareService.acquire_more``,
the session's epoch unchanged). Records released by other members or by an expired lock do
not wake it: they are seen at the next fetch, at most max_wait_ms later.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.share_fetch_request import ShareFetchRequest
from semel.protocol.messages.share_fetch_response import (
    PartitionData,
    ShareFetchableTopicResponse,
    ShareFetchResponse,
)

API_KEY = 78


def denied_topic_ids(ctx, topic_ids) -> set[UUID]:
    """The topic ids among ``topic_ids`` whose topic the client may not READ (unknown ids
    are left to the service: UNKNOWN_TOPIC_ID)."""
    if ctx.broker.authorizer is None:
        return set()
    denied = set()
    for topic_id in set(topic_ids):
        info = ctx.log_manager.topic_by_id(topic_id)
        if info is not None and not ctx.authorize(AclOperation.READ, ResourceType.TOPIC,
                                                  info.name):
            denied.add(topic_id)
    return denied


async def handle(ctx, req: ShareFetchRequest) -> ShareFetchResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id or ""):
        return ShareFetchResponse(error_code=Error.GROUP_AUTHORIZATION_FAILED)
    denied = denied_topic_ids(ctx, [t.topic_id for t in req.topics])
    refused = []
    if denied:
        refused = [ShareFetchableTopicResponse(t.topic_id, [
            PartitionData(partition_index=p.partition_index,
                          error_code=Error.TOPIC_AUTHORIZATION_FAILED,
                          acknowledge_error_code=Error.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]) for t in req.topics if t.topic_id in denied]
        req.topics = [t for t in req.topics if t.topic_id not in denied]
    service = ctx.broker.share_service
    response = await service.share_fetch(req)
    if not response.error_code and req.max_wait_ms > 0 and req.share_session_epoch != -1 \
            and req.max_records > 0 and not _acquired(response):
        await _wait_for_data(ctx, req)
        more = await service.acquire_more(req.group_id or "", req.member_id or "",
                                          req.max_records, req.max_bytes)
        _merge(response, more)
    response.responses.extend(refused)
    return response


def _acquired(response: ShareFetchResponse) -> bool:
    return any(p.acquired_records for t in response.responses for p in t.partitions)


async def _wait_for_data(ctx, req: ShareFetchRequest) -> None:
    session = ctx.broker.share_service.sessions.get(req.group_id or "", req.member_id or "")
    if session is None:
        return
    names = []
    for topic_id, partition in session.partitions:
        info = ctx.log_manager.topic_by_id(topic_id)
        if info is not None:
            names.append((info.name, partition))
    if not names:
        return
    waiter = ctx.broker.fetch_waiters.register(names)
    try:
        await asyncio.wait_for(asyncio.shield(waiter), req.max_wait_ms / 1000)
    except TimeoutError:
        pass
    finally:
        if not waiter.done():
            waiter.cancel()


def _merge(response: ShareFetchResponse, more: dict[tuple[UUID, int], PartitionData]) -> None:
    """Put ``more``'s partitions into ``response`` (a partition already there - with an
    acknowledgement result - takes the records and acquired ranges)."""
    by_topic = {t.topic_id: t for t in response.responses}
    for (topic_id, partition), data in more.items():
        topic = by_topic.get(topic_id)
        if topic is None:
            topic = by_topic[topic_id] = ShareFetchableTopicResponse(topic_id, [])
            response.responses.append(topic)
        existing = next((p for p in topic.partitions if p.partition_index == partition), None)
        if existing is None:
            topic.partitions.append(data)
        else:
            existing.error_code = data.error_code
            existing.records = data.records
            existing.acquired_records = data.acquired_records


def error_response(req: ShareFetchRequest, code: Error) -> ShareFetchResponse:
    return ShareFetchResponse(error_code=code)
