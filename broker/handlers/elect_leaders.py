"""ElectLeaders (key 43), v0-2.

As Kafka's controller (``ReplicationControlManager.electLeaders``) answers it on one node:
this broker is every partition's only replica, its preferred leader and its leader, so
neither a preferred nor an unclean election (v1+ ``election_type`` 0 / 1) is ever needed.
An existing partition answers ELECTION_NOT_NEEDED (no message), an unknown topic or
partition UNKNOWN_TOPIC_OR_PARTITION. ``topic_partitions`` null asks for every partition of
every topic (internal ones included): each topic is listed, and, as Kafka leaves out the
partitions that already have the leader they should, with no partitions. An election type
other than 0 and 1 fails the whole request with INVALID_REQUEST, and without Alter on the
cluster CLUSTER_AUTHORIZATION_FAILED (v1+ top-level error; every named partition carries it).
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.elect_leaders_request import ElectLeadersRequest
from semel.protocol.messages.elect_leaders_response import (
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)

API_KEY = 43
PREFERRED = 0
UNCLEAN = 1


async def handle(ctx, req: ElectLeadersRequest) -> ElectLeadersResponse:
    if not cluster_allows(ctx, AclOperation.ALTER):
        raise KafkaError(Error.CLUSTER_AUTHORIZATION_FAILED)
    if req.election_type not in (PREFERRED, UNCLEAN):
        return _failed(req, Error.INVALID_REQUEST, f"Unknown election type {req.election_type}")
    logs = ctx.log_manager
    if req.topic_partitions is None:
        # the partitions whose election is not needed (all of them) are left out
        return ElectLeadersResponse(replica_election_results=[
            ReplicaElectionResult(topic=name, partition_result=[]) for name in logs.topics])
    results = []
    for topic in req.topic_partitions:
        info = logs.topics.get(topic.topic)
        partitions = []
        for partition in topic.partitions:
            if info is None:
                error, message = (Error.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"No such topic as {topic.topic}")
            elif not 0 <= partition < info.num_partitions:
                error, message = (Error.UNKNOWN_TOPIC_OR_PARTITION,
                                  f"No such partition as {topic.topic}-{partition}")
            else:
                error, message = Error.ELECTION_NOT_NEEDED, None
            partitions.append(PartitionResult(partition_id=partition, error_code=error,
                                              error_message=message))
        results.append(ReplicaElectionResult(topic=topic.topic, partition_result=partitions))
    return ElectLeadersResponse(replica_election_results=results)


def _failed(req: ElectLeadersRequest, code: Error,
            message: str | None = None) -> ElectLeadersResponse:
    """Kafka's ``ElectLeadersRequest.getErrorResponse``: the code at the top (v1+) and on
    every partition named."""
    return ElectLeadersResponse(error_code=code, replica_election_results=[
        ReplicaElectionResult(topic=t.topic, partition_result=[
            PartitionResult(partition_id=p, error_code=code, error_message=message)
            for p in t.partitions])
        for t in req.topic_partitions or ()])


def error_response(req: ElectLeadersRequest, code: Error) -> ElectLeadersResponse:
    return _failed(req, code)
