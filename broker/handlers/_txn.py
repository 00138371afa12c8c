"""Shared by the transaction handlers: the transaction coordinator and version quirks."""

from __future__ import annotations

from semel.protocol.errors import Error


def txn_coordinator(ctx):
    """The broker's TransactionCoordinator, or None while it does not run."""
    return getattr(ctx.broker, "txn_coordinator", None)


def txn_coordinator_of(broker):
    """``txn_coordinator`` for code that has the broker, not a request context."""
    return getattr(broker, "txn_coordinator", None)


def fenced_for_old_clients(error: Error, version: int, first_version: int) -> Error:
    """PRODUCER_FENCED (KIP-588) is only understood from ``first_version`` on; older clients
    get INVALID_PRODUCER_EPOCH, which they handle the same way (as Kafka answers them)."""
    if error == Error.PRODUCER_FENCED and version < first_version:
        return Error.INVALID_PRODUCER_EPOCH
    return error


def verification_error(error: Error, generic_errors: bool) -> Error:
    """A transaction coordinator answer to partition verification (or an implicit add), as
    Kafka's AddPartitionsToTxnManager hands it to an append: PRODUCER_FENCED becomes
    INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE stays only for clients that know it
    (``generic_errors``), older ones get INVALID_TXN_STATE."""
    if error == Error.PRODUCER_FENCED:
        return Error.INVALID_PRODUCER_EPOCH
    if error == Error.TRANSACTION_ABORTABLE and not generic_errors:
        return Error.INVALID_TXN_STATE
    return error
