"""DescribeTransactions (key 65), v0 (KIP-664).

For each transactional id: its state name ("Ongoing", "PrepareCommit" ...), producer id and
epoch, timeout, start time and the partitions of the current transaction; per id errors:
TRANSACTIONAL_ID_NOT_FOUND (unknown or expiring), INVALID_REQUEST (empty id),
COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from semel.broker.handlers._authz import denied_topics
from semel.broker.handlers._txn import txn_coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.describe_transactions_request import DescribeTransactionsRequest
from semel.protocol.messages.describe_transactions_response import (
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)

API_KEY = 65


async def handle(ctx, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    tc = txn_coordinator(ctx)
    if tc is None:
        return error_response(req, Error.COORDINATOR_NOT_AVAILABLE)
    states = []
    for transactional_id in req.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                             transactional_id):
            states.append(TransactionState(
                error_code=Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                transactional_id=transactional_id))
            continue
        d = tc.describe(transactional_id)
        hidden = denied_topics(ctx, AclOperation.DESCRIBE, d.partitions)
        states.append(TransactionState(
            error_code=d.error, transactional_id=transactional_id, transaction_state=d.state,
            transaction_timeout_ms=d.transaction_timeout_ms,
            transaction_start_time_ms=d.transaction_start_time_ms,
            producer_id=d.producer_id, producer_epoch=d.producer_epoch,
            topics=[TopicData(topic=topic, partitions=partitions)
                    for topic, partitions in d.partitions.items() if topic not in hidden]))
    return DescribeTransactionsResponse(transaction_states=states)


def error_response(req: DescribeTransactionsRequest, code: Error) -> DescribeTransactionsResponse:
    return DescribeTransactionsResponse(transaction_states=[
        TransactionState(error_code=code, transactional_id=t, producer_id=-1, producer_epoch=-1)
        for t in req.transactional_ids])
