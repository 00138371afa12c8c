"""CreatePartitions (key 37), v0-3.

Grows a topic to ``count`` partitions. A name given twice -> INVALID_REQUEST; unknown topic
-> UNKNOWN_TOPIC_OR_PARTITION; a count equal to or below the current one -> INVALID_PARTITIONS
(Kafka's messages); assignments, if given, must list one replica list per new partition, each
exactly ``[node_id]`` (INVALID_REPLICA_ASSIGNMENT otherwise). More than 10000 new partitions
in one request fails every topic with POLICY_VIOLATION (Kafka's controller batch limit).
Deviation: the internal topics keep their partition count (INVALID_REQUEST); Kafka 4 would
grow them, which remaps every group and transactional id to another partition.
``validate_only`` runs the checks and changes nothing. v2: flexible.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers.create_topics import MAX_RECORDS_PER_REQUEST, check_manual_assignment
from semel.broker.handlers.metadata import INTERNAL_TOPICS
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from semel.protocol.messages.create_partitions_response import (
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)

API_KEY = 37


def _check(ctx, topic: CreatePartitionsTopic) -> int:
    """The number of partitions to add; raises KafkaError."""
    info = ctx.log_manager.topics.get(topic.name)
    if info is None:
        raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION,
                         f"This server does not host this topic: {topic.name}")
    if info.name in INTERNAL_TOPICS:
        raise KafkaError(Error.INVALID_REQUEST, f"Topic {info.name} is an internal topic; its "
                         "partition count is fixed.")
    current = info.num_partitions
    if topic.count == current:
        raise KafkaError(Error.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
    if topic.count < current:
        raise KafkaError(Error.INVALID_PARTITIONS,
                         f"The topic {topic.name} currently has {current} partition(s); "
                         f"{topic.count} would not be an increase.")
    additional = topic.count - current
    if topic.assignments is not None:
        if len(topic.assignments) != additional:
            raise KafkaError(Error.INVALID_REPLICA_ASSIGNMENT,
                             f"Attempted to add {additional} additional partition(s), but only "
                             f"{len(topic.assignments)} assignment(s) were specified.")
        for assignment in topic.assignments:
            check_manual_assignment(assignment.broker_ids, ctx.broker.node_id)
    return additional


async def handle(ctx, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
    counts: dict[str, int] = {}
    for topic in req.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    denied = denied_topics(ctx, AclOperation.ALTER, counts)
    results: list[CreatePartitionsTopicResult] = []
    planned: list[tuple[int, CreatePartitionsTopic, int]] = []
    for topic in req.topics:
        if counts[topic.name] > 1:
            results.append(CreatePartitionsTopicResult(topic.name, Error.INVALID_REQUEST,
                                                       "Duplicate topic name."))
            continue
        if topic.name in denied:
            results.append(CreatePartitionsTopicResult(
                topic.name, Error.TOPIC_AUTHORIZATION_FAILED, None))
            continue
        try:
            additional = _check(ctx, topic)
        except KafkaError as e:
            results.append(CreatePartitionsTopicResult(topic.name, e.code, e.message))
            continue
        planned.append((len(results), topic, additional))
        results.append(CreatePartitionsTopicResult(topic.name, Error.NONE, None))

    if sum(additional for _, _, additional in planned) > MAX_RECORDS_PER_REQUEST:
        message = "Unable to perform excessively large batch operation."
        return CreatePartitionsResponse(results=[
            CreatePartitionsTopicResult(t.name, Error.POLICY_VIOLATION, message)
            for t in req.topics])
    if not req.validate_only:
        for index, topic, _ in planned:
            try:
                ctx.log_manager.create_partitions(topic.name, topic.count)
            except KafkaError as e:
                results[index] = CreatePartitionsTopicResult(topic.name, e.code, e.message)
    return CreatePartitionsResponse(results=results)


def error_response(req: CreatePartitionsRequest, code: Error) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(results=[CreatePartitionsTopicResult(t.name, code, None)
                                             for t in req.topics])
