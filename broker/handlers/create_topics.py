"""CreateTopics (key 19), v2-7.

Each topic is checked on its own, in Kafka's order: legal name, not already there (nor
differing from an existing name only by '.' vs '_'), no null config values, then either a
manual assignment or counts. ``num_partitions``/``replication_factor`` -1 take the broker's
``num.partitions``/``default.replication.factor``. One broker holds every replica, so a
replication factor above 1 is INVALID_REPLICATION_FACTOR unless
``allow.replication.factor.overcommit=true`` (then the topic is created with 1). A manual
assignment (counts must be -1) may only name ``[node_id]`` for partitions 0..n-1. Configs are
validated like AlterConfigs (INVALID_CONFIG with a message). A name given twice in one request
is INVALID_REQUEST for both. More than 10000 records' worth of work in one request (topics +
partitions + configs, Kafka's controller batch limit) fails every topic with
POLICY_VIOLATION. ``validate_only`` runs every check and answers as if created, with a zero
topic id. v5+: the result carries partitions, replication factor and the topic's configs with
their sources. v7: topic id.
"""

from __future__ import annotations

from semel.broker.handlers._authz import NOTHING, cluster_allows, denied_topics
from semel.broker.handlers._configs import topic_config_entries
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.create_topics_request import CreatableTopic, CreateTopicsRequest
from semel.protocol.messages.create_topics_response import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsResponse,
)
from semel.protocol.primitives import ZERO_UUID

API_KEY = 19
MAX_RECORDS_PER_REQUEST = 10000  # Kafka's MAX_RECORDS_PER_USER_OP


def _error(name: str, code: Error, message: str | None = None) -> CreatableTopicResult:
    return CreatableTopicResult(name=name, error_code=code, error_message=message)


def _resolve_counts(ctx, topic: CreatableTopic) -> tuple[int, int]:
    """(num_partitions, replication_factor) the topic gets; raises KafkaError."""
    config = ctx.config
    node_id = ctx.broker.node_id
    if topic.assignments:
        if topic.replication_factor != -1:
            raise KafkaError(Error.INVALID_REQUEST, "A manual partition assignment was "
                             "specified, but replication factor was not set to -1.")
        if topic.num_partitions != -1:
            raise KafkaError(Error.INVALID_REQUEST, "A manual partition assignment was "
                             "specified, but numPartitions was not set to -1.")
        seen: set[int] = set()
        for assignment in topic.assignments:
            if assignment.partition_index in seen:
                raise KafkaError(Error.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual "
                                 f"partition assignments for partition "
                                 f"{assignment.partition_index}")
            seen.add(assignment.partition_index)
            check_manual_assignment(assignment.broker_ids, node_id)
        if seen != set(range(len(seen))):
            raise KafkaError(Error.INVALID_REPLICA_ASSIGNMENT,
                             "partitions should be a consecutive 0-based integer sequence")
        return len(seen), 1
    if topic.replication_factor < -1 or topic.replication_factor == 0:
        raise KafkaError(Error.INVALID_REPLICATION_FACTOR, "Replication factor must be larger "
                         "than 0, or -1 to use the default value.")
    if topic.num_partitions < -1 or topic.num_partitions == 0:
        raise KafkaError(Error.INVALID_PARTITIONS,
                         "Number of partitions was set to an invalid non-positive value.")
    partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    replication = (config.default_replication_factor if topic.replication_factor == -1
                   else topic.replication_factor)
    if replication > 1 and not config.allow_replication_factor_overcommit:
        raise KafkaError(Error.INVALID_REPLICATION_FACTOR,
                         f"Unable to replicate the partition {replication} time(s): The target "
                         f"replication factor of {replication} cannot be reached because only "
                         "1 broker(s) are registered.")
    return partitions, 1


def check_manual_assignment(broker_ids: list[int], node_id: int) -> None:
    """A manual replica list on a one-broker cluster: exactly [node_id]."""
    if not broker_ids:
        raise KafkaError(Error.INVALID_REPLICA_ASSIGNMENT,
                         "The manual partition assignment includes an empty replica list.")
    for broker_id in sorted(broker_ids):
        if broker_id != node_id:
            raise KafkaError(Error.INVALID_REPLICA_ASSIGNMENT, "The manual partition "
                             f"assignment includes broker {broker_id}, but no such broker is "
                             "registered.")
    if len(broker_ids) > 1:
        raise KafkaError(Error.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                         f"includes the broker {node_id} more than once.")


def _configs(topic: CreatableTopic) -> dict[str, str]:
    nulls = [c.name for c in topic.configs if c.value is None]
    if nulls:
        raise KafkaError(Error.INVALID_CONFIG,
                         f"Null value not supported for topic configs: {','.join(nulls)}")
    return {c.name: c.value for c in topic.configs}


def _denied(ctx, names) -> tuple[frozenset[str], frozenset[str]]:
    """(names the principal may not create, names whose configs it may not see): Create on
    the cluster or on the topic; DescribeConfigs on the topic (Kafka's controller)."""
    if ctx.broker.authorizer is None:
        return NOTHING, NOTHING
    not_creatable = NOTHING if cluster_allows(ctx, AclOperation.CREATE) else denied_topics(
        ctx, AclOperation.CREATE, names)
    return not_creatable, denied_topics(ctx, AclOperation.DESCRIBE_CONFIGS, names)


def _success(ctx, name: str, topic_id, partitions: int, overrides: dict[str, str],
             describable: bool = True) -> CreatableTopicResult:
    result = CreatableTopicResult(name=name, topic_id=topic_id, error_code=Error.NONE,
                                  error_message=None)
    if ctx.api_version >= 5 and not describable:
        # created, but its configuration is not shown (partitions, replication factor -1)
        result.topic_config_error_code = Error.TOPIC_AUTHORIZATION_FAILED
    elif ctx.api_version >= 5:
        result.num_partitions = partitions
        result.replication_factor = 1
        result.configs = [
            CreatableTopicConfigs(name=e.name, value=e.value, read_only=e.read_only,
                                  config_source=e.source, is_sensitive=e.is_sensitive)
            for e in topic_config_entries(ctx.broker.dynamic_configs,
                                          ctx.log_manager.default_config, overrides)]
    return result


async def handle(ctx, req: CreateTopicsRequest) -> CreateTopicsResponse:
    logs = ctx.log_manager
    counts: dict[str, int] = {}
    for topic in req.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1

    not_creatable, hidden = _denied(ctx, counts)
    results: dict[int, CreatableTopicResult] = {}
    planned: list[tuple[int, CreatableTopic, int, dict[str, str]]] = []
    for i, topic in enumerate(req.topics):
        if counts[topic.name] > 1:
            results[i] = _error(topic.name, Error.INVALID_REQUEST, "Duplicate topic name.")
            continue
        if topic.name in not_creatable:
            results[i] = _error(topic.name, Error.TOPIC_AUTHORIZATION_FAILED,
                                "Authorization failed.")
            continue
        try:
            logs.validate_new_topic(topic.name, 1, {})  # name, existence, collision first
            overrides = _configs(topic)
            partitions, _ = _resolve_counts(ctx, topic)
            logs.validate_new_topic(topic.name, partitions, overrides)
        except KafkaError as e:
            results[i] = _error(topic.name, e.code, e.message)
            continue
        planned.append((i, topic, partitions, overrides))

    records = sum(1 + partitions + len(overrides) for _, _, partitions, overrides in planned)
    if records > MAX_RECORDS_PER_REQUEST:
        message = "Unable to perform excessively large batch operation."
        return CreateTopicsResponse(topics=[_error(t.name, Error.POLICY_VIOLATION, message)
                                            for t in req.topics])

    for i, topic, partitions, overrides in planned:
        if req.validate_only:
            results[i] = _success(ctx, topic.name, ZERO_UUID, partitions, overrides,
                                  topic.name not in hidden)
            continue
        try:
            info = logs.create_topic(topic.name, partitions, overrides)
        except KafkaError as e:
            results[i] = _error(topic.name, e.code, e.message)
            continue
        results[i] = _success(ctx, info.name, info.topic_id, info.num_partitions, overrides,
                              info.name not in hidden)
    return CreateTopicsResponse(topics=[results[i] for i in range(len(req.topics))])


def error_response(req: CreateTopicsRequest, code: Error) -> CreateTopicsResponse:
    return CreateTopicsResponse(topics=[_error(t.name, code) for t in req.topics])
