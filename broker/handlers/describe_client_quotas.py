"""DescribeClientQuotas (key 48), v0-1 (v1 flexible).

Needs Cluster DescribeConfigs (else CLUSTER_AUTHORIZATION_FAILED). The filter's components
match an entity type exactly (by name), its default (name null) or any name it has; with
``strict`` an entity with other types is left out. Each selected entity comes with all its
values. A bad filter answers the request's error code and Kafka's message with null entries
(INVALID_REQUEST; an unknown entity type UNSUPPORTED_VERSION), as ClientQuotasImage.
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.quotas import QuotaError
from semel.broker.security import AclOperation
from semel.protocol.errors import Error
from semel.protocol.messages.describe_client_quotas_request import DescribeClientQuotasRequest
from semel.protocol.messages.describe_client_quotas_response import (
    DescribeClientQuotasResponse,
    EntityData,
    EntryData,
    ValueData,
)

API_KEY = 48


async def handle(ctx, req: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not cluster_allows(ctx, AclOperation.DESCRIBE_CONFIGS):
        return error_response(req, Error.CLUSTER_AUTHORIZATION_FAILED)
    try:
        found = ctx.broker.quotas.describe(
            [(c.entity_type, c.match_type, c.match) for c in req.components], req.strict)
    except QuotaError as e:
        return DescribeClientQuotasResponse(error_code=e.code, error_message=e.message,
                                            entries=None)
    return DescribeClientQuotasResponse(error_message=None, entries=[
        EntryData(entity=[EntityData(t, n) for t, n in entity],
                  values=[ValueData(k, v) for k, v in values.items()])
        for entity, values in found])


def error_response(req: DescribeClientQuotasRequest, code: Error) -> DescribeClientQuotasResponse:
    return DescribeClientQuotasResponse(error_code=code, error_message=None, entries=None)
