"""IncrementalAlterConfigs (key 44), v0-1.

TOPIC resources: each entry SETs, DELETEs, APPENDs to or SUBTRACTs from one override;
APPEND/SUBTRACT work on list configs only (``cleanup.policy``, the throttled-replica lists)
and start from the current value, override or default (INVALID_CONFIG "Can't APPEND to key
... because its type is not LIST." otherwise). The resulting override set is validated as a
whole (INVALID_CONFIG with Kafka's message); unknown topic -> UNKNOWN_TOPIC_OR_PARTITION. Like
AlterConfigs: a resource listed twice, a key listed twice, a null value for anything but
DELETE or an unknown operation -> INVALID_REQUEST; BROKER resources accept no keys (semel has
no dynamic broker configs: INVALID_REQUEST "Cannot update these configs dynamically", as Kafka
answers for a static config); BROKER_LOGGER and other types -> INVALID_REQUEST.
``validate_only`` checks and changes nothing. v1: flexible.
"""

from __future__ import annotations

from semel.broker.handlers._authz import config_resource_error
from semel.broker.handlers._configs import (
    AlterOp,
    ResourceType,
    alter_each,
    apply_incremental,
    check_alter_entries,
    check_broker_resource_name,
    check_resource_type,
    refuse_broker_changes,
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

API_KEY = 44
_OPS = frozenset(op.value for op in AlterOp)


def _alter(ctx, resource: AlterConfigsResource, validate_only: bool) -> None:
    denied = config_resource_error(ctx, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                   resource.resource_name)
    if denied:
        raise KafkaError(denied)
    configs = resource.configs
    check_alter_entries([c.name for c in configs],
                        [c.name for c in configs
                         if c.value is None and c.config_operation != AlterOp.DELETE])
    for c in configs:
        if c.config_operation not in _OPS:
            raise KafkaError(Error.INVALID_REQUEST,
                             f"Unknown operations type {c.config_operation}")
    kind = check_resource_type(resource.resource_type)
    if kind == ResourceType.BROKER:
        check_broker_resource_name(resource.resource_name, ctx.broker.node_id)
        refuse_broker_changes(c.name for c in configs)
        return
    logs = ctx.log_manager
    info = logs.topics.get(resource.resource_name)
    current = dict(info.configs) if info is not None else {}
    overrides = apply_incremental(current, logs.default_config,
                                  [(c.name, c.config_operation, c.value) for c in configs])
    replace_topic_overrides(logs, resource.resource_name, overrides, validate_only)


async def handle(ctx, req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    outcomes = alter_each(req.resources, lambda r: _alter(ctx, r, req.validate_only))
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
