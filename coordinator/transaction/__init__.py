"""Transaction coordinator: transactional ids, their transactions and ``__transaction_state``.

``state`` (the transition table), ``metadata`` (one id's state, prepare/complete), ``core``
(what each request does, pure), ``log`` (the record codecs) and ``coordinator`` (the async
shell on the broker's event loop: persistence, markers, timeouts, expiration, loading).
"""

from semel.coordinator.transaction.config import TxnConfig
from semel.coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnDescription,
    TxnListing,
    TxnResult,
)
from semel.coordinator.transaction.log import TRANSACTION_STATE_TOPIC_NAME
from semel.coordinator.transaction.markers import LogMarkerWriter
from semel.coordinator.transaction.state import TransactionState

__all__ = ["TRANSACTION_STATE_TOPIC_NAME", "LogMarkerWriter", "TransactionCoordinator",
           "TransactionState", "TxnConfig", "TxnDescription", "TxnListing", "TxnResult"]
