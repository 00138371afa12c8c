"""InitProducerId (key 22), v0-6.

Without a transactional id (idempotent producers) Kafka's coordinator "blindly accepts":
a producer id never handed out before (coordinator/producer_id.py), epoch 0, whatever
producer id/epoch (KIP-360, v3+) or transaction timeout the request carries (clients send
-1, 0 or 2^31-1) - an idempotent client bumps its epoch itself and asks for a new id only
when the epoch is exhausted. With a transactional id the transaction coordinator decides
(fresh id, epoch bump fencing the previous instance, KIP-360 recovery with the expected
producer id/epoch, epoch exhaustion rotating the id); until it runs (``broker.txn_coordinator``
is None) the answer is COORDINATOR_NOT_AVAILABLE, Kafka's answer while the coordinator of
that transactional id is not loaded.
Checks before that, as KafkaApis makes them: a producer id without an epoch or an epoch
without a producer id is INVALID_REQUEST; an empty transactional id is INVALID_REQUEST.
v2: throttle_time_ms. v4+: flexible, and PRODUCER_FENCED (KIP-588) - older versions get
INVALID_PRODUCER_EPOCH instead. v6 (KIP-939 two-phase commit): ``enable2Pc`` needs, as in
Kafka, TwoPhaseCommit on the transactional id besides Write (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and ``transaction.two.phase.commit.enable`` (the
coordinator's check); ``keepPreparedTxn`` keeps an ongoing transaction, whose producer id and
epoch come back in ongoing_txn_producer_id/epoch (-1 when none). Without a transactional id
both flags are ignored, as in Kafka.
Beyond Kafka, with the authorizer on (``broker.producer_principals``): the producer id is
bound to the requesting principal before the answer - an idempotent one in semel's file, a
transactional one with its transactional id in ``__transaction_state`` (a new epoch or id on
the same transactional id is bound to whoever asked for it); other principals then cannot
use it (coordinator/producer_principal.py).
"""

from __future__ import annotations

from semel.broker.handlers._authz import cluster_allows
from semel.broker.handlers._txn import fenced_for_old_clients
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.init_producer_id_request import InitProducerIdRequest
from semel.protocol.messages.init_producer_id_response import InitProducerIdResponse

API_KEY = 22
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def handle(ctx, req: InitProducerIdRequest) -> InitProducerIdResponse:
    error = _authorize(ctx, req.transactional_id, req.enable2_pc)
    if error:
        return error_response(req, error)
    producer_id, producer_epoch = req.producer_id, req.producer_epoch
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return error_response(req, Error.INVALID_REQUEST)
    transactional_id = req.transactional_id
    if transactional_id is None:
        try:
            new_id = await ctx.broker.producer_id_manager.generate_producer_id()
            principals = ctx.broker.producer_principals
            if principals is not None:
                await principals.bind_idempotent(new_id, str(ctx.principal), ctx.broker.clock())
        except KafkaError as e:
            return error_response(req, e.code)
        return InitProducerIdResponse(error_code=Error.NONE, producer_id=new_id, producer_epoch=0)
    if not transactional_id:
        return error_response(req, Error.INVALID_REQUEST)
    coordinator = getattr(ctx.broker, "txn_coordinator", None)
    if coordinator is None:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    result = await coordinator.init_producer_id(
        transactional_id, req.transaction_timeout_ms, producer_id, producer_epoch,
        enable_two_phase_commit=req.enable2_pc, keep_prepared_txn=req.keep_prepared_txn,
        principal=None if ctx.broker.producer_principals is None else str(ctx.principal))
    return InitProducerIdResponse(
        error_code=fenced_for_old_clients(result.error, ctx.api_version, 4),
        producer_id=result.producer_id, producer_epoch=result.producer_epoch,
        ongoing_txn_producer_id=result.ongoing_producer_id,
        ongoing_txn_producer_epoch=result.ongoing_producer_epoch)


def _authorize(ctx, transactional_id: str | None, enable_two_phase_commit: bool) -> Error:
    """Kafka: Write on the transactional id (and TwoPhaseCommit for enable2Pc); an
    idempotent producer needs IdempotentWrite on the cluster or Write on some topic."""
    if transactional_id is not None:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                             transactional_id):
            return Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if enable_two_phase_commit and not ctx.authorize(
                AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not (cluster_allows(ctx, AclOperation.IDEMPOTENT_WRITE)
              or ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC)):
        return Error.CLUSTER_AUTHORIZATION_FAILED
    return Error.NONE


def error_response(req: InitProducerIdRequest, code: Error) -> InitProducerIdResponse:
    return InitProducerIdResponse(error_code=code, producer_id=NO_PRODUCER_ID,
                                  producer_epoch=NO_PRODUCER_EPOCH)
