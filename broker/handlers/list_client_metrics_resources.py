"""ListClientMetricsResources (key 74), v0 (KIP-714): the names of the client-metrics
config resources (the subscriptions a ClientTelemetry receiver would serve).

semel keeps no client-metrics configs (AlterConfigs on a CLIENT_METRICS resource is
refused), so the list is empty, as a Kafka 4.0 broker with none defined answers. Without
DescribeConfigs on the cluster: CLUSTER_AUTHORIZATION_FAILED. (Kafka 4.1 renames the API
ListConfigResources and adds v1, a filter by resource type; AdminClient 3.9 sends v0.)
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.list_client_metrics_resources_request import (
    ListClientMetricsResourcesRequest,
)
from semel.protocol.messages.list_client_metrics_resources_response import (
    ListClientMetricsResourcesResponse,
)

API_KEY = 74


async def handle(ctx, req: ListClientMetricsResourcesRequest
                 ) -> ListClientMetricsResourcesResponse:
    if not cluster_allows(ctx, AclOperation.DESCRIBE_CONFIGS):
        raise KafkaError(Error.CLUSTER_AUTHORIZATION_FAILED)
    return ListClientMetricsResourcesResponse(error_code=Error.NONE, client_metrics_resources=[])


def error_response(req: ListClientMetricsResourcesRequest,
                   code: Error) -> ListClientMetricsResourcesResponse:
    return ListClientMetricsResourcesResponse(error_code=code, client_metrics_resources=[])
