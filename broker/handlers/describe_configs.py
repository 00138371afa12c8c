"""DescribeConfigs (key 32), v1-4.

TOPIC resources (type 2): every topic config with its effective value, source and synonyms
as Kafka's ConfigHelper (broker/handlers/_configs.py), read_only false; an illegal name is
INVALID_TOPIC_EXCEPTION, an unknown topic UNKNOWN_TOPIC_OR_PARTITION. BROKER resources (type
4): named by this node's id, every broker property with its current value (dynamic configs
applied) and synonyms, read-only unless dynamic (broker/dynamic_config.py); the empty name,
the cluster-wide dynamic defaults set; another id or a non-number is INVALID_REQUEST. GROUP
resources (type 32): the group configs (GROUP_CONFIG for an override, else the broker's value
as DEFAULT_CONFIG); an empty name is INVALID_REQUEST. Other resource types are
INVALID_REQUEST. ``configuration_keys`` (null or empty = all) filters by name; synonyms only
with ``include_synonyms``. v3: ``config_type`` and, with ``include_documentation``, the
documentation. v4: flexible.
"""

from __future__ import annotations

from semel.broker.handlers._authz import config_resource_error
from semel.broker.handlers._configs import (
    ConfigEntry,
    ResourceType,
    broker_config_entries,
    group_config_entries,
    resource_type_name,
    topic_config_entries,
)
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from semel.protocol.messages.describe_configs_response import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from semel.storage.log_manager import validate_topic_name

API_KEY = 32


def _entries(ctx, resource: DescribeConfigsResource) -> list[ConfigEntry]:
    name = resource.resource_name
    dynamic = ctx.broker.dynamic_configs
    if resource.resource_type == ResourceType.TOPIC:
        validate_topic_name(name)
        info = ctx.log_manager.topics.get(name)
        if info is None:
            raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist.")
        return topic_config_entries(dynamic, ctx.log_manager.default_config, info.configs)
    if resource.resource_type == ResourceType.BROKER:
        if name:
            try:
                broker_id = int(name)
            except ValueError:
                raise KafkaError(Error.INVALID_REQUEST,
                                 f"Broker id must be an integer, but it is: {name}") from None
            if broker_id != ctx.broker.node_id:
                raise KafkaError(Error.INVALID_REQUEST, "Unexpected broker id, expected "
                                 f"{ctx.broker.node_id} or empty string, but received {name}")
        return broker_config_entries(dynamic, ctx.config, per_broker=bool(name))
    if resource.resource_type == ResourceType.GROUP:
        return group_config_entries(dynamic, ctx.config, name)
    raise KafkaError(Error.INVALID_REQUEST, "Unsupported resource type: "
                     f"{resource_type_name(resource.resource_type)}")


def _result_entry(entry: ConfigEntry, req: DescribeConfigsRequest,
                  version: int) -> DescribeConfigsResourceResult:
    result = DescribeConfigsResourceResult(
        name=entry.name, value=entry.value, read_only=entry.read_only,
        config_source=entry.source, is_sensitive=entry.is_sensitive,
        synonyms=[DescribeConfigsSynonym(s.name, s.value, s.source) for s in entry.synonyms]
        if req.include_synonyms else [])
    if version >= 3:
        result.config_type = entry.config_type
        result.documentation = entry.documentation if req.include_documentation else None
    return result


async def handle(ctx, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for resource in req.resources:
        result = DescribeConfigsResult(error_code=Error.NONE, error_message=None,
                                       resource_type=resource.resource_type,
                                       resource_name=resource.resource_name)
        denied = config_resource_error(ctx, AclOperation.DESCRIBE_CONFIGS,
                                       resource.resource_type, resource.resource_name)
        if denied:
            result.error_code = denied
            results.append(result)
            continue
        try:
            entries = _entries(ctx, resource)
        except KafkaError as e:
            result.error_code, result.error_message = e.code, e.message
            results.append(result)
            continue
        keys = resource.configuration_keys
        if keys:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        result.configs = [_result_entry(e, req, ctx.api_version) for e in entries]
        results.append(result)
    return DescribeConfigsResponse(results=results)


def error_response(req: DescribeConfigsRequest, code: Error) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(results=[
        DescribeConfigsResult(error_code=code, error_message=None,
                              resource_type=r.resource_type, resource_name=r.resource_name)
        for r in req.resources])
