"""Classic group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, timers, listing.

A pure state machine (Kafka's GroupMetadataManager, classic part): no I/O and no event
loop. Time comes from ``clock()``; delays go through a keyed ``Timer``; records for
``__consumer_offsets`` go through ``write(group_id, records, on_done)``, where ``on_done(error,
base_offset)`` runs once the records are durable (error NONE) or failed. Parked JoinGroup and
SyncGroup requests hold a ``respond(response)`` callback, completed when the rebalance moves.

Rebalance in short: a join (new member, changed metadata, leader rejoin) moves the group to
PreparingRebalance; the join phase ends when every known member has rejoined or the rebalance
timeout passes (members that did not rejoin are dropped), or for a group coming from Empty
after ``group.initial.rebalance.delay.ms`` (extended while new members keep arriving, up to the
rebalance timeout). Then the generation is bumped, a protocol every member supports is chosen
by vote, all joiners are answered (the leader with the member list) and the group waits in
CompletingRebalance for the leader's SyncGroup; its assignment is persisted as a
GroupMetadata record, then every member's SyncGroup is answered and the group is Stable.
Members that miss their session timeout (heartbeats) are removed and trigger a rebalance.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from semel.coordinator.group.classic_group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    GROUP_TYPE,
    MEMBER_ID_DELIMITER,
    PREPARING_REBALANCE,
    STABLE,
    UNKNOWN_MEMBER_ID,
    ClassicGroup,
    ClassicGroupMember,
    Respond,
)
from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
)
from semel.coordinator.group.timer import Timer
from semel.protocol.errors import Error, KafkaError
from semel.protocol.messages.describe_groups_response import DescribedGroup, DescribedGroupMember
from semel.protocol.messages.heartbeat_request import HeartbeatRequest
from semel.protocol.messages.join_group_request import JoinGroupRequest
from semel.protocol.messages.join_group_response import JoinGroupResponse, JoinGroupResponseMember
from semel.protocol.messages.leave_group_request import LeaveGroupRequest
from semel.protocol.messages.leave_group_response import LeaveGroupResponse, MemberResponse
from semel.protocol.messages.list_groups_response import ListedGroup
from semel.protocol.messages.sync_group_request import SyncGroupRequest
from semel.protocol.messages.sync_group_response import SyncGroupResponse

log = logging.getLogger("coordinator.group")

WriteDone = Callable[[Error, int], None]
WriteFn = Callable[[str, list[CoordinatorRecord], "WriteDone | None"], None]
# Kafka's GROUP resource operations without an authorizer: READ(3), DELETE(6), DESCRIBE(8)
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What the coordinator needs to know about the client behind a request."""

    client_id: str = ""
    client_host: str = "/127.0.0.1"
    api_version: int = 0


def append_error_to_response_error(error: Error) -> Error:
    """Kafka's mapping of a failed __consumer_offsets append to a client-facing error."""
    if error in (Error.UNKNOWN_TOPIC_OR_PARTITION, Error.NOT_ENOUGH_REPLICAS,
                 Error.REQUEST_TIMED_OUT):
        return Error.COORDINATOR_NOT_AVAILABLE
    if error in (Error.NOT_LEADER_OR_FOLLOWER, Error.KAFKA_STORAGE_ERROR):
        return Error.NOT_COORDINATOR
    if error in (Error.MESSAGE_TOO_LARGE, Error.RECORD_LIST_TOO_LARGE, Error.INVALID_FETCH_SIZE):
        return Error.UNKNOWN_SERVER_ERROR
    return error


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


def _protocols(req: JoinGroupRequest) -> list[tuple[str, bytes]]:
    return [(p.name, bytes(p.metadata)) for p in req.protocols]


def _join_error(member_id: str, error: Error) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=error, member_id=member_id)


class GroupMetadataManager:
    def __init__(self, config: GroupConfig, clock: Callable[[], int], timer: Timer,
                 write: WriteFn) -> None:
        self.config = config
        self.clock = clock
        self.timer = timer
        self.write = write
        self.groups: dict[str, ClassicGroup] = {}
        # consumer groups (KIP-848) share the group id namespace: ConsumerGroupManager.groups
        self.consumer_groups: dict = {}
        # the ConsumerGroupManager (set by the shard): classic members of consumer groups
        self.consumer_manager = None

    # -- lookup -------------------------------------------------------------------------

    def find(self, group_id: str):
        """The group of either kind (a ConsumerGroup or a ClassicGroup), or None: what the
        offset manager validates commits and fetches against."""
        group = self.consumer_groups.get(group_id)
        return group if group is not None else self.groups.get(group_id)

    def group(self, group_id: str) -> ClassicGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return group

    def get_or_create_group(self, group_id: str, create: bool) -> ClassicGroup:
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
            group = ClassicGroup(group_id, EMPTY, now_ms=self.clock())
            self.groups[group_id] = group
        return group

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None and group.state is not DEAD:
            group.transition_to(DEAD, self.clock())

    # -- JoinGroup ----------------------------------------------------------------------

    def join_group(self, ctx: RequestInfo, req: JoinGroupRequest, respond: Respond) -> None:
        if not req.group_id:
            respond(_join_error(req.member_id, Error.INVALID_GROUP_ID))
            return
        if not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                <= self.config.max_session_timeout_ms):
            respond(_join_error(req.member_id, Error.INVALID_SESSION_TIMEOUT))
            return
        member_id = req.member_id
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        consumer_group = self.consumer_groups.get(req.group_id)
        if consumer_group is not None:
            if not consumer_group.is_empty:
                # a classic member joins a consumer group (KIP-848 online migration)
                self.consumer_manager.classic_join(ctx.client_id, ctx.client_host,
                                                   ctx.api_version, req, respond)
                return
            # Kafka: an empty consumer group is replaced by a classic group (offsets stay)
            self.write(req.group_id, self.consumer_manager.delete_group_records(req.group_id),
                       None)
            self.consumer_manager.remove_group(req.group_id)
            log.info("group %s: empty consumer group converted to a classic group",
                     req.group_id)
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                respond(_join_error(member_id, Error.UNKNOWN_MEMBER_ID))
                return
            group = self.get_or_create_group(req.group_id, True)
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            respond(_join_error(UNKNOWN_MEMBER_ID, Error.GROUP_MAX_SIZE_REACHED))
        elif is_unknown:
            self._join_new_member(ctx, req, group, respond)
        else:
            self._join_existing_member(ctx, req, group, respond)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.max_size
        if group.is_in(EMPTY, DEAD):
            return True
        if group.is_in(PREPARING_REBALANCE):
            return (group.has_member(member_id) and group.member(member_id).is_awaiting_join) \
                or group.num_awaiting_join < max_size
        return group.has_member(member_id) or len(group.members) < max_size

    def _join_new_member(self, ctx: RequestInfo, req: JoinGroupRequest, group: ClassicGroup,
                         respond: Respond) -> None:
        if group.is_in(DEAD):
            respond(_join_error(UNKNOWN_MEMBER_ID, Error.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
            respond(_join_error(UNKNOWN_MEMBER_ID, Error.INCONSISTENT_GROUP_PROTOCOL))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else ctx.client_id
        new_member_id = f"{prefix}{MEMBER_ID_DELIMITER}{uuid.uuid4()}"
        if req.group_instance_id is not None:
            existing = group.static_member_id(req.group_instance_id)
            if existing is not None:
                log.info("group %s: static member %s rejoins with an unknown member id in "
                         "state %s; replacing member %s", group.group_id,
                         req.group_instance_id, group.state, existing)
                self._update_static_member_then_rebalance_or_complete_join(
                    ctx, req, group, existing, new_member_id, respond)
            else:
                self._add_member_then_rebalance_or_complete_join(
                    ctx, req, group, new_member_id, respond)
        elif ctx.api_version >= 4:
            # KIP-394: hand out a member id and ask the member to join again with it
            group.add_pending_member(new_member_id)
            group_id = group.group_id
            self.timer.schedule(heartbeat_key(group_id, new_member_id), req.session_timeout_ms,
                                lambda: self._expire_member_heartbeat(group_id, new_member_id))
            respond(_join_error(new_member_id, Error.MEMBER_ID_REQUIRED))
        else:
            self._add_member_then_rebalance_or_complete_join(
                ctx, req, group, new_member_id, respond)

    def _join_existing_member(self, ctx: RequestInfo, req: JoinGroupRequest,
                              group: ClassicGroup, respond: Respond) -> None:
        member_id = req.member_id
        if group.is_in(DEAD):
            respond(_join_error(member_id, Error.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, {p.name for p in req.protocols}):
            respond(_join_error(member_id, Error.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if req.group_instance_id is not None:
                raise AssertionError(f"pending member {member_id} joins with instance id "
                                     f"{req.group_instance_id}")
            self._add_member_then_rebalance_or_complete_join(ctx, req, group, member_id, respond)
            return
        try:
            group.validate_member(member_id, req.group_instance_id, "join-group")
        except KafkaError as e:
            respond(JoinGroupResponse(error_code=e.code, member_id=member_id,
                                      protocol_type=None, protocol_name=None))
            return
        member = group.member(member_id)
        protocols = _protocols(req)
        if group.is_in(PREPARING_REBALANCE):
            self._update_member_then_rebalance_or_complete_join(
                req, group, member, f"member {member_id} joins during {group.state}", respond)
        elif group.is_in(COMPLETING_REBALANCE):
            if member.matches(protocols):
                # the member probably missed the JoinGroup response: send it again
                respond(self._join_response(group, member_id,
                                            with_members=group.is_leader(member_id)))
            else:
                self._update_member_then_rebalance_or_complete_join(
                    req, group, member, f"member {member_id} updates its metadata", respond)
        elif group.is_in(STABLE):
            if group.is_leader(member_id):
                # a leader rejoining forces a rebalance (e.g. topic metadata changed)
                self._update_member_then_rebalance_or_complete_join(
                    req, group, member, f"leader {member_id} rejoins", respond)
            elif not member.matches(protocols):
                self._update_member_then_rebalance_or_complete_join(
                    req, group, member, f"member {member_id} updates its metadata", respond)
            else:
                respond(self._join_response(group, member_id, with_members=False))
        else:
            log.warning("group %s: member %s rejoins in unexpected state %s",
                        group.group_id, member_id, group.state)
            respond(_join_error(member_id, Error.UNKNOWN_MEMBER_ID))

    def _join_response(self, group: ClassicGroup, member_id: str, *, with_members: bool,
                       skip_assignment: bool = False) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=Error.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            skip_assignment=skip_assignment,
            member_id=member_id,
            members=self._current_members(group) if with_members else [],
        )

    def _current_members(self, group: ClassicGroup) -> list[JoinGroupResponseMember]:
        if group.is_in(DEAD, PREPARING_REBALANCE):
            raise AssertionError(f"no member metadata for group {group.group_id} in "
                                 f"{group.state}")
        return [JoinGroupResponseMember(m.member_id, m.group_instance_id,
                                        m.metadata(group.protocol_name))
                for m in group.members.values()]

    def _add_member_then_rebalance_or_complete_join(
            self, ctx: RequestInfo, req: JoinGroupRequest, group: ClassicGroup,
            member_id: str, respond: Respond) -> None:
        member = ClassicGroupMember(member_id, req.group_instance_id, ctx.client_id,
                                    ctx.client_host, req.rebalance_timeout_ms,
                                    req.session_timeout_ms, req.protocol_type, _protocols(req))
        member.is_new = True
        if group.is_in(PREPARING_REBALANCE) and group.previous_state is EMPTY:
            group.new_member_added = True  # the initial rebalance may wait a bit longer
        group.add(member, respond)
        # a new member cannot heartbeat while parked in JoinGroup; bound how long it may wait
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(
            group, f"adding new member {member_id} with group instance id "
                   f"{req.group_instance_id}")

    def _update_member_then_rebalance_or_complete_join(
            self, req: JoinGroupRequest, group: ClassicGroup, member: ClassicGroupMember,
            reason: str, respond: Respond) -> None:
        group.update_member(member, _protocols(req), req.rebalance_timeout_ms,
                            req.session_timeout_ms, respond)
        self._maybe_prepare_rebalance_or_complete_join(group, reason)

    def _update_static_member_then_rebalance_or_complete_join(
            self, ctx: RequestInfo, req: JoinGroupRequest, group: ClassicGroup,
            old_member_id: str, new_member_id: str, respond: Respond) -> None:
        current_leader = group.leader_id
        new_member = group.replace_static_member(req.group_instance_id, old_member_id,
                                                 new_member_id)
        self._reschedule_heartbeat(group, new_member)
        old_rebalance_timeout = new_member.rebalance_timeout_ms
        old_session_timeout = new_member.session_timeout_ms
        old_protocols = new_member.protocols
        group.update_member(new_member, _protocols(req), req.rebalance_timeout_ms,
                            req.session_timeout_ms, respond)
        if group.is_in(STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # nothing changes for the group: persist the new member id, no rebalance
                assignment = group.group_assignment()
                instance_id = req.group_instance_id

                def done(error: Error, _base_offset: int) -> None:
                    if error:
                        log.warning("group %s: persisting static member %s failed (%s); "
                                    "reverting to member id %s", group.group_id,
                                    new_member_id, error.name, old_member_id)
                        group.update_member(new_member, old_protocols, old_rebalance_timeout,
                                            old_session_timeout, None)
                        old = group.replace_static_member(instance_id, new_member_id,
                                                          old_member_id)
                        self._reschedule_heartbeat(group, old)
                        respond(JoinGroupResponse(
                            error_code=append_error_to_response_error(error),
                            member_id=UNKNOWN_MEMBER_ID, generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name, leader=current_leader or ""))
                    elif ctx.api_version >= 9:
                        is_leader = group.is_leader(new_member_id)
                        group.complete_join(new_member, self._join_response(
                            group, new_member_id, with_members=is_leader,
                            skip_assignment=is_leader))
                    else:
                        response = self._join_response(group, new_member_id,
                                                       with_members=False)
                        response.leader = current_leader or ""
                        group.complete_join(new_member, response)

                self.write(group.group_id, [self.group_metadata_record(group, assignment)],
                           done)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"static member {new_member_id} with instance id "
                           f"{req.group_instance_id} rejoins with a protocol change")
        elif group.is_in(COMPLETING_REBALANCE):
            # the leader may already be assigning with the old member id: rebalance again
            self._prepare_rebalance(group, f"static member {new_member_id} with instance id "
                                           f"{req.group_instance_id} rejoins")
        elif group.is_in(EMPTY, DEAD):
            raise AssertionError(f"group {group.group_id} in {group.state} with known static "
                                 f"member {req.group_instance_id}")
        else:
            self._maybe_complete_join_phase(group)

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup,
                                                  reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        """Start a rebalance (a consumer group downgraded to this classic group)."""
        self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_in(COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_with_error(group, Error.REBALANCE_IN_PROGRESS)
        self._remove_sync_expiration(group)
        initial = group.is_in(EMPTY)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            group_id = group.group_id
            self.timer.schedule(join_key(group_id), delay,
                                lambda: self._try_complete_initial_rebalance_else_schedule(
                                    group_id, delay, remaining))
        group.transition_to(PREPARING_REBALANCE, self.clock())
        log.info("group %s: preparing to rebalance in state %s with old generation %d (%s)",
                 group.group_id, group.state, group.generation_id, reason)
        if not initial:
            self._maybe_complete_join_else_schedule(group)

    def _maybe_complete_join_else_schedule(self, group: ClassicGroup) -> None:
        if group.has_all_members_joined():
            self._complete_join(group)
        else:
            group_id = group.group_id
            self.timer.schedule(join_key(group_id), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(group_id))

    def _try_complete_initial_rebalance_else_schedule(self, group_id: str, delay_ms: int,
                                                      remaining_ms: int) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            new_delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            new_remaining = max(remaining_ms - delay_ms, 0)
            self.timer.schedule(join_key(group_id), new_delay,
                                lambda: self._try_complete_initial_rebalance_else_schedule(
                                    group_id, new_delay, new_remaining))
        else:
            self._complete_join(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (group.is_in(PREPARING_REBALANCE) and group.previous_state is not EMPTY
                and group.has_all_members_joined()):
            self._complete_join(group)

    def _complete_join_by_id(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        group_id = group.group_id
        self.timer.cancel(join_key(group_id))
        dropped = [m for m in group.not_yet_rejoined_members() if not m.is_static]
        for member in dropped:
            group.remove(member.member_id)
            self.timer.cancel(heartbeat_key(group_id, member.member_id))
        if dropped:
            log.info("group %s: removed dynamic members that did not rejoin: %s", group_id,
                     [m.member_id for m in dropped])
        if group.is_in(DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # nobody rejoined: wait another rebalance timeout for sessions to expire
            log.error("group %s could not complete the rebalance: no member rejoined",
                      group_id)
            self.timer.schedule(join_key(group_id), group.rebalance_timeout_ms(),
                                lambda: self._complete_join_by_id(group_id))
            return
        group.init_next_generation(self.clock())
        if group.is_in(EMPTY):
            log.info("group %s with generation %d is now empty", group_id, group.generation_id)

            def done(error: Error, _base_offset: int) -> None:
                if error:
                    log.warning("group %s: writing the empty group metadata failed: %s",
                                group_id, error.name)

            self.write(group_id, [self.group_metadata_record(group, {})], done)
            return
        log.info("group %s: generation %d stabilizing with %d members", group_id,
                 group.generation_id, len(group.members))
        for member in list(group.members.values()):
            response = self._join_response(group, member.member_id,
                                           with_members=group.is_leader(member.member_id))
            group.complete_join(member, response)
            self._reschedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self._schedule_pending_sync(group)

    def _schedule_pending_sync(self, group: ClassicGroup) -> None:
        group_id, generation = group.group_id, group.generation_id
        self.timer.schedule(sync_key(group_id), group.rebalance_timeout_ms(),
                            lambda: self._expire_pending_sync(group_id, generation))

    def _remove_sync_expiration(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timer.cancel(sync_key(group.group_id))

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        group = self.groups.get(group_id)
        if group is None or generation_id != group.generation_id:
            return
        if group.is_in(COMPLETING_REBALANCE, STABLE) and group.pending_sync_members:
            missing = set(group.pending_sync_members)
            for member_id in missing:
                group.remove(member_id)
                self.timer.cancel(heartbeat_key(group_id, member_id))
            self._prepare_rebalance(group, f"removing {sorted(missing)} on pending sync "
                                           f"request expiration")

    # -- heartbeats and session expiry --------------------------------------------------

    def reschedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember) -> None:
        self._reschedule_heartbeat(group, member)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: ClassicGroupMember,
                              timeout_ms: int | None = None) -> None:
        group_id, member_id = group.group_id, member.member_id
        self.timer.schedule(heartbeat_key(group_id, member_id),
                            member.session_timeout_ms if timeout_ms is None else timeout_ms,
                            lambda: self._expire_member_heartbeat(group_id, member_id))

    def _expire_member_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None or group.is_in(DEAD):
            return
        if group.is_pending_member(member_id):
            log.info("group %s: pending member %s expired", group_id, member_id)
            group.remove(member_id)
            if group.is_in(PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        if not group.has_member(member_id):
            return
        member = group.member(member_id)
        if not member.has_satisfied_heartbeat():
            log.info("group %s: member %s failed its session timeout; removing it",
                     group_id, member_id)
            self._remove_member_and_update_group(
                group, member, f"removing member {member_id} on heartbeat expiration")

    def _remove_member_and_update_group(self, group: ClassicGroup, member: ClassicGroupMember,
                                        reason: str) -> None:
        # a new member may expire while parked in JoinGroup: answer it before removing
        group.complete_join(member, _join_error(UNKNOWN_MEMBER_ID, Error.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.is_in(STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, reason)
        elif group.is_in(PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # -- SyncGroup ----------------------------------------------------------------------

    def sync_group(self, ctx: RequestInfo, req: SyncGroupRequest, respond: Respond) -> None:
        if not req.group_id:
            respond(SyncGroupResponse(error_code=Error.INVALID_GROUP_ID))
            return
        if req.group_id in self.consumer_groups:
            self.consumer_manager.classic_sync(req, respond)
            return
        group = self.groups.get(req.group_id)
        if group is None or group.is_empty:
            respond(SyncGroupResponse(error_code=Error.UNKNOWN_MEMBER_ID))
            return
        member_id = req.member_id
        error = self._validate_sync_group(group, req)
        if error is not None:
            respond(SyncGroupResponse(error_code=error))
        elif group.is_in(PREPARING_REBALANCE):
            respond(SyncGroupResponse(error_code=Error.REBALANCE_IN_PROGRESS))
        elif group.is_in(COMPLETING_REBALANCE):
            group.member(member_id).awaiting_sync = respond
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                self._store_assignment(group, req)
        elif group.is_in(STABLE):
            self._remove_pending_sync_member(group, member_id)
            respond(SyncGroupResponse(
                error_code=Error.NONE, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=group.member(member_id).assignment))

    def _store_assignment(self, group: ClassicGroup, req: SyncGroupRequest) -> None:
        log.info("group %s: assignment received from leader %s for generation %d",
                 group.group_id, req.member_id, group.generation_id)
        assignment = {a.member_id: bytes(a.assignment) for a in req.assignments}
        missing = [m for m in group.members if m not in assignment]
        for member_id in missing:
            assignment[member_id] = b""
        if missing:
            log.warning("group %s: empty assignment for members %s in generation %d",
                        group.group_id, missing, group.generation_id)
        generation = req.generation_id

        def done(error: Error, _base_offset: int) -> None:
            # the group may have moved on while the record was being written
            if not (group.is_in(COMPLETING_REBALANCE) and group.generation_id == generation):
                return
            if error:
                mapped = append_error_to_response_error(error)
                self._reset_and_propagate_assignment_with_error(group, mapped)
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"error {mapped.name} storing the group assignment")
            else:
                for member in group.members.values():
                    member.assignment = assignment.get(member.member_id, b"")
                self._propagate_assignment(group, Error.NONE)
                group.transition_to(STABLE, self.clock())

        self.write(group.group_id, [self.group_metadata_record(group, assignment)], done)

    def _validate_sync_group(self, group: ClassicGroup, req: SyncGroupRequest) -> Error | None:
        if group.is_in(DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(req.member_id, req.group_instance_id, "sync-group")
        except KafkaError as e:
            return e.code
        if req.generation_id != group.generation_id:
            return Error.ILLEGAL_GENERATION
        if _inconsistent(req.protocol_type, group.protocol_type) or \
                _inconsistent(req.protocol_name, group.protocol_name):
            return Error.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.is_in(COMPLETING_REBALANCE, STABLE) or not group.pending_sync_members:
            self.timer.cancel(sync_key(group.group_id))

    def _reset_and_propagate_assignment_with_error(self, group: ClassicGroup,
                                                   error: Error) -> None:
        if not group.is_in(COMPLETING_REBALANCE):
            raise AssertionError(f"group {group.group_id} must be in CompletingRebalance, "
                                 f"not {group.state}")
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: Error) -> None:
        ok = error == Error.NONE
        for member in list(group.members.values()):
            response = SyncGroupResponse(
                error_code=error, assignment=member.assignment,
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None)
            if group.complete_sync(member, response):
                # restart the session clock once the member has its answer
                self._reschedule_heartbeat(group, member)

    # -- Heartbeat ----------------------------------------------------------------------

    def heartbeat(self, ctx: RequestInfo, req: HeartbeatRequest) -> Error:
        if not req.group_id:
            return Error.INVALID_GROUP_ID
        if req.group_id in self.consumer_groups:
            return self.consumer_manager.classic_heartbeat(req)
        group = self.groups.get(req.group_id)
        if group is None:
            return Error.UNKNOWN_MEMBER_ID
        if group.is_in(DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        try:
            group.validate_member(req.member_id, req.group_instance_id, "heartbeat")
        except KafkaError as e:
            return e.code
        if req.generation_id != group.generation_id:
            return Error.ILLEGAL_GENERATION
        if group.is_in(EMPTY):
            return Error.UNKNOWN_MEMBER_ID
        self._reschedule_heartbeat(group, group.member(req.member_id))
        if group.is_in(PREPARING_REBALANCE):
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    # -- LeaveGroup ---------------------------------------------------------------------

    def leave_group(self, ctx: RequestInfo, req: LeaveGroupRequest) -> LeaveGroupResponse:
        """``req.members`` must be set (the handler turns v0-2's member_id into one entry)."""
        if not req.group_id:
            return LeaveGroupResponse(error_code=Error.INVALID_GROUP_ID)
        if req.group_id in self.consumer_groups:
            return self.consumer_manager.classic_leave(req)
        group = self.groups.get(req.group_id)
        if group is None:
            return LeaveGroupResponse(members=[
                MemberResponse(m.member_id, m.group_instance_id, Error.UNKNOWN_MEMBER_ID)
                for m in req.members])
        if group.is_in(DEAD):
            return LeaveGroupResponse(error_code=Error.COORDINATOR_NOT_AVAILABLE)
        responses: list[MemberResponse] = []
        for identity in req.members:
            reason = identity.reason or "not provided"
            error = Error.NONE
            if identity.member_id == UNKNOWN_MEMBER_ID:
                # administrative removal of a static member by instance id
                instance = identity.group_instance_id
                if instance is not None and group.static_member_id(instance) is not None:
                    self._remove_current_member(group, group.static_member_id(instance), reason)
                else:
                    error = Error.UNKNOWN_MEMBER_ID
            elif group.is_pending_member(identity.member_id):
                group.remove(identity.member_id)
                self.timer.cancel(heartbeat_key(group.group_id, identity.member_id))
                log.info("group %s: pending member %s left (%s)", group.group_id,
                         identity.member_id, reason)
            else:
                try:
                    group.validate_member(identity.member_id, identity.group_instance_id,
                                          "leave-group")
                    self._remove_current_member(group, identity.member_id, reason)
                except KafkaError as e:
                    error = e.code
            responses.append(MemberResponse(identity.member_id, identity.group_instance_id,
                                            error))
        left = [r.member_id for r in responses if r.error_code == Error.NONE]
        if left:
            if group.is_in(STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(
                    group, f"explicit LeaveGroup of {left}")
            elif group.is_in(PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        return LeaveGroupResponse(members=responses)

    def _remove_current_member(self, group: ClassicGroup, member_id: str, reason: str) -> None:
        member = group.member(member_id)
        self.timer.cancel(heartbeat_key(group.group_id, member_id))
        log.info("group %s: member %s left (%s)", group.group_id, member_id, reason)
        group.complete_join(member, _join_error(UNKNOWN_MEMBER_ID, Error.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # -- ListGroups / DescribeGroups / DeleteGroups -------------------------------------

    def list_groups(self, states_filter: list[str], types_filter: list[str]) -> list[ListedGroup]:
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        listed = []
        for group in self.groups.values():
            if states and str(group.state).lower() not in states:
                continue
            if types and GROUP_TYPE not in types:
                continue
            listed.append(ListedGroup(group.group_id, group.protocol_type or "",
                                      str(group.state), GROUP_TYPE))
        return listed

    def describe_group(self, group_id: str, api_version: int = 5) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None:
            if api_version >= 6:  # KIP-1043: an unknown group is an error from v6
                return DescribedGroup(group_id=group_id, group_state=str(DEAD),
                                      error_code=Error.GROUP_ID_NOT_FOUND,
                                      error_message=f"Group {group_id} not found.")
            return DescribedGroup(group_id=group_id, group_state=str(DEAD))
        stable = group.is_in(STABLE)
        members = []
        for m in group.members.values():
            members.append(DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                client_id=m.client_id, client_host=m.client_host,
                member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment))
        return DescribedGroup(
            group_id=group_id, group_state=str(group.state),
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "", members=members)

    def validate_delete_group(self, group_id: str) -> None:
        group = self.group(group_id)
        if group.is_in(DEAD):
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {group_id} is in dead state.")
        if group.is_in(STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE):
            raise KafkaError(Error.NON_EMPTY_GROUP)

    # -- records and loading ------------------------------------------------------------

    def group_metadata_record(self, group: ClassicGroup,
                              assignment: dict[str, bytes]) -> CoordinatorRecord:
        members = []
        for m in group.members.values():
            if m.member_id not in assignment:
                raise AssertionError(f"member {m.member_id} of {group.group_id} has no "
                                     f"assignment")
            members.append(MemberMetadata(
                member_id=m.member_id, client_id=m.client_id, client_host=m.client_host,
                session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol_name),
                assignment=assignment[m.member_id], rebalance_timeout=m.rebalance_timeout_ms,
                group_instance_id=m.group_instance_id))
        ts = group.current_state_timestamp
        return CoordinatorRecord(GroupMetadataKey(group.group_id), GroupMetadataValue(
            protocol_type=group.protocol_type or "", generation=group.generation_id,
            protocol=group.protocol_name, leader=group.leader_id,
            current_state_timestamp=-1 if ts is None else ts, members=members))

    def replay_group_metadata(self, key: GroupMetadataKey,
                              value: GroupMetadataValue | None) -> None:
        if value is None:
            self.remove_group(key.group)
            return
        protocol_type = value.protocol_type or None
        group = ClassicGroup(
            key.group, STABLE if value.members else EMPTY,
            now_ms=None if value.current_state_timestamp == -1
            else value.current_state_timestamp,
            generation_id=value.generation, protocol_type=protocol_type,
            protocol_name=value.protocol, leader_id=value.leader)
        for m in value.members:
            rebalance_timeout = m.session_timeout if m.rebalance_timeout == -1 \
                else m.rebalance_timeout
            group.add(ClassicGroupMember(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                rebalance_timeout, m.session_timeout, value.protocol_type,
                [(value.protocol or "", m.subscription)], m.assignment))
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[key.group] = group

    def on_loaded(self, group_ids: list[str]) -> None:
        """Start the session clock of every member of freshly loaded groups."""
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            log.info("loaded group %s (%s, generation %d) with %d members", group_id,
                     group.state, group.generation_id, len(group.members))
            for member in group.members.values():
                self._reschedule_heartbeat(group, member)
            if len(group.members) > self.config.max_size:
                self._prepare_rebalance(group, f"loaded group {group_id} is over capacity")

    def unload(self, group_ids: list[str]) -> None:
        """Answer everything parked with NOT_COORDINATOR and forget the groups (shutdown)."""
        for group_id in group_ids:
            group = self.groups.pop(group_id, None)
            if group is None:
                continue
            for member in group.members.values():
                self.timer.cancel(heartbeat_key(group_id, member.member_id))
            for member_id in group.pending_join_members:
                self.timer.cancel(heartbeat_key(group_id, member_id))
            self.timer.cancel(join_key(group_id))
            self.timer.cancel(sync_key(group_id))
            group.transition_to(DEAD, self.clock())
            for member in list(group.members.values()):
                group.complete_join(member, _join_error(member.member_id,
                                                        Error.NOT_COORDINATOR))
                group.complete_sync(member, SyncGroupResponse(error_code=Error.NOT_COORDINATOR))


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
