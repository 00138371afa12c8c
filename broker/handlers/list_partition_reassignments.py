"""ListPartitionReassignments (key 46), v0.

As Kafka's controller answers it: the topics with a reassignment in progress, all of them
(``topics`` null) or among those named. On one broker a reassignment completes the moment
it is accepted (AlterPartitionReassignments), so none is ever in progress and the list is
empty, whatever is asked. Without Describe on the cluster: CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.list_partition_reassignments_request import (
    ListPartitionReassignmentsRequest,
)
from semel.protocol.messages.list_partition_reassignments_response import (
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
)

API_KEY = 46


async def handle(ctx, req: ListPartitionReassignmentsRequest
                 ) -> ListPartitionReassignmentsResponse:
    if not cluster_allows(ctx, AclOperation.DESCRIBE):
        raise KafkaError(Error.CLUSTER_AUTHORIZATION_FAILED)
    return ListPartitionReassignmentsResponse(error_code=Error.NONE, error_message=None,
                                              topics=[])


def error_response(req: ListPartitionReassignmentsRequest,
                   code: Error) -> ListPartitionReassignmentsResponse:
    """Kafka's ``ListPartitionReassignmentsRequest.getErrorResponse``: the named partitions
    listed with no replicas under the error."""
    return ListPartitionReassignmentsResponse(error_code=code, error_message=None, topics=[
        OngoingTopicReassignment(name=t.name, partitions=[
            OngoingPartitionReassignment(partition_index=p) for p in t.partition_indexes])
        for t in req.topics or ()])
