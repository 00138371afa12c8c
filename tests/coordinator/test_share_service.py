"""The ShareFetch/ShareAcknowledge core (v1) over a real LogManager: share sessions and
their epochs, piggybacked acknowledgements, record limits, session close releasing the
member's records, unknown topics; requests and responses go through the generated codecs."""

from __future__ import annotations

import uuid

from semel.coordinator.share.service import ShareService
from semel.protocol.errors import Error
from semel.protocol.messages import share_acknowledge_request as ack_req
from semel.protocol.messages import share_acknowledge_response as ack_resp
from semel.protocol.messages import share_fetch_request as fetch_req
from semel.protocol.messages import share_fetch_response as fetch_resp
from semel.protocol.records import iter_batches
from tests.coordinator.test_share_manager import produce, running, topic_id
from tests.coordinator.txn_harness import ManualClock

ACCEPT, RELEASE, REJECT = 1, 2, 3


def wire(module, message):
    """Encode and decode with the generated codec (v1), as the broker would."""
    data = module.encode(1, message)
    decoded, end = module.decode(1, bytes(data))
    assert end == len(data) and decoded == message
    return decoded


def fetch(tid, epoch, *, acks=None, max_records=100, member="m1", partitions=(0,),
          forget=()):
    topics = [fetch_req.FetchTopic(tid, [
        fetch_req.FetchPartition(p, 0, [fetch_req.AcknowledgementBatch(f, la, list(t))
                                        for f, la, t in (acks or {}).get(p, [])])
        for p in partitions])] if partitions else []
    return wire(fetch_req, fetch_req.ShareFetchRequest(
        "g", member, epoch, 500, 1, 1 << 20, max_records, max_records, topics=topics,
        forgotten_topics_data=[fetch_req.ForgottenTopic(tid, list(forget))] if forget else []))


def acknowledge(tid, epoch, batches, member="m1"):
    return wire(ack_req, ack_req.ShareAcknowledgeRequest("g", member, epoch, topics=[
        ack_req.AcknowledgeTopic(tid, [ack_req.AcknowledgePartition(0, [
            ack_req.AcknowledgementBatch(f, la, list(t)) for f, la, t in batches])])]))


def acquired(response) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count)
            for t in response.responses for p in t.partitions for r in p.acquired_records]


async def test_sessions_fetch_and_acknowledge(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock) as (manager, log_manager):
        service = ShareService(manager)
        tid = topic_id(log_manager)
        produce(log_manager, 3)
        produce(log_manager, 3)
        # no session yet
        response = await service.share_fetch(fetch(tid, 1))
        assert response.error_code == Error.SHARE_SESSION_NOT_FOUND
        # acknowledgements on the opening request are refused
        response = await service.share_fetch(fetch(tid, 0, acks={0: [(0, 0, [ACCEPT])]}))
        assert response.error_code == Error.INVALID_REQUEST
        response = wire(fetch_resp, await service.share_fetch(fetch(tid, 0, max_records=2)))
        assert response.error_code == 0 and response.acquisition_lock_timeout_ms == 1000
        assert acquired(response) == [(0, 2, 1)]  # a whole batch: the limit is soft
        partition = response.responses[0].partitions[0]
        assert [h.base_offset for h in iter_batches(partition.records)] == [0]
        # the wrong epoch
        response = await service.share_fetch(fetch(tid, 2))
        assert response.error_code == Error.INVALID_SHARE_SESSION_EPOCH
        # epoch 1: acknowledge 0-1, release 2; fetch the rest (2 again, then 3-5)
        response = wire(fetch_resp, await service.share_fetch(
            fetch(tid, 1, acks={0: [(0, 2, [ACCEPT, ACCEPT, RELEASE])]})))
        partition = response.responses[0].partitions[0]
        assert partition.acknowledge_error_code == 0
        assert acquired(response) == [(2, 2, 2), (3, 5, 1)]
        # ShareAcknowledge: epoch 2
        response = wire(ack_resp, await service.share_acknowledge(
            acknowledge(tid, 2, [(2, 5, [ACCEPT])])))
        assert response.responses[0].partitions[0].error_code == 0
        sp = next(iter(manager.partitions.values()))
        assert sp.start_offset == 6
        response = await service.share_acknowledge(acknowledge(tid, 2, [(2, 5, [ACCEPT])]))
        assert response.error_code == Error.INVALID_SHARE_SESSION_EPOCH
        # below the start offset: done already, nothing to do (Kafka); past it: invalid
        response = await service.share_acknowledge(acknowledge(tid, 3, [(2, 2, [ACCEPT])]))
        assert response.responses[0].partitions[0].error_code == 0
        response = await service.share_acknowledge(acknowledge(tid, 4, [(6, 6, [ACCEPT])]))
        assert response.responses[0].partitions[0].error_code == Error.INVALID_REQUEST
        # another member cannot acknowledge m1's records
        produce(log_manager, 1)
        assert acquired(await service.share_fetch(fetch(tid, 5))) == [(6, 6, 1)]
        assert acquired(await service.share_fetch(fetch(tid, 0, member="m2"))) == []
        response = await service.share_acknowledge(
            acknowledge(tid, 1, [(6, 6, [ACCEPT])], member="m2"))
        assert response.responses[0].partitions[0].error_code == Error.INVALID_RECORD_STATE
        # ShareAcknowledge never opens a session
        response = await service.share_acknowledge(acknowledge(tid, 0, [], member="m9"))
        assert response.error_code == Error.INVALID_SHARE_SESSION_EPOCH
        response = await service.share_acknowledge(acknowledge(tid, 1, [], member="m9"))
        assert response.error_code == Error.SHARE_SESSION_NOT_FOUND


async def test_closing_the_session_releases_the_members_records(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock) as (manager, log_manager):
        service = ShareService(manager)
        tid = topic_id(log_manager)
        produce(log_manager, 4)
        assert acquired(await service.share_fetch(fetch(tid, 0))) == [(0, 3, 1)]
        assert acquired(await service.share_fetch(fetch(tid, 0, member="m2"))) == []
        response = await service.share_fetch(fetch(tid, -1, acks={0: [(0, 0, [ACCEPT])]}))
        assert response.error_code == 0
        assert response.responses[0].partitions[0].acknowledge_error_code == 0
        assert acquired(response) == []
        assert service.sessions.get("g", "m1") is None
        # released with the delivery count given back: delivered to m2 as a first delivery
        assert acquired(await service.share_fetch(fetch(tid, 1, member="m2"))) == [(1, 3, 1)]
        response = await service.share_fetch(fetch(tid, -1))
        assert response.error_code == Error.SHARE_SESSION_NOT_FOUND
        # member_left (the membership side's hook) does the same
        assert await service.member_left("g", "m2") == Error.NONE
        assert service.sessions.get("g", "m2") is None
        assert acquired(await service.share_fetch(fetch(tid, 0, member="m3"))) == [(1, 3, 1)]


async def test_session_partitions_forgotten_and_unknown_topics(tmp_path):
    clock = ManualClock()
    async with running(tmp_path, clock) as (manager, log_manager):
        service = ShareService(manager)
        tid = topic_id(log_manager)
        produce(log_manager, 2)
        unknown = uuid.UUID(int=99)
        request = fetch(tid, 0)
        request.topics.append(fetch_req.FetchTopic(unknown, [fetch_req.FetchPartition(0)]))
        response = await service.share_fetch(request)
        errors = {t.topic_id: [p.error_code for p in t.partitions] for t in response.responses}
        assert errors == {tid: [0], unknown: [Error.UNKNOWN_TOPIC_ID]}
        # the session remembers the partition: a request naming none still fetches it
        produce(log_manager, 1)
        assert acquired(await service.share_fetch(fetch(tid, 1, partitions=()))) == [(2, 2, 1)]
        # forgotten: no longer fetched
        produce(log_manager, 1)
        request = fetch(tid, 2, partitions=(), forget=(0,))
        request.forgotten_topics_data.append(fetch_req.ForgottenTopic(unknown, [0]))
        response = await service.share_fetch(request)
        assert response.error_code == 0 and response.responses == []
        # MaxRecords 0 acquires nothing (Kafka)
        assert acquired(await service.share_fetch(fetch(tid, 3, max_records=0))) == []
