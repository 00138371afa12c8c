"""DeleteRecords (key 21), v0-2.

Advances each partition's log start offset to the requested offset (-1 = the high
watermark) and deletes the segments wholly below it; answers the new log start offset as
low_watermark. An offset below the current log start leaves it unchanged. Errors, with
low_watermark -1: OFFSET_OUT_OF_RANGE (past the high watermark, or negative other than -1),
POLICY_VIOLATION (cleanup.policy without "delete"), INVALID_TOPIC_EXCEPTION (internal
topics), UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR. With one replica nothing waits
for followers, so timeout_ms is not needed. The new log start offset reaches the
log-start-offset checkpoint in the next flush round, as in Kafka (asynchronously).
v2: flexible.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._partitions import partition_log
from semel.broker.handlers.metadata import INTERNAL_TOPICS
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.delete_records_request import DeleteRecordsRequest
from semel.protocol.messages.delete_records_response import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)

API_KEY = 21
HIGH_WATERMARK = -1


async def handle(ctx, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    logs = ctx.log_manager
    denied = denied_topics(ctx, AclOperation.DELETE, (t.name for t in req.topics))
    topics = []
    for topic in req.topics:
        partitions = []
        topics.append(DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
        if topic.name in denied:
            partitions.extend(DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1,
                error_code=Error.TOPIC_AUTHORIZATION_FAILED) for p in topic.partitions)
            continue
        for p in topic.partitions:
            try:
                low_watermark = _delete(logs, topic.name, p.partition_index, p.offset)
            except KafkaError as e:
                partitions.append(DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=-1, error_code=e.code))
                continue
            except OSError:
                partitions.append(DeleteRecordsPartitionResult(
                    partition_index=p.partition_index, low_watermark=-1,
                    error_code=Error.KAFKA_STORAGE_ERROR))
                continue
            partitions.append(DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=low_watermark))
    return DeleteRecordsResponse(topics=topics)


def _delete(logs, topic: str, partition: int, offset: int) -> int:
    if topic in INTERNAL_TOPICS:
        raise KafkaError(Error.INVALID_TOPIC_EXCEPTION,
                         f"Cannot delete records of internal topic {topic}")
    plog = partition_log(logs, topic, partition)
    if "delete" not in plog.config.cleanup_policy:
        raise KafkaError(Error.POLICY_VIOLATION, f"Records of partition {topic}-{partition} "
                                                 "can not be deleted due to the configured policy")
    if offset == HIGH_WATERMARK:
        offset = plog.high_watermark
    return plog.delete_records_before(offset)


def error_response(req: DeleteRecordsRequest, code: Error) -> DeleteRecordsResponse:
    return DeleteRecordsResponse(topics=[
        DeleteRecordsTopicResult(name=t.name, partitions=[
            DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                         error_code=code)
            for p in t.partitions])
        for t in req.topics])
