"""DeleteTopics (key 20), v1-6.

Topics are named (v1-5 ``topic_names``, v6 ``topics[].name``) or, v6, given by id. With
``delete.topic.enable=false`` every topic fails: INVALID_REQUEST before v3,
TOPIC_DELETION_DISABLED from v3 (as Kafka). Per topic, in Kafka's order: neither or both of
name and id given -> INVALID_REQUEST; a name or id given twice -> INVALID_REQUEST; unknown id
-> UNKNOWN_TOPIC_ID; unknown name -> UNKNOWN_TOPIC_OR_PARTITION; a name that resolves to an
id also given -> INVALID_REQUEST. Deviation: Kafka 4 lets the internal topics
(``__consumer_offsets``, ``__transaction_state``) be deleted; semel refuses with
INVALID_REQUEST because its coordinators live on them. Results keep the request's order
(Kafka shuffles them). v5: error messages. v6: topic ids.
"""

from __future__ import annotations

import uuid

from semel.broker.handlers._authz import cluster_allows
from semel.broker.handlers.metadata import INTERNAL_TOPICS
from semel.broker.security import AclOperation, ResourceType
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.delete_topics_request import DeleteTopicsRequest
from semel.protocol.messages.delete_topics_response import (
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from semel.protocol.primitives import ZERO_UUID

API_KEY = 20
AUTH_FAILED = "Authorization failed."


def _requested(req: DeleteTopicsRequest) -> list[tuple[str | None, uuid.UUID]]:
    if req.topics:
        return [(t.name, t.topic_id) for t in req.topics]
    return [(name, ZERO_UUID) for name in req.topic_names]


def _result(name: str | None, topic_id: uuid.UUID, code: Error,
            message: str | None = None) -> DeletableTopicResult:
    return DeletableTopicResult(name=name, topic_id=topic_id, error_code=code,
                                error_message=message)


async def handle(ctx, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    requested = _requested(req)
    if not ctx.config.delete_topic_enable:
        code = Error.INVALID_REQUEST if ctx.api_version < 3 else Error.TOPIC_DELETION_DISABLED
        return DeleteTopicsResponse(responses=[
            _result(name, topic_id, code, "Topic deletion is disabled.")
            for name, topic_id in requested])

    logs = ctx.log_manager
    name_count: dict[str, int] = {}
    id_count: dict[uuid.UUID, int] = {}
    for name, topic_id in requested:
        if name is not None and topic_id == ZERO_UUID:
            name_count[name] = name_count.get(name, 0) + 1
        elif name is None and topic_id != ZERO_UUID:
            id_count[topic_id] = id_count.get(topic_id, 0) + 1
    # a topic named once and also given by id: both entries fail (Kafka answers the name)
    named_ids = {info.topic_id for name, n in name_count.items()
                 if n == 1 and (info := logs.topics.get(name)) is not None}
    both_ways = named_ids & id_count.keys()

    may = _permissions(ctx)
    results: list[DeletableTopicResult] = []
    targets: dict[uuid.UUID, int] = {}  # topic id -> index of its result
    for name, topic_id in requested:
        result = _check(logs, name, topic_id, name_count, id_count, both_ways, may)
        if result.error_code == Error.NONE:
            targets[result.topic_id] = len(results)
        results.append(result)

    deleted: list[str] = []
    for topic_id, index in targets.items():
        name = results[index].name
        try:
            logs.delete_topic(name)
            deleted.append(name)
        except KafkaError as e:
            results[index] = _result(name, topic_id, e.code, e.message)
    if deleted:  # committed offsets of deleted topics go too (Kafka's onPartitionsDeleted)
        ctx.broker.group_coordinator.on_topics_deleted(deleted)
    return DeleteTopicsResponse(responses=results)


def _permissions(ctx):
    """``may(operation, topic)``: Delete on the cluster allows everything, else Describe
    and Delete on each topic (Kafka's controller)."""
    if ctx.broker.authorizer is None or cluster_allows(ctx, AclOperation.DELETE):
        return lambda _operation, _name: True
    return lambda operation, name: ctx.authorize(operation, ResourceType.TOPIC, name)


def _check(logs, name: str | None, topic_id: uuid.UUID, name_count: dict[str, int],
           id_count: dict[uuid.UUID, int], both_ways: set[uuid.UUID],
           may) -> DeletableTopicResult:
    """The entry's result: an error, or NONE with the topic's name and id (to delete).
    Unauthorized: TOPIC_AUTHORIZATION_FAILED, telling nothing the principal may not
    describe (not whether a name exists, nor the name of an id)."""
    if name is None and topic_id == ZERO_UUID:
        return _result(None, ZERO_UUID, Error.INVALID_REQUEST,
                       "Neither topic name nor id were specified.")
    if name is not None and topic_id != ZERO_UUID:
        return _result(name, topic_id, Error.INVALID_REQUEST,
                       "You may not specify both topic name and topic id.")
    if name is None:
        if id_count[topic_id] > 1 or topic_id in both_ways:
            return _result(None, topic_id, Error.INVALID_REQUEST, "Duplicate topic id.")
        info = logs.topic_by_id(topic_id)
        if info is None:
            return _result(None, topic_id, Error.UNKNOWN_TOPIC_ID,
                           "This server does not host this topic ID.")
        if not may(AclOperation.DELETE, info.name):
            shown = info.name if may(AclOperation.DESCRIBE, info.name) else None
            return _result(shown, topic_id, Error.TOPIC_AUTHORIZATION_FAILED, AUTH_FAILED)
    else:
        if name_count[name] > 1:
            return _result(name, ZERO_UUID, Error.INVALID_REQUEST, "Duplicate topic name.")
        if not may(AclOperation.DESCRIBE, name):
            return _result(name, ZERO_UUID, Error.TOPIC_AUTHORIZATION_FAILED, AUTH_FAILED)
        info = logs.topics.get(name)
        if info is None:
            return _result(name, ZERO_UUID, Error.UNKNOWN_TOPIC_OR_PARTITION,
                           "This server does not host this topic-partition.")
        if not may(AclOperation.DELETE, name):
            return _result(name, ZERO_UUID, Error.TOPIC_AUTHORIZATION_FAILED, AUTH_FAILED)
        if info.topic_id in both_ways:
            return _result(name, info.topic_id, Error.INVALID_REQUEST,
                           "The provided topic name maps to an ID that was already supplied.")
    if info.name in INTERNAL_TOPICS:
        return _result(info.name, info.topic_id, Error.INVALID_REQUEST,
                       f"Topic {info.name} is an internal topic and cannot be deleted.")
    return _result(info.name, info.topic_id, Error.NONE)


def error_response(req: DeleteTopicsRequest, code: Error) -> DeleteTopicsResponse:
    return DeleteTopicsResponse(responses=[_result(name, topic_id, code)
                                           for name, topic_id in _requested(req)])
