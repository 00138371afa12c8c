"""DescribeCluster (key 60), v0-2.

The cluster is this one broker: it is listed with its advertised address and named as the
controller (Kafka's brokers report a live broker there, since clients cannot reach KRaft
controllers). With ``include_cluster_authorized_operations`` every CLUSTER operation is
reported as allowed (no authorizer). v1: ``endpoint_type``; only BROKER (1) is served, an
unknown type answers UNSUPPORTED_ENDPOINT_TYPE and CONTROLLER (2) MISMATCHED_ENDPOINT_TYPE
(INVALID_REQUEST for both in v0, as Kafka does). v2 (KIP-1073): ``include_fenced_brokers``
and each broker's ``is_fenced``; this broker serves, so it is never fenced and there is no
fenced broker to add.
"""

from __future__ import annotations

from semel.broker.handlers._authz import authorized_operations, cluster_allows
from semel.broker.security import CLUSTER_NAME, AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.describe_cluster_request import DescribeClusterRequest
from semel.protocol.messages.describe_cluster_response import (
    DescribeClusterBroker,
    DescribeClusterResponse,
)

API_KEY = 60
ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
# AclOperation codes Kafka supports on the CLUSTER resource: CREATE, ALTER, DESCRIBE,
# CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def cluster_authorized_operations() -> int:
    bits = 0
    for op in CLUSTER_OPERATIONS:
        bits |= 1 << op
    return bits


async def handle(ctx, req: DescribeClusterRequest) -> DescribeClusterResponse:
    if req.endpoint_type not in (ENDPOINT_BROKER, ENDPOINT_CONTROLLER):
        return DescribeClusterResponse(
            error_code=Error.INVALID_REQUEST if ctx.api_version == 0
            else Error.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"Unsupported endpoint type {req.endpoint_type}")
    if req.endpoint_type != ENDPOINT_BROKER:
        return DescribeClusterResponse(
            error_code=Error.INVALID_REQUEST if ctx.api_version == 0
            else Error.MISMATCHED_ENDPOINT_TYPE,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted "
                          "an endpoint of type CONTROLLER")
    broker = ctx.broker
    host, port = broker.advertised(ctx.session.listener)
    return DescribeClusterResponse(
        error_code=Error.NONE, endpoint_type=ENDPOINT_BROKER, cluster_id=broker.cluster_id,
        controller_id=broker.node_id,
        brokers=[DescribeClusterBroker(broker_id=broker.node_id, host=host, port=port,
                                       rack=None, is_fenced=False)],
        cluster_authorized_operations=(_authorized_operations(ctx)
                                       if req.include_cluster_authorized_operations
                                       else AUTHORIZED_OPERATIONS_OMITTED))


def _authorized_operations(ctx) -> int:
    """Kafka: the cluster's bit field for a principal with Describe on it, else 0."""
    if not cluster_allows(ctx, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME,
                                 cluster_authorized_operations())


def error_response(req: DescribeClusterRequest, code: Error) -> DescribeClusterResponse:
    return DescribeClusterResponse(error_code=code)
