"""AddPartitionsToTxn (key 24), v0-5.

v0-3 (from producers): one transaction; partitions are added to it (starting it) once that
is durable in ``__transaction_state``. Any partition that does not exist
(UNKNOWN_TOPIC_OR_PARTITION) or is internal (TOPIC_AUTHORIZATION_FAILED: producers add
``__consumer_offsets`` through AddOffsetsToTxn) fails the whole request, the others then get
OPERATION_NOT_ATTEMPTED; a coordinator error is reported on every partition. v0-1:
PRODUCER_FENCED is sent as INVALID_PRODUCER_EPOCH. v3: flexible.
v4+ (between brokers, KIP-890): a batch of transactions, each answered on its own; with
``verify_only`` nothing is added, each partition is checked to be in the ongoing
transaction (TRANSACTION_ABORTABLE if not). v5: the caller is a producer of transaction
version 2 whose partition is added implicitly.
Beyond Kafka, with the authorizer on: v0-3 with a producer id issued to another principal
(coordinator/producer_principal.py) fail every partition with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, before the coordinator is asked.
"""

from __future__ import annotations

import asyncio

from semel.broker.handlers._authz import NOTHING, cluster_allows, denied_topics, foreign_producer_id
from semel.broker.handlers._txn import fenced_for_old_clients, txn_coordinator
from semel.broker.handlers.metadata import INTERNAL_TOPICS
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.add_partitions_to_txn_request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTransaction,
)
from semel.protocol.messages.add_partitions_to_txn_response import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
)
from semel.storage.topic_partition import TopicPartition

API_KEY = 24


async def handle(ctx, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    version = ctx.api_version
    if version < 4:  # one transaction, awaited in the request's own turn (no task)
        result = await _one(ctx, AddPartitionsToTxnTransaction(
            transactional_id=req.v3_and_below_transactional_id,
            producer_id=req.v3_and_below_producer_id,
            producer_epoch=req.v3_and_below_producer_epoch,
            topics=req.v3_and_below_topics), version)
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=result.topic_results)
    if not cluster_allows(ctx, AclOperation.CLUSTER_ACTION):  # only brokers send v4+
        return AddPartitionsToTxnResponse(error_code=Error.CLUSTER_AUTHORIZATION_FAILED)
    results = await asyncio.gather(*(_one(ctx, t, version) for t in req.transactions))
    return AddPartitionsToTxnResponse(error_code=Error.NONE, results_by_transaction=results)


async def _one(ctx, txn: AddPartitionsToTxnTransaction, version: int) -> AddPartitionsToTxnResult:
    partitions = list(dict.fromkeys(TopicPartition(t.name, p)
                                    for t in txn.topics for p in t.partitions))
    denied = NOTHING
    if version < 4:  # from a producer: Write on its transactional id and on the topics
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                             txn.transactional_id):
            return result_for(txn.transactional_id, dict.fromkeys(
                partitions, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        if foreign_producer_id(ctx, txn.producer_id):
            return result_for(txn.transactional_id, dict.fromkeys(
                partitions, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        denied = denied_topics(ctx, AclOperation.WRITE, (tp.topic for tp in partitions))
    tc = txn_coordinator(ctx)
    if tc is None:
        return result_for(txn.transactional_id, dict.fromkeys(
            partitions, Error.COORDINATOR_NOT_AVAILABLE))
    errors: dict[TopicPartition, Error] = {}
    for tp in partitions:
        info = ctx.log_manager.topics.get(tp.topic)
        if version < 4 and (tp.topic in INTERNAL_TOPICS or tp.topic in denied):
            errors[tp] = Error.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not 0 <= tp.partition < info.num_partitions:
            errors[tp] = Error.UNKNOWN_TOPIC_OR_PARTITION
    if errors:
        return result_for(txn.transactional_id, {
            tp: errors.get(tp, Error.OPERATION_NOT_ATTEMPTED) for tp in partitions})
    if txn.verify_only:
        return result_for(txn.transactional_id, tc.verify_partitions(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions))
    error = await tc.add_partitions(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                    partitions,
                                    client_transaction_version=2 if version >= 5 else 0)
    return result_for(txn.transactional_id,
                      dict.fromkeys(partitions, fenced_for_old_clients(error, version, 2)))


def result_for(transactional_id: str,
               errors: dict[TopicPartition, Error]) -> AddPartitionsToTxnResult:
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for tp, error in errors.items():
        by_topic.setdefault(tp.topic, []).append(
            AddPartitionsToTxnPartitionResult(partition_index=tp.partition,
                                              partition_error_code=error))
    return AddPartitionsToTxnResult(
        transactional_id=transactional_id,
        topic_results=[AddPartitionsToTxnTopicResult(name=topic, results_by_partition=parts)
                       for topic, parts in by_topic.items()])


def error_response(req: AddPartitionsToTxnRequest, code: Error) -> AddPartitionsToTxnResponse:
    single = result_for(req.v3_and_below_transactional_id, {
        TopicPartition(t.name, p): code for t in req.v3_and_below_topics for p in t.partitions})
    return AddPartitionsToTxnResponse(
        error_code=code, results_by_topic_v3_and_below=single.topic_results,
        results_by_transaction=[result_for(t.transactional_id, {
            TopicPartition(topic.name, p): code for topic in t.topics for p in topic.partitions})
            for t in req.transactions])
