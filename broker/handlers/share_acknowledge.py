"""ShareAcknowledge (key 79), v1: a share group member's acknowledgements outside a fetch
(KIP-932), over ``ShareService.share_acknowledge`` (coordinator/share/service.py).

Kafka checks READ on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED) and
READ on each topic: the partitions of a topic not allowed answer TOPIC_AUTHORIZATION_FAILED
and their acknowledgements are not applied.
"""

from __future__ import annotations

from semel.broker.handlers.share_fetch import denied_topic_ids
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.share_acknowledge_request import ShareAcknowledgeRequest
from semel.protocol.messages.share_acknowledge_response import (
    PartitionData,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopicResponse,
)

API_KEY = 79


async def handle(ctx, req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id or ""):
        return ShareAcknowledgeResponse(error_code=Error.GROUP_AUTHORIZATION_FAILED)
    denied = denied_topic_ids(ctx, [t.topic_id for t in req.topics])
    refused = []
    if denied:
        refused = [ShareAcknowledgeTopicResponse(t.topic_id, [
            PartitionData(p.partition_index, Error.TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions]) for t in req.topics if t.topic_id in denied]
        req.topics = [t for t in req.topics if t.topic_id not in denied]
    response = await ctx.broker.share_service.share_acknowledge(req)
    if not response.error_code:
        response.responses.extend(refused)
    return response


def error_response(req: ShareAcknowledgeRequest, code: Error) -> ShareAcknowledgeResponse:
    return ShareAcknowledgeResponse(error_code=code)
