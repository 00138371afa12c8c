"""AlterPartitionReassignments (key 45), v0-1.

As Kafka's controller (``ReplicationControlManager.alterPartitionReassignments``) answers
it with this broker as the only registered one. Per partition: an unknown topic or
partition is UNKNOWN_TOPIC_OR_PARTITION; ``replicas`` null (cancel) finds no reassignment in
progress, NO_REASSIGNMENT_IN_PROGRESS; a target that is empty, names a broker other than
this one or names it twice is INVALID_REPLICA_ASSIGNMENT (Kafka's
``validateManualPartitionAssignment`` messages); the target ``[node_id]`` is the current
assignment, so it succeeds at once without a change (and nothing is ever in progress for
ListPartitionReassignments to list). v1 (KIP-860) ``allow_replication_factor_change`` is
echoed; refusing a factor change can never apply, since a valid target on one broker has
one replica, as every partition here. Without Alter on the cluster every partition and
the top level answer CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.alter_partition_reassignments_request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
)
from semel.protocol.messages.alter_partition_reassignments_response import (
    AlterPartitionReassignmentsResponse,
    ReassignablePartitionResponse,
    ReassignableTopicResponse,
)

API_KEY = 45


async def handle(ctx, req: AlterPartitionReassignmentsRequest
                 ) -> AlterPartitionReassignmentsResponse:
    if not cluster_allows(ctx, AclOperation.ALTER):
        raise KafkaError(Error.CLUSTER_AUTHORIZATION_FAILED)
    logs = ctx.log_manager
    node_id = ctx.broker.node_id
    responses = []
    for topic in req.topics:
        info = logs.topics.get(topic.name)
        partitions = []
        for partition in topic.partitions:
            error, message = _alter(topic.name, info, partition, node_id)
            partitions.append(ReassignablePartitionResponse(
                partition_index=partition.partition_index, error_code=error,
                error_message=message))
        responses.append(ReassignableTopicResponse(name=topic.name, partitions=partitions))
    return AlterPartitionReassignmentsResponse(
        allow_replication_factor_change=req.allow_replication_factor_change,
        error_code=Error.NONE, error_message=None, responses=responses)


def _alter(name: str, info, partition: ReassignablePartition,
           node_id: int) -> tuple[Error, str | None]:
    index = partition.partition_index
    if info is None:
        return Error.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}."
    if not 0 <= index < info.num_partitions:
        return Error.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{index}."
    if partition.replicas is None:
        return Error.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
    if not partition.replicas:
        return (Error.INVALID_REPLICA_ASSIGNMENT,
                "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(partition.replicas):
        if broker_id != node_id:
            message = (f"The manual partition assignment includes broker {broker_id}, but no "
                       "such broker is registered.")
            return Error.INVALID_REPLICA_ASSIGNMENT, message
        if broker_id == previous:
            message = (f"The manual partition assignment includes the broker {previous} more "
                       "than once.")
            return Error.INVALID_REPLICA_ASSIGNMENT, message
        previous = broker_id
    return Error.NONE, None


def error_response(req: AlterPartitionReassignmentsRequest,
                   code: Error) -> AlterPartitionReassignmentsResponse:
    """Kafka's ``AlterPartitionReassignmentsRequest.getErrorResponse``."""
    return AlterPartitionReassignmentsResponse(
        allow_replication_factor_change=req.allow_replication_factor_change,
        error_code=code, error_message=None, responses=[
            ReassignableTopicResponse(name=t.name, partitions=[
                ReassignablePartitionResponse(partition_index=p.partition_index,
                                              error_code=code, error_message=None)
                for p in t.partitions])
            for t in req.topics])
