"""A classic group (JoinGroup/SyncGroup protocol): its state, members and generation.

States and the transitions allowed into each (Kafka's ClassicGroupState):

  Empty                <- PreparingRebalance
  PreparingRebalance   <- Stable, CompletingRebalance, Empty
  CompletingRebalance  <- PreparingRebalance
  Stable               <- CompletingRebalance
  Dead                 <- any

Members are identified by member id; static members (KIP-345) also by group instance id,
which maps to their current member id. A member parked in JoinGroup or SyncGroup holds a
``respond`` callback that the group manager completes. Pure data and bookkeeping: no I/O,
no clock other than the ``now_ms`` given to ``transition_to``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import Any

from semel.coordinator.group.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from semel.protocol.errors import Error, KafkaError, ProtocolError
from semel.protocol.messages.join_group_response import JoinGroupResponse
from semel.protocol.messages.sync_group_response import SyncGroupResponse

log = logging.getLogger("coordinator.group")

UNKNOWN_MEMBER_ID = ""
MEMBER_ID_DELIMITER = "-"
GROUP_TYPE = "classic"

Respond = Callable[[Any], None]


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


EMPTY = GroupState.EMPTY
PREPARING_REBALANCE = GroupState.PREPARING_REBALANCE
COMPLETING_REBALANCE = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset(GroupState),
}


class ClassicGroupMember:
    __slots__ = ("assignment", "awaiting_join", "awaiting_sync", "client_host", "client_id",
                 "group_instance_id", "is_new", "member_id", "protocol_type", "protocols",
                 "rebalance_timeout_ms", "session_timeout_ms")

    def __init__(self, member_id: str, group_instance_id: str | None, client_id: str,
                 client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
                 protocol_type: str, protocols: list[tuple[str, bytes]],
                 assignment: bytes = b"") -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols  # (name, metadata) in the member's preference order
        self.assignment = assignment
        self.awaiting_join: Respond | None = None
        self.awaiting_sync: Respond | None = None
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol_name}")

    def has_satisfied_heartbeat(self) -> bool:
        # new members may expire while awaiting join; others awaiting a rebalance are alive
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return protocols == self.protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {candidates}")

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def __repr__(self) -> str:
        return (f"ClassicGroupMember({self.member_id!r}, instance={self.group_instance_id!r}, "
                f"protocols={[n for n, _ in self.protocols]})")


class ClassicGroup:
    def __init__(self, group_id: str, state: GroupState = EMPTY, *, now_ms: int | None = None,
                 generation_id: int = 0, protocol_type: str | None = None,
                 protocol_name: str | None = None, leader_id: str | None = None) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = DEAD
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        self.current_state_timestamp = now_ms  # None: unknown (old metadata schema)
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        self.pending_join_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.subscribed_topics: set[str] | None = None  # None: unknown
        self.new_member_added = False

    # -- state --------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PREPARING_REBALANCE]

    def transition_to(self, target: GroupState, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS_STATES[target]:
            raise AssertionError(f"group {self.group_id} should be in one of "
                                 f"{sorted(map(str, VALID_PREVIOUS_STATES[target]))} before "
                                 f"moving to {target}; it is {self.state}")
        self.previous_state = self.state
        self.state = target
        self.current_state_timestamp = now_ms

    @property
    def is_empty(self) -> bool:
        return self.state is EMPTY

    def is_simple_group(self) -> bool:
        return self.protocol_type is None and self.is_empty and not self.pending_join_members

    def uses_consumer_group_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # -- members ------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def member(self, member_id: str) -> ClassicGroupMember:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def add(self, member: ClassicGroupMember, respond: Respond | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise AssertionError(f"static member {member.group_instance_id} already in "
                                     f"group {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise AssertionError("the group and member protocol types must be the same")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise AssertionError("none of the member's protocols can be supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.awaiting_join = respond
        if member.is_awaiting_join:
            self.num_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        removed = self.members.pop(member_id, None)
        if removed is not None:
            self._count_protocols(removed, -1)
            if removed.is_awaiting_join:
                self.num_awaiting_join -= 1
            if removed.group_instance_id is not None:
                self.static_members.pop(removed.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                log.info("group %s: leader %s did not rejoin in time, %s is the new leader",
                         self.group_id, leader.member_id, member.member_id)
                self.leader_id = member.member_id
                return True
        return False

    def replace_static_member(self, group_instance_id: str, old_member_id: str,
                              new_member_id: str) -> ClassicGroupMember:
        removed = self.members.pop(old_member_id)
        # fence a duplicate parked in JoinGroup or SyncGroup right away
        self.complete_join(removed, JoinGroupResponse(
            error_code=Error.FENCED_INSTANCE_ID, member_id=old_member_id, protocol_type=None,
            protocol_name=None, leader=""))
        self.complete_sync(removed, SyncGroupResponse(
            error_code=Error.FENCED_INSTANCE_ID, protocol_type=None, protocol_name=None))
        new = ClassicGroupMember(new_member_id, removed.group_instance_id, removed.client_id,
                                 removed.client_host, removed.rebalance_timeout_ms,
                                 removed.session_timeout_ms, removed.protocol_type,
                                 removed.protocols, removed.assignment)
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return new

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending_member(self, member_id: str) -> None:
        if self.has_member(member_id):
            raise AssertionError(f"{member_id} is already a member of {self.group_id}")
        self.pending_join_members.add(member_id)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def validate_member(self, member_id: str, group_instance_id: str | None,
                        operation: str) -> None:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's ClassicGroup.validateMember."""
        if group_instance_id is not None:
            existing = self.static_member_id(group_instance_id)
            if existing is None:
                raise KafkaError(Error.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                log.info("group %s: static member %s with instance id %s is fenced by %s "
                         "during %s", self.group_id, member_id, group_instance_id, existing,
                         operation)
                raise KafkaError(Error.FENCED_INSTANCE_ID)
        if not self.has_member(member_id):
            raise KafkaError(Error.UNKNOWN_MEMBER_ID)

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None,
                               generation_id: int, is_transactional: bool) -> None:
        """Kafka's ClassicGroup.validateOffsetCommit; raises KafkaError."""
        if self.is_in(DEAD):
            raise KafkaError(Error.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.is_in(EMPTY):
            return  # admin client or a consumer without group management: a simple commit
        if generation_id >= 0 or member_id or group_instance_id is not None:
            self.validate_member(member_id, group_instance_id,
                                 "txn-offset-commit" if is_transactional else "offset-commit")
            if generation_id != self.generation_id:
                raise KafkaError(Error.ILLEGAL_GENERATION)
        elif not is_transactional and not self.is_in(EMPTY):
            # no member id and no generation: only an empty group accepts the commit
            raise KafkaError(Error.UNKNOWN_MEMBER_ID)
        if not is_transactional and self.is_in(COMPLETING_REBALANCE):
            # a valid member that commits before its SyncGroup: let it finish the rebalance
            raise KafkaError(Error.REBALANCE_IN_PROGRESS)

    def validate_offset_delete(self) -> None:
        if self.is_in(DEAD):
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {self.group_id} is in dead state.")
        if self.is_in(STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE) \
                and not self.uses_consumer_group_protocol():
            raise KafkaError(Error.NON_EMPTY_GROUP)

    def offset_expiration_base(self) -> Callable[[Any], int] | None:
        """Which timestamp an offset's retention counts from, or None: nothing expires.

        Empty group: since it became empty (or the commit time if unknown); stable consumer
        group that knows its subscriptions: since the commit, for topics it no longer
        subscribes to; simple group (no protocol type): since the commit."""
        if self.protocol_type is None:
            return lambda offset: offset.commit_timestamp_ms
        if self.is_in(EMPTY):
            ts = self.current_state_timestamp
            return lambda offset: offset.commit_timestamp_ms if ts is None else ts
        if self.uses_consumer_group_protocol() and self.subscribed_topics is not None \
                and self.is_in(STABLE):
            return lambda offset: offset.commit_timestamp_ms
        return None

    # -- protocols ----------------------------------------------------------------------

    def _count_protocols(self, member: ClassicGroupMember, delta: int) -> None:
        for name, _ in member.protocols:
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + delta

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        if self.is_empty:
            return bool(protocol_type) and bool(protocol_names)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == len(self.members) for name in protocol_names)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        if not self.members:
            raise AssertionError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes.items(), key=lambda item: item[1])[0]

    def update_member(self, member: ClassicGroupMember, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int,
                      respond: Respond | None) -> None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if respond is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif respond is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.awaiting_join = respond

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics |= subscribed_topics(member.metadata(self.protocol_name))
        except (ProtocolError, ValueError) as e:
            log.warning("group %s: cannot parse the consumer protocol subscription (%s); "
                        "subscribed topics unknown", self.group_id, e)
            return None
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.uses_consumer_group_protocol()
        return topic in self.subscribed_topics

    # -- parked requests ----------------------------------------------------------------

    def complete_join(self, member: ClassicGroupMember, response) -> bool:
        respond = member.awaiting_join
        if respond is None:
            return False
        member.awaiting_join = None
        self.num_awaiting_join -= 1
        respond(response)
        return True

    def complete_sync(self, member: ClassicGroupMember, response) -> bool:
        respond = member.awaiting_sync
        if respond is None:
            return False
        member.awaiting_sync = None
        respond(response)
        return True

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(EMPTY, now_ms)
        self.pending_sync_members.clear()

    def group_assignment(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={list(self.members)})")
