"""AlterConfigs (key 33), v0-2: the legacy API that replaces a resource's whole config set.

TOPIC resources: the given configs become the topic's overrides; every override not given is
removed. Checks in Kafka's order: a resource listed twice -> INVALID_REQUEST for each copy; a
key listed twice or a null value -> INVALID_REQUEST; empty topic name -> INVALID_REQUEST,
illegal name -> INVALID_TOPIC_EXCEPTION; unknown key or bad value -> INVALID_CONFIG with
Kafka's message; unknown topic -> UNKNOWN_TOPIC_OR_PARTITION. BROKER resources (this node's
id, or empty for the cluster-wide defaults): the given keys become its dynamic configs
(broker/dynamic_config.py: a key Kafka cannot change at run time or a bad value ->
INVALID_REQUEST with Kafka's message), persisted and in force before the answer. GROUP
resources: the group's configs (broker/group_configs.py; INVALID_CONFIG with Kafka's message,
an empty name INVALID_REQUEST). Other resource types -> INVALID_REQUEST. ``validate_only``
checks and changes nothing. v2: flexible.
"""

from __future__ import annotations

from semel.broker.handlers._authz import config_resource_error
from semel.broker.handlers._configs import (
    ResourceType,
    alter_each,
    check_alter_entries,
    check_broker_resource_name,
    check_resource_type,
    replace_broker_configs,
    replace_group_configs,
    replace_topic_overrides,
)
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.alter_configs_request import AlterConfigsRequest, AlterConfigsResource
from semel.protocol.messages.alter_configs_response import (
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)

API_KEY = 33


async def _alter(ctx, resource: AlterConfigsResource, validate_only: bool) -> None:
    denied = config_resource_error(ctx, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                   resource.resource_name)
    if denied:
        raise KafkaError(denied)
    check_alter_entries([c.name for c in resource.configs],
                        [c.name for c in resource.configs if c.value is None])
    kind = check_resource_type(resource.resource_type)
    configs = {c.name: c.value for c in resource.configs}
    if kind == ResourceType.BROKER:
        check_broker_resource_name(resource.resource_name, ctx.broker.node_id)
        await replace_broker_configs(ctx, resource.resource_name, configs, validate_only)
    elif kind == ResourceType.GROUP:
        await replace_group_configs(ctx, resource.resource_name, configs, validate_only)
    else:
        replace_topic_overrides(ctx.log_manager, resource.resource_name, configs, validate_only)


async def handle(ctx, req: AlterConfigsRequest) -> AlterConfigsResponse:
    outcomes = await alter_each(req.resources, lambda r: _alter(ctx, r, req.validate_only))
    responses = [AlterConfigsResourceResponse(
        error_code=code, error_message=message, resource_type=resource.resource_type,
        resource_name=resource.resource_name) for resource, code, message in outcomes]
    return AlterConfigsResponse(responses=responses)


def error_response(req: AlterConfigsRequest, code: Error) -> AlterConfigsResponse:
    return AlterConfigsResponse(responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=None,
                                     resource_type=r.resource_type,
                                     resource_name=r.resource_name)
        for r in req.resources])
