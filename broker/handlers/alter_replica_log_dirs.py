"""AlterReplicaLogDirs (key 34), v1-2.

As Kafka's ``ReplicaManager.alterReplicaLogDirs`` answers it on a broker with one log
directory (``log.dirs``, named by its absolute path as DescribeLogDirs reports it). Per
partition, in Kafka's order: a topic name too long for the future replica's directory name
(``<topic>-<partition>.<32 hex digits>-future`` past 255 characters) is
INVALID_TOPIC_EXCEPTION; a path other than the log directory LOG_DIR_NOT_FOUND; an unknown
partition UNKNOWN_TOPIC_OR_PARTITION; else the replica is already in the requested
directory and nothing moves (NONE). A partition named under two paths is answered once, for
the last. Without Alter on the cluster every partition named answers
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import os

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.alter_replica_log_dirs_request import AlterReplicaLogDirsRequest
from semel.protocol.messages.alter_replica_log_dirs_response import (
    AlterReplicaLogDirPartitionResult,
    AlterReplicaLogDirsResponse,
    AlterReplicaLogDirTopicResult,
)

API_KEY = 34
MAX_DIR_NAME = 255
FUTURE_SUFFIX_LEN = len(".") + 32 + len("-future")  # Kafka's future replica dir suffix


async def handle(ctx, req: AlterReplicaLogDirsRequest) -> AlterReplicaLogDirsResponse:
    if not cluster_allows(ctx, AclOperation.ALTER):
        raise KafkaError(Error.CLUSTER_AUTHORIZATION_FAILED)
    logs = ctx.log_manager
    log_dir = os.path.abspath(logs.data_dir)
    destinations: dict[tuple[str, int], str] = {}
    for alter_dir in req.dirs:
        for topic in alter_dir.topics:
            for partition in topic.partitions:
                destinations[(topic.name, partition)] = alter_dir.path
    by_topic: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    for (name, partition), path in destinations.items():
        if len(f"{name}-{partition}") + FUTURE_SUFFIX_LEN > MAX_DIR_NAME:
            error = Error.INVALID_TOPIC_EXCEPTION
        elif path != log_dir:
            error = Error.LOG_DIR_NOT_FOUND
        elif logs.get_partition(name, partition) is None:
            error = Error.UNKNOWN_TOPIC_OR_PARTITION
        else:
            error = Error.NONE
        by_topic.setdefault(name, []).append(
            AlterReplicaLogDirPartitionResult(partition_index=partition, error_code=error))
    return AlterReplicaLogDirsResponse(results=[
        AlterReplicaLogDirTopicResult(topic_name=name, partitions=partitions)
        for name, partitions in by_topic.items()])


def error_response(req: AlterReplicaLogDirsRequest, code: Error) -> AlterReplicaLogDirsResponse:
    """Kafka's ``AlterReplicaLogDirsRequest.getErrorResponse``: one result per topic entry of
    each directory."""
    return AlterReplicaLogDirsResponse(results=[
        AlterReplicaLogDirTopicResult(topic_name=topic.name, partitions=[
            AlterReplicaLogDirPartitionResult(partition_index=p, error_code=code)
            for p in topic.partitions])
        for alter_dir in req.dirs for topic in alter_dir.topics])
