"""Settings of the transaction coordinator, with Kafka's defaults.

Built from the broker's ``transaction.*`` / ``transactional.id.*`` properties by
``from_broker_config``; ``transaction_version`` is the finalized ``transaction.version``
feature level (0: Kafka's original protocol, 1: flexible ``__transaction_state`` values,
2: KIP-890 epoch bump per transaction), which the broker passes in.
"""

from __future__ import annotations

from semel.storage.config import config_class


@config_class
class TxnConfig:
    """The transaction coordinator's settings (see the module docstring), Kafka's defaults."""

    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    transaction_max_timeout_ms: int = 900000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    abort_timed_out_transaction_cleanup_interval_ms: int = 10000
    remove_expired_transaction_cleanup_interval_ms: int = 3600000
    transaction_version: int = 0
    # KIP-939: InitProducerId with enable2Pc allowed (transaction.two.phase.commit.enable)
    two_phase_commit_enable: bool = False
    # a 2PC transaction open longer than this is logged and counted (never aborted)
    two_phase_commit_warn_age_ms: int = 3600000
    # pause between attempts to write markers / COMPLETE_* that failed with a retriable error
    retry_backoff_ms: int = 100

    @classmethod
    def from_broker_config(cls, config, transaction_version: int = 0) -> TxnConfig:
        return cls(
            transactional_id_expiration_ms=config.transactional_id_expiration_ms,
            transaction_max_timeout_ms=config.transaction_max_timeout_ms,
            transaction_state_log_num_partitions=config.transaction_state_log_num_partitions,
            transaction_state_log_segment_bytes=config.transaction_state_log_segment_bytes,
            abort_timed_out_transaction_cleanup_interval_ms=(
                config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
            remove_expired_transaction_cleanup_interval_ms=(
                config.transaction_remove_expired_transaction_cleanup_interval_ms),
            transaction_version=transaction_version,
            two_phase_commit_enable=config.transaction_two_phase_commit_enable,
            two_phase_commit_warn_age_ms=config.transaction_two_phase_commit_warn_age_ms,
        )
