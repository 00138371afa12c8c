"""ListOffsets (key 2), v1-10.

Per partition, the offset for a timestamp spec:
  -2 earliest        log start offset
  -1 latest          high watermark (read_committed: last stable offset); for a replica id
                     other than -1 (debugging tools) the log end offset
  -3 max timestamp   (v7+) offset and timestamp of the record with the largest timestamp
  -4 earliest local  (v8+) = earliest (no tiered storage)
  -5 latest tiered   (v9+) offset -1, leader epoch -1: nothing is tiered
  t >= 0             first record with timestamp >= t, through the time index
v10 (KIP-1075) adds ``timeout_ms``, the wait for offsets read from remote storage: nothing
is remote here, every answer is immediate, so it is not used.
Timestamp lookups and max timestamp only report offsets below the high watermark (last
stable offset), else offset -1 and timestamp -1, as Kafka does. The timestamp is -1 for
earliest/latest. v4+: leader epoch 0 (the only one) with every offset found. A spec the
request version does not know: UNSUPPORTED_VERSION; a partition named twice:
INVALID_REQUEST; unknown partition: UNKNOWN_TOPIC_OR_PARTITION; current_leader_epoch
(v4+) other than 0: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH.
"""

from __future__ import annotations

from collections import Counter

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._partitions import partition_log
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.list_offsets_request import ListOffsetsPartition, ListOffsetsRequest
from semel.protocol.messages.list_offsets_response import (
    ListOffsetsPartitionResponse,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

API_KEY = 2
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
CONSUMER_REPLICA_ID = -1
READ_COMMITTED = 1
# the first request version that knows each spec
SPEC_MIN_VERSION = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8,
                    LATEST_TIERED: 9}


async def handle(ctx, req: ListOffsetsRequest) -> ListOffsetsResponse:
    version = ctx.api_version
    logs = ctx.log_manager
    seen = Counter((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    denied = denied_topics(ctx, AclOperation.DESCRIBE, (t.name for t in req.topics))
    topics = []
    for topic in req.topics:
        partitions = []
        topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
        if topic.name in denied:
            partitions.extend(_error(p, Error.TOPIC_AUTHORIZATION_FAILED)
                              for p in topic.partitions)
            continue
        for p in topic.partitions:
            if seen[(topic.name, p.partition_index)] > 1:
                partitions.append(_error(p, Error.INVALID_REQUEST))
                continue
            spec = p.timestamp
            if spec < 0 and SPEC_MIN_VERSION.get(spec, 1 << 15) > version:
                partitions.append(_error(p, Error.UNSUPPORTED_VERSION))
                continue
            try:
                plog = partition_log(logs, topic.name, p.partition_index, p.current_leader_epoch)
            except KafkaError as e:
                partitions.append(_error(p, e.code))
                continue
            partitions.append(_lookup(plog, p, req, version))
    return ListOffsetsResponse(topics=topics)


def _lookup(plog, p: ListOffsetsPartition, req: ListOffsetsRequest,
            version: int) -> ListOffsetsPartitionResponse:
    if req.replica_id != CONSUMER_REPLICA_ID:
        last_fetchable = plog.log_end_offset
    elif req.isolation_level == READ_COMMITTED:
        last_fetchable = plog.last_stable_offset
    else:
        last_fetchable = plog.high_watermark
    spec = p.timestamp
    if spec in (EARLIEST, EARLIEST_LOCAL):
        found = (plog.log_start_offset, -1)
    elif spec == LATEST:
        found = (last_fetchable, -1)
    elif spec == LATEST_TIERED:
        return ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=-1,
                                            timestamp=-1, leader_epoch=-1)
    else:
        found = (plog.max_timestamp_offset() if spec == MAX_TIMESTAMP
                 else plog.offset_for_timestamp(spec, upper_bound=last_fetchable))
        if found is None or found[0] >= last_fetchable:
            return _error(p, Error.NONE)
    offset, timestamp = found
    response = ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                            offset=offset, timestamp=timestamp)
    if version >= 4:
        response.leader_epoch = plog.leader_epoch
    return response


def _error(p: ListOffsetsPartition, code: Error) -> ListOffsetsPartitionResponse:
    return ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code,
                                        timestamp=-1, offset=-1, leader_epoch=-1)


def error_response(req: ListOffsetsRequest, code: Error) -> ListOffsetsResponse:
    return ListOffsetsResponse(topics=[
        ListOffsetsTopicResponse(name=t.name, partitions=[_error(p, code) for p in t.partitions])
        for t in req.topics])
