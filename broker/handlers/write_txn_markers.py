"""WriteTxnMarkers (key 27), v1-2.

Writes COMMIT/ABORT control batches for each marker's partitions, through the very function
the transaction coordinator completes its transactions with
(``broker.txn_coordinator.write_markers``, coordinator/transaction/markers.py): durable
before the answer; ``__consumer_offsets`` partitions go to the group coordinator, which
publishes or drops the transaction's pending offsets. Kafka's admin tool uses it to abort a
hanging transaction (KIP-664). Per partition: UNKNOWN_TOPIC_OR_PARTITION for a partition
that does not exist; a stale marker INVALID_PRODUCER_EPOCH (older producer epoch; with
transaction version 2, not above the data's) or TRANSACTION_COORDINATOR_FENCED (older
coordinator epoch); NOT_LEADER_OR_FOLLOWER while the offsets partition is not ready.
v1: flexible. v2 (KIP-1228): each marker names its transaction version.
"""

from __future__ import annotations

import asyncio

from semel.broker.handlers._authz import cluster_allows
from semel.broker.security import AclOperation
from semel.protocol.errors import Error
from semel.protocol.messages.write_txn_markers_request import (
    WritableTxnMarker,
    WriteTxnMarkersRequest,
)
from semel.protocol.messages.write_txn_markers_response import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from semel.storage.topic_partition import TopicPartition

API_KEY = 27


async def handle(ctx, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    if not (cluster_allows(ctx, AclOperation.ALTER)
            or cluster_allows(ctx, AclOperation.CLUSTER_ACTION)):
        return error_response(req, Error.CLUSTER_AUTHORIZATION_FAILED)
    write_markers = ctx.broker.txn_coordinator.write_markers
    results = await asyncio.gather(*(_one(write_markers, marker) for marker in req.markers))
    return WriteTxnMarkersResponse(markers=list(results))


async def _one(write_markers, marker: WritableTxnMarker) -> WritableTxnMarkerResult:
    partitions = [TopicPartition(t.name, p) for t in marker.topics for p in t.partition_indexes]
    errors = await write_markers(
        None, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
        marker.transaction_result, frozenset(partitions),
        transaction_version=marker.transaction_version)
    return _result(marker, lambda tp: errors.get(tp, Error.UNKNOWN_SERVER_ERROR))


def _result(marker: WritableTxnMarker, error_of) -> WritableTxnMarkerResult:
    return WritableTxnMarkerResult(producer_id=marker.producer_id, topics=[
        WritableTxnMarkerTopicResult(name=t.name, partitions=[
            WritableTxnMarkerPartitionResult(partition_index=p,
                                             error_code=error_of(TopicPartition(t.name, p)))
            for p in t.partition_indexes])
        for t in marker.topics])


def error_response(req: WriteTxnMarkersRequest, code: Error) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(markers=[_result(m, lambda _tp: code) for m in req.markers])
