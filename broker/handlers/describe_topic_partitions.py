"""DescribeTopicPartitions (key 75), v0: what Kafka 4.x's ``kafka-topics --describe`` and
the Java AdminClient's ``describeTopics`` (3.7+) ask instead of Metadata.

As Kafka's ``DescribeTopicPartitionsRequestHandler`` and ``KRaftMetadataCache`` answer it:
the topics named (or, ``topics`` empty, every topic) from the cursor's topic on, in name
order, with at most ``min(response_partition_limit, 2000)`` (at least 1) partitions in all.
A topic cut short, or the next topic once the limit is used up, is named by
``next_cursor`` (topic, first partition not returned); the request's ``cursor`` starts the
listing at its topic and partition. A cursor whose topic is not among those named, or whose
partition is negative, is INVALID_REQUEST. Named topics: unknown ones answer
UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an illegal name), those without
Describe TOPIC_AUTHORIZATION_FAILED (zero id, listed last); an all-topics request leaves
both out. Partitions as in Metadata: this node leads each one, epoch 0, empty ELR lists.
Every topic returned carries its authorized-operations bit field (all of a topic's
operations while the authorizer is off, as Kafka).
"""

from __future__ import annotations

from semel.broker.handlers._authz import authorized_operations
from semel.broker.handlers.metadata import INTERNAL_TOPICS
from semel.broker.security import AclOperation, ResourceType
from semel.broker.security.authorizer import SUPPORTED_OPERATIONS
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.describe_topic_partitions_request import (
    DescribeTopicPartitionsRequest,
)
from semel.protocol.messages.describe_topic_partitions_response import (
    Cursor,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from semel.protocol.primitives import ZERO_UUID
from semel.storage.log_manager import validate_topic_name

API_KEY = 75
# Kafka's max.request.partition.size.limit default: the most partitions in one response
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
ALL_TOPIC_OPERATIONS = sum(1 << op for op in SUPPORTED_OPERATIONS[ResourceType.TOPIC])


async def handle(ctx, req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    logs = ctx.log_manager
    cursor = req.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not req.topics
    names = logs.topics if fetch_all else {t.name for t in req.topics}
    wanted = sorted(name for name in set(names) if name >= start_topic)
    if not fetch_all and cursor is not None and cursor.topic_name not in wanted:
        raise KafkaError(Error.INVALID_REQUEST, "DescribeTopicPartitionsRequest topic list "
                         f"should contain the cursor topic: {cursor.topic_name}")
    if cursor is not None and cursor.partition_index < 0:
        raise KafkaError(Error.INVALID_REQUEST,
                         "DescribeTopicPartitionsRequest cursor partition must be valid")
    denied = []
    allowed = []
    for name in wanted:
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            allowed.append(name)
        elif not fetch_all:
            denied.append(DescribeTopicPartitionsResponseTopic(
                error_code=Error.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=ZERO_UUID,
                is_internal=False, partitions=[]))
    limit = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, req.response_partition_limit), 1)
    response = _describe(ctx, allowed, limit, cursor, fetch_all)
    response.topics.extend(denied)
    return response


def _describe(ctx, names: list[str], remaining: int, cursor: Cursor | None,
              fetch_all: bool) -> DescribeTopicPartitionsResponse:
    """Kafka's ``getTopicMetadataForDescribeTopicResponse``: topics until ``remaining``
    partitions are used up, then the cursor to go on from."""
    logs = ctx.log_manager
    node_id = ctx.broker.node_id
    response = DescribeTopicPartitionsResponse(topics=[], next_cursor=None)
    for name in names:
        if remaining == 0:
            response.next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        info = logs.topics.get(name)
        if info is None:
            if not fetch_all:
                response.topics.append(DescribeTopicPartitionsResponseTopic(
                    error_code=_unknown_topic_error(name), name=name, topic_id=ZERO_UUID,
                    is_internal=name in INTERNAL_TOPICS, partitions=[]))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name \
            else 0
        end = min(info.num_partitions, start + remaining)
        response.topics.append(DescribeTopicPartitionsResponseTopic(
            error_code=Error.NONE, name=name, topic_id=info.topic_id,
            is_internal=name in INTERNAL_TOPICS,
            partitions=[DescribeTopicPartitionsResponsePartition(
                error_code=Error.NONE, partition_index=p, leader_id=node_id, leader_epoch=0,
                replica_nodes=[node_id], isr_nodes=[node_id], eligible_leader_replicas=[],
                last_known_elr=[], offline_replicas=[]) for p in range(start, end)],
            topic_authorized_operations=authorized_operations(
                ctx, ResourceType.TOPIC, name, ALL_TOPIC_OPERATIONS)))
        if end < info.num_partitions:
            response.next_cursor = Cursor(topic_name=name, partition_index=end)
            break
        remaining -= max(end - start, 0)
    return response


def _unknown_topic_error(name: str) -> Error:
    try:
        validate_topic_name(name)
    except KafkaError as e:
        return e.code
    return Error.UNKNOWN_TOPIC_OR_PARTITION


def error_response(req: DescribeTopicPartitionsRequest,
                   code: Error) -> DescribeTopicPartitionsResponse:
    """Kafka's ``DescribeTopicPartitionsRequest.getErrorResponse``."""
    return DescribeTopicPartitionsResponse(topics=[
        DescribeTopicPartitionsResponseTopic(error_code=code, name=t.name, is_internal=False,
                                             partitions=[])
        for t in req.topics])
