"""Feature flags advertised in ApiVersions v3+ (KIP-584): supported ranges and finalized
levels.

``transaction.version`` (KIP-890): 0 is Kafka's original transaction protocol, 1 adds
flexible ``__transaction_state`` values, 2 bumps the producer epoch with every transaction
(EndTxn v5 returns it), lets Produce v12 / TxnOffsetCommit v5 add partitions implicitly and
requires markers to carry an epoch above the data's. semel serves all three and finalizes 2:
clients that know transaction version 2 (Java kafka-clients 4.x) use it, older clients
(Java 3.9, librdkafka, kafka-python, aiokafka) keep the version-1 protocol with partition
verification. The transaction coordinator reads its level from FINALIZED_FEATURES.
"""

from __future__ import annotations

SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {"transaction.version": (0, 2)}
FINALIZED_FEATURES: dict[str, int] = {"transaction.version": 2}
FINALIZED_FEATURES_EPOCH = 0
