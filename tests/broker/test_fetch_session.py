"""The fetch session cache on its own: epochs, eviction, what an incremental answer carries."""

from __future__ import annotations

import random
import uuid

from semel.broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    next_epoch,
)


def parts(n: int, topic: str = "t") -> dict:
    return {(topic, p): CachedPartition(topic, uuid.UUID(int=0), p, 0, 1024, -1)
            for p in range(n)}


def test_next_epoch():
    assert next_epoch(0) == 1
    assert next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1  # wraps past int32, never back to 0 (initial)
    assert next_epoch(-1) == FINAL_EPOCH


def test_new_sessions_start_at_epoch_one_with_distinct_ids():
    cache = FetchSessionCache(rng=random.Random(7))
    ids = {cache.create(parts(1), False, 0) for _ in range(50)}
    assert len(ids) == 50 and INVALID_SESSION_ID not in ids
    assert all(cache.get(i).epoch == 1 for i in ids)


def test_a_full_cache_refuses_while_every_session_is_recent():
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000)
    a = cache.create(parts(1), False, now_ms=0)
    b = cache.create(parts(1), False, now_ms=0)
    assert cache.create(parts(5), False, now_ms=500) == INVALID_SESSION_ID
    assert {cache.get(a), cache.get(b)} != {None}
    assert len(cache) == 2


def test_a_stale_session_is_evicted_first():
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000)
    a = cache.create(parts(9), False, now_ms=0)
    b = cache.create(parts(1), False, now_ms=0)
    cache.touch(cache.get(b), 1500)
    c = cache.create(parts(1), False, now_ms=1600)  # a unused for 1600 ms > 1000
    assert c != INVALID_SESSION_ID
    assert cache.get(a) is None and cache.get(b) is not None
    assert cache.evictions == 1


def test_an_old_smaller_session_gives_way_to_a_larger_one():
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000)
    small = cache.create(parts(2), False, now_ms=0)
    big = cache.create(parts(8), False, now_ms=0)
    for session_id in (small, big):  # both in use, both older than eviction_ms
        cache.touch(cache.get(session_id), 1200)
    assert cache.create(parts(2), False, now_ms=1300) == INVALID_SESSION_ID  # not larger
    larger = cache.create(parts(3), False, now_ms=1300)
    assert larger != INVALID_SESSION_ID
    assert cache.get(small) is None and cache.get(big) is not None


def test_update_adds_changes_and_forgets_partitions_in_order():
    cache = FetchSessionCache()
    session = cache.get(cache.create(parts(3), False, 0))
    changed = CachedPartition("t", uuid.UUID(int=0), 1, 50, 99, 0)
    added = CachedPartition("u", uuid.UUID(int=0), 0, 7, 10, -1)
    session.update([(("t", 1), changed), (("u", 0), added)], [("t", 0), ("nope", 3)])
    assert list(session.partitions) == [("t", 1), ("t", 2), ("u", 0)]
    t1 = session.partitions[("t", 1)]
    assert (t1.fetch_offset, t1.max_bytes, t1.current_leader_epoch) == (50, 99, 0)
    assert session.partitions[("u", 0)] is added
    session.rotate_to_end(("t", 1))
    assert list(session.partitions) == [("t", 2), ("u", 0), ("t", 1)]


def test_must_respond_tracks_what_the_client_was_told():
    p = CachedPartition("t", uuid.UUID(int=0), 0, 0, 1024, -1, high_watermark=5,
                        log_start_offset=0)
    assert not p.must_respond(0, 0, 5, 0)  # nothing new
    assert p.must_respond(0, 100, 5, 0)  # records
    assert p.must_respond(0, 0, 6, 0) and p.high_watermark == 6  # high watermark moved
    assert not p.must_respond(0, 0, 6, 0)
    assert p.must_respond(0, 0, 6, 3) and p.log_start_offset == 3  # log start moved
    assert p.must_respond(1, 0, -1, -1) and p.high_watermark == -1  # errors always
    assert p.must_respond(0, 0, 6, 3)  # and the partition is sent again once it recovers
