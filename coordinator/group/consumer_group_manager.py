"""Consumer groups (KIP-848): ConsumerGroupHeartbeat, ConsumerGroupDescribe, fencing, records.

A pure state machine beside the classic ``GroupMetadataManager`` (Kafka's
GroupMetadataManager, consumer part): no I/O, time from ``clock()``, delays through the keyed
``Timer``, records through ``write(group_id, records, on_done)``. A heartbeat runs Kafka's
three steps:

1. update the member (subscription, rebalance timeout, assignor, client); bump the group
   epoch when a subscription changed or the subscribed topics' metadata (topic created,
   deleted, partitions added; regular expressions resolved against the current topics) no
   longer matches what the target assignment was computed with;
2. recompute the target assignment with the server-side assignor when the group epoch is
   ahead of the assignment epoch;
3. reconcile the member towards its target (``consumer_group.reconcile``).

Records (ConsumerGroupMetadata, PartitionMetadata, MemberMetadata, TargetAssignmentMember,
TargetAssignmentMetadata, CurrentMemberAssignment) are written for what changed; the
response leaves once they are durable. Members are fenced when they leave (epoch -1), miss
their session timeout (``group.consumer.session.timeout.ms``) or do not revoke within their
rebalance timeout; a static member (``group.instance.id``) leaving with epoch -2 keeps its
assignment until it rejoins or its session expires.

Regular expressions: Kafka resolves them with RE2/J (full match, internal topics excluded);
here Python's ``re`` (``fullmatch``), which agrees on the common syntax (RE2 lacks
backreferences and lookaround, which ``re`` would accept).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable

from semel.coordinator.group.assignors import ASSIGNORS, MemberSpec
from semel.coordinator.group.classic_group import STABLE, ClassicGroup, ClassicGroupMember
from semel.coordinator.group.config import GroupConfig
from semel.coordinator.group.consumer_group import (
    GROUP_TYPE,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    PROTOCOL_TYPE,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
    OwnedPartitions,
    TopicMetadata,
    is_subset,
    reconcile,
)
from semel.coordinator.group.consumer_protocol import (
    encode_assignment,
    parse_assignment,
    parse_subscription,
    protocol_version,
)
from semel.coordinator.group.consumer_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    ConsumerGroupKey,
    ConsumerGroupMetadataValue,
    CurrentMemberAssignmentValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
)
from semel.coordinator.group.group_manager import heartbeat_key, join_key, sync_key
from semel.coordinator.group.records import CoordinatorRecord, GroupMetadataKey
from semel.coordinator.group.timer import Timer
from semel.protocol.errors import Error, KafkaError, ProtocolError
from semel.protocol.messages.consumer_group_describe_response import (
    Assignment as DescribedAssignment,
)
from semel.protocol.messages.consumer_group_describe_response import (
    DescribedGroup,
    Member,
)
from semel.protocol.messages.consumer_group_describe_response import (
    TopicPartitions as DescribedTopicPartitions,
)
from semel.protocol.messages.consumer_group_heartbeat_request import (
    ConsumerGroupHeartbeatRequest,
)
from semel.protocol.messages.consumer_group_heartbeat_response import (
    Assignment as HeartbeatAssignment,
)
from semel.protocol.messages.consumer_group_heartbeat_response import (
    ConsumerGroupHeartbeatResponse,
)
from semel.protocol.messages.consumer_group_heartbeat_response import (
    TopicPartitions as HeartbeatTopicPartitions,
)
from semel.protocol.messages.heartbeat_request import HeartbeatRequest
from semel.protocol.messages.join_group_request import JoinGroupRequest
from semel.protocol.messages.join_group_response import JoinGroupResponse
from semel.protocol.messages.leave_group_request import LeaveGroupRequest
from semel.protocol.messages.leave_group_response import LeaveGroupResponse, MemberResponse
from semel.protocol.messages.list_groups_response import ListedGroup
from semel.protocol.messages.sync_group_request import SyncGroupRequest
from semel.protocol.messages.sync_group_response import SyncGroupResponse
from semel.storage.log_manager import kafka_uuid_string, random_kafka_uuid

log = logging.getLogger("coordinator.group")

# v1 (KIP-1082): the consumer generates its member id
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType
CLASSIC_MEMBER_TYPE = 0
# Kafka's GROUP resource operations without an authorizer: READ(3), DELETE(6), DESCRIBE(8)
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

Metadata = Callable[[], dict[str, TopicMetadata]]
Respond = Callable[[ConsumerGroupHeartbeatResponse], None]


def join_timeout_key(group_id: str, member_id: str) -> str:
    return f"consumer-join-{group_id}-{member_id}"


def sync_timeout_key(group_id: str, member_id: str) -> str:
    return f"consumer-sync-{group_id}-{member_id}"


def session_key(group_id: str, member_id: str) -> str:
    return f"consumer-session-{group_id}-{member_id}"


def rebalance_key(group_id: str, member_id: str) -> str:
    return f"consumer-rebalance-{group_id}-{member_id}"


def _is_internal(topic: str) -> bool:
    return topic in ("__consumer_offsets", "__transaction_state", "__share_group_state")


def _error(error: Error, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=error, error_message=message)


def _owned(req: ConsumerGroupHeartbeatRequest) -> OwnedPartitions:
    if req.topic_partitions is None:
        return None
    return [(tp.topic_id, list(tp.partitions)) for tp in req.topic_partitions]


def _to_record_tps(assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in sorted(assignment.items(), key=lambda i: str(i[0]))]


def _from_record_tps(tps) -> Assignment:
    return {t: frozenset(ps) for t, ps in tps if ps}


class ConsumerGroupManager:
    def __init__(self, config: GroupConfig, clock: Callable[[], int], timer: Timer,
                 write, metadata: Metadata, classic_groups: dict) -> None:
        self.config = config
        self.clock = clock
        self.timer = timer
        self.write = write
        self.metadata = metadata
        self.classic_groups = classic_groups  # the classic manager's groups (one namespace)
        self.groups: dict[str, ConsumerGroup] = {}
        self._regex_cache: dict[str, re.Pattern] = {}
        self._join_timeouts: set[str] = set()
        # the classic manager (set by the shard): downgrades hand groups over to it
        self.classic_manager = None
        # a group's GROUP config overrides by Kafka name (set by the coordinator: the
        # broker's dynamic configs); none by default
        self.group_configs: Callable[[str], dict[str, str]] = lambda group_id: {}

    # -- per-group settings (Kafka 4.x group configs fall back to the broker's) ----------

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms (a GROUP config), else the broker's."""
        value = self.group_configs(group_id).get("consumer.session.timeout.ms")
        return self.config.consumer_session_timeout_ms if value is None else int(value)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms (a GROUP config), else the broker's."""
        value = self.group_configs(group_id).get("consumer.heartbeat.interval.ms")
        return self.config.consumer_heartbeat_interval_ms if value is None else int(value)

    # -- ConsumerGroupHeartbeat ---------------------------------------------------------

    def heartbeat(self, client_id: str, client_host: str, api_version: int,
                  req: ConsumerGroupHeartbeatRequest, respond: Respond) -> None:
        try:
            self._validate_request(req, api_version)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                records, response = self._leave(req)
            else:
                records, response = self._heartbeat(client_id, client_host, req)
        except KafkaError as e:
            respond(_error(e.code, e.message or None))
            return
        if not records:
            respond(response)
            return

        def done(error: Error, _base: int) -> None:
            if error:
                from semel.coordinator.group.group_manager import append_error_to_response_error

                respond(_error(append_error_to_response_error(error)))
            else:
                respond(response)

        self.write(req.group_id, records, done)

    def _validate_request(self, req: ConsumerGroupHeartbeatRequest, api_version: int) -> None:
        def invalid(message: str) -> KafkaError:
            return KafkaError(Error.INVALID_REQUEST, message)

        if (api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or req.member_epoch > 0
                or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH) and not req.member_id:
            raise invalid("MemberId can't be empty.")
        if not req.group_id:
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            raise invalid("RackId can't be empty.")
        if req.member_epoch == 0:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be "
                              "non-null when (re-)joining.")
        elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        assignors = self.config.consumer_assignors
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise KafkaError(Error.UNSUPPORTED_ASSIGNOR,
                             f"ServerAssignor {req.server_assignor} is not supported. "
                             f"Supported assignors: {', '.join(assignors)}.")
        if req.subscribed_topic_regex:
            self._pattern(req.subscribed_topic_regex)

    def _pattern(self, regex: str) -> re.Pattern:
        pattern = self._regex_cache.get(regex)
        if pattern is None:
            try:
                pattern = re.compile(regex)
            except (re.error, RecursionError, OverflowError) as e:
                raise KafkaError(Error.INVALID_REGULAR_EXPRESSION,
                                 f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                 f"expression: {e}.") from None
            if len(self._regex_cache) > 1024:
                self._regex_cache.clear()
            self._regex_cache[regex] = pattern
        return pattern

    def _consumer_group(self, group_id: str, create: bool,
                        records: list[CoordinatorRecord]) -> ConsumerGroup:
        """Kafka's getOrMaybeCreateConsumerGroup: an empty classic group of the same id is
        replaced (its committed offsets stay); a non-empty one is not ours."""
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self.classic_groups.get(group_id)
        if classic is not None:
            if not create:
                raise KafkaError(Error.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} is not a consumer group.")
            if not classic.is_empty:
                return self._upgrade(classic, records)
            records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
            del self.classic_groups[group_id]
            log.info("group %s: empty classic group converted to a consumer group", group_id)
        elif not create:
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _heartbeat(self, client_id: str, client_host: str, req: ConsumerGroupHeartbeatRequest
                   ) -> tuple[list[CoordinatorRecord], ConsumerGroupHeartbeatResponse]:
        records: list[CoordinatorRecord] = []
        group_id = req.group_id
        joining = req.member_epoch == 0
        owned = _owned(req)
        group = self._consumer_group(group_id, joining, records)
        # v0: the coordinator names a joining member (Kafka's Uuid.randomUuid().toString())
        member_id = req.member_id or kafka_uuid_string(random_kafka_uuid())
        if len(group.members) >= self.config.consumer_max_size and \
                (not req.member_id or member_id not in group.members):
            raise KafkaError(Error.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its "
                             f"maximum capacity of {self.config.consumer_max_size} members.")
        if req.instance_id is None:
            member = self._dynamic_member(group, member_id, req.member_epoch, owned, joining)
        else:
            member = self._static_member(group, member_id, req.member_epoch, req.instance_id,
                                         owned, joining, records)
        is_new = member.member_id not in group.members
        updated = member.copy(
            client_id=client_id, client_host=client_host,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None
            else member.server_assignor,
            subscribed_topic_names=sorted(req.subscribed_topic_names)
            if req.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(req.subscribed_topic_regex or None)
            if req.subscribed_topic_regex is not None else member.subscribed_topic_regex)
        reconciled = self._update_and_reconcile(group, member, updated, is_new, owned, records)
        self._schedule_session_timeout(group_id, reconciled.member_id)
        response = ConsumerGroupHeartbeatResponse(
            member_id=reconciled.member_id, member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.heartbeat_interval_ms(group_id))
        full = req.rebalance_timeout_ms != -1 and owned is not None and \
            (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        if joining or full or reconciled.assigned != member.assigned:
            response.assignment = HeartbeatAssignment([
                HeartbeatTopicPartitions(t, ps) for t, ps in _to_record_tps(reconciled.assigned)])
        return records, response

    def _update_and_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember,
                              updated: ConsumerGroupMember, is_new: bool,
                              owned: OwnedPartitions, records: list[CoordinatorRecord]
                              ) -> ConsumerGroupMember:
        """Kafka's three heartbeat steps for ``member`` becoming ``updated`` (shared by
        ConsumerGroupHeartbeat and classic members' JoinGroup): group epoch, target
        assignment, reconciliation; records for what changed."""
        group_id = group.group_id
        subscription_changed = is_new or \
            updated.subscribed_topic_names != member.subscribed_topic_names or \
            updated.subscribed_topic_regex != member.subscribed_topic_regex
        if is_new or not updated.same_metadata(member):
            records.append(self._member_metadata_record(group_id, updated))
        # 1. the group epoch
        group.update_member(updated)
        metadata = self._subscription_metadata(group)
        metadata_changed = metadata != group.subscription_metadata
        if group.group_epoch == 0 or subscription_changed or metadata_changed:
            if metadata_changed:
                group.subscription_metadata = metadata
                records.append(self._partition_metadata_record(group))
            if group.group_epoch == 0 or subscription_changed or metadata_changed:
                group.group_epoch += 1
                records.append(self._group_epoch_record(group))
                log.info("group %s: epoch bumped to %d", group_id, group.group_epoch)
        # 2. the target assignment
        if group.group_epoch > group.assignment_epoch:
            self._update_target_assignment(group, records)
        target = group.target_assignment.get(updated.member_id, {})
        # 3. reconcile
        subscribed_ids = self._subscribed_topic_ids(updated)
        reconciled = reconcile(updated, group.assignment_epoch, target, subscribed_ids,
                               subscription_changed, group.partition_epoch, owned)
        if reconciled is not updated:
            group.update_member(reconciled)
        if is_new or not reconciled.same_assignment(member):
            records.append(self._current_assignment_record(group_id, reconciled))
            if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group_id, reconciled)
            else:
                self.timer.cancel(rebalance_key(group_id, reconciled.member_id))
        return reconciled

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, epoch: int,
                        owned: OwnedPartitions, joining: bool) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise KafkaError(Error.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a "
                                 f"member of group {group.group_id}.")
            log.info("group %s: member %s joins", group.group_id, member_id)
            return ConsumerGroupMember(member_id)
        _check_epoch(member, epoch, owned)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, epoch: int,
                       instance_id: str, owned: OwnedPartitions, joining: bool,
                       records: list[CoordinatorRecord]) -> ConsumerGroupMember:
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                log.info("group %s: static member %s (%s) joins", group.group_id, member_id,
                         instance_id)
                return group.members.get(member_id) or ConsumerGroupMember(member_id)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(Error.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} "
                                 f"cannot join the group because the instance id is owned by "
                                 f"{existing.member_id} member.")
            replacement = existing.copy(member_id=member_id, member_epoch=0,
                                        previous_member_epoch=0)
            self._replace_member(group, existing, replacement, records)
            log.info("group %s: static member %s rejoins as %s, replacing %s",
                     group.group_id, instance_id, member_id, existing.member_id)
            return replacement
        if existing is None:
            raise KafkaError(Error.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise KafkaError(Error.FENCED_INSTANCE_ID,
                             f"Static member {member_id} with instance id {instance_id} was "
                             f"fenced by member {existing.member_id}.")
        _check_epoch(existing, epoch, owned)
        return existing

    def _replace_member(self, group: ConsumerGroup, old: ConsumerGroupMember,
                        new: ConsumerGroupMember, records: list[CoordinatorRecord]) -> None:
        """A static member's new incarnation takes over the old one's assignment."""
        group_id = group.group_id
        target = group.target_assignment.get(old.member_id, {})
        self._remove_member(group, old.member_id, records)
        group.update_member(new)
        group.target_assignment[new.member_id] = target
        records.append(self._member_metadata_record(group_id, new))
        records.append(self._target_member_record(group_id, new.member_id, target))
        records.append(self._current_assignment_record(group_id, new))

    # -- online migration: upgrade and downgrade ----------------------------------------

    def _upgrade(self, classic: ClassicGroup, records: list[CoordinatorRecord]
                 ) -> ConsumerGroup:
        """Kafka's validateOnlineUpgrade + convertToConsumerGroup: a non-empty classic group
        joined by a consumer-protocol member becomes a consumer group at epoch = its
        generation, each classic member Stable with its last SyncGroup assignment as both
        current and target assignment; they keep using JoinGroup/SyncGroup/Heartbeat."""
        group_id = classic.group_id

        def refuse(why: str) -> KafkaError:
            log.info("group %s: cannot upgrade the classic group: %s", group_id, why)
            return KafkaError(Error.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group "
                              f"{group_id} to consumer group because {why}.")

        if not self.config.upgrade_enabled:
            raise refuse("online upgrade is disabled")
        if classic.protocol_type != PROTOCOL_TYPE:
            raise refuse("the group does not use the consumer embedded protocol")
        if len(classic.members) > self.config.consumer_max_size:
            raise refuse("the group size exceeds the consumer group maximum size")
        topics = self.metadata()
        group = ConsumerGroup(group_id)
        group.group_epoch = group.assignment_epoch = classic.generation_id
        try:
            for m in classic.members.values():
                assigned: Assignment = {}
                if m.assignment:
                    partitions, user_data = parse_assignment(m.assignment)
                    if user_data:
                        raise refuse("an unsupported custom assignor is in use")
                    assigned = self._ids_of(partitions, topics)
                sub = parse_subscription(m.metadata(classic.protocol_name))
                member = ConsumerGroupMember(
                    m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id,
                    client_id=m.client_id, client_host=m.client_host,
                    subscribed_topic_names=sorted(sub.topics),
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    member_epoch=classic.generation_id,
                    previous_member_epoch=classic.generation_id, assigned=assigned,
                    classic=ClassicMemberMetadata(m.session_timeout_ms, list(m.protocols)))
                group.target_assignment[m.member_id] = assigned
                group.update_member(member)
        except ProtocolError:
            raise refuse("the embedded consumer protocol is malformed") from None
        # parked JoinGroup/SyncGroup requests rejoin the new group
        for m in list(classic.members.values()):
            classic.complete_join(m, JoinGroupResponse(
                error_code=Error.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            classic.complete_sync(m, SyncGroupResponse(error_code=Error.REBALANCE_IN_PROGRESS))
        for member_id in [*classic.members, *classic.pending_join_members]:
            self.timer.cancel(heartbeat_key(group_id, member_id))
        self.timer.cancel(join_key(group_id))
        self.timer.cancel(sync_key(group_id))
        classic.pending_join_members.clear()
        records.append(CoordinatorRecord(GroupMetadataKey(group_id), None))
        del self.classic_groups[group_id]
        group.subscription_metadata = self._subscription_metadata(group)
        for member in group.members.values():
            records.append(self._member_metadata_record(group_id, member))
        records.append(self._group_epoch_record(group))
        records.append(self._partition_metadata_record(group))
        for member_id, assignment in group.target_assignment.items():
            records.append(self._target_member_record(group_id, member_id, assignment))
        records.append(CoordinatorRecord(
            ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id),
            TargetAssignmentMetadataValue(group.assignment_epoch)))
        for member in group.members.values():
            records.append(self._current_assignment_record(group_id, member))
        self.groups[group_id] = group
        for member_id in group.members:
            self._schedule_session_timeout(group_id, member_id)
        log.info("group %s: classic group converted to a consumer group (epoch %d, %d "
                 "classic members)", group_id, group.group_epoch, len(group.members))
        return group

    def _maybe_downgrade(self, group: ConsumerGroup, leaving: set[str],
                         records: list[CoordinatorRecord]) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMembers + convertToClassicGroup: when
        the members left after ``leaving`` all use the classic protocol (and there are
        some), the policy allows it and they fit a classic group, the group becomes a
        Stable classic group of generation = the group epoch, each member with its target
        assignment, and a rebalance starts at once."""
        remaining = [m for m in group.members.values() if m.member_id not in leaving]
        if not remaining or not group.all_classic_except(leaving):
            return False
        if not self.config.downgrade_enabled:
            log.info("group %s: cannot downgrade to a classic group: the online downgrade "
                     "is disabled", group.group_id)
            return False
        if len(remaining) > self.config.max_size:
            log.info("group %s: cannot downgrade to a classic group: more members than "
                     "group.max.size", group.group_id)
            return False
        group_id = group.group_id
        topics = {t.topic_id: t.name for t in self.metadata().values()}
        classic = ClassicGroup(group_id, STABLE, now_ms=self.clock(),
                               generation_id=group.group_epoch, protocol_type=PROTOCOL_TYPE)
        for m in remaining:
            classic.add(ClassicGroupMember(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.classic.session_timeout_ms, PROTOCOL_TYPE, list(m.classic.protocols)))
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        assignments = {}
        for m in remaining:
            cm = classic.member(m.member_id)
            target = group.target_assignment.get(m.member_id, {})
            names = sorted((topics[t], sorted(ps)) for t, ps in target.items() if t in topics)
            version = protocol_version(cm.metadata(classic.protocol_name))
            cm.assignment = assignments[m.member_id] = encode_assignment(names, version)
        for member_id in list(group.members):
            self._remove_member(group, member_id, records)
        records.extend(self.delete_group_records(group_id))
        self.remove_group(group_id)
        manager = self.classic_manager
        records.append(manager.group_metadata_record(classic, assignments))
        self.classic_groups[group_id] = classic
        for cm in classic.members.values():
            manager.reschedule_heartbeat(classic, cm)
        log.info("group %s: consumer group converted to a classic group", group_id)
        manager.prepare_rebalance(classic, f"Downgrade group {group_id} from consumer to "
                                           "classic for member leaving.")
        return True

    def _ids_of(self, partitions, topics: dict[str, TopicMetadata]) -> Assignment:
        """Topic names to ids; unknown topics are dropped (Kafka's toTopicPartitionMap)."""
        out: Assignment = {}
        for name, ps in partitions:
            topic = topics.get(name)
            if topic is not None and ps:
                out[topic.topic_id] = out.get(topic.topic_id, frozenset()) | frozenset(ps)
        return out

    # -- classic members of a consumer group (JoinGroup, SyncGroup, Heartbeat, Leave) ----

    def _classic_member(self, group: ConsumerGroup, member_id: str,
                        instance_id: str | None) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.member(member_id)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise KafkaError(Error.UNKNOWN_MEMBER_ID,
                                 f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise KafkaError(Error.FENCED_INSTANCE_ID, f"Static member {member_id} with "
                                 f"instance id {instance_id} was fenced by member "
                                 f"{member.member_id}.")
        if member.classic is None:
            raise KafkaError(Error.UNKNOWN_MEMBER_ID,
                             f"Member {member.member_id} does not use the classic protocol.")
        return member

    def classic_join(self, client_id: str, client_host: str, api_version: int,
                     req: JoinGroupRequest, respond) -> None:
        """Kafka's classicGroupJoinToConsumerGroup: the classic member's subscription (from
        its first protocol's metadata) goes through the same three steps as a heartbeat; the
        answer carries its member epoch as the generation, once the records are durable."""
        group_id = req.group_id
        group = self.groups[group_id]
        member_id = req.member_id
        is_unknown = member_id == ""
        if is_unknown:
            member_id = kafka_uuid_string(random_kafka_uuid())
        records: list[CoordinatorRecord] = []
        try:
            if member_id not in group.members and \
                    len(group.members) >= self.config.consumer_max_size:
                raise KafkaError(Error.GROUP_MAX_SIZE_REACHED, "The consumer group has reached "
                                 f"its maximum capacity of {self.config.consumer_max_size} "
                                 "members.")
            names = {p.name for p in req.protocols}
            if not group.supports_classic_protocols(req.protocol_type, names):
                raise KafkaError(Error.INCONSISTENT_GROUP_PROTOCOL,
                                 f"Member {member_id}'s protocols are not supported.")
            if is_unknown and req.group_instance_id is None and api_version >= 4:
                log.info("group %s: dynamic classic member joins; asking it to rejoin as %s",
                         group_id, member_id)
                respond(JoinGroupResponse(error_code=Error.MEMBER_ID_REQUIRED,
                                          member_id=member_id))
                return
            try:
                sub = parse_subscription(bytes(req.protocols[0].metadata))
            except ProtocolError as e:
                raise KafkaError(Error.INCONSISTENT_GROUP_PROTOCOL,
                                 f"Malformed embedded consumer protocol: {e}") from None
            member = self._classic_joining_member(group, member_id, req.group_instance_id,
                                                  records)
        except KafkaError as e:
            respond(JoinGroupResponse(error_code=e.code, member_id=req.member_id))
            return
        member_id = member.member_id
        is_new = member_id not in group.members
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        updated = member.copy(
            instance_id=req.group_instance_id if req.group_instance_id is not None
            else member.instance_id,
            rack_id=sub.rack_id if sub.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=None, subscribed_topic_names=sorted(sub.topics),
            subscribed_topic_regex=None, client_id=client_id, client_host=client_host,
            classic=ClassicMemberMetadata(req.session_timeout_ms, protocols))
        topics = self.metadata()
        owned = [(t, sorted(ps)) for t, ps in
                 self._ids_of(sub.owned_partitions, topics).items()]
        reconciled = self._update_and_reconcile(group, member, updated, is_new, owned, records)
        response = JoinGroupResponse(
            error_code=Error.NONE, member_id=member_id, generation_id=reconciled.member_epoch,
            protocol_type=PROTOCOL_TYPE, protocol_name=protocols[0][0], leader="")
        log.info("group %s: classic member %s joins at epoch %d (%s)", group_id, member_id,
                 reconciled.member_epoch, reconciled.state.label)

        def done(error: Error, _base: int) -> None:
            if error:
                from semel.coordinator.group.group_manager import append_error_to_response_error

                respond(JoinGroupResponse(error_code=append_error_to_response_error(error),
                                          member_id=member_id))
                return
            self._cancel_join_timeout(group_id, member_id)
            if self.groups.get(group_id) is group and member_id in group.members:
                self._schedule_session_timeout(group_id, member_id)
                self._schedule_sync_timeout(group_id, member_id, req.rebalance_timeout_ms)
            respond(response)

        self.write(group_id, records, done)

    def _classic_joining_member(self, group: ConsumerGroup, member_id: str,
                                instance_id: str | None, records: list[CoordinatorRecord]
                                ) -> ConsumerGroupMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is not None and member.classic is None:
                raise KafkaError(Error.UNKNOWN_MEMBER_ID, f"Member {member_id} does not use "
                                 "the classic protocol.")
            return member or ConsumerGroupMember(member_id)
        existing = group.static_member(instance_id)
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        if existing.member_id == member_id:
            return existing
        # a new incarnation of the static member takes over the old one's assignment
        replacement = existing.copy(member_id=member_id)
        self._replace_member(group, existing, replacement, records)
        log.info("group %s: static classic member %s rejoins as %s, replacing %s",
                 group.group_id, instance_id, member_id, existing.member_id)
        return replacement

    def classic_sync(self, req: SyncGroupRequest, respond) -> None:
        """Kafka's classicGroupSyncToConsumerGroup: the member's current assignment,
        serialized with the consumer protocol at its subscription's version."""
        group_id = req.group_id
        try:
            group = self.groups[group_id]
            member = self._classic_member(group, req.member_id, req.group_instance_id)
            if req.generation_id != member.member_epoch:
                raise KafkaError(Error.ILLEGAL_GENERATION)
            protocol_name = member.classic.protocols[0][0]
            if (req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE) or \
                    (req.protocol_name is not None and req.protocol_name != protocol_name):
                raise KafkaError(Error.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and \
                    member.state is not MemberState.UNREVOKED_PARTITIONS:
                self._schedule_join_timeout_if_absent(group_id, member)
                raise KafkaError(Error.REBALANCE_IN_PROGRESS)
        except KafkaError as e:
            respond(SyncGroupResponse(error_code=e.code))
            return
        self.timer.cancel(sync_timeout_key(group_id, member.member_id))
        self._schedule_session_timeout(group_id, member.member_id)
        names = {t.topic_id: t.name for t in self.metadata().values()}
        partitions = sorted((names[t], sorted(ps)) for t, ps in member.assigned.items()
                            if t in names)
        version = protocol_version(member.classic.protocols[0][1])
        respond(SyncGroupResponse(error_code=Error.NONE, protocol_type=req.protocol_type,
                                  protocol_name=req.protocol_name,
                                  assignment=encode_assignment(partitions, version)))

    def classic_heartbeat(self, req: HeartbeatRequest) -> Error:
        """Kafka's classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS when the
        member must rejoin (the group epoch moved on, it has partitions to revoke, or the
        partitions it waits for are free now)."""
        group_id = req.group_id
        try:
            group = self.groups[group_id]
            member = self._classic_member(group, req.member_id, req.group_instance_id)
            if req.generation_id != member.member_epoch:
                raise KafkaError(Error.ILLEGAL_GENERATION)
        except KafkaError as e:
            return e.code
        self._schedule_session_timeout(group_id, member.member_id)
        if member.member_epoch < group.group_epoch or \
                member.state is MemberState.UNREVOKED_PARTITIONS or \
                (member.state is MemberState.UNRELEASED_PARTITIONS
                 and not group.waiting_on_unreleased_partition(member)):
            self._schedule_join_timeout_if_absent(group_id, member)
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    def classic_leave(self, req: LeaveGroupRequest) -> LeaveGroupResponse:
        """Kafka's classicGroupLeaveToConsumerGroup: the members named leave (fenced
        together), which may convert the group back to a classic group."""
        group = self.groups[req.group_id]
        responses = []
        leaving: dict[str, ConsumerGroupMember] = {}
        for identity in req.members:
            error = Error.NONE
            try:
                if identity.group_instance_id is None:
                    member = group.member(identity.member_id)
                else:
                    member = group.static_member(identity.group_instance_id)
                    if member is None:
                        raise KafkaError(Error.UNKNOWN_MEMBER_ID)
                    if identity.member_id and identity.member_id != member.member_id:
                        raise KafkaError(Error.FENCED_INSTANCE_ID)
                leaving[member.member_id] = member
                log.info("group %s: member %s left through LeaveGroup (%s)", group.group_id,
                         member.member_id, identity.reason or "not provided")
            except KafkaError as e:
                error = e.code
            responses.append(MemberResponse(identity.member_id, identity.group_instance_id,
                                            error))
        if leaving:
            records: list[CoordinatorRecord] = []
            if not self._maybe_downgrade(group, set(leaving), records):
                for member_id in leaving:
                    self._remove_member(group, member_id, records)
                metadata = self._subscription_metadata(group)
                if metadata != group.subscription_metadata:
                    group.subscription_metadata = metadata
                    records.append(self._partition_metadata_record(group))
                group.group_epoch += 1
                records.append(self._group_epoch_record(group))
            self.write(group.group_id, records, None)
        return LeaveGroupResponse(members=responses)

    def _schedule_join_timeout_if_absent(self, group_id: str,
                                         member: ConsumerGroupMember) -> None:
        key = join_timeout_key(group_id, member.member_id)
        if key in self._join_timeouts:
            return
        self._join_timeouts.add(key)
        member_id = member.member_id

        def expire() -> None:
            self._join_timeouts.discard(key)
            self._fence_by_timer(group_id, member_id,
                                 "the classic member failed to join within the rebalance timeout")

        self.timer.schedule(key, member.rebalance_timeout_ms, expire)

    def _cancel_join_timeout(self, group_id: str, member_id: str) -> None:
        key = join_timeout_key(group_id, member_id)
        self._join_timeouts.discard(key)
        self.timer.cancel(key)

    def _schedule_sync_timeout(self, group_id: str, member_id: str, timeout_ms: int) -> None:
        self.timer.schedule(sync_timeout_key(group_id, member_id), timeout_ms,
                            lambda: self._fence_by_timer(
                                group_id, member_id, "the member failed to sync within timeout"))

    def _cancel_classic_timers(self, group_id: str, member_id: str) -> None:
        self._cancel_join_timeout(group_id, member_id)
        self.timer.cancel(sync_timeout_key(group_id, member_id))

    # -- leaving and fencing ------------------------------------------------------------

    def _leave(self, req: ConsumerGroupHeartbeatRequest
               ) -> tuple[list[CoordinatorRecord], ConsumerGroupHeartbeatResponse]:
        group = self.groups.get(req.group_id)
        if group is None:
            raise KafkaError(Error.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        response = ConsumerGroupHeartbeatResponse(member_id=req.member_id,
                                                  member_epoch=req.member_epoch)
        records: list[CoordinatorRecord] = []
        if req.instance_id is None:
            group.member(req.member_id)
            log.info("group %s: member %s left", group.group_id, req.member_id)
            self._fence(group, req.member_id, records)
            return records, response
        member = group.static_member(req.instance_id)
        if member is None:
            raise KafkaError(Error.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise KafkaError(Error.FENCED_INSTANCE_ID,
                             f"Static member {req.member_id} with instance id "
                             f"{req.instance_id} was fenced by member {member.member_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("group %s: static member %s (%s) left temporarily", group.group_id,
                     member.member_id, req.instance_id)
            left = member.copy(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            group.update_member(left)
            records.append(self._current_assignment_record(group.group_id, left))
            return records, response
        log.info("group %s: static member %s (%s) left", group.group_id, member.member_id,
                 req.instance_id)
        self._fence(group, member.member_id, records)
        return records, response

    def _fence(self, group: ConsumerGroup, member_id: str,
               records: list[CoordinatorRecord]) -> None:
        """Kafka's consumerGroupFenceMember: remove, then bump the group epoch so that the
        member's partitions are assigned again; or, when only classic members remain and
        the policy allows, convert the group back to a classic group (online downgrade)."""
        if self._maybe_downgrade(group, {member_id}, records):
            return
        self._remove_member(group, member_id, records)
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            group.subscription_metadata = metadata
            records.append(self._partition_metadata_record(group))
        group.group_epoch += 1
        records.append(self._group_epoch_record(group))

    def _remove_member(self, group: ConsumerGroup, member_id: str,
                       records: list[CoordinatorRecord]) -> None:
        group_id = group.group_id
        for record_type in (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                            CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                            CONSUMER_GROUP_MEMBER_METADATA):
            records.append(CoordinatorRecord(ConsumerGroupKey(record_type, group_id, member_id),
                                             None))
        group.remove_member(member_id)
        self.timer.cancel(session_key(group_id, member_id))
        self.timer.cancel(rebalance_key(group_id, member_id))
        self._cancel_classic_timers(group_id, member_id)

    def _fence_by_timer(self, group_id: str, member_id: str, reason: str,
                        epoch: int | None = None) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        member = group.members[member_id]
        if epoch is not None and (member.member_epoch != epoch
                                  or member.state is not MemberState.UNREVOKED_PARTITIONS):
            return
        log.info("group %s: member %s fenced: %s", group_id, member_id, reason)
        records: list[CoordinatorRecord] = []
        self._fence(group, member_id, records)
        self.write(group_id, records, None)

    def _schedule_session_timeout(self, group_id: str, member_id: str) -> None:
        """A classic member's session is the one it asked for in JoinGroup."""
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        timeout = member.classic.session_timeout_ms \
            if member is not None and member.classic is not None \
            else self.session_timeout_ms(group_id)
        self.timer.schedule(session_key(group_id, member_id), timeout,
                            lambda: self._fence_by_timer(group_id, member_id,
                                                         "the member session expired"))

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 \
            else self.session_timeout_ms(group_id)
        self.timer.schedule(rebalance_key(group_id, member_id), timeout,
                            lambda: self._fence_by_timer(
                                group_id, member_id, "it did not revoke its partitions within "
                                "the rebalance timeout", epoch))

    # -- subscriptions and the target assignment ----------------------------------------

    def _resolve_regex(self, regex: str, topics: dict[str, TopicMetadata]) -> set[str]:
        pattern = self._pattern(regex)
        return {name for name in topics if not _is_internal(name) and pattern.fullmatch(name)}

    def _subscription_metadata(self, group: ConsumerGroup) -> dict[str, TopicMetadata]:
        topics = self.metadata()
        names = group.subscribed_topic_names(lambda rx: self._resolve_regex(rx, topics))
        return {name: topics[name] for name in sorted(names) if name in topics}

    def _member_topic_names(self, member: ConsumerGroupMember,
                            topics: dict[str, TopicMetadata]) -> set[str]:
        names = {n for n in member.subscribed_topic_names if n in topics}
        if member.subscribed_topic_regex:
            names |= self._resolve_regex(member.subscribed_topic_regex, topics)
        return names

    def _subscribed_topic_ids(self, member: ConsumerGroupMember) -> set[uuid.UUID]:
        topics = self.metadata()
        return {topics[n].topic_id for n in self._member_topic_names(member, topics)}

    def _update_target_assignment(self, group: ConsumerGroup,
                                  records: list[CoordinatorRecord]) -> None:
        metadata = group.subscription_metadata
        specs = {}
        for member_id, member in group.members.items():
            ids = {metadata[n].topic_id for n in self._member_topic_names(member, metadata)}
            specs[member_id] = MemberSpec(ids, group.target_assignment.get(member_id, {}))
        sizes = {t.topic_id: t.num_partitions for t in metadata.values()}
        assignor = group.preferred_assignor(self.config.consumer_assignors[0])
        new = ASSIGNORS.get(assignor, ASSIGNORS["uniform"])(specs, sizes)
        for member_id, assignment in new.items():
            if group.target_assignment.get(member_id) != assignment:
                records.append(self._target_member_record(group.group_id, member_id,
                                                          assignment))
            group.target_assignment[member_id] = assignment
        group.assignment_epoch = group.group_epoch
        records.append(CoordinatorRecord(
            ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group.group_id),
            TargetAssignmentMetadataValue(group.assignment_epoch)))
        log.info("group %s: target assignment of epoch %d computed by %s", group.group_id,
                 group.assignment_epoch, assignor)

    # -- records ------------------------------------------------------------------------

    def _group_epoch_record(self, group: ConsumerGroup) -> CoordinatorRecord:
        return CoordinatorRecord(ConsumerGroupKey(CONSUMER_GROUP_METADATA, group.group_id),
                                 ConsumerGroupMetadataValue(group.group_epoch))

    def _partition_metadata_record(self, group: ConsumerGroup) -> CoordinatorRecord:
        return CoordinatorRecord(
            ConsumerGroupKey(CONSUMER_GROUP_PARTITION_METADATA, group.group_id),
            PartitionMetadataValue([(t.topic_id, t.name, t.num_partitions)
                                    for t in group.subscription_metadata.values()]))

    def _member_metadata_record(self, group_id: str,
                                member: ConsumerGroupMember) -> CoordinatorRecord:
        return CoordinatorRecord(
            ConsumerGroupKey(CONSUMER_GROUP_MEMBER_METADATA, group_id, member.member_id),
            MemberMetadataValue(member.instance_id, member.rack_id, member.client_id,
                                member.client_host, list(member.subscribed_topic_names),
                                member.subscribed_topic_regex, member.rebalance_timeout_ms,
                                member.server_assignor, member.classic))

    def _target_member_record(self, group_id: str, member_id: str,
                              assignment: Assignment) -> CoordinatorRecord:
        return CoordinatorRecord(
            ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
            TargetAssignmentMemberValue(_to_record_tps(assignment)))

    def _current_assignment_record(self, group_id: str,
                                   member: ConsumerGroupMember) -> CoordinatorRecord:
        return CoordinatorRecord(
            ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id,
                             member.member_id),
            CurrentMemberAssignmentValue(member.member_epoch, member.previous_member_epoch,
                                         member.state.value, _to_record_tps(member.assigned),
                                         _to_record_tps(member.pending_revocation)))

    def delete_group_records(self, group_id: str) -> list[CoordinatorRecord]:
        """Tombstones of an empty group's own records (DeleteGroups, offsets cleanup)."""
        return [CoordinatorRecord(ConsumerGroupKey(t, group_id), None) for t in (
            CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
            CONSUMER_GROUP_METADATA)]

    def remove_group(self, group_id: str) -> None:
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.dead = True

    def replay(self, key: ConsumerGroupKey, value) -> None:
        """Apply one consumer group record read from ``__consumer_offsets``."""
        group_id = key.group
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return
            self.classic_groups.pop(group_id, None)  # an empty classic group was converted
            group = self.groups[group_id] = ConsumerGroup(group_id)
        rtype = key.record_type
        if rtype == CONSUMER_GROUP_METADATA:
            if value is None:
                self.remove_group(group_id)
            else:
                group.group_epoch = value.epoch
        elif rtype == CONSUMER_GROUP_PARTITION_METADATA:
            group.subscription_metadata = {} if value is None else {
                name: TopicMetadata(topic_id, name, n) for topic_id, name, n in value.topics}
        elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = 0 if value is None else value.assignment_epoch
        elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                group.target_assignment.pop(key.member, None)
            else:
                group.target_assignment[key.member] = _from_record_tps(value.topic_partitions)
        elif rtype == CONSUMER_GROUP_MEMBER_METADATA:
            if value is None:
                group.remove_member(key.member)
                return
            old = group.members.get(key.member) or ConsumerGroupMember(key.member)
            group.update_member(old.copy(
                instance_id=value.instance_id, rack_id=value.rack_id,
                client_id=value.client_id, client_host=value.client_host,
                subscribed_topic_names=list(value.subscribed_topic_names),
                subscribed_topic_regex=value.subscribed_topic_regex,
                rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor, classic=value.classic))
        elif rtype == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            old = group.members.get(key.member)
            if old is None:
                return  # the member's metadata tombstone came first
            if value is None:
                group.update_member(old.copy(assigned={}, pending_revocation={}))
                return
            try:
                state = MemberState(value.state)
            except ValueError:
                state = MemberState.UNKNOWN
            group.update_member(old.copy(
                member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                state=state, assigned=_from_record_tps(value.assigned),
                pending_revocation=_from_record_tps(value.pending_revocation)))

    def on_loaded(self, group_ids: list[str]) -> None:
        """Start the session clock of every member of the loaded groups."""
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                continue
            log.info("loaded consumer group %s (%s, epoch %d) with %d members", group_id,
                     group.state, group.group_epoch, len(group.members))
            for member_id in group.members:
                self._schedule_session_timeout(group_id, member_id)

    def unload(self) -> None:
        for group_id, group in self.groups.items():
            for member_id in group.members:
                self.timer.cancel(session_key(group_id, member_id))
                self.timer.cancel(rebalance_key(group_id, member_id))
        self.groups.clear()

    # -- ConsumerGroupDescribe / ListGroups ---------------------------------------------

    def describe(self, group_id: str, include_operations: bool = False) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None:
            message = f"Group {group_id} is not a consumer group." \
                if group_id in self.classic_groups else f"Group {group_id} not found."
            return DescribedGroup(error_code=Error.GROUP_ID_NOT_FOUND, error_message=message,
                                  group_id=group_id)
        names = {t.topic_id: t.name for t in self.metadata().values()}

        def described(assignment: Assignment) -> DescribedAssignment:
            return DescribedAssignment([
                DescribedTopicPartitions(t, names.get(t, ""), ps)
                for t, ps in _to_record_tps(assignment)])

        members = [Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
            member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex, assignment=described(m.assigned),
            target_assignment=described(group.target_assignment.get(m.member_id, {})),
            member_type=CLASSIC_MEMBER_TYPE if m.classic is not None else CONSUMER_MEMBER_TYPE)
            for m in group.members.values()]
        return DescribedGroup(
            group_id=group_id, group_state=str(group.state), group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=group.preferred_assignor(self.config.consumer_assignors[0]),
            members=members,
            authorized_operations=GROUP_AUTHORIZED_OPERATIONS if include_operations
            else -2147483648)

    def list_groups(self, states: set[str], types: set[str]) -> list[ListedGroup]:
        if types and GROUP_TYPE not in types:
            return []
        return [ListedGroup(g.group_id, PROTOCOL_TYPE, str(g.state), GROUP_TYPE)
                for g in self.groups.values()
                if not states or str(g.state).lower() in states]


def _check_epoch(member: ConsumerGroupMember, received: int, owned: OwnedPartitions) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
    if received > member.member_epoch:
        raise KafkaError(Error.FENCED_MEMBER_EPOCH,
                         f"The consumer group member has a greater member epoch ({received}) "
                         f"than the one known by the group coordinator ({member.member_epoch})."
                         " The member must abandon all its partitions and rejoin.")
    if received < member.member_epoch and (received != member.previous_member_epoch
                                           or not is_subset(owned, member.assigned)):
        raise KafkaError(Error.FENCED_MEMBER_EPOCH,
                         f"The consumer group member has a smaller member epoch ({received}) "
                         f"than the one known by the group coordinator ({member.member_epoch})."
                         " The member must abandon all its partitions and rejoin.")


__all__ = ["ConsumerGroupManager", "ConsumerGroupState", "rebalance_key", "session_key"]
