"""Feature flags advertised in ApiVersions v3+ (KIP-584): supported ranges and finalized
levels. ``transaction.version`` joins when transactions (KIP-890) are served."""

from __future__ import annotations

SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {}
FINALIZED_FEATURES: dict[str, int] = {}
FINALIZED_FEATURES_EPOCH = 0
