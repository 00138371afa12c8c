"""Metadata (key 3), v0-12.

One broker (this node) leads every partition with leader epoch 0; replicas and ISR are
``[node_id]``. ``topics`` null = all topics; topics may be named (and, v10+, given by id).
Unknown topics are auto-created when ``auto.create.topics.enable`` and (v4+) the request's
``allow_auto_topic_creation`` allow it; internal topics are never auto-created here.
v10-11 carry a topic id field but, as in Kafka, topics can only be asked for by name there:
a null name or a topic id answers INVALID_REQUEST for every topic (names "" where null,
since a v10-11 response cannot carry a null name). v12+: an unknown id is UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

from protocol.errors import Error, KafkaError
from protocol.messages.metadata_request import MetadataRequest
from protocol.messages.metadata_response import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from protocol.primitives import ZERO_UUID

API_KEY = 3
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
    if req.topics is None or (ctx.api_version == 0 and not req.topics):
        topics = [topic_entry(info, node_id) for info in logs.topics.values()]
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
                else:
                    topics.append(topic_entry(info, node_id))
                continue
            info = logs.topics.get(requested.name)
            if info is None:
                if not allow_create or requested.name in INTERNAL_TOPICS:
                    topics.append(_error_topic(requested.name, None,
                                               Error.UNKNOWN_TOPIC_OR_PARTITION))
                    continue
                try:
                    info = await auto_create_topic(broker, requested.name)
                except KafkaError as e:
                    topics.append(_error_topic(requested.name, None, e.code))
                    continue
            topics.append(topic_entry(info, node_id))
    host, port = broker.advertised(ctx.session.listener)
    return MetadataResponse(
        brokers=[MetadataResponseBroker(node_id, host, port, None)],
        cluster_id=broker.cluster_id, controller_id=node_id, topics=topics)


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
    return MetadataResponse(topics=[_error_topic("" if t.name is None else t.name, t.topic_id, code)
                                    for t in (req.topics or [])])
