"""Metadata (key 3), v0-13.

One broker (this node) leads every partition with leader epoch 0; replicas and ISR are
``[node_id]``. ``topics`` null = all topics; topics may be named (and, v10+, given by id).
Unknown topics are auto-created when ``auto.create.topics.enable`` and (v4+) the request's
``allow_auto_topic_creation`` allow it; internal topics are never auto-created here.
Authorization (authorizer on, as KafkaApis): an all-topics request leaves out topics
without Describe; a named one answers TOPIC_AUTHORIZATION_FAILED for them (zero topic id,
existence not told; by id: the id, no name); auto-creation needs Create on the cluster or
the topic, else TOPIC_AUTHORIZATION_FAILED. v8+: authorized-operation bit fields on request
(v8-10 the cluster's: 0 without Describe on it).
v10-11 carry a topic id field but, as in Kafka, topics can only be asked for by name there:
a null name or a topic id answers INVALID_REQUEST for every topic (names "" where null,
since a v10-11 response cannot carry a null name). v12+: an unknown id is UNKNOWN_TOPIC_ID.
v13 (KIP-1102) has a top-level error code: NONE in an answer (Kafka's brokers never send
REBOOTSTRAP_REQUIRED), the error of a failed request, as Kafka's ``getErrorResponse``.
"""

from __future__ import annotations

from semel.broker.handlers._authz import (
    NOTHING,
    authorized_operations,
    cluster_allows,
    denied_topics,
)
from semel.broker.security import CLUSTER_NAME, AclOperation, ResourceType
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.metadata_request import MetadataRequest
from semel.protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from semel.protocol.primitives import ZERO_UUID

API_KEY = 3
AUTHORIZED_OPERATIONS_VERSION = 8
TOPIC_IDS_VERSION = 12  # topics asked for by id
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def topic_entry(info, node_id: int) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=Error.NONE, name=info.name, topic_id=info.topic_id,
        is_internal=info.name in INTERNAL_TOPICS,
        partitions=[MetadataResponsePartition(
            error_code=Error.NONE, partition_index=p, leader_id=node_id, leader_epoch=0,
            replica_nodes=[node_id], isr_nodes=[node_id], offline_replicas=[])
            for p in range(info.num_partitions)])


def _error_topic(name: str | None, topic_id, code: Error) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id or ZERO_UUID)


async def handle(ctx, req: MetadataRequest) -> MetadataResponse:
    broker = ctx.broker
    logs = broker.log_manager
    node_id = broker.node_id
    topics: list[MetadataResponseTopic] = []
    secured = broker.authorizer is not None
    if req.topics is None or (ctx.api_version == 0 and not req.topics):
        hidden = denied_topics(ctx, AclOperation.DESCRIBE, logs.topics) if secured else NOTHING
        topics = [topic_entry(info, node_id) for info in logs.topics.values()
                  if info.name not in hidden]
    else:
        if ctx.api_version < TOPIC_IDS_VERSION:
            _check_named(req, ctx.api_version)
        allow_create = broker.config.auto_create_topics_enable and (
            ctx.api_version < 4 or req.allow_auto_topic_creation)
        for requested in req.topics:
            if requested.name is None:
                info = logs.topic_by_id(requested.topic_id)
                if info is None:
                    topics.append(_error_topic(None, requested.topic_id, Error.UNKNOWN_TOPIC_ID))
                elif not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, info.name):
                    # topic ids are not secret: the id is echoed, the name is not
                    topics.append(_error_topic(None, requested.topic_id,
                                               Error.TOPIC_AUTHORIZATION_FAILED))
                else:
                    topics.append(topic_entry(info, node_id))
                continue
            if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, requested.name):
                # whether it exists is not told
                topics.append(_error_topic(requested.name, None, Error.TOPIC_AUTHORIZATION_FAILED))
                continue
            info = logs.topics.get(requested.name)
            if info is None:
                if not allow_create or requested.name in INTERNAL_TOPICS:
                    topics.append(_error_topic(requested.name, None,
                                               Error.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                if secured and not _may_create(ctx, requested.name):
                    topics.append(_error_topic(requested.name, None,
                                               Error.TOPIC_AUTHORIZATION_FAILED))
                    continue
                try:
                    info = await auto_create_topic(broker, requested.name)
                except KafkaError as e:
                    topics.append(_error_topic(requested.name, None, e.code))
                    continue
            topics.append(topic_entry(info, node_id))
    host, port = broker.advertised(ctx.session.listener)
    response = MetadataResponse(
        brokers=[MetadataResponseBroker(node_id, host, port, None)],
        cluster_id=broker.cluster_id, controller_id=node_id, topics=topics)
    if secured and ctx.api_version >= AUTHORIZED_OPERATIONS_VERSION:
        _authorized_operations(ctx, req, response)
    return response


def _may_create(ctx, name: str) -> bool:
    return (cluster_allows(ctx, AclOperation.CREATE)
            or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, name))


def _authorized_operations(ctx, req: MetadataRequest, response: MetadataResponse) -> None:
    """v8+: the bit fields asked for (v8-10 the cluster's, needing Describe on it: else 0;
    each returned topic's). Without the authorizer they keep the schema default."""
    if ctx.api_version <= 10 and req.include_cluster_authorized_operations:
        response.cluster_authorized_operations = authorized_operations(
            ctx, ResourceType.CLUSTER, CLUSTER_NAME, 0) if cluster_allows(
            ctx, AclOperation.DESCRIBE) else 0
    if req.include_topic_authorized_operations:
        for topic in response.topics:
            if topic.error_code == Error.NONE:
                topic.topic_authorized_operations = authorized_operations(
                    ctx, ResourceType.TOPIC, topic.name, topic.topic_authorized_operations)


def _check_named(req: MetadataRequest, version: int) -> None:
    for topic in req.topics:
        if topic.name is None:
            raise KafkaError(Error.INVALID_REQUEST,
                             f"Topic name can not be null for version {version}")
        if topic.topic_id != ZERO_UUID:
            raise KafkaError(Error.INVALID_REQUEST,
                             f"Topic IDs are not supported in requests for version {version}")


async def auto_create_topic(broker, name: str):
    """Create ``name`` with the broker's defaults (``num.partitions``); shared with Produce."""
    existing = broker.log_manager.topics.get(name)
    if existing is not None:
        return existing
    return broker.log_manager.create_topic(name, broker.config.num_partitions, {})


def error_response(req: MetadataRequest, code: Error) -> MetadataResponse:
    return MetadataResponse(error_code=code, topics=[
        _error_topic("" if t.name is None else t.name, t.topic_id, code)
        for t in (req.topics or [])])
