"""What does an authorization decision cost with 1,000 ACLs in place?

``python bench/bench_authorizer.py [--acls N] [--rounds R] [--json]`` builds N ACLs (default
1,000: ten principals, each with LITERAL and PREFIXED topic grants, group and
transactional-id grants, some DENYs, plus wildcard ACLs) and times, per call:

- ``authorize`` uncached (the index walk: literal lookups and the prefix range scan),
- a connection's ``AuthorizerCache.authorize`` (the memo a connection keeps),
- ``authorize_by_resource_type`` uncached and cached (InitProducerId's "WRITE on any topic"),
- an ACL change (index rebuild; and with the file write, fsync included).

The decisions asked are those of the data path: WRITE on a topic granted literally, WRITE
on a topic granted by prefix, READ refused by a DENY, DESCRIBE implied by READ, a topic no
ACL names. It then relates the cached and uncached costs to one produce request: the
broker's CPU per produce request is ``--request-us`` (default 130 us: a 16 KiB batch at the
~8 CPU s/GB docs/BENCHMARKS.md reports for Java kafka-clients without compression), and a
produce request makes one decision per topic (two when transactional).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from semel.broker.security import AclOperation, AclPermissionType, PatternType, ResourceType
from semel.broker.security.acl import AclBinding
from semel.broker.security.authorizer import Authorizer

TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
HOST = "10.1.2.3"


def make_acls(count: int) -> list[AclBinding]:
    """``count`` distinct ACLs in the mix described above."""
    acls = [AclBinding(TOPIC, "*", LITERAL, "User:monitor", "*", AclOperation.DESCRIBE, ALLOW),
            AclBinding(GROUP, "*", LITERAL, "User:monitor", "*", AclOperation.DESCRIBE, ALLOW)]
    i = 0
    while len(acls) < count:
        p = f"User:app-{i % 10}"
        n = i // 10
        kind = i % 7
        if kind in (0, 1, 2):
            acls.append(AclBinding(TOPIC, f"orders-{n}", LITERAL, p, "*",
                                   AclOperation.WRITE if kind else AclOperation.READ, ALLOW))
        elif kind == 3:
            acls.append(AclBinding(TOPIC, f"team-{n}-", PREFIXED, p, "*", AclOperation.WRITE,
                                   ALLOW))
        elif kind == 4:
            acls.append(AclBinding(GROUP, f"group-{n}", LITERAL, p, "*", AclOperation.READ,
                                   ALLOW))
        elif kind == 5:
            acls.append(AclBinding(TXN, f"tx-{n}-", PREFIXED, p, "*", AclOperation.WRITE, ALLOW))
        else:
            acls.append(AclBinding(TOPIC, f"secret-{n}", PREFIXED, p, HOST, AclOperation.READ,
                                   DENY))
        i += 1
    return acls[:count]


QUERIES = [
    # (principal, operation, resource type, name): the data path's decisions
    ("User:app-1", AclOperation.WRITE, TOPIC, "orders-11"),          # literal grant
    ("User:app-3", AclOperation.WRITE, TOPIC, "team-23-payments"),  # prefixed grant
    ("User:app-6", AclOperation.READ, TOPIC, "secret-36-x"),         # denied
    ("User:app-0", AclOperation.DESCRIBE, TOPIC, "orders-0"),        # implied by READ
    ("User:app-2", AclOperation.WRITE, TOPIC, "unnamed-topic"),      # no ACL: default deny
    ("User:app-5", AclOperation.WRITE, TXN, "tx-35-worker-1"),       # transactional id
]


def per_call_ns(fn, calls: int) -> float:
    started = time.perf_counter_ns()
    fn(calls)
    return (time.perf_counter_ns() - started) / calls


def measure(acl_count: int, rounds: int) -> dict[str, float]:
    authorizer = Authorizer(make_acls(acl_count))
    assert len(authorizer.acls()) == acl_count
    caches = {p: authorizer.cache_for(p, HOST) for p, *_ in QUERIES}
    queries = QUERIES * 100  # 600 decisions per pass

    def uncached(n: int) -> None:
        authorize = authorizer.authorize
        for _ in range(n // len(queries)):
            for p, op, rtype, name in queries:
                authorize(p, HOST, op, rtype, name)

    def cached(n: int) -> None:
        bound = [(caches[p].authorize, op, rtype, name) for p, op, rtype, name in queries]
        for _ in range(n // len(queries)):
            for authorize, op, rtype, name in bound:
                authorize(op, rtype, name)

    def by_type_uncached(n: int) -> None:
        for i in range(n):
            authorizer.authorize_by_resource_type(f"User:app-{i % 10}", HOST,
                                                  AclOperation.WRITE, TOPIC)

    def by_type_cached(n: int) -> None:
        cache = caches["User:app-1"]
        for _ in range(n):
            cache.authorize_by_resource_type(AclOperation.WRITE, TOPIC)

    calls = len(queries) * rounds
    results = {
        "authorize_uncached_ns": min(per_call_ns(uncached, calls) for _ in range(5)),
        "authorize_cached_ns": min(per_call_ns(cached, calls) for _ in range(5)),
        "by_resource_type_uncached_ns": min(per_call_ns(by_type_uncached, 2_000)
                                            for _ in range(3)),
        "by_resource_type_cached_ns": min(per_call_ns(by_type_cached, calls) for _ in range(5)),
    }
    extra = AclBinding(TOPIC, "new-topic", LITERAL, "User:app-1", "*", AclOperation.READ, ALLOW)
    started = time.perf_counter_ns()
    asyncio.run(authorizer.create_acls([extra]))
    results["acl_change_in_memory_ms"] = (time.perf_counter_ns() - started) / 1e6
    with tempfile.TemporaryDirectory() as tmp:
        durable = Authorizer.open(tmp)

        async def fill_and_change() -> float:
            await durable.create_acls(make_acls(acl_count))
            begun = time.perf_counter_ns()
            await durable.create_acls([extra])
            return (time.perf_counter_ns() - begun) / 1e6

        results["acl_change_durable_ms"] = asyncio.run(fill_and_change())
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--request-us", type=float, default=130.0,
                        help="broker CPU per produce request, in microseconds")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = measure(args.acls, args.rounds)
    request_ns = args.request_us * 1000
    r["share_of_produce_request_uncached"] = 2 * r["authorize_uncached_ns"] / request_ns
    r["share_of_produce_request_cached"] = 2 * r["authorize_cached_ns"] / request_ns
    if args.json:
        print(json.dumps(r, indent=1))
        return
    print(f"authorizer with {args.acls} ACLs ({sys.implementation.name} "
          f"{sys.version.split()[0]})")
    print(f"  authorize, uncached              {r['authorize_uncached_ns'] / 1000:8.2f} us")
    print(f"  authorize, connection cache      {r['authorize_cached_ns'] / 1000:8.2f} us")
    print(f"  by resource type, uncached       {r['by_resource_type_uncached_ns'] / 1000:8.2f} us")
    print(f"  by resource type, cached         {r['by_resource_type_cached_ns'] / 1000:8.2f} us")
    print(f"  ACL change, in memory            {r['acl_change_in_memory_ms']:8.2f} ms")
    print(f"  ACL change, durable (fsync)      {r['acl_change_durable_ms']:8.2f} ms")
    print(f"  2 decisions per produce request of {args.request_us:.0f} us CPU: "
          f"{100 * r['share_of_produce_request_uncached']:.2f}% uncached, "
          f"{100 * r['share_of_produce_request_cached']:.2f}% cached")


if __name__ == "__main__":
    main()
