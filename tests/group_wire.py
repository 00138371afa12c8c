"""Group coordinator requests over tests/kafka_wire.py, shared by the wire and restart tests."""

from __future__ import annotations

from semel.coordinator.group.consumer_protocol import encode_subscription
from semel.protocol.errors import Error
from tests.kafka_wire import KafkaWire, message

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
DELETE_GROUPS, OFFSET_DELETE = 42, 47
RANGE_PROTOCOLS = (("range", encode_subscription(["t"])),)


def join_request(group: str, member_id: str = "", *, session_ms: int = 10_000,
                 rebalance_ms: int = 10_000, instance_id: str | None = None,
                 protocols=RANGE_PROTOCOLS,
                 protocol_type: str = "consumer"):
    return message(JOIN_GROUP, "request", group_id=group, session_timeout_ms=session_ms,
                   rebalance_timeout_ms=rebalance_ms, member_id=member_id,
                   group_instance_id=instance_id, protocol_type=protocol_type,
                   protocols=[message(JOIN_GROUP, "request", "JoinGroupRequestProtocol",
                                      name=n, metadata=m) for n, m in protocols])


def join(wire: KafkaWire, group: str, version: int = 9, **kw) -> tuple[str, object]:
    """JoinGroup including the KIP-394 round trip; (member id, response)."""
    response = wire.request(JOIN_GROUP, version, join_request(group, **kw))
    if response.error_code == Error.MEMBER_ID_REQUIRED:
        kw.pop("member_id", None)
        response = wire.request(JOIN_GROUP, version,
                                join_request(group, response.member_id, **kw))
    return response.member_id, response


def sync(wire: KafkaWire, group: str, member_id: str, generation: int,
         assignments: dict[str, bytes] | None = None, version: int = 5, **kw):
    return wire.request(SYNC_GROUP, version, message(
        SYNC_GROUP, "request", group_id=group, generation_id=generation, member_id=member_id,
        protocol_type=kw.get("protocol_type", "consumer"),
        protocol_name=kw.get("protocol_name", "range"),
        group_instance_id=kw.get("instance_id"),
        assignments=[message(SYNC_GROUP, "request", "SyncGroupRequestAssignment",
                             member_id=m, assignment=a)
                     for m, a in (assignments or {}).items()]))


def heartbeat(wire: KafkaWire, group: str, member_id: str, generation: int, version: int = 4):
    return wire.request(HEARTBEAT, version, message(
        HEARTBEAT, "request", group_id=group, generation_id=generation,
        member_id=member_id)).error_code


def commit(wire: KafkaWire, group: str, offsets: dict[tuple[str, int], int], *,
           version: int = 9, generation: int = -1, member_id: str = "", metadata: str = ""):
    topics: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(message(
            OFFSET_COMMIT, "request", "OffsetCommitRequestPartition", partition_index=partition,
            committed_offset=offset, committed_metadata=metadata, committed_leader_epoch=3))
    response = wire.request(OFFSET_COMMIT, version, message(
        OFFSET_COMMIT, "request", group_id=group, generation_id_or_member_epoch=generation,
        member_id=member_id, topics=[
            message(OFFSET_COMMIT, "request", "OffsetCommitRequestTopic", name=t, partitions=ps)
            for t, ps in topics.items()]))
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


def fetch_offsets(wire: KafkaWire, group: str, partitions: list[tuple[str, int]] | None, *,
                  version: int = 9, require_stable: bool = False):
    """OffsetFetch; (top-level error, {(topic, partition): (offset, leader epoch, metadata,
    error)})."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions or ():
        by_topic.setdefault(topic, []).append(partition)
    if version >= 8:
        topics = None if partitions is None else [
            message(OFFSET_FETCH, "request", "OffsetFetchRequestTopics", name=t,
                    partition_indexes=ps) for t, ps in by_topic.items()]
        req = message(OFFSET_FETCH, "request", require_stable=require_stable, groups=[
            message(OFFSET_FETCH, "request", "OffsetFetchRequestGroup", group_id=group,
                    topics=topics)])
        response = wire.request(OFFSET_FETCH, version, req)
        group_response = response.groups[0]
        error, topics_out = group_response.error_code, group_response.topics
    else:
        topics = None if partitions is None else [
            message(OFFSET_FETCH, "request", "OffsetFetchRequestTopic", name=t,
                    partition_indexes=ps) for t, ps in by_topic.items()]
        req = message(OFFSET_FETCH, "request", group_id=group, topics=topics,
                      require_stable=require_stable)
        response = wire.request(OFFSET_FETCH, version, req)
        error, topics_out = response.error_code, response.topics
    return error, {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch,
                                                 p.metadata, p.error_code)
                   for t in topics_out for p in t.partitions}
