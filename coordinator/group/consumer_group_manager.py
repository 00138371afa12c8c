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
from semel.coordinator.group.consumer_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    ConsumerGroupKey,
    ConsumerGroupMetadataValue,
    CurrentMemberAssignmentValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
)
from semel.coordinator.group.records import CoordinatorRecord
from semel.coordinator.group.timer import Timer
from semel.protocol.errors import Error, KafkaError
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
from semel.protocol.messages.list_groups_response import ListedGroup
from semel.storage.log_manager import kafka_uuid_string, random_kafka_uuid

log = logging.getLogger("coordinator.group")

# v1 (KIP-1082): the consumer generates its member id
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1 MemberType
# Kafka's GROUP resource operations without an authorizer: READ(3), DELETE(6), DESCRIBE(8)
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

Metadata = Callable[[], dict[str, TopicMetadata]]
Respond = Callable[[ConsumerGroupHeartbeatResponse], None]


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

    # -- per-group settings (Kafka 4.x group configs fall back to the broker's) ----------

    def session_timeout_ms(self, group_id: str) -> int:
        return self.config.consumer_session_timeout_ms

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.config.consumer_heartbeat_interval_ms

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
            if not create or not classic.is_empty or classic.pending_join_members:
                raise KafkaError(Error.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} is not a consumer group.")
            from semel.coordinator.group.records import GroupMetadataKey

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
        member's partitions are assigned again."""
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
        self.timer.schedule(session_key(group_id, member_id), self.session_timeout_ms(group_id),
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
                                member.server_assignor))

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
                server_assignor=value.server_assignor))
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
            member_type=CONSUMER_MEMBER_TYPE) for m in group.members.values()]
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
