"""Share group administration (KIP-932), as Kafka's group coordinator answers it: ListGroups
and DeleteGroups for share groups, and the share group offsets APIs - DescribeShareGroupOffsets
(key 90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92) - over the
share-partition state in ``__share_group_state`` (``SharePartitionManager``).

A share group exists here while membership knows it (``ShareGroupMembership.groups``, in
memory) or ``__share_group_state`` holds state of it (durable: after a restart a group with
no members is known by its state). Its state is Stable with members, else Empty.

- Describe: per requested partition the start offset, leader epoch and (v1) lag; a topic
  that does not exist answers start offset -1 with a zero topic id, not an error (Kafka:
  "treated as absence of data", like OffsetFetch). Without topics (null): every partition
  that has state.
- Alter: the group must be empty (NON_EMPTY_GROUP); an unknown group becomes an empty share
  group, as Kafka's getOrMaybeCreateShareGroup. Each partition starts afresh at its offset
  (a new snapshot without in-flight records); an unknown topic or partition index is
  UNKNOWN_TOPIC_OR_PARTITION for that partition.
- Delete offsets: the group must exist (GROUP_ID_NOT_FOUND) and be empty; each topic's
  state is tombstoned. A topic without state is UNKNOWN_TOPIC_OR_PARTITION "There is no
  offset information to delete.", an unknown topic UNKNOWN_TOPIC_OR_PARTITION.
- DeleteGroups: an empty share group is forgotten with its state; else NON_EMPTY_GROUP.

A group id that is a classic or consumer group is not a share group: GROUP_ID_NOT_FOUND
"Group ... is not a share group." (the ids are one namespace).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from uuid import UUID

from semel.coordinator.share.manager import SharePartitionManager
from semel.coordinator.share.membership import ShareGroup, ShareGroupMembership
from semel.protocol.errors import Error
from semel.protocol.messages import alter_share_group_offsets_response as alter_resp
from semel.protocol.messages import delete_share_group_offsets_response as delete_resp
from semel.protocol.messages import describe_share_group_offsets_response as describe_resp

PROTOCOL_TYPE = "share"  # Kafka's ShareGroup.PROTOCOL_TYPE, also its group type
ZERO_UUID = UUID(int=0)
_UNKNOWN_TOPIC = "This server does not host this topic-partition."


class ShareGroupAdmin:
    """The admin side of share groups over membership (``membership``, None until a share
    group request made it) and the share-partition manager."""

    def __init__(self, membership: ShareGroupMembership | None,
                 manager: SharePartitionManager, log_manager, *,
                 other_group: Callable[[str], bool] = lambda _group_id: False) -> None:
        self.membership = membership
        self.manager = manager
        self.log_manager = log_manager
        self.other_group = other_group  # a classic or consumer group id

    # -- groups -------------------------------------------------------------------------

    def _group(self, group_id: str) -> ShareGroup | None:
        return None if self.membership is None else self.membership.groups.get(group_id)

    def exists(self, group_id: str) -> bool:
        return self._group(group_id) is not None \
            or bool(self.manager.store.keys_of_group(group_id))

    def state(self, group_id: str) -> str:
        group = self._group(group_id)
        return group.state if group is not None else "Empty"

    def group_ids(self) -> list[str]:
        ids = set() if self.membership is None else set(self.membership.groups)
        ids.update(key.group_id for key in self.manager.store.states)
        return sorted(ids)

    def list_groups(self, states: Iterable[str], types: Iterable[str]) -> list[tuple[str, str]]:
        """(group id, state) of the share groups passing ListGroups' filters
        (case-insensitive, empty = all)."""
        states = {s.strip().lower() for s in states}
        types = {t.strip().lower() for t in types}
        if types and PROTOCOL_TYPE not in types:
            return []
        listed = [(group_id, self.state(group_id)) for group_id in self.group_ids()]
        return [(g, s) for g, s in listed if not states or s.lower() in states]

    async def delete_group(self, group_id: str) -> Error:
        """DeleteGroups of a share group: only when empty, with its durable state."""
        group = self._group(group_id)
        if group is not None and group.members:
            return Error.NON_EMPTY_GROUP
        error = await self.manager.delete_group(group_id)
        if error == Error.NONE and self.membership is not None:
            error = await self.membership.delete_group(group_id)
        return error

    # -- DescribeShareGroupOffsets ------------------------------------------------------

    def describe_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                         ) -> describe_resp.DescribeShareGroupOffsetsResponseGroup:
        """One group's answer; ``topics`` None = every partition with state."""
        if topics is None:
            by_id: dict[UUID, list[int]] = {}
            for key in self.manager.store.keys_of_group(group_id):
                by_id.setdefault(key.topic_id, []).append(key.partition)
            topics = []
            for topic_id, partitions in by_id.items():
                info = self.log_manager.topic_by_id(topic_id)
                if info is not None:
                    topics.append((info.name, sorted(partitions)))
        results = []
        for name, partitions in topics:
            info = self.log_manager.topics.get(name)
            if info is None:
                results.append(describe_resp.DescribeShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=ZERO_UUID, partitions=[
                        describe_resp.DescribeShareGroupOffsetsResponsePartition(
                            partition_index=p, start_offset=-1) for p in partitions]))
                continue
            answers = []
            for p in partitions:
                offsets = self.manager.describe_offsets(group_id, info.topic_id, p)
                answers.append(describe_resp.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=offsets.start_offset,
                    leader_epoch=offsets.leader_epoch, lag=offsets.lag))
            results.append(describe_resp.DescribeShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=info.topic_id, partitions=answers))
        return describe_resp.DescribeShareGroupOffsetsResponseGroup(group_id=group_id,
                                                                    topics=results)

    # -- AlterShareGroupOffsets ---------------------------------------------------------

    async def alter_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]
                            ) -> alter_resp.AlterShareGroupOffsetsResponse:
        """Start each (partition, offset) afresh; the group must be empty."""
        if self.other_group(group_id):
            return alter_resp.AlterShareGroupOffsetsResponse(
                error_code=int(Error.GROUP_ID_NOT_FOUND),
                error_message=f"Group {group_id} is not a share group.")
        group = self._group(group_id)
        if group is not None and group.members:
            return alter_resp.AlterShareGroupOffsetsResponse(
                error_code=int(Error.NON_EMPTY_GROUP),
                error_message="The group is not empty.")
        if group is None and self.membership is not None:  # Kafka creates it, empty
            await self.membership.create_group(group_id)
        responses = []
        for name, partitions in topics:
            info = self.log_manager.topics.get(name)
            answers = []
            for index, start_offset in partitions:
                if info is None or not 0 <= index < info.num_partitions:
                    error, message = Error.UNKNOWN_TOPIC_OR_PARTITION, _UNKNOWN_TOPIC
                else:
                    error = await self.manager.alter_offsets(group_id, info.topic_id, index,
                                                             start_offset)
                    message = None
                answers.append(alter_resp.AlterShareGroupOffsetsResponsePartition(
                    partition_index=index, error_code=int(error), error_message=message))
            responses.append(alter_resp.AlterShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=ZERO_UUID if info is None else info.topic_id,
                partitions=answers))
        return alter_resp.AlterShareGroupOffsetsResponse(responses=responses)

    # -- DeleteShareGroupOffsets --------------------------------------------------------

    async def delete_offsets(self, group_id: str, topic_names: list[str]
                             ) -> delete_resp.DeleteShareGroupOffsetsResponse:
        """Tombstone each topic's share-partition state; the group must exist, empty."""
        if self.other_group(group_id) or not self.exists(group_id):
            message = f"Group {group_id} is not a share group." if self.other_group(group_id) \
                else f"Share group {group_id} not found."
            return delete_resp.DeleteShareGroupOffsetsResponse(
                error_code=int(Error.GROUP_ID_NOT_FOUND), error_message=message)
        group = self._group(group_id)
        if group is not None and group.members:
            return delete_resp.DeleteShareGroupOffsetsResponse(
                error_code=int(Error.NON_EMPTY_GROUP),
                error_message="The group is not empty.")
        keys = self.manager.store.keys_of_group(group_id)
        responses = []
        for name in topic_names:
            info = self.log_manager.topics.get(name)
            if info is None:
                responses.append(delete_resp.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=ZERO_UUID,
                    error_code=int(Error.UNKNOWN_TOPIC_OR_PARTITION),
                    error_message=_UNKNOWN_TOPIC))
                continue
            partitions = sorted(k.partition for k in keys if k.topic_id == info.topic_id)
            if not partitions:
                responses.append(delete_resp.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name, topic_id=ZERO_UUID,
                    error_code=int(Error.UNKNOWN_TOPIC_OR_PARTITION),
                    error_message="There is no offset information to delete."))
                continue
            error = Error.NONE
            for p in partitions:
                error = await self.manager.delete_offsets(group_id, info.topic_id, p)
                if error:
                    break
            responses.append(delete_resp.DeleteShareGroupOffsetsResponseTopic(
                topic_name=name, topic_id=info.topic_id, error_code=int(error)))
        return delete_resp.DeleteShareGroupOffsetsResponse(responses=responses)
