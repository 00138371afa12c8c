"""ListTransactions (key 66), v0-2 (KIP-664).

Every transactional id this coordinator knows (never one being expired), filtered by state
names (unknown names are echoed back in unknown_state_filters), producer ids, v1+ a
minimum duration of the current transaction (duration_filter, -1: none) and v2+ a regular
expression the whole transactional id must match (KIP-1152; INVALID_REGULAR_EXPRESSION if
it does not compile). COORDINATOR_LOAD_IN_PROGRESS while ``__transaction_state`` loads.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied
from semel.broker.handlers._txn import txn_coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.list_transactions_request import ListTransactionsRequest
from semel.protocol.messages.list_transactions_response import (
    ListTransactionsResponse,
    TransactionState,
)

API_KEY = 66


async def handle(ctx, req: ListTransactionsRequest) -> ListTransactionsResponse:
    tc = txn_coordinator(ctx)
    if tc is None:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    listing = tc.list_transactions(
        req.state_filters, req.producer_id_filters,
        req.duration_filter if ctx.api_version >= 1 else -1,
        req.transactional_id_pattern if ctx.api_version >= 2 else None)
    hidden = denied(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                    (tid for tid, _, _ in listing.transactions))
    return ListTransactionsResponse(
        error_code=listing.error, unknown_state_filters=listing.unknown_state_filters,
        transaction_states=[TransactionState(transactional_id=tid, producer_id=pid,
                                             transaction_state=state)
                            for tid, pid, state in listing.transactions if tid not in hidden])


def error_response(req: ListTransactionsRequest, code: Error) -> ListTransactionsResponse:
    return ListTransactionsResponse(error_code=code)
