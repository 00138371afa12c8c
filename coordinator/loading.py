"""Reading a coordinator topic's partition back at start-up: its batches, decoded.

The transaction coordinator (``__transaction_state``), the group coordinator and share group
membership (``__consumer_offsets``) and the share-partition state (``__share_group_state``)
each rebuild their state from their partitions' records. They read the same way: every batch
from the log start up to an end offset, each batch's records decoded; a batch that cannot be
decoded is logged and skipped, so one bad batch costs its own records and not the rest of the
partition (Kafka's CoordinatorLoaderImpl skips nothing, it fails the load; a broker that
served nothing of a partition over one bad batch would lose more); and the loop is given back
every few hundred batches so that a long load does not stall the connections being served.
What a record means stays with each coordinator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeVar

from semel.protocol.errors import ProtocolError
from semel.protocol.records import BatchHeader, Record, iter_records

if TYPE_CHECKING:
    from semel.storage.partition_log import PartitionLog

YIELD_EVERY_BATCHES = 256

_Parsed = TypeVar("_Parsed")


def readable_batches(plog: PartitionLog, end: int, name: str, log: logging.Logger, *,
                     control: bool = False) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """The batches of ``plog`` below offset ``end`` with their records, in order: control
    batches too when ``control`` (their records are the markers), else they are passed over
    undecoded. ``name`` (topic-partition) and ``log`` say where an unreadable batch is
    reported."""
    for header, data in plog.iter_batches_from(plog.log_start_offset, with_data=True):
        if header.base_offset >= end:
            break
        if header.is_control and not control:
            continue
        try:
            records = list(iter_records(data, header))
        except ProtocolError as e:
            log.error("%s: unreadable batch at %d skipped: %s", name, header.base_offset, e)
            continue
        yield header, records


async def batches_to_load(plog: PartitionLog, end: int, name: str, log: logging.Logger, *,
                          control: bool = False
                          ) -> AsyncIterator[tuple[BatchHeader, list[Record]]]:
    """``readable_batches``, giving the loop back every YIELD_EVERY_BATCHES batches."""
    for count, item in enumerate(readable_batches(plog, end, name, log, control=control), 1):
        yield item
        if count % YIELD_EVERY_BATCHES == 0:
            await asyncio.sleep(0)


def decoded_records(records: Iterable[Record],
                    decode: Callable[[bytes | None, bytes | None], _Parsed],
                    ignored: type[ProtocolError], name: str, log: logging.Logger,
                    ) -> Iterator[tuple[Record, _Parsed]]:
    """Each of ``records`` with what ``decode(key, value)`` made of it. A record ``decode``
    rejects with ``ignored`` (a record type this coordinator does not keep, as Kafka's loaders
    pass over unknown types) is passed over silently; any other unreadable record is logged
    (at ``name``) and skipped."""
    for record in records:
        try:
            parsed = decode(record.key, record.value)
        except ignored:
            continue
        except ProtocolError as e:
            log.error("%s: unreadable record at %d skipped: %s", name, record.offset, e)
            continue
        yield record, parsed


__all__ = ["YIELD_EVERY_BATCHES", "batches_to_load", "decoded_records", "readable_batches"]
