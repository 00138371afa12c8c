"""The core of ShareFetch (key 78) and ShareAcknowledge (key 79), v1: share sessions,
piggybacked acknowledgements, acquisition, responses (Kafka's ShareSessionCache and the
ShareFetch/ShareAcknowledge paths of KafkaApis and SharePartitionManager).

A share session is keyed by (group id, member id) and holds the partitions the member
fetches. ShareSessionEpoch 0 opens a new one (replacing any) with the request's partitions
- acknowledgements are not allowed then (INVALID_REQUEST); the next request carries epoch
1, and each request after it the next epoch (else INVALID_SHARE_SESSION_EPOCH; no session:
SHARE_SESSION_NOT_FOUND); a request adds its partitions and drops its forgotten ones. Epoch
-1 closes the session: its acknowledgements are applied, nothing is fetched, the member's
acquired records are released and the session forgotten. ShareAcknowledge never opens a
session (epoch 0 is INVALID_SHARE_SESSION_EPOCH) and does not change its partitions.

Acknowledgements are applied before fetching; their result is the partition's
AcknowledgeErrorCode (ShareFetch) or ErrorCode (ShareAcknowledge). MaxRecords (a soft
limit: whole batches) and MaxBytes bound the whole request (partitions in session order,
each gets what is left; MaxRecords 0 acquires nothing, as in Kafka). A partition of
an unknown topic id answers UNKNOWN_TOPIC_ID. The broker handlers (once share group
membership exists and the APIs are advertised) authorize, then call ``share_fetch`` /
``share_acknowledge``; this layer does not wait for data (MaxWaitMs / MinBytes): an empty
answer comes at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from uuid import UUID

from semel.coordinator.share.manager import SharePartitionManager
from semel.coordinator.share.partition import AcknowledgementBatch
from semel.protocol.errors import Error
from semel.protocol.messages import share_acknowledge_response as ack_resp
from semel.protocol.messages import share_fetch_response as fetch_resp

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def next_epoch(epoch: int) -> int:
    """Kafka's ShareRequestMetadata.nextEpoch: -1 stays, wraps to 1 after int32 max."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    partitions: dict[tuple[UUID, int], None] = field(default_factory=dict)  # ordered set


class ShareSessionCache:
    def __init__(self) -> None:
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.get((group_id, member_id))

    def open(self, group_id: str, member_id: str,
             partitions: Iterable[tuple[UUID, int]]) -> ShareSession:
        session = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH),
                               dict.fromkeys(partitions))
        self.sessions[(group_id, member_id)] = session
        return session

    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)


def _batches(raw) -> list[AcknowledgementBatch]:
    return [AcknowledgementBatch(b.first_offset, b.last_offset, list(b.acknowledge_types))
            for b in raw]


class ShareService:
    def __init__(self, manager: SharePartitionManager) -> None:
        self.manager = manager
        self.sessions = ShareSessionCache()

    def lock_timeout_ms(self, group_id: str) -> int:
        settings = self.manager.group_settings(group_id)
        return settings.record_lock_duration_ms or self.manager.config.record_lock_duration_ms

    async def member_left(self, group_id: str, member_id: str) -> Error:
        """The membership side's hook: a member left or was fenced."""
        self.sessions.remove(group_id, member_id)
        return await self.manager.release_member(group_id, member_id)

    # -- ShareFetch ---------------------------------------------------------------------

    async def share_fetch(self, req) -> fetch_resp.ShareFetchResponse:
        group_id, member_id, epoch = req.group_id or "", req.member_id or "", \
            req.share_session_epoch
        if not member_id:
            return _fetch_error(Error.INVALID_REQUEST, "Invalid member id in the request.")
        requested = [(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions]
        acks = {(t.topic_id, p.partition_index): _batches(p.acknowledgement_batches)
                for t in req.topics for p in t.partitions if p.acknowledgement_batches}
        forgotten = [(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions]
        session = self.sessions.get(group_id, member_id)
        final = epoch == FINAL_EPOCH
        if final:
            if session is None:
                return _fetch_error(Error.SHARE_SESSION_NOT_FOUND)
        elif epoch == INITIAL_EPOCH:
            if acks:
                return _fetch_error(Error.INVALID_REQUEST,
                                    "Acknowledge data present on initial fetch")
            session = self.sessions.open(group_id, member_id, requested)
        else:
            if session is None:
                return _fetch_error(Error.SHARE_SESSION_NOT_FOUND)
            if session.epoch != epoch:
                return _fetch_error(Error.INVALID_SHARE_SESSION_EPOCH)
            for key in requested:
                session.partitions.setdefault(key, None)
            for key in forgotten:
                session.partitions.pop(key, None)
            session.epoch = next_epoch(session.epoch)

        results: dict[tuple[UUID, int], fetch_resp.PartitionData] = {}

        def result(key: tuple[UUID, int]) -> fetch_resp.PartitionData:
            data = results.get(key)
            if data is None:
                data = results[key] = fetch_resp.PartitionData(partition_index=key[1])
            return data

        for key, batches in acks.items():
            error, message = await self._acknowledge(group_id, member_id, key, batches)
            data = result(key)
            data.acknowledge_error_code, data.acknowledge_error_message = int(error), message
        if final:
            self.sessions.remove(group_id, member_id)
            await self.manager.release_member(group_id, member_id)
        else:
            await self._acquire(group_id, member_id, session, req.max_records, req.max_bytes,
                                result)
        by_topic: dict[UUID, list[fetch_resp.PartitionData]] = {}
        for (topic_id, _partition), data in results.items():
            by_topic.setdefault(topic_id, []).append(data)
        return fetch_resp.ShareFetchResponse(
            acquisition_lock_timeout_ms=self.lock_timeout_ms(group_id),
            responses=[fetch_resp.ShareFetchableTopicResponse(topic_id, partitions)
                       for topic_id, partitions in by_topic.items()])

    async def acquire_more(self, group_id: str, member_id: str, max_records: int,
                           max_bytes: int) -> dict[tuple[UUID, int], fetch_resp.PartitionData]:
        """Acquire again for an open session, its epoch unchanged: the second look of a
        ShareFetch that found nothing and waited (the handler's long poll)."""
        session = self.sessions.get(group_id, member_id)
        results: dict[tuple[UUID, int], fetch_resp.PartitionData] = {}
        if session is None:
            return results

        def result(key: tuple[UUID, int]) -> fetch_resp.PartitionData:
            data = results.get(key)
            if data is None:
                data = results[key] = fetch_resp.PartitionData(partition_index=key[1])
            return data

        await self._acquire(group_id, member_id, session, max_records, max_bytes, result)
        return results

    async def _acquire(self, group_id: str, member_id: str, session: ShareSession,
                       records_left: int, bytes_left: int, result) -> None:
        """Acquire for the member over the session's partitions, in order, within the
        request's MaxRecords / MaxBytes; ``result(key)`` gives a partition's answer."""
        for key in list(session.partitions):
            if records_left <= 0 or bytes_left <= 0:
                break
            if self.manager.log_manager.topic_by_id(key[0]) is None:
                result(key).error_code = int(Error.UNKNOWN_TOPIC_ID)
                continue
            got = await self.manager.acquire(group_id, member_id, key[0], key[1],
                                             records_left, bytes_left)
            if got.error:
                result(key).error_code = int(got.error)
                continue
            if not got.acquired:
                continue
            data = result(key)
            data.records = got.records
            data.acquired_records = [
                fetch_resp.AcquiredRecords(r.first_offset, r.last_offset, r.delivery_count)
                for r in got.acquired]
            records_left -= sum(r.last_offset - r.first_offset + 1 for r in got.acquired)
            bytes_left -= len(got.records)

    # -- ShareAcknowledge ---------------------------------------------------------------

    async def share_acknowledge(self, req) -> ack_resp.ShareAcknowledgeResponse:
        group_id, member_id, epoch = req.group_id or "", req.member_id or "", \
            req.share_session_epoch
        if not member_id:
            return _ack_error(Error.INVALID_REQUEST, "Invalid member id in the request.")
        if epoch == INITIAL_EPOCH:
            return _ack_error(Error.INVALID_SHARE_SESSION_EPOCH)
        session = self.sessions.get(group_id, member_id)
        if session is None:
            return _ack_error(Error.SHARE_SESSION_NOT_FOUND)
        final = epoch == FINAL_EPOCH
        if not final:
            if session.epoch != epoch:
                return _ack_error(Error.INVALID_SHARE_SESSION_EPOCH)
            session.epoch = next_epoch(session.epoch)
        responses = []
        for topic in req.topics:
            partitions = []
            for p in topic.partitions:
                error, message = await self._acknowledge(
                    group_id, member_id, (topic.topic_id, p.partition_index),
                    _batches(p.acknowledgement_batches))
                partitions.append(ack_resp.PartitionData(p.partition_index, int(error), message))
            responses.append(ack_resp.ShareAcknowledgeTopicResponse(topic.topic_id, partitions))
        if final:
            self.sessions.remove(group_id, member_id)
            await self.manager.release_member(group_id, member_id)
        return ack_resp.ShareAcknowledgeResponse(responses=responses)

    async def _acknowledge(self, group_id: str, member_id: str, key: tuple[UUID, int],
                           batches: list[AcknowledgementBatch]) -> tuple[Error, str | None]:
        if self.manager.log_manager.topic_by_id(key[0]) is None:
            return Error.UNKNOWN_TOPIC_ID, None
        return await self.manager.acknowledge(group_id, member_id, key[0], key[1], batches)


def _fetch_error(error: Error, message: str | None = None) -> fetch_resp.ShareFetchResponse:
    return fetch_resp.ShareFetchResponse(error_code=int(error), error_message=message)


def _ack_error(error: Error, message: str | None = None) -> ack_resp.ShareAcknowledgeResponse:
    return ack_resp.ShareAcknowledgeResponse(error_code=int(error), error_message=message)
