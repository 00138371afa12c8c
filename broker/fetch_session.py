"""Incremental fetch sessions (KIP-227): the broker's cache of what each fetcher reads.

A full fetch with session epoch 0 opens a session holding its partitions (fetch offset,
partition_max_bytes, current leader epoch, and the high watermark and log start offset last
sent); the response carries the new session id and the client continues with epoch 1.
An incremental fetch (epoch 1, 2, ...) names only the partitions whose position or limits
changed, plus ``forgotten_topics_data``; the broker reads every partition of the session
and answers only those with records, an error, or a high watermark or log start offset
that differs from what the client was last told. Partitions that returned records move to
the end of the session order, so a small response limit is shared fairly. A full fetch
(epoch 0 or -1) naming a session closes it; epoch -1 never opens one.

At most ``max_sessions`` sessions (Kafka's max.incremental.fetch.session.cache.slots,
1000) are kept. When full, a new session may evict one unused for ``eviction_ms`` (120 s),
or else one older than ``eviction_ms`` with fewer partitions; otherwise the fetch is
answered with session id 0, which clients take as "no session" and keep fetching in full.

No I/O and no event loop: the Fetch handler passes ``now_ms`` (monotonic) in.
"""

from __future__ import annotations

import random
import weakref
from dataclasses import dataclass
from uuid import UUID

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_SESSIONS = 1000
EVICTION_MS = 120_000
_INT32_MAX = 2**31 - 1

# a partition is named by topic id when the session uses ids (v13+), else by topic name
PartitionKey = tuple[str | UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch the next request of a session must carry (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == _INT32_MAX:
        return 1
    return epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the request fields the client may omit later, and the
    response fields it was last sent."""

    topic: str | None  # None: a topic id not (yet) known to this broker
    topic_id: UUID
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int
    high_watermark: int = -1
    log_start_offset: int = -1

    def update_request(self, fetch_offset: int, max_bytes: int, current_leader_epoch: int) -> None:
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch

    def must_respond(self, error_code: int, records_size: int, high_watermark: int,
                     log_start_offset: int) -> bool:
        """Whether an incremental response must carry this partition (Kafka's
        CachedPartition.maybeUpdateResponseData); remembers what is sent."""
        respond = records_size > 0
        if self.high_watermark != high_watermark:
            respond = True
            self.high_watermark = high_watermark
        if self.log_start_offset != log_start_offset:
            respond = True
            self.log_start_offset = log_start_offset
        if error_code:
            # forget the high watermark, so the partition is sent again once it recovers
            self.high_watermark = -1
            respond = True
        return respond


class FetchSession:
    def __init__(self, session_id: int, partitions: dict[PartitionKey, CachedPartition],
                 uses_topic_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.partitions = partitions  # in session order
        self.uses_topic_ids = uses_topic_ids
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)

    def __len__(self) -> int:
        return len(self.partitions)

    def update(self, changed: list[tuple[PartitionKey, CachedPartition]],
               forgotten: list[PartitionKey]) -> None:
        """Apply an incremental request: new or changed partitions, then forgotten ones."""
        partitions = self.partitions
        for key, part in changed:
            cached = partitions.get(key)
            if cached is None:
                partitions[key] = part
            else:
                cached.update_request(part.fetch_offset, part.max_bytes, part.current_leader_epoch)
        for key in forgotten:
            partitions.pop(key, None)

    def rotate_to_end(self, key: PartitionKey) -> None:
        part = self.partitions.pop(key, None)
        if part is not None:
            self.partitions[key] = part


class FetchSessionCache:
    def __init__(self, max_sessions: int = MAX_SESSIONS, eviction_ms: int = EVICTION_MS,
                 rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self.rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.created = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms

    def create(self, partitions: dict[PartitionKey, CachedPartition], uses_topic_ids: bool,
               now_ms: int) -> int:
        """Open a session for ``partitions``; its id, or INVALID_SESSION_ID when the cache
        is full and nothing may be evicted."""
        if len(self.sessions) >= self.max_sessions and not self._evict_for(len(partitions),
                                                                           now_ms):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self.sessions:
            session_id = self.rng.randint(1, _INT32_MAX)
        self.sessions[session_id] = FetchSession(session_id, partitions, uses_topic_ids, now_ms)
        self.created += 1
        return session_id

    def _evict_for(self, size: int, now_ms: int) -> bool:
        """Kafka's tryEvict for an unprivileged (consumer) session of ``size`` partitions."""
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            victim = stalest
        else:
            # sessions that were already older than eviction_ms when last used
            old = [s for s in self.sessions.values()
                   if s.last_used_ms - s.created_ms > self.eviction_ms]
            if not old:
                return False
            victim = min(old, key=lambda s: (len(s), s.id))
            if size <= len(victim):
                return False
        del self.sessions[victim.id]
        self.evictions += 1
        return True


_CACHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sessions_of(broker) -> FetchSessionCache:
    """The fetch session cache of ``broker`` (created on first use, gone with the broker)."""
    cache = _CACHES.get(broker)
    if cache is None:
        cache = _CACHES[broker] = FetchSessionCache()
    return cache
