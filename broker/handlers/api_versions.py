"""ApiVersions (key 18), v0-4.

Lists every API the broker has a handler for, with the version range from
``protocol.api.SUPPORTED``. A request in a version newer than ours is answered (by the
dispatcher) in v0 with UNSUPPORTED_VERSION and only ApiVersions' own range, from which the
client picks the version to retry with (KIP-511; Kafka's
``ApiVersionsRequest.getErrorResponse``). v3+: client software name/version in the request
(an illegal one answers INVALID_REQUEST with no list, as Kafka); supported and finalized
features in tagged fields, from ``broker.features`` (below v4 a supported feature whose
minimum is 0 is left out, a finalized level 0 is never listed, ZkMigrationReady is false, as
Kafka 4.x answers).
"""

from __future__ import annotations

from semel.broker.features import FeatureStore
from semel.protocol.errors import Error
from semel.protocol.messages.api_versions_request import ApiVersionsRequest
from semel.protocol.messages.api_versions_response import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)

API_KEY = 18


def build_response(error: Error, supported: dict[int, tuple[int, int]],
                   version: int, features: FeatureStore | None = None) -> ApiVersionsResponse:
    response = ApiVersionsResponse(
        error_code=error,
        api_keys=[ApiVersion(key, lo, hi) for key, (lo, hi) in sorted(supported.items())])
    if version >= 3 and features is not None:
        response.supported_features = [SupportedFeatureKey(name, lo, hi) for name, lo, hi
                                       in features.supported(omit_min_zero=version < 4)]
        response.finalized_features_epoch = features.epoch
        response.finalized_features = [FinalizedFeatureKey(name, level, level)
                                       for name, level in features.finalized_levels()]
        response.zk_migration_ready = False
    return response


async def handle(ctx, req: ApiVersionsRequest) -> ApiVersionsResponse:
    if ctx.api_version >= 3 and not (_valid_client_field(req.client_software_name)
                                     and _valid_client_field(req.client_software_version)):
        return ApiVersionsResponse(error_code=Error.INVALID_REQUEST)
    return build_response(Error.NONE, ctx.broker.dispatcher.supported, ctx.api_version,
                          ctx.broker.features)


def _valid_client_field(value: str) -> bool:
    # Kafka: [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
    if not value:
        return False
    ok = all(c.isascii() and (c.isalnum() or c in "-.") for c in value)
    return ok and value[0].isalnum() and value[-1].isalnum()


def unsupported_version_response(supported: dict[int, tuple[int, int]]) -> ApiVersionsResponse:
    """The v0 answer to a request in a version we do not have: ApiVersions' range only."""
    return build_response(Error.UNSUPPORTED_VERSION, {API_KEY: supported[API_KEY]}, 0)


def error_response(req: ApiVersionsRequest, code: Error) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=code)
