"""DescribeProducers (key 61), v0 (KIP-664).

For each requested partition, the producers its producer state knows (Kafka's
UnifiedLog.activeProducers): producer id and epoch, last sequence (-1 when no batch of the
epoch is retained), last timestamp, coordinator epoch of the last marker, and the first
offset of the open transaction (-1 when none) - what the admin tool reads to find a hanging
transaction. A partition that does not exist: UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.security import AclOperation
from semel.protocol.errors import Error
from semel.protocol.messages.describe_producers_request import DescribeProducersRequest
from semel.protocol.messages.describe_producers_response import (
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

API_KEY = 61


async def handle(ctx, req: DescribeProducersRequest) -> DescribeProducersResponse:
    logs = ctx.log_manager
    denied = denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics))
    topics = []
    for topic in req.topics:
        partitions = []
        topics.append(TopicResponse(name=topic.name, partitions=partitions))
        if topic.name in denied:
            partitions.extend(PartitionResponse(
                partition_index=index, error_code=Error.TOPIC_AUTHORIZATION_FAILED)
                for index in topic.partition_indexes)
            continue
        for index in topic.partition_indexes:
            plog = logs.get_partition(topic.name, index)
            if plog is None:
                partitions.append(PartitionResponse(
                    partition_index=index, error_code=Error.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            partitions.append(PartitionResponse(partition_index=index, active_producers=[
                ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                              last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                              coordinator_epoch=e.coordinator_epoch,
                              current_txn_start_offset=e.current_txn_first_offset)
                for e in plog.producer_state.producers.values()]))
    return DescribeProducersResponse(topics=topics)


def error_response(req: DescribeProducersRequest, code: Error) -> DescribeProducersResponse:
    return DescribeProducersResponse(topics=[
        TopicResponse(name=t.name, partitions=[
            PartitionResponse(partition_index=p, error_code=code)
            for p in t.partition_indexes])
        for t in req.topics])
