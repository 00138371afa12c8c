"""Transaction coordinator: transactional ids, their transactions and ``__transaction_state``.

``state`` (the transition table), ``metadata`` (one id's state, prepare/complete), ``core``
(what each request does, pure), ``log`` (the record codecs) and ``coordinator`` (the async
shell on the broker's event loop: persistence, markers, timeouts, expiration, loading).
"""

from coordinator.transaction.config import TxnConfig
from coordinator.transaction.coordinator import (
    TransactionCoordinator,
    TxnDescription,
    TxnListing,
    TxnResult,
)
from coordinator.transaction.log import TRANSACTION_STATE_TOPIC_NAME
from coordinator.transaction.markers import LogMarkerWriter
from coordinator.transaction.state import TransactionState

__all__ = ["TRANSACTION_STATE_TOPIC_NAME", "LogMarkerWriter", "TransactionCoordinator",
           "TransactionState", "TxnConfig", "TxnDescription", "TxnListing", "TxnResult"]
