"""The per-connection decision cache: same answers as the authorizer, forgotten on change.

Each CreateAcls / DeleteAcls that changes the set moves the authorizer's generation; a
connection's cache notices on its next lookup, so a change is in force from the next
request. Denials served from the cache are still logged at DEBUG.
"""

from __future__ import annotations

import logging

from semel.broker.security import AclOperation, AclPermissionType, PatternType, ResourceType
from semel.broker.security.acl import AclBinding, AclBindingFilter
from semel.broker.security.authorizer import MAX_CACHED_DECISIONS, Authorizer

TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER
READ, WRITE = AclOperation.READ, AclOperation.WRITE
HOST = "127.0.0.1"


def grant(
    name: str,
    op: AclOperation = READ,
    principal: str = "User:alice",
    permission: AclPermissionType = AclPermissionType.ALLOW,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(TOPIC, name, pattern, principal, "*", op, permission)


async def test_cache_answers_as_the_authorizer_and_follows_creates_and_deletes():
    authorizer = Authorizer([grant("orders")])
    cache = authorizer.cache_for("User:alice", HOST)
    assert cache.authorize(READ, TOPIC, "orders")
    assert cache.authorize(READ, TOPIC, "orders")  # from the memo
    assert not cache.authorize(READ, TOPIC, "payments")
    assert not cache.authorize_by_resource_type(WRITE, TOPIC)

    generation = authorizer.generation
    assert await authorizer.create_acls(
        [grant("payments"), grant("p", WRITE, pattern=PatternType.PREFIXED)]
    ) == [None, None]
    assert authorizer.generation == generation + 1
    assert cache.authorize(READ, TOPIC, "payments")  # the very next lookup sees it
    assert cache.authorize_by_resource_type(WRITE, TOPIC)

    deny = grant("o", permission=AclPermissionType.DENY, pattern=PatternType.PREFIXED)
    await authorizer.create_acls([deny])
    assert not cache.authorize(READ, TOPIC, "orders")

    deleted = await authorizer.delete_acls(
        [AclBindingFilter(permission_type=AclPermissionType.DENY)]
    )
    assert deleted == [[deny]]
    assert cache.authorize(READ, TOPIC, "orders")
    await authorizer.delete_acls(
        [
            AclBindingFilter(
                resource_type=TOPIC, resource_name="p", pattern_type=PatternType.PREFIXED
            )
        ]
    )
    assert not cache.authorize_by_resource_type(WRITE, TOPIC)


async def test_no_change_no_new_generation():
    authorizer = Authorizer([grant("orders")])
    generation = authorizer.generation
    assert await authorizer.create_acls([grant("orders")]) == [None]  # exists already
    assert await authorizer.delete_acls([AclBindingFilter(resource_name="none")]) == [[]]
    assert authorizer.generation == generation
    assert authorizer.acls() == [grant("orders")]


def test_caches_are_per_principal_and_host():
    authorizer = Authorizer(
        [
            AclBinding(
                TOPIC,
                "orders",
                PatternType.LITERAL,
                "User:alice",
                "10.0.0.1",
                READ,
                AclPermissionType.ALLOW,
            )
        ]
    )
    assert authorizer.cache_for("User:alice", "10.0.0.1").authorize(READ, TOPIC, "orders")
    assert not authorizer.cache_for("User:alice", "10.0.0.2").authorize(READ, TOPIC, "orders")
    assert not authorizer.cache_for("User:bob", "10.0.0.1").authorize(READ, TOPIC, "orders")


def test_cache_stays_bounded():
    authorizer = Authorizer([grant("orders")])
    cache = authorizer.cache_for("User:alice", HOST)
    for i in range(3 * MAX_CACHED_DECISIONS):
        assert not cache.authorize(READ, TOPIC, f"t{i}")
    assert len(cache._decisions) <= MAX_CACHED_DECISIONS
    assert cache.authorize(READ, TOPIC, "orders")


def test_denials_are_logged_at_debug_also_from_the_cache(caplog):
    authorizer = Authorizer([grant("orders", permission=AclPermissionType.DENY)])
    cache = authorizer.cache_for("User:alice", HOST)
    with caplog.at_level(logging.INFO, logger="broker.security.authorizer"):
        assert not cache.authorize(READ, TOPIC, "orders")
    assert not caplog.records  # nothing above DEBUG
    with caplog.at_level(logging.DEBUG, logger="broker.security.authorizer"):
        assert not cache.authorize(READ, TOPIC, "orders")
        assert not cache.authorize(READ, TOPIC, "orders")
        assert cache.authorize(WRITE, TOPIC, "elsewhere") is False
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "Principal = User:alice is Denied operation = READ from host = 127.0.0.1 on resource "
        "= Topic:LITERAL:orders based on rule MatchingAcl(acl=Topic:LITERAL:orders DENY "
        "User:alice READ from host *)"
    )
    assert lines[1] == lines[0]
    assert lines[2].endswith("on resource = Topic:LITERAL:elsewhere based on rule DefaultDeny")


async def test_invalid_creations_change_nothing():
    authorizer = Authorizer()
    bad = AclBinding(
        CLUSTER,
        "other",
        PatternType.LITERAL,
        "User:a",
        "*",
        AclOperation.ALTER,
        AclPermissionType.ALLOW,
    )
    results = await authorizer.create_acls([bad, grant("orders")])
    assert results[0].message == "The only valid name for the CLUSTER resource is kafka-cluster"
    assert results[1] is None
    assert authorizer.acls() == [grant("orders")]
