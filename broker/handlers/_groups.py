"""Shared by the group handlers: the coordinator, and what it needs to know of the client."""

from __future__ import annotations

from semel.coordinator.group import GroupCoordinator, RequestInfo


def coordinator(ctx) -> GroupCoordinator:
    return ctx.broker.group_coordinator


def request_info(ctx) -> RequestInfo:
    """client id, client host as Kafka prints it ("/127.0.0.1"), api version."""
    return RequestInfo(ctx.header.client_id or "", f"/{ctx.client_host}", ctx.api_version)


def partition_exists(ctx, topic: str, partition: int) -> bool:
    info = ctx.log_manager.topics.get(topic)
    return info is not None and 0 <= partition < info.num_partitions
