"""Share group membership (KIP-932): ShareGroupHeartbeat (key 76) and ShareGroupDescribe
(key 77), v1, as Kafka's GroupMetadataManager runs them for share groups.

- A member joins with epoch 0 and the topics it subscribes to (required then); it keeps
  heartbeating with the epoch it was given, and leaves with -1. The member id is the
  client's own (v1). A join, a leave, an expired member, a changed subscription or a change
  in the subscribed topics (created, deleted, more partitions) bumps the group epoch, and
  the target assignment is computed again for that epoch (the assignment epoch).
- Share groups have no revocation: a member whose epoch is behind the assignment epoch is
  moved to it, with its new partitions, on its next heartbeat (its previous epoch is still
  accepted, as Kafka does when a response was lost). A larger epoch, or a smaller one that
  is not the previous, is FENCED_MEMBER_EPOCH; an unknown member with a non-zero epoch is
  UNKNOWN_MEMBER_ID; a new member of a group at ``group.share.max.size`` members is
  GROUP_MAX_SIZE_REACHED. Epoch 0 from a member that is known is a rejoin (the client lost
  its state): it is answered with its full assignment at the current epoch.
- Kafka's simple assignor: for each subscribed topic, its P partitions are shared by its M
  subscribers so that every partition has ceil(M / P) members (every member gets every
  partition of a single-partition topic) and the members' counts differ by at most one.
  Members are taken in member id order; unlike Kafka's builder this one is not sticky: a
  change of members may move partitions that did not need to move (a share group's records
  are acquired per fetch, so nothing is lost by a move).
- The session timeout and heartbeat interval are the group's own
  ``share.session.timeout.ms`` / ``share.heartbeat.interval.ms`` (GROUP configs, through
  ``group_settings``), else the broker's ``group.share.*`` values (``config``).
- A member whose heartbeats stop for ``group.share.session.timeout.ms`` is removed; a
  member that leaves or is removed has its share session dropped and its acquired records
  released (``ShareService.member_left``).
- The answer carries the assignment (topic ids and partitions) when the member joined, sent
  a full request (subscribed topics set) or its assignment changed; else it is null.
- Group ids are one namespace: a heartbeat for a group that is a classic or consumer group
  (``other_group``) is GROUP_ID_NOT_FOUND "Group ... is not a share group.", as in Kafka.

Membership is persisted as Kafka does, in ``__consumer_offsets`` with Kafka's share group
records (``group_records``: ShareGroupMetadata, ShareGroupMemberMetadata, target assignment
metadata and members, current member assignments), written through the group coordinator
(``write``) after every change of a group and before the answer, as the difference between
the group's records now and those last written (changed values, tombstones for what went;
what a failed write missed goes with the next). On start
the groups are built from the loaded records (``records``; heartbeats wait with
COORDINATOR_LOAD_IN_PROGRESS while the log loads), so after a restart a member continues at
its epoch; every loaded member gets a fresh session, as in Kafka. ShareGroupMetadata's
metadata hash is semel's own hash of the subscribed topics (ids and partition counts), not
Kafka's: a group whose topics changed while the broker was down starts a new epoch on its
next heartbeat. A heartbeat with a non-zero epoch for a share group not known here is still
UNKNOWN_MEMBER_ID rather than Kafka's GROUP_ID_NOT_FOUND, which librdkafka treats as fatal.
What the members acknowledged lives in ``__share_group_state``. Time is the injectable ``clock``; ``expire_members`` (run by a background task
every ``check_interval_ms`` and before every heartbeat) removes expired members.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from uuid import UUID

from semel.coordinator.group.group_manager import append_error_to_response_error
from semel.coordinator.group.records import CoordinatorRecord
from semel.coordinator.share import group_records as gr
from semel.coordinator.share.config import ShareGroupSettings
from semel.coordinator.share.service import ShareService
from semel.protocol.errors import Error
from semel.protocol.messages import share_group_describe_response as describe_resp
from semel.protocol.messages import share_group_heartbeat_response as hb_resp

log = logging.getLogger("coordinator.share")

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
ASSIGNOR_NAME = "simple"

Assignment = dict[UUID, list[int]]


@dataclass(frozen=True, slots=True)
class ShareMembershipConfig:
    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size

    @classmethod
    def from_broker_config(cls, config) -> ShareMembershipConfig:
        return cls(config.group_share_session_timeout_ms,
                   config.group_share_heartbeat_interval_ms, config.group_share_max_size)

    def __post_init__(self) -> None:
        for name in ("session_timeout_ms", "heartbeat_interval_ms", "max_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


@dataclass(slots=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    subscribed: tuple[str, ...] = ()
    assignment: Assignment = field(default_factory=dict)
    deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # the subscribed topics as the last epoch saw them: name -> (topic id, partitions)
    topics: dict[str, tuple[UUID, int]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


def simple_assignment(members: dict[str, tuple[str, ...]],
                      topics: dict[str, tuple[UUID, int]]) -> dict[str, Assignment]:
    """Kafka's simple share assignor: member id -> topic id -> partitions. ``members`` maps
    each member to its subscribed topic names, ``topics`` the existing ones to (id, count)."""
    result: dict[str, Assignment] = {member_id: {} for member_id in members}
    for name in sorted(topics):
        topic_id, count = topics[name]
        subscribers = sorted(m for m, subscribed in members.items() if name in subscribed)
        if not subscribers or count <= 0:
            continue
        sharing = -(-len(subscribers) // count)  # ceil(M / P)
        slot = 0
        for partition in range(count):
            for _ in range(min(sharing, len(subscribers))):
                member = subscribers[slot % len(subscribers)]
                result[member].setdefault(topic_id, []).append(partition)
                slot += 1
    for assignment in result.values():
        for partitions in assignment.values():
            partitions.sort()
    return result


class ShareGroupMembership:
    def __init__(self, service: ShareService, log_manager, *, clock: Callable[[], int],
                 config: ShareMembershipConfig | None = None,
                 other_group: Callable[[str], bool] = lambda _group_id: False,
                 group_settings: Callable[[str], ShareGroupSettings] | None = None,
                 check_interval_ms: int = 1000,
                 records: Callable[[], gr.ShareGroupRecords | None] | None = None,
                 write: Callable[[str, list[CoordinatorRecord]], Awaitable[Error]] | None = None
                 ) -> None:
        """``records()``: the share group records loaded from ``__consumer_offsets`` (None
        while loading); ``write(group_id, records)`` appends records and answers the error
        once durable. Without them membership is kept in memory only."""
        self.service = service
        self.records = records
        self.write = write
        self._loaded = records is None
        # per group, the records the log holds (the last durable write, or the load)
        self._written: dict[str, dict[gr.ShareGroupKey, gr.ShareGroupValue]] = {}
        # a group's share.session.timeout.ms / share.heartbeat.interval.ms (None: config's)
        self.group_settings = group_settings or (lambda _group_id: ShareGroupSettings())
        self.log_manager = log_manager
        self.clock = clock
        self.config = config or ShareMembershipConfig()
        self.other_group = other_group
        self.check_interval_ms = check_interval_ms
        self.groups: dict[str, ShareGroup] = {}
        self._task: asyncio.Task | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the expiry task (on the running loop)."""
        self._task = asyncio.get_running_loop().create_task(
            self._expiry_loop(), name="semel-share-member-expiry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _expiry_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            try:
                await self.expire_members()
            except Exception:
                log.exception("share group member expiry failed")

    async def expire_members(self) -> int:
        """Remove the members whose session timed out; how many."""
        now = self.clock()
        expired = [(group, member_id) for group in self.groups.values()
                   for member_id, member in group.members.items() if member.deadline_ms <= now]
        for group, member_id in expired:
            log.info("share group %s: member %s expired", group.group_id, member_id)
            await self._remove(group, member_id)
            error = await self._persist(group.group_id)
            if error:
                log.warning("share group %s: records of expired member %s not written: %s",
                            group.group_id, member_id, error.name)
        return len(expired)

    # -- persistence --------------------------------------------------------------------

    def ensure_loaded(self) -> bool:
        """Build the groups from the loaded records once they are loaded; whether they are."""
        if self._loaded:
            return True
        image = self.records() if self.records is not None else None
        if image is None:
            return False
        self.load(image)
        self._loaded = True
        return True

    def load(self, image: gr.ShareGroupRecords) -> None:
        """The share groups of ``image``; every member with a fresh session."""
        now = self.clock()
        for group_id in image.group_ids():
            if group_id in self.groups:
                continue
            group = self.groups[group_id] = ShareGroup(group_id)
            self._written[group_id] = dict(image.groups[group_id])
            metadata_hash = 0
            for key, value in image.groups[group_id].items():
                if isinstance(value, gr.ShareGroupMetadataValue):
                    group.group_epoch, metadata_hash = value.epoch, value.metadata_hash
                elif isinstance(value, gr.ShareTargetAssignmentMetadataValue):
                    group.assignment_epoch = value.assignment_epoch
                elif isinstance(value, gr.ShareTargetAssignmentMemberValue):
                    group.target[key.member] = {t: list(p) for t, p in value.topic_partitions}
                elif isinstance(value, gr.ShareMemberMetadataValue):
                    member = group.members.setdefault(key.member, ShareGroupMember(key.member))
                    member.rack_id, member.client_id = value.rack_id, value.client_id
                    member.client_host = value.client_host
                    member.subscribed = tuple(value.subscribed_topic_names)
                elif isinstance(value, gr.ShareCurrentMemberAssignmentValue):
                    member = group.members.setdefault(key.member, ShareGroupMember(key.member))
                    member.member_epoch = value.member_epoch
                    member.previous_member_epoch = value.previous_member_epoch
                    member.assignment = {t: list(p) for t, p in value.assigned}
            session_timeout_ms, _interval = self._timeouts(group_id)
            for member in group.members.values():
                member.deadline_ms = now + session_timeout_ms
            topics = self._subscribed_topics(group)
            # unchanged topics: as they were; else the next heartbeat starts a new epoch
            group.topics = topics if _metadata_hash(topics) == metadata_hash else {}
            log.info("share group %s loaded at epoch %d with %d members", group_id,
                     group.group_epoch, len(group.members))

    def _image(self, group: ShareGroup | None) -> dict[gr.ShareGroupKey, gr.ShareGroupValue]:
        """The records that describe ``group`` now (none for None)."""
        if group is None or self.write is None:
            return {}
        group_id = group.group_id
        image: dict[gr.ShareGroupKey, gr.ShareGroupValue] = {
            gr.ShareGroupKey(gr.SHARE_GROUP_METADATA, group_id):
                gr.ShareGroupMetadataValue(group.group_epoch, _metadata_hash(group.topics)),
            gr.ShareGroupKey(gr.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, group_id):
                gr.ShareTargetAssignmentMetadataValue(group.assignment_epoch)}
        for member_id, member in group.members.items():
            image[gr.ShareGroupKey(gr.SHARE_GROUP_MEMBER_METADATA, group_id, member_id)] = \
                gr.ShareMemberMetadataValue(member.rack_id, member.client_id,
                                            member.client_host, list(member.subscribed))
            image[gr.ShareGroupKey(gr.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id,
                                   member_id)] = gr.ShareCurrentMemberAssignmentValue(
                member.member_epoch, member.previous_member_epoch, gr.MEMBER_STATE_STABLE,
                gr.topic_partitions(member.assignment))
        for member_id, target in group.target.items():
            image[gr.ShareGroupKey(gr.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id,
                                   member_id)] = gr.ShareTargetAssignmentMemberValue(
                gr.topic_partitions(target))
        return image

    async def _persist(self, group_id: str) -> Error:
        """Write what changed in ``group_id``'s records since they were last written."""
        if self.write is None:
            return Error.NONE
        before = self._written.get(group_id, {})
        after = self._image(self.groups.get(group_id))
        records = [CoordinatorRecord(key, None) for key in before if key not in after]
        records += [CoordinatorRecord(key, value) for key, value in after.items()
                    if before.get(key) != value]
        if not records:
            return Error.NONE
        error = await self.write(group_id, records)
        if error == Error.NONE:
            if after:
                self._written[group_id] = after
            else:
                self._written.pop(group_id, None)
        return error

    async def delete_group(self, group_id: str) -> Error:
        """Forget a group (DeleteGroups): its records become tombstones."""
        self.groups.pop(group_id, None)
        return await self._persist(group_id)

    async def create_group(self, group_id: str) -> Error:
        """An empty group (AlterShareGroupOffsets on a group not known), written."""
        if group_id in self.groups:
            return Error.NONE
        self.groups[group_id] = ShareGroup(group_id)
        return await self._persist(group_id)

    # -- ShareGroupHeartbeat ------------------------------------------------------------

    async def heartbeat(self, client_id: str, client_host: str,
                        req) -> hb_resp.ShareGroupHeartbeatResponse:
        error = _invalid(req)
        if error is not None:
            return _hb_error(Error.INVALID_REQUEST, error)
        if not self.ensure_loaded():
            return _hb_error(Error.COORDINATOR_LOAD_IN_PROGRESS)
        await self.expire_members()
        group_id, member_id, epoch = req.group_id, req.member_id, req.member_epoch
        if self.other_group(group_id):
            return _hb_error(Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        group = self.groups.get(group_id)
        session_timeout_ms, heartbeat_interval_ms = self._timeouts(group_id)
        if epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                return _hb_error(Error.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            await self._remove(group, member_id)
            error = await self._persist(group_id)
            if error:
                return _hb_error(append_error_to_response_error(error))
            return hb_resp.ShareGroupHeartbeatResponse(
                member_id=member_id, member_epoch=LEAVE_EPOCH,
                heartbeat_interval_ms=heartbeat_interval_ms)
        if group is None:
            if epoch != JOIN_EPOCH:  # see the module docstring: not GROUP_ID_NOT_FOUND
                return _hb_error(Error.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            group = self.groups[group_id] = ShareGroup(group_id)
        member = group.members.get(member_id)
        if member is None:
            if len(group.members) >= self.config.max_size:
                return _hb_error(Error.GROUP_MAX_SIZE_REACHED,
                                 "The share group has reached its maximum capacity of "
                                 f"{self.config.max_size} members.")
            if epoch != JOIN_EPOCH:
                return _hb_error(Error.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
            member = group.members[member_id] = ShareGroupMember(member_id)
            joined = True
        elif epoch != JOIN_EPOCH and epoch not in (member.member_epoch,
                                                   member.previous_member_epoch):
            return _hb_error(Error.FENCED_MEMBER_EPOCH,
                             f"The share group member's epoch ({epoch}) is not the one known "
                             f"by the group coordinator ({member.member_epoch}). The member "
                             "must abandon all its partitions and rejoin.")
        else:
            joined = False
        member.client_id, member.client_host = client_id, client_host
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        bump = joined
        if req.subscribed_topic_names is not None:
            subscribed = tuple(sorted(set(req.subscribed_topic_names)))
            if subscribed != member.subscribed:
                member.subscribed = subscribed
                bump = True
        topics = self._subscribed_topics(group)
        if topics != group.topics:
            bump = True
        if bump:
            group.group_epoch += 1
            group.topics = topics
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        old = member.assignment
        target = group.target.get(member_id, {})
        if member.member_epoch != group.assignment_epoch or member.assignment != target:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
            member.assignment = target
        member.deadline_ms = self.clock() + session_timeout_ms
        error = await self._persist(group_id)
        if error:
            return _hb_error(append_error_to_response_error(error))
        response = hb_resp.ShareGroupHeartbeatResponse(
            member_id=member_id, member_epoch=member.member_epoch,
            heartbeat_interval_ms=heartbeat_interval_ms)
        if epoch == JOIN_EPOCH or req.subscribed_topic_names is not None \
                or member.assignment != old:
            response.assignment = hb_resp.Assignment(
                [hb_resp.TopicPartitions(topic_id, list(partitions))
                 for topic_id, partitions in member.assignment.items()])
        return response

    def _timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a group: its own configs, else the
        broker's."""
        settings = self.group_settings(group_id)
        return (settings.session_timeout_ms or self.config.session_timeout_ms,
                settings.heartbeat_interval_ms or self.config.heartbeat_interval_ms)

    def _subscribed_topics(self, group: ShareGroup) -> dict[str, tuple[UUID, int]]:
        names = {name for member in group.members.values() for name in member.subscribed}
        topics = {}
        for name in names:
            info = self.log_manager.topics.get(name)
            if info is not None:
                topics[name] = (info.topic_id, info.num_partitions)
        return topics

    def _assign(self, group: ShareGroup) -> None:
        group.target = simple_assignment(
            {m.member_id: m.subscribed for m in group.members.values()}, group.topics)
        group.assignment_epoch = group.group_epoch

    async def _remove(self, group: ShareGroup, member_id: str) -> None:
        """A member left or expired: a new epoch without it; its records released."""
        if group.members.pop(member_id, None) is None:
            return
        group.target.pop(member_id, None)
        group.group_epoch += 1
        group.topics = self._subscribed_topics(group)
        self._assign(group)
        await self.service.member_left(group.group_id, member_id)

    # -- ShareGroupDescribe -------------------------------------------------------------

    def describe(self, group_id: str) -> describe_resp.DescribedGroup:
        if not self.ensure_loaded():
            return describe_resp.DescribedGroup(
                error_code=int(Error.COORDINATOR_LOAD_IN_PROGRESS), group_id=group_id)
        group = self.groups.get(group_id)
        if group is None:
            message = f"Group {group_id} is not a share group." if self.other_group(group_id) \
                else f"Group {group_id} not found."
            return describe_resp.DescribedGroup(
                error_code=int(Error.GROUP_ID_NOT_FOUND), error_message=message,
                group_id=group_id)
        names = {info.topic_id: info.name for info in self.log_manager.topics.values()}
        members = [
            describe_resp.Member(
                member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=list(m.subscribed),
                assignment=describe_resp.Assignment([
                    describe_resp.TopicPartitions(topic_id, names.get(topic_id, ""),
                                                  list(partitions))
                    for topic_id, partitions in m.assignment.items()]))
            for m in group.members.values()]
        return describe_resp.DescribedGroup(
            group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR_NAME,
            members=members)


def _metadata_hash(topics: dict[str, tuple[UUID, int]]) -> int:
    """A signed 64-bit hash of the subscribed topics (name, id, partition count)."""
    if not topics:
        return 0
    text = ";".join(f"{name}:{topics[name][0]}:{topics[name][1]}" for name in sorted(topics))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _invalid(req) -> str | None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid: the message, or None."""
    if not req.member_id:
        return "MemberId can't be empty."
    if not req.group_id:
        return "GroupId can't be empty."
    if req.rack_id is not None and not req.rack_id:
        return "RackId can't be empty."
    if req.member_epoch == JOIN_EPOCH:
        if not req.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
    elif req.member_epoch < LEAVE_EPOCH:
        return "MemberEpoch is invalid."
    return None


def _hb_error(error: Error, message: str | None = None) -> hb_resp.ShareGroupHeartbeatResponse:
    return hb_resp.ShareGroupHeartbeatResponse(error_code=int(error), error_message=message)
