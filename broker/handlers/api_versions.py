"""ApiVersions (key 18), v0-4.

Lists every API the broker has a handler for, with the version range from
``protocol.api.SUPPORTED``. A request in a version newer than ours is answered (by the
dispatcher) in v0 with UNSUPPORTED_VERSION and the same list, so the client can pick
(KIP-511). v3+: client software name/version in the request; supported and finalized
features in tagged fields.
"""

from __future__ import annotations

from semel.broker.features import FINALIZED_FEATURES, FINALIZED_FEATURES_EPOCH, SUPPORTED_FEATURES
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
                   version: int) -> ApiVersionsResponse:
    response = ApiVersionsResponse(
        error_code=error,
        api_keys=[ApiVersion(key, lo, hi) for key, (lo, hi) in sorted(supported.items())])
    if version >= 3:
        response.supported_features = [SupportedFeatureKey(name, lo, hi)
                                       for name, (lo, hi) in SUPPORTED_FEATURES.items()]
        response.finalized_features_epoch = FINALIZED_FEATURES_EPOCH
        response.finalized_features = [FinalizedFeatureKey(name, level, level)
                                       for name, level in FINALIZED_FEATURES.items()]
    return response


async def handle(ctx, req: ApiVersionsRequest) -> ApiVersionsResponse:
    error = Error.NONE
    if ctx.api_version >= 3 and not (_valid_client_field(req.client_software_name)
                                     and _valid_client_field(req.client_software_version)):
        error = Error.INVALID_REQUEST
    return build_response(error, ctx.broker.dispatcher.supported, ctx.api_version)


def _valid_client_field(value: str) -> bool:
    # Kafka: [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
    if not value:
        return False
    ok = all(c.isascii() and (c.isalnum() or c in "-.") for c in value)
    return ok and value[0].isalnum() and value[-1].isalnum()


def error_response(req: ApiVersionsRequest, code: Error) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=code)
