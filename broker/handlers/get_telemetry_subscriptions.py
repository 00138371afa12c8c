"""GetTelemetrySubscriptions (key 71), v0 (KIP-714).

semel collects no client metrics: every client gets an empty ``requested_metrics`` list, so a
client with telemetry enabled (the Java client's default since 3.7) pushes nothing and asks
again after ``push_interval_ms``. A zero ``client_instance_id`` is replaced by a fresh random
one, as Kafka does; a non-zero one is echoed. PushTelemetry is not served (not advertised).
"""

from __future__ import annotations

from semel.protocol.errors import Error
from semel.protocol.messages.get_telemetry_subscriptions_request import (
    GetTelemetrySubscriptionsRequest,
)
from semel.protocol.messages.get_telemetry_subscriptions_response import (
    GetTelemetrySubscriptionsResponse,
)
from semel.protocol.primitives import ZERO_UUID
from semel.storage.log_manager import random_kafka_uuid

API_KEY = 71
PUSH_INTERVAL_MS = 300_000  # Kafka's default interval for a client without a subscription
TELEMETRY_MAX_BYTES = 1_048_576
# CompressionType ids Kafka accepts for pushed metrics: zstd, lz4, gzip, snappy
ACCEPTED_COMPRESSION_TYPES = [4, 3, 1, 2]


async def handle(ctx, req: GetTelemetrySubscriptionsRequest) -> GetTelemetrySubscriptionsResponse:
    client_instance_id = req.client_instance_id
    if client_instance_id == ZERO_UUID:
        client_instance_id = random_kafka_uuid()
    return GetTelemetrySubscriptionsResponse(
        error_code=Error.NONE, client_instance_id=client_instance_id, subscription_id=0,
        accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES),
        push_interval_ms=PUSH_INTERVAL_MS, telemetry_max_bytes=TELEMETRY_MAX_BYTES,
        delta_temporality=True, requested_metrics=[])


def error_response(req: GetTelemetrySubscriptionsRequest,
                   code: Error) -> GetTelemetrySubscriptionsResponse:
    return GetTelemetrySubscriptionsResponse(error_code=code)
