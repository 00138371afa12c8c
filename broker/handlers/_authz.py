"""Shared by the handlers: Kafka's authorization checks over many names at once.

Each helper asks ``ctx.authorize`` once per distinct name (the connection's decision cache
answers repeats) and costs one attribute check while the authorizer is off
(``broker.authorizer`` None: everything is allowed, nothing is asked).
"""

from __future__ import annotations

from collections.abc import Iterable

from semel.broker.security import CLUSTER_NAME, AclOperation, ResourceType
from semel.protocol.errors import Error

NOTHING: frozenset[str] = frozenset()


def denied(ctx, operation: AclOperation, resource_type: ResourceType,
           names: Iterable[str]) -> frozenset[str]:
    """The names among ``names`` on which ``operation`` is not allowed (Kafka's
    ``filterByAuthorized``, seen from the other side)."""
    if ctx.broker.authorizer is None:
        return NOTHING
    return frozenset(name for name in set(names)
                     if not ctx.authorize(operation, resource_type, name))


def denied_topics(ctx, operation: AclOperation, names: Iterable[str]) -> frozenset[str]:
    return denied(ctx, operation, ResourceType.TOPIC, names)


def cluster_allows(ctx, operation: AclOperation) -> bool:
    return ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)


def authorized_operations(ctx, resource_type: ResourceType, name: str, default: int) -> int:
    """Kafka's authorized-operations bit field of the resource for this principal;
    ``default`` (what semel answered before it had an authorizer) while the authorizer is
    off."""
    authorizer = ctx.broker.authorizer
    if authorizer is None:
        return default
    return authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name)


# DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: the ACL resource a config
# resource type (Kafka's ConfigResource.Type id) is checked on, and the error when denied
_CONFIG_RESOURCES = {
    2: (ResourceType.TOPIC, Error.TOPIC_AUTHORIZATION_FAILED),  # TOPIC
    4: (ResourceType.CLUSTER, Error.CLUSTER_AUTHORIZATION_FAILED),  # BROKER
    8: (ResourceType.CLUSTER, Error.CLUSTER_AUTHORIZATION_FAILED),  # BROKER_LOGGER
    16: (ResourceType.CLUSTER, Error.CLUSTER_AUTHORIZATION_FAILED),  # CLIENT_METRICS
    32: (ResourceType.GROUP, Error.GROUP_AUTHORIZATION_FAILED),  # GROUP
}


def config_resource_error(ctx, operation: AclOperation, config_resource_type: int,
                          name: str) -> Error:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on a config resource as Kafka checks it: the cluster
    for brokers, loggers and client metrics, else the topic or group; an unknown type is
    left for the handler to refuse."""
    checked = _CONFIG_RESOURCES.get(config_resource_type)
    if checked is None:
        return Error.NONE
    resource_type, error = checked
    resource_name = CLUSTER_NAME if resource_type == ResourceType.CLUSTER else name
    return Error.NONE if ctx.authorize(operation, resource_type, resource_name) else error


def foreign_producer_id(ctx, producer_id: int) -> bool:
    """Beyond Kafka (coordinator/producer_principal.py): whether ``producer_id`` was issued
    to a principal other than this request's. False while nothing is bound (authorizer off,
    or producer.id.principal.binding.enable false) and for ids nobody is known to own."""
    principals = ctx.broker.producer_principals
    if principals is None:
        return False
    owner = principals.owner(producer_id)
    if owner is None or owner == str(ctx.principal):
        return False
    ctx.broker.bad_input_log.warning(
        f"refused producer id {producer_id} from {ctx.principal} ({ctx.client_host}, api "
        f"{ctx.header.api_key}): it was issued to another principal")
    return True


def foreign_producer_message(ctx, producer_id: int) -> str:
    return (f"Producer id {producer_id} was issued to another principal than "
            f"{ctx.principal}; semel binds producer ids to the principal that obtained them "
            "(producer.id.principal.binding.enable)")
