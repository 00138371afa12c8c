"""A consumer group of the KIP-848 protocol: members, epochs, target and current assignments.

Pure data and decisions (Kafka's ConsumerGroup, ConsumerGroupMember and
CurrentAssignmentBuilder), no I/O. An assignment maps a topic id to a set of partitions.

- ``group_epoch`` is bumped whenever the group's subscriptions or the metadata of the topics
  it subscribes to change; ``assignment_epoch`` is the epoch of the target assignment, which
  the coordinator recomputes when it lags behind the group epoch.
- Every member converges on its target through ``reconcile`` (CurrentAssignmentBuilder): it
  first gives up the partitions it must revoke (UNREVOKED_PARTITIONS, at its old epoch); then
  it moves to the target epoch and gets the target partitions no other member still owns
  (UNRELEASED_PARTITIONS while some are still owned elsewhere, STABLE once it has them all).
- ``partition_epochs`` records, per owned partition (assigned or pending revocation), the
  epoch of its owner: a partition is free to hand out once nobody owns it.
- The group state is derived (Empty, Assigning, Reconciling, Stable), as Kafka does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from semel.coordinator.group.consumer_records import ClassicMemberMetadata
from semel.protocol.errors import Error, KafkaError

GROUP_TYPE = "consumer"
PROTOCOL_TYPE = "consumer"
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Assignment = dict[uuid.UUID, frozenset[int]]


class MemberState(Enum):
    """Kafka's MemberState with its record ids."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127

    @property
    def label(self) -> str:
        return self.name.lower()


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # set for a member using the classic protocol (JoinGroup/SyncGroup) in a consumer group
    classic: ClassicMemberMetadata | None = None

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def copy(self, **changes) -> ConsumerGroupMember:
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return ConsumerGroupMember(**fields)

    def same_metadata(self, other: ConsumerGroupMember) -> bool:
        """Equal in what the MemberMetadata record holds."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                self.subscribed_topic_names, self.subscribed_topic_regex,
                self.server_assignor, self.rebalance_timeout_ms, self.classic) == \
            (other.instance_id, other.rack_id, other.client_id, other.client_host,
             other.subscribed_topic_names, other.subscribed_topic_regex,
             other.server_assignor, other.rebalance_timeout_ms, other.classic)

    def same_assignment(self, other: ConsumerGroupMember) -> bool:
        """Equal in what the CurrentMemberAssignment record holds."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation) == \
            (other.member_epoch, other.previous_member_epoch, other.state, other.assigned,
             other.pending_revocation)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


def with_epoch(member: ConsumerGroupMember, epoch: int, **changes) -> ConsumerGroupMember:
    """Kafka's Builder.updateMemberEpoch: the old epoch becomes the previous one."""
    return member.copy(previous_member_epoch=member.member_epoch, member_epoch=epoch, **changes)


OwnedPartitions = list[tuple[uuid.UUID, list[int]]] | None


def owns_any(owned: OwnedPartitions, partitions: Assignment) -> bool:
    """Does the member still report owning any of ``partitions``? Unknown (None): yes."""
    if owned is None:
        return True
    for topic_id, ps in owned:
        revoking = partitions.get(topic_id)
        if revoking and any(p in revoking for p in ps):
            return True
    return False


def is_subset(owned: OwnedPartitions, target: Assignment) -> bool:
    if owned is None:
        return False
    for topic_id, ps in owned:
        have = target.get(topic_id)
        if have is None or any(p not in have for p in ps):
            return False
    return True


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment,
              subscribed_topic_ids: set[uuid.UUID], subscription_changed: bool,
              partition_epoch: Callable[[uuid.UUID, int], int],
              owned: OwnedPartitions) -> ConsumerGroupMember:
    """The member's next current assignment (Kafka's CurrentAssignmentBuilder.build).

    ``partition_epoch(topic_id, partition)`` is the epoch of the partition's owner, -1 when
    free; ``owned`` the partitions the member reported (None: not reported)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target,
                                    subscribed_topic_ids, partition_epoch, owned)
        if subscription_changed:
            return _drop_unsubscribed(member, subscribed_topic_ids, owned)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            if subscription_changed:
                return _drop_unsubscribed(member, subscribed_topic_ids, owned)
            return member
        return _next_assignment(member, min(member.member_epoch + 1, target_epoch),
                                target_epoch, target, subscribed_topic_ids, partition_epoch,
                                owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target,
                                subscribed_topic_ids, partition_epoch, owned)
    if owned is None or owned:
        raise KafkaError(Error.FENCED_MEMBER_EPOCH, "The consumer group member is in a "
                         "unknown state. The member must abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, subscribed_topic_ids,
                            partition_epoch, owned)


def _drop_unsubscribed(member: ConsumerGroupMember, subscribed: set[uuid.UUID],
                       owned: OwnedPartitions) -> ConsumerGroupMember:
    """Kafka's updateCurrentAssignment: partitions of topics no longer subscribed go to
    revocation at once, before the new target assignment exists."""
    assigned = dict(member.assigned)
    pending = dict(member.pending_revocation)
    removed = False
    for topic_id, ps in member.assigned.items():
        if topic_id not in subscribed:
            removed = True
            del assigned[topic_id]
            pending[topic_id] = pending.get(topic_id, frozenset()) | ps
    if not removed:
        return member
    if pending and owns_any(owned, pending):
        return member.copy(state=MemberState.UNREVOKED_PARTITIONS, assigned=assigned,
                           pending_revocation=pending)
    return member.copy(assigned=assigned)


def _next_assignment(member: ConsumerGroupMember, epoch: int, target_epoch: int,
                     target: Assignment, subscribed: set[uuid.UUID],
                     partition_epoch: Callable[[uuid.UUID, int], int],
                     owned: OwnedPartitions) -> ConsumerGroupMember:
    """Kafka's computeNextAssignment."""
    unreleased = False
    assigned: Assignment = {}
    revoking: Assignment = {}
    to_assign: Assignment = {}
    for topic_id in set(target) | set(member.assigned):
        want = target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
        have = member.assigned.get(topic_id, frozenset())
        keep = have & want
        revoke = have - keep
        own_pending = member.pending_revocation.get(topic_id, frozenset())
        add = set()
        for p in want - keep:
            if partition_epoch(topic_id, p) != -1 and p not in own_pending:
                unreleased = True
            else:
                add.add(p)
        if keep:
            assigned[topic_id] = keep
        if revoke:
            revoking[topic_id] = revoke
        if add:
            to_assign[topic_id] = frozenset(add)
    if revoking and owns_any(owned, revoking):
        return with_epoch(member, epoch, state=MemberState.UNREVOKED_PARTITIONS,
                          assigned=assigned, pending_revocation=revoking)
    for topic_id, ps in to_assign.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return with_epoch(member, target_epoch, state=state, assigned=assigned,
                      pending_revocation={})


@dataclass(slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.static_members: dict[str, str] = {}  # instance id -> member id
        self.target_assignment: dict[str, Assignment] = {}
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        # the metadata of the subscribed topics the target assignment was computed with
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.dead = False

    # -- state --------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if not member.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def is_in(self, *states) -> bool:
        """Classic states never match: the offset manager asks classic questions too."""
        return self.state in states

    # -- members ------------------------------------------------------------------------

    def member(self, member_id: str) -> ConsumerGroupMember:
        member = self.members.get(member_id)
        if member is None:
            raise KafkaError(Error.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {self.group_id}.")
        return member

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def update_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and old.instance_id != member.instance_id:
                self.static_members.pop(old.instance_id, None)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id
        self._claim(member)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and \
                self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        self.target_assignment.pop(member_id, None)
        return member

    def _claim(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, ps in assignment.items():
                for p in ps:
                    self.partition_epochs[(topic_id, p)] = member.member_epoch

    def _release(self, member: ConsumerGroupMember) -> None:
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, ps in assignment.items():
                for p in ps:
                    self.partition_epochs.pop((topic_id, p), None)

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    # -- classic members (online migration) ---------------------------------------------

    def classic_members(self) -> list[ConsumerGroupMember]:
        return [m for m in self.members.values() if m.classic is not None]

    def all_classic_except(self, member_ids: set[str]) -> bool:
        """Kafka's allMembersUseClassicProtocolExcept."""
        return all(m.classic is not None for m in self.members.values()
                   if m.member_id not in member_ids)

    def supports_classic_protocols(self, protocol_type: str | None, names: set[str]) -> bool:
        """Kafka's supportsClassicProtocols: protocol type "consumer" and, once classic
        members exist, a protocol every one of them supports."""
        if protocol_type != PROTOCOL_TYPE:
            return False
        classic = self.classic_members()
        if not self.members or not classic:
            return bool(names)
        return any(all(name in {p for p, _ in m.classic.protocols} for m in classic)
                   for name in names)

    def waiting_on_unreleased_partition(self, member: ConsumerGroupMember) -> bool:
        """Does a partition of the member's target still belong to another member?"""
        for topic_id, ps in self.target_assignment.get(member.member_id, {}).items():
            have = member.assigned.get(topic_id, frozenset())
            for p in ps:
                if p not in have and self.partition_epoch(topic_id, p) != -1:
                    return True
        return False

    # -- subscriptions ------------------------------------------------------------------

    def subscribed_topic_names(self, resolve_regex: Callable[[str], set[str]]) -> set[str]:
        names: set[str] = set()
        for member in self.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                names |= resolve_regex(member.subscribed_topic_regex)
        return names

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return topic in self.subscription_metadata

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (Kafka: the most used one), else the default."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])

    # -- offsets (Kafka's ConsumerGroup.validateOffset*) --------------------------------

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None,
                               member_epoch: int, is_transactional: bool,
                               api_version: int = 9) -> None:
        if member_epoch < 0 and not self.members:
            return
        if is_transactional and member_epoch == -1 and member_id == "" \
                and group_instance_id is None:
            return
        member = self.member(member_id)
        if not is_transactional and api_version < 9:
            raise KafkaError(Error.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must "
                             "be used by members using the modern group protocol")
        _validate_member_epoch(member_epoch, member.member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if member_id is None and member_epoch < 0:
            return
        _validate_member_epoch(member_epoch, self.member(member_id or "").member_epoch)

    def validate_offset_delete(self) -> None:
        if self.dead:
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {self.group_id} is in dead state.")

    def validate_delete_group(self) -> None:
        if self.dead:
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {self.group_id} is in dead state.")
        if self.members:
            raise KafkaError(Error.NON_EMPTY_GROUP)

    def offset_expiration_base(self) -> Callable[[object], int] | None:
        """Kafka: offsets of a consumer group expire from their commit time, for topics the
        group does not subscribe to (checked by the caller)."""
        return lambda offset: offset.commit_timestamp_ms


def _validate_member_epoch(received: int, expected: int) -> None:
    if received != expected:
        raise KafkaError(Error.STALE_MEMBER_EPOCH, f"The received member epoch {received} "
                         f"does not match the expected member epoch {expected}.")
