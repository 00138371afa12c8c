"""A transaction coordinator over a real LogManager in a temporary directory, with a manual
clock, a fake producer id allocator and a fake ``write_markers`` that records its calls and
answers what the test scripts (or waits on a gate)."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from semel.coordinator.transaction import TransactionCoordinator, TxnConfig
from semel.coordinator.transaction.log import (
    TRANSACTION_STATE_TOPIC_NAME,
    decode_key,
    decode_value,
)
from semel.coordinator.transaction.state import TransactionState
from semel.protocol.errors import Error
from semel.protocol.records import iter_records
from semel.storage.config import LogConfig
from semel.storage.log_manager import LogManager
from semel.storage.topic_partition import TopicPartition

CONFIG = TxnConfig(transaction_state_log_num_partitions=4,
                   abort_timed_out_transaction_cleanup_interval_ms=10**9,
                   remove_expired_transaction_cleanup_interval_ms=10**9,
                   retry_backoff_ms=0)


class ManualClock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


class FakeProducerIds:
    def __init__(self, first: int = 1000) -> None:
        self.next = first

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next - 1


@dataclass(frozen=True)
class MarkerCall:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
    transaction_version: int


class FakeMarkers:
    """``results``: per call, the errors of the partitions named (others NONE)."""

    def __init__(self) -> None:
        self.calls: list[MarkerCall] = []
        self.results: list[dict[TopicPartition, Error]] = []
        self.gate: asyncio.Event | None = None
        self.called = asyncio.Event()

    async def __call__(self, transactional_id, producer_id, producer_epoch, coordinator_epoch,
                       commit, partitions, *, transaction_version):
        self.calls.append(MarkerCall(transactional_id, producer_id, producer_epoch,
                                     coordinator_epoch, commit, frozenset(partitions),
                                     transaction_version))
        self.called.set()
        if self.gate is not None:
            await self.gate.wait()
        scripted = self.results.pop(0) if self.results else {}
        return {tp: scripted.get(tp, Error.NONE) for tp in partitions}


@dataclass
class Env:
    tc: TransactionCoordinator
    log_manager: LogManager
    clock: ManualClock
    markers: FakeMarkers
    producer_ids: FakeProducerIds

    def states_written(self, transactional_id: str) -> list[TransactionState | None]:
        """Every state persisted for the id, in log order (None: a tombstone)."""
        plog = self.log_manager.get_partition(TRANSACTION_STATE_TOPIC_NAME,
                                              self.tc.partition_for(transactional_id))
        states: list[TransactionState | None] = []
        if plog is None:
            return states
        for header, data in plog.iter_batches_from(0, with_data=True):
            for record in iter_records(data, header):
                if decode_key(record.key) != transactional_id:
                    continue
                states.append(None if record.value is None else
                              TransactionState(decode_value(record.value).transaction_status))
        return states


@asynccontextmanager
async def running(data_dir: Path, *, clock: ManualClock | None = None, fs=None,
                  flush_mode: str = "none", markers: FakeMarkers | None = None,
                  producer_ids: FakeProducerIds | None = None, principals=None, **config):
    clock = clock or ManualClock()
    log_manager = LogManager(Path(data_dir), default_config=LogConfig(), flush_mode=flush_mode,
                             fs=fs, clock=clock)
    await log_manager.start()
    markers = markers or FakeMarkers()
    producer_ids = producer_ids or FakeProducerIds()
    tc = TransactionCoordinator(log_manager, producer_ids, replace(CONFIG, **config), clock,
                                markers, principals=principals)
    await tc.start()
    await tc.wait_loaded()
    try:
        yield Env(tc, log_manager, clock, markers, producer_ids)
    finally:
        await tc.stop()  # a marker write still waiting on its gate is cancelled
        await log_manager.close()
