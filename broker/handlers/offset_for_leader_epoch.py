"""OffsetForLeaderEpoch (key 23), v2-4.

For each partition, the largest leader epoch <= the requested one and the end offset of
that epoch (Kafka's LeaderEpochFileCache.endOffsetFor). Every partition log here has one
epoch, 0 (``PartitionLog.leader_epoch``), starting at the log start offset, so:
  requested == 0   -> (0, log end offset): the current epoch ends at the log end
  requested == -1  -> (-1, -1): undefined
  requested > 0    -> (-1, -1): an epoch larger than any known one
  requested < -1   -> (requested, log start offset): older than the first known epoch
all with error NONE, as Kafka answers. Consumers use this to validate their position after
a leader change (KIP-320). current_leader_epoch (-1 = unknown) other than 0:
FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH; unknown partition: UNKNOWN_TOPIC_OR_PARTITION.
v3: replica_id. v4: flexible.
"""

from __future__ import annotations

from semel.broker.handlers._authz import NOTHING, cluster_allows, denied_topics
from semel.broker.handlers._partitions import partition_log
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.offset_for_leader_epoch_request import OffsetForLeaderEpochRequest
from semel.protocol.messages.offset_for_leader_epoch_response import (
    EpochEndOffset,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
)

API_KEY = 23
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


async def handle(ctx, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    logs = ctx.log_manager
    denied = NOTHING
    if not cluster_allows(ctx, AclOperation.CLUSTER_ACTION):  # else consumers: Describe
        denied = denied_topics(ctx, AclOperation.DESCRIBE, (t.topic for t in req.topics))
    topics = []
    for topic in req.topics:
        partitions = []
        topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions))
        if topic.topic in denied:
            partitions.extend(EpochEndOffset(error_code=Error.TOPIC_AUTHORIZATION_FAILED,
                                             partition=p.partition) for p in topic.partitions)
            continue
        for p in topic.partitions:
            try:
                plog = partition_log(logs, topic.topic, p.partition, p.current_leader_epoch)
            except KafkaError as e:
                partitions.append(EpochEndOffset(error_code=e.code, partition=p.partition))
                continue
            epoch, end_offset = end_offset_for_epoch(plog, p.leader_epoch)
            partitions.append(EpochEndOffset(partition=p.partition, leader_epoch=epoch,
                                             end_offset=end_offset))
    return OffsetForLeaderEpochResponse(topics=topics)


def end_offset_for_epoch(plog, requested: int) -> tuple[int, int]:
    """(epoch, end offset) for a log whose single epoch starts at its log start offset."""
    current = plog.leader_epoch
    if requested == UNDEFINED_EPOCH or requested > current:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if requested == current:
        return current, plog.log_end_offset
    return requested, plog.log_start_offset


def error_response(req: OffsetForLeaderEpochRequest, code: Error) -> OffsetForLeaderEpochResponse:
    return OffsetForLeaderEpochResponse(topics=[
        OffsetForLeaderTopicResult(topic=t.topic, partitions=[
            EpochEndOffset(error_code=code, partition=p.partition) for p in t.partitions])
        for t in req.topics])
