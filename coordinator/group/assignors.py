"""Server-side partition assignors of consumer groups (``group.consumer.assignors``).

Pure functions from (members' subscriptions, their current target, topic sizes) to the new
target assignment, as Kafka's ConsumerGroupPartitionAssignor:

- ``uniform`` (Kafka's UniformAssignor, the default): every partition goes to one of its
  subscribers, partition counts per member as even as the subscriptions allow, and a
  member keeps the partitions it already has wherever balance permits (sticky). Kafka has
  two builders (homogeneous and heterogeneous subscriptions); this one algorithm gives the
  same guarantees for both: keep what is valid up to the member's fair share, hand the rest
  to the least loaded subscriber, then move partitions from members with two or more above
  a subscriber's count until no such move exists.
- ``range`` (Kafka's RangeAssignor): per topic, its subscribers sorted by member id get
  contiguous ranges, the first ``partitions % members`` one partition more, so that
  co-partitioned topics line up member by member.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from semel.coordinator.group.consumer_group import Assignment

UNIFORM = "uniform"
RANGE = "range"


@dataclass(slots=True)
class MemberSpec:
    subscribed: set[uuid.UUID]  # topic ids
    current: Assignment  # the member's current target (stickiness)


Assignor = Callable[[dict[str, MemberSpec], dict[uuid.UUID, int]], dict[str, Assignment]]


def _freeze(owned: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, Assignment]:
    return {m: {t: frozenset(ps) for t, ps in topics.items() if ps}
            for m, topics in owned.items()}


def uniform_assign(members: dict[str, MemberSpec],
                   topics: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    """``topics``: topic id -> partition count, for every subscribed topic that exists."""
    order = sorted(members)
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in order}
    count = dict.fromkeys(order, 0)
    subscribers: dict[uuid.UUID, list[str]] = {
        t: [m for m in order if t in members[m].subscribed] for t in topics}
    total_eligible = {m: sum(topics[t] for t in members[m].subscribed if t in topics)
                      for m in order}
    # a fair share per member when subscriptions are equal: ceil(P / N)
    all_partitions = sum(topics.values())
    share = -(-all_partitions // len(order)) if order else 0
    taken: set[tuple[uuid.UUID, int]] = set()
    for m in order:  # sticky: keep valid partitions up to the fair share
        kept = 0
        for t in sorted(members[m].current, key=str):
            if t not in topics or t not in members[m].subscribed:
                continue
            for p in sorted(members[m].current[t]):
                if p >= topics[t] or (t, p) in taken:
                    continue
                if kept >= share and total_eligible[m] == all_partitions:
                    break
                owned[m].setdefault(t, set()).add(p)
                taken.add((t, p))
                kept += 1
        count[m] = kept
    # unassigned partitions, topics with the fewest subscribers first
    for t in sorted(topics, key=lambda t: (len(subscribers[t]), str(t))):
        subs = subscribers[t]
        if not subs:
            continue
        for p in range(topics[t]):
            if (t, p) in taken:
                continue
            m = min(subs, key=lambda m: (count[m], m))
            owned[m].setdefault(t, set()).add(p)
            taken.add((t, p))
            count[m] += 1
    _balance(order, members, owned, count)
    return _freeze(owned)


def _balance(order: list[str], members: dict[str, MemberSpec],
             owned: dict[str, dict[uuid.UUID, set[int]]], count: dict[str, int]) -> None:
    """Move single partitions from a member to a subscriber holding two or more fewer; each
    move lowers the sum of squared counts, so this ends."""
    moved = True
    while moved:
        moved = False
        for src in sorted(order, key=lambda m: (-count[m], m)):
            for dst in sorted(order, key=lambda m: (count[m], m)):
                if count[src] - count[dst] < 2:
                    break
                topic = next((t for t in sorted(owned[src], key=str)
                              if owned[src][t] and t in members[dst].subscribed), None)
                if topic is None:
                    continue
                p = max(owned[src][topic])
                owned[src][topic].discard(p)
                owned[dst].setdefault(topic, set()).add(p)
                count[src] -= 1
                count[dst] += 1
                moved = True
                break
            if moved:
                break


def range_assign(members: dict[str, MemberSpec],
                 topics: dict[uuid.UUID, int]) -> dict[str, Assignment]:
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for t, partitions in topics.items():
        subs = sorted(m for m, spec in members.items() if t in spec.subscribed)
        if not subs:
            continue
        quota, extra = divmod(partitions, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = quota + (1 if i < extra else 0)
            if n:
                owned[m][t] = set(range(start, start + n))
            start += n
    return _freeze(owned)


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform_assign, RANGE: range_assign}
