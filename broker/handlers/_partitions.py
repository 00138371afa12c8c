"""Shared by the data-path handlers: finding a partition log and Kafka's leader epoch check.

This node leads every partition in leader epoch ``PartitionLog.leader_epoch`` (0). A
request may name the epoch it believes current (``current_leader_epoch``, -1 = unknown):
older than ours is FENCED_LEADER_EPOCH, newer is UNKNOWN_LEADER_EPOCH (Kafka's
``Partition.checkCurrentLeaderEpoch``).
"""

from __future__ import annotations

from semel.protocol.errors import Error, KafkaError

NO_LEADER_EPOCH = -1


def check_leader_epoch(current_leader_epoch: int, leader_epoch: int) -> Error:
    if current_leader_epoch == NO_LEADER_EPOCH or current_leader_epoch == leader_epoch:
        return Error.NONE
    if current_leader_epoch < leader_epoch:
        return Error.FENCED_LEADER_EPOCH
    return Error.UNKNOWN_LEADER_EPOCH


def partition_log(log_manager, topic: str, partition: int, current_leader_epoch: int = -1):
    """The partition's log; KafkaError(UNKNOWN_TOPIC_OR_PARTITION / leader epoch errors)."""
    plog = log_manager.get_partition(topic, partition)
    if plog is None:
        raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION,
                         f"This server does not host this topic-partition: {topic}-{partition}")
    error = check_leader_epoch(current_leader_epoch, plog.leader_epoch)
    if error:
        raise KafkaError(error, f"{topic}-{partition}: leader epoch {plog.leader_epoch}, "
                                f"request has {current_leader_epoch}")
    return plog
