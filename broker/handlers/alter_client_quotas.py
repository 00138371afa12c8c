"""AlterClientQuotas (key 49), v0-1 (v1 flexible).

Needs Cluster AlterConfigs (else CLUSTER_AUTHORIZATION_FAILED for every entry). Each entry
sets or removes quota keys of one entity (user / client-id, or ip; a null name is the
default); Kafka's controller rules decide what is valid (broker/quotas/store.py) and each
entity gets its own error code and message. Valid changes are written to the data directory
and enforced at once; ``validate_only`` checks without changing anything. An ip entity may
name a host, valid when it resolves (as Kafka's InetAddress.getByName), looked up off the
event loop.
"""

from __future__ import annotations

import asyncio
import socket

from semel.broker.handlers._authz import cluster_allows
from semel.broker.quotas.store import IP, is_ip_literal, make_entity
from semel.broker.security import AclOperation
from semel.protocol.errors import Error
from semel.protocol.messages.alter_client_quotas_request import AlterClientQuotasRequest
from semel.protocol.messages.alter_client_quotas_response import (
    AlterClientQuotasResponse,
    EntityData,
    EntryData,
)

API_KEY = 49


async def handle(ctx, req: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    if not cluster_allows(ctx, AclOperation.ALTER_CONFIGS):
        return error_response(req, Error.CLUSTER_AUTHORIZATION_FAILED)
    entries = []
    hosts = set()
    for entry in req.entries:
        # a map, as Kafka's request: an entity type named twice keeps its last name
        entity = make_entity({e.entity_type: e.entity_name for e in entry.entity})
        ops = [(op.key, None if op.remove else op.value) for op in entry.ops]
        entries.append((entity, ops))
        name = dict(entity).get(IP)
        if name and not is_ip_literal(name):
            hosts.add(name)
    resolvable = {host for host in hosts if await _resolves(host)}
    results = ctx.broker.quotas.alter(
        entries, req.validate_only,
        valid_ip=lambda name: is_ip_literal(name) or name in resolvable)
    return AlterClientQuotasResponse(entries=[
        EntryData(error_code=code, error_message=message,
                  entity=[EntityData(t, n) for t, n in entity])
        for entity, code, message in results])


async def _resolves(host: str) -> bool:
    try:
        await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return True


def error_response(req: AlterClientQuotasRequest, code: Error) -> AlterClientQuotasResponse:
    return AlterClientQuotasResponse(entries=[
        EntryData(error_code=code, error_message=None,
                  entity=[EntityData(e.entity_type, e.entity_name) for e in entry.entity])
        for entry in req.entries])
