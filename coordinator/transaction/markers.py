"""Transaction markers on the local logs: the one ``write_markers`` function.

The transaction coordinator completes every transaction through it, and the WriteTxnMarkers
handler (key 27) serves the wire API through the same instance
(``broker.txn_coordinator.write_markers``), as Kafka's coordinator sends WriteTxnMarkers to
the partition leaders.

For each partition it appends one COMMIT/ABORT control batch (producer id, epoch,
coordinator epoch; ``origin="coordinator"``, with the transaction version so that
transaction version 2 markers must carry an epoch above the data's) and waits until it is
durable; the partitions of ``__consumer_offsets`` go through the group coordinator, which
writes the marker there and then publishes or drops the transaction's pending offsets. The
result is one error code per partition, as a WriteTxnMarkers response carries them:
UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist (a deleted topic), the
append's (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED for stale markers) or the
durability wait's error otherwise; NOT_LEADER_OR_FOLLOWER while the group coordinator is not
ready for an offsets partition (Kafka's translation of its coordinator errors).

Whatever the partition logs do with a marker (producer state, last stable offset, aborted
transaction index, stale epochs) happens inside ``PartitionLog.append``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_control_batch
from semel.storage.topic_partition import TopicPartition

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
_NOT_READY = dict.fromkeys((Error.COORDINATOR_NOT_AVAILABLE, Error.COORDINATOR_LOAD_IN_PROGRESS,
                            Error.NOT_COORDINATOR), Error.NOT_LEADER_OR_FOLLOWER)


class LogMarkerWriter:
    def __init__(self, log_manager, group_coordinator=None, *,
                 clock: Callable[[], int]) -> None:
        self.log_manager = log_manager
        self.group_coordinator = group_coordinator
        self.clock = clock

    async def __call__(self, transactional_id: str | None, producer_id: int,
                       producer_epoch: int, coordinator_epoch: int, commit: bool,
                       partitions: Iterable[TopicPartition], *,
                       transaction_version: int = 0) -> dict[TopicPartition, Error]:
        del transactional_id  # markers carry producer ids only
        errors: dict[TopicPartition, Error] = {}
        waits: list[tuple[TopicPartition, asyncio.Future]] = []
        offsets: list[TopicPartition] = []
        loop = asyncio.get_running_loop()
        now = self.clock()
        for tp in partitions:
            plog = self.log_manager.get_partition(tp.topic, tp.partition)
            if plog is None:
                errors[tp] = Error.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if tp.topic == GROUP_METADATA_TOPIC_NAME and self.group_coordinator is not None:
                offsets.append(tp)
                continue
            batch = build_control_batch(commit=commit, producer_id=producer_id,
                                        producer_epoch=producer_epoch,
                                        coordinator_epoch=coordinator_epoch, timestamp_ms=now)
            try:
                result = plog.append(bytearray(batch), origin="coordinator",
                                     transaction_version=transaction_version)
                durable = plog.durable_future(result.next_offset, loop)
            except KafkaError as e:
                errors[tp] = e.code
                continue
            if durable is None:  # durable already (log.flush.mode=none)
                errors[tp] = Error.NONE
            else:
                waits.append((tp, durable))
        if not waits and not offsets:
            return errors  # nothing to wait for: no turn of the loop
        if len(waits) == 1 and not offsets:  # the usual transaction: one future, one hop
            tp, durable = waits[0]
            try:
                await durable
            except KafkaError as e:
                errors[tp] = e.code
            else:
                errors[tp] = Error.NONE
            return errors
        group_results = [self.group_coordinator.complete_transaction(
            producer_id, producer_epoch, coordinator_epoch, tp.partition, commit)
            for tp in offsets]
        results = await asyncio.gather(
            *(durable for _, durable in waits), *group_results, return_exceptions=True)
        for tp, result in zip([tp for tp, _ in waits] + offsets, results, strict=True):
            if isinstance(result, KafkaError):
                errors[tp] = result.code
            elif isinstance(result, BaseException):
                raise result
            elif isinstance(result, Error):
                # as Kafka's WriteTxnMarkers: the group coordinator not being ready is
                # NOT_LEADER_OR_FOLLOWER to the transaction coordinator (retried)
                errors[tp] = _NOT_READY.get(result, result)
            else:
                errors[tp] = Error.NONE
        return errors
