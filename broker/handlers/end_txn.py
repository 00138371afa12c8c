"""EndTxn (key 26), v0-5.

Commits or aborts the producer's transaction: answers once PREPARE_COMMIT / PREPARE_ABORT
is durable in ``__transaction_state``; the COMMIT/ABORT markers follow asynchronously. A
retry of an EndTxn that already completed is answered NONE. v0-1: PRODUCER_FENCED is sent
as INVALID_PRODUCER_EPOCH. v3: flexible. v5: transaction version 2 (KIP-890) - the epoch is
bumped per transaction and the response carries the producer id and epoch to continue with.
Beyond Kafka, with the authorizer on: a producer id issued to another principal
(coordinator/producer_principal.py) is TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from semel.broker.handlers._authz import foreign_producer_id
from semel.broker.handlers._txn import fenced_for_old_clients, txn_coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.end_txn_request import EndTxnRequest
from semel.protocol.messages.end_txn_response import EndTxnResponse

API_KEY = 26


async def handle(ctx, req: EndTxnRequest) -> EndTxnResponse:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return error_response(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if foreign_producer_id(ctx, req.producer_id):
        return error_response(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    tc = txn_coordinator(ctx)
    if tc is None:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    result = await tc.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                              req.committed,
                              client_transaction_version=2 if ctx.api_version >= 5 else 0)
    return EndTxnResponse(error_code=fenced_for_old_clients(result.error, ctx.api_version, 2),
                          producer_id=result.producer_id, producer_epoch=result.producer_epoch)


def error_response(req: EndTxnRequest, code: Error) -> EndTxnResponse:
    return EndTxnResponse(error_code=code, producer_id=-1, producer_epoch=-1)
