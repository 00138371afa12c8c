"""FindCoordinator (key 10), v0-6.

There is one broker, so it coordinates every group (key_type 0) and every transactional id
(key_type 1). The first lookup of a group creates ``__consumer_offsets``, of a
transactional id ``__transaction_state`` (Kafka creates them then too); a coordinator that
is not running answers COORDINATOR_NOT_AVAILABLE. Share coordinators (key_type 2) do not exist here: INVALID_REQUEST, as Kafka
answers without one; so does an unknown key type. v4+: batched ``coordinator_keys``, one
answer each; before v4 one key and a top-level answer (error_message is the error's name
on success, as Kafka sends it). Errors come with node id -1, empty host and port -1.
"""

from __future__ import annotations

from semel.broker.handlers._groups import coordinator
from semel.broker.handlers._txn import txn_coordinator
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error
from semel.protocol.messages.find_coordinator_request import FindCoordinatorRequest
from semel.protocol.messages.find_coordinator_response import Coordinator, FindCoordinatorResponse

API_KEY = 10
GROUP, TRANSACTION = 0, 1


def _lookup(ctx, key_type: int, key: str) -> Error:
    if key_type == GROUP and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return Error.GROUP_AUTHORIZATION_FAILED
    if key_type == TRANSACTION and not ctx.authorize(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        return Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if key_type == GROUP:
        gc = coordinator(ctx)
        if not gc.active:
            return Error.COORDINATOR_NOT_AVAILABLE
        return gc.ensure_topic()
    if key_type == TRANSACTION:
        tc = txn_coordinator(ctx)
        if tc is None:
            return Error.COORDINATOR_NOT_AVAILABLE
        return tc.check_available() or tc.ensure_topic()
    return Error.INVALID_REQUEST


async def handle(ctx, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    broker = ctx.broker
    node = (broker.node_id, *broker.advertised(ctx.session.listener))
    if ctx.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            error = _lookup(ctx, req.key_type, key)
            node_id, host, port = node if error == Error.NONE else (-1, "", -1)
            coordinators.append(Coordinator(key=key, node_id=node_id, host=host, port=port,
                                            error_code=error))
        return FindCoordinatorResponse(coordinators=coordinators)
    error = _lookup(ctx, req.key_type, req.key)
    if error:
        return error_response(req, error)
    node_id, host, port = node
    return FindCoordinatorResponse(error_code=Error.NONE, error_message=Error.NONE.name,
                                   node_id=node_id, host=host, port=port)


def error_response(req: FindCoordinatorRequest, code: Error) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(
        error_code=code, error_message=None, node_id=-1, host="", port=-1,
        coordinators=[Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code)
                      for k in req.coordinator_keys])
