"""Shared by the transaction handlers: the transaction coordinator and version quirks."""

from __future__ import annotations

from protocol.errors import Error


def txn_coordinator(ctx):
    """The broker's TransactionCoordinator, or None while it does not run."""
    return getattr(ctx.broker, "txn_coordinator", None)


def fenced_for_old_clients(error: Error, version: int, first_version: int) -> Error:
    """PRODUCER_FENCED (KIP-588) is only understood from ``first_version`` on; older clients
    get INVALID_PRODUCER_EPOCH, which they handle the same way (as Kafka answers them)."""
    if error == Error.PRODUCER_FENCED and version < first_version:
        return Error.INVALID_PRODUCER_EPOCH
    return error
