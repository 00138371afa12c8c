"""UpdateFeatures (key 57), v0-2.

Changes finalized feature levels (``broker.features``: metadata.version, transaction.version,
group.version) as a single-node Kafka 4.0 controller does: ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED; the updates are checked in order and applied all or nothing,
the first bad one failing the request with INVALID_UPDATE_VERSION and Kafka's message ("The
update failed for all features since the following feature had an error: Invalid update
version 3 for feature transaction.version. Local controller 0 only supports versions 0-2").
A downgrade needs upgrade type SAFE_DOWNGRADE or UNSAFE_DOWNGRADE; a level of 0 removes the
feature. Applied levels are on disk before the answer and in force at once; the finalized
epoch in ApiVersions grows by one. ``validate_only`` (v1+) checks and changes nothing.
v0's ``allow_downgrade`` is not read, as Kafka 4.0's controller reads only the upgrade type
(v0 requests are upgrades). v0-1: a result per feature on success (message "NONE", as
Kafka); v2: none.
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.update_features_request import UpdateFeaturesRequest
from semel.protocol.messages.update_features_response import (
    UpdatableFeatureResult,
    UpdateFeaturesResponse,
)

API_KEY = 57


async def handle(ctx, req: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    if not cluster_allows(ctx, AclOperation.ALTER):
        return error_response(req, Error.CLUSTER_AUTHORIZATION_FAILED)
    updates = [(u.feature, u.max_version_level, u.upgrade_type) for u in req.feature_updates]
    try:
        await ctx.broker.features.update(updates, req.validate_only)
    except KafkaError as e:
        return UpdateFeaturesResponse(
            error_code=e.code, error_message="The update failed for all features since the "
            f"following feature had an error: {e.message}")
    results = []
    if ctx.api_version <= 1:
        results = [UpdatableFeatureResult(u.feature, Error.NONE, Error.NONE.name)
                   for u in req.feature_updates]
    return UpdateFeaturesResponse(error_code=Error.NONE, error_message=None, results=results)


def error_response(req: UpdateFeaturesRequest, code: Error) -> UpdateFeaturesResponse:
    return UpdateFeaturesResponse(error_code=code, error_message=None)
