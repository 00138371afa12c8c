"""TxnOffsetCommit (key 28), v0-5.

Commits a consumer group's offsets inside the producer's transaction: written to the
group's ``__consumer_offsets`` partition in a transactional batch of the producer, pending
(invisible to OffsetFetch) until the transaction's COMMIT marker lands there (ABORT drops
them). Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION, the rest go on.

As in Kafka 4: the group coordinator must be available; an empty group id is
INVALID_GROUP_ID; then, unless the producer already has a transaction open on the offsets
partition, the transaction coordinator verifies that the partition is in the producer's
transaction (``transaction.partition.verification.enable``; not in it: INVALID_TXN_STATE,
TRANSACTION_ABORTABLE from v4; a fenced producer: INVALID_PRODUCER_EPOCH) - v5 (transaction
version 2) adds it instead, always; finally the group coordinator checks the KIP-447
generation, member id and group instance id (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID) and writes. v0-1: COORDINATOR_LOAD_IN_PROGRESS is sent as
COORDINATOR_NOT_AVAILABLE. v2: leader epoch. v3: flexible, member fields.
Beyond Kafka, with the authorizer on: a producer id issued to another principal
(coordinator/producer_principal.py) fails every partition with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, before the group coordinator is asked.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics, foreign_producer_id
from semel.broker.handlers._groups import coordinator, partition_exists, request_info
from semel.broker.handlers._txn import txn_coordinator, verification_error
from semel.broker.security import AclOperation, ResourceType
from semel.coordinator.group.group_manager import append_error_to_response_error
from semel.protocol.errors import Error
from semel.protocol.messages.txn_offset_commit_request import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
)
from semel.protocol.messages.txn_offset_commit_response import (
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from semel.storage.topic_partition import TopicPartition

API_KEY = 28
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
GENERIC_ERRORS_VERSION = 4  # TRANSACTION_ABORTABLE understood (KIP-890 part 1)
IMPLICIT_ADD_VERSION = 5  # transaction version 2: the offsets partition joins implicitly


async def handle(ctx, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    version = ctx.api_version
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, req.transactional_id):
        return error_response(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if foreign_producer_id(ctx, req.producer_id):
        return error_response(req, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, req.group_id):
        return error_response(req, Error.GROUP_AUTHORIZATION_FAILED)
    gc = coordinator(ctx)
    error = gc.check_available(req.group_id)
    if error:
        return error_response(req, _for_version(error, version))
    denied = denied_topics(ctx, AclOperation.READ, (t.name for t in req.topics))
    results: dict[tuple[str, int], int] = {}
    valid: list[TxnOffsetCommitRequestTopic] = []
    for topic in req.topics:
        known = []
        for p in topic.partitions:
            if topic.name in denied:
                results[(topic.name, p.partition_index)] = Error.TOPIC_AUTHORIZATION_FAILED
            elif partition_exists(ctx, topic.name, p.partition_index):
                known.append(p)
            else:
                results[(topic.name, p.partition_index)] = Error.UNKNOWN_TOPIC_OR_PARTITION
        if known:
            valid.append(TxnOffsetCommitRequestTopic(name=topic.name, partitions=known))
    if valid:
        error = Error.INVALID_GROUP_ID if not req.group_id else await _verify(ctx, req, version)
        if error:
            for topic in valid:
                for p in topic.partitions:
                    results[(topic.name, p.partition_index)] = error
        else:
            req.topics, all_topics = valid, req.topics
            for topic in await gc.commit_transactional_offsets(request_info(ctx), req):
                for p in topic.partitions:
                    results[(topic.name, p.partition_index)] = p.error_code
            req.topics = all_topics
    return TxnOffsetCommitResponse(topics=[
        TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(
                p.partition_index, _for_version(results[(t.name, p.partition_index)], version))
            for p in t.partitions])
        for t in req.topics])


async def _verify(ctx, req: TxnOffsetCommitRequest, version: int) -> Error:
    """The transaction check before the write (Kafka's transactional write operation)."""
    implicit_add = version >= IMPLICIT_ADD_VERSION
    if not implicit_add and not ctx.config.transaction_partition_verification_enable:
        return Error.NONE
    tc = txn_coordinator(ctx)
    if tc is None:
        return Error.COORDINATOR_NOT_AVAILABLE
    tp = TopicPartition(GROUP_METADATA_TOPIC_NAME, coordinator(ctx).partition_for(req.group_id))
    plog = ctx.log_manager.get_partition(tp.topic, tp.partition)
    if plog is not None and plog.has_ongoing_transaction(req.producer_id, req.producer_epoch):
        return Error.NONE
    if implicit_add:
        error = await tc.add_partitions(req.transactional_id, req.producer_id,
                                        req.producer_epoch, [tp], client_transaction_version=2)
    else:
        error = tc.verify_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                     [tp])[tp]
    error = verification_error(error, generic_errors=version >= GENERIC_ERRORS_VERSION)
    if error == Error.NETWORK_EXCEPTION:
        return Error.COORDINATOR_LOAD_IN_PROGRESS  # Kafka's translation for older clients
    return append_error_to_response_error(error)


def _for_version(error: Error, version: int) -> Error:
    if version < 2 and error == Error.COORDINATOR_LOAD_IN_PROGRESS:
        return Error.COORDINATOR_NOT_AVAILABLE
    return error


def error_response(req: TxnOffsetCommitRequest, code: Error) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(topics=[
        TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(p.partition_index, code) for p in t.partitions])
        for t in req.topics])
