"""IncrementalAlterConfigs (key 44), v0-1.

TOPIC resources: each entry SETs, DELETEs, APPENDs to or SUBTRACTs from one override;
APPEND/SUBTRACT work on list configs only (``cleanup.policy``, the throttled-replica lists)
and start from the current value, override or default (INVALID_CONFIG "Can't APPEND to key
... because its type is not LIST." otherwise). The resulting override set is validated as a
whole (INVALID_CONFIG with Kafka's message); unknown topic -> UNKNOWN_TOPIC_OR_PARTITION. Like
AlterConfigs: a resource listed twice, a key listed twice, a null value for anything but
DELETE or an unknown operation -> INVALID_REQUEST. BROKER resources (this node's id, or ""
for the cluster-wide defaults): the operations apply to that resource's dynamic configs as
Kafka's prepareIncrementalConfigs (APPEND/SUBTRACT on a non-list key -> INVALID_CONFIG
"Config value append is not allowed for config key: k"), then the whole set is validated
(broker/dynamic_config.py: INVALID_REQUEST "Cannot update these configs dynamically: ..." or
"Invalid value ..."), persisted and put in force. GROUP resources: the group's configs, with
Kafka's GroupConfig checks (INVALID_CONFIG). BROKER_LOGGER and other types ->
INVALID_REQUEST. ``validate_only`` checks and changes nothing. v1: flexible.
"""

from __future__ import annotations

from semel.broker.dynamic_config import apply_broker_ops
from semel.broker.handlers._authz import config_resource_error
from semel.broker.handlers._configs import (
    AlterOp,
    ResourceType,
    alter_each,
    apply_incremental,
    check_alter_entries,
    check_broker_resource_name,
    check_resource_type,
    replace_broker_configs,
    replace_group_configs,
    replace_topic_overrides,
)
from semel.broker.security import AclOperation
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.incremental_alter_configs_request import (
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from semel.protocol.messages.incremental_alter_configs_response import (
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsResponse,
)
from semel.storage.config import LogConfig

API_KEY = 44
_OPS = frozenset(op.value for op in AlterOp)


async def _alter(ctx, resource: AlterConfigsResource, validate_only: bool) -> None:
    denied = config_resource_error(ctx, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                   resource.resource_name)
    if denied:
        raise KafkaError(denied)
    configs = resource.configs
    check_alter_entries([c.name for c in configs],
                        [c.name for c in configs
                         if c.value is None and c.config_operation != AlterOp.DELETE])
    kind = check_resource_type(resource.resource_type)
    name = resource.resource_name
    if kind == ResourceType.BROKER:
        check_broker_resource_name(name, ctx.broker.node_id)
    for c in configs:
        if c.config_operation not in _OPS:
            raise KafkaError(Error.INVALID_REQUEST,
                             f"Unknown operations type {c.config_operation}")
    ops = [(c.name, c.config_operation, c.value) for c in configs]
    dynamic = ctx.broker.dynamic_configs
    if kind == ResourceType.BROKER:
        current = dynamic.broker if name else dynamic.cluster_default
        await replace_broker_configs(ctx, name, apply_broker_ops(current, ops), validate_only)
        return
    if kind == ResourceType.GROUP:
        overrides = apply_incremental(dynamic.group_overrides(name), LogConfig(), ops)
        await replace_group_configs(ctx, name, overrides, validate_only)
        return
    logs = ctx.log_manager
    info = logs.topics.get(name)
    current = dict(info.configs) if info is not None else {}
    overrides = apply_incremental(current, logs.default_config, ops)
    replace_topic_overrides(logs, name, overrides, validate_only)


async def handle(ctx, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    outcomes = await alter_each(req.resources, lambda r: _alter(ctx, r, req.validate_only))
    responses = [AlterConfigsResourceResponse(
        error_code=code, error_message=message, resource_type=resource.resource_type,
        resource_name=resource.resource_name) for resource, code, message in outcomes]
    return IncrementalAlterConfigsResponse(responses=responses)


def error_response(req: IncrementalAlterConfigsRequest,
                   code: Error) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(responses=[
        AlterConfigsResourceResponse(error_code=code, error_message=None,
                                     resource_type=r.resource_type,
                                     resource_name=r.resource_name)
        for r in req.resources])
