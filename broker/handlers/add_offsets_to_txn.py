"""AddOffsetsToTxn (key 25), v0-4.

Adds the group's ``__consumer_offsets`` partition (the one its group coordinator uses) to
the producer's transaction, so the COMMIT/ABORT marker reaches it and the offsets committed
with TxnOffsetCommit become visible or are dropped. Errors as for AddPartitionsToTxn;
v0-1: PRODUCER_FENCED is sent as INVALID_PRODUCER_EPOCH. v3: flexible.
Beyond Kafka, with the authorizer on: a producer id issued to another principal
(coordinator/producer_principal.py) is TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from semel.broker.handlers._authz import foreign_producer_id
from semel.broker.handlers._txn import fenced_for_old_clients, txn_coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.add_offsets_to_txn_request import AddOffsetsToTxnRequest
from semel.protocol.messages.add_offsets_to_txn_response import AddOffsetsToTxnResponse

API_KEY = 25


async def handle(ctx, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return error_response(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if foreign_producer_id(ctx, req.producer_id):
        return error_response(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return error_response(req, Error.GROUP_AUTHORIZATION_FAILED)
    tc = txn_coordinator(ctx)
    if tc is None:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    partition = ctx.broker.group_coordinator.partition_for(req.group_id)
    error = await tc.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                 partition)
    return AddOffsetsToTxnResponse(error_code=fenced_for_old_clients(error, ctx.api_version, 2))


def error_response(req: AddOffsetsToTxnRequest, code: Error) -> AddOffsetsToTxnResponse:
    return AddOffsetsToTxnResponse(error_code=code)
