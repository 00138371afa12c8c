"""Producer id allocation: blocks recorded before use, unique across restarts and crashes,
prefetch of the next block, failures answered with COORDINATOR_LOAD_IN_PROGRESS."""

from __future__ import annotations

import errno
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semel.coordinator.producer_id import (
    BLOCK_FILE,
    ProducerIdBlock,
    ProducerIdManager,
    next_block,
)
from semel.protocol.errors import Error, KafkaError
from semel.storage.fs import FaultyFileSystem


def recorded(tmp_path) -> dict:
    return json.loads((tmp_path / BLOCK_FILE).read_text())


async def test_first_block_is_recorded_before_any_id(tmp_path):
    manager = ProducerIdManager(tmp_path)
    await manager.start()
    assert recorded(tmp_path) == {"version": 1, "broker": 0, "block_start": "0", "block_end": "999"}
    assert [await manager.generate_producer_id() for _ in range(3)] == [0, 1, 2]
    await manager.close()


async def test_restart_continues_after_the_recorded_block(tmp_path):
    first = ProducerIdManager(tmp_path)
    await first.start()
    assert await first.generate_producer_id() == 0
    # no close: a crash loses nothing that matters, the block is on disk
    second = ProducerIdManager(tmp_path)
    await second.start()
    assert await second.generate_producer_id() == 1000
    assert recorded(tmp_path)["block_start"] == "1000"


async def test_next_block_is_prefetched_and_ids_stay_consecutive(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    await manager.start()
    ids = [manager.generate_producer_id_nowait() for _ in range(9)]  # 90%: prefetch starts
    assert manager._reserving is not None
    await manager.close()  # waits for the reservation
    assert recorded(tmp_path)["block_start"] == "10"
    ids += [manager.generate_producer_id_nowait() for _ in range(11)]
    assert ids == list(range(20))
    await manager.close()
    assert recorded(tmp_path)["block_start"] == "20"


async def test_nowait_refuses_while_the_next_block_is_being_recorded(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=2)
    await manager.start()
    assert manager.generate_producer_id_nowait() == 0  # 50% used: no prefetch yet
    assert manager.generate_producer_id_nowait() == 1  # 100%: prefetch starts
    with pytest.raises(KafkaError) as excinfo:
        manager.generate_producer_id_nowait()
    assert excinfo.value.code == Error.COORDINATOR_LOAD_IN_PROGRESS
    assert await manager.generate_producer_id() == 2  # waits for the block instead
    await manager.close()


async def test_failed_block_write_is_retriable(tmp_path):
    fs = FaultyFileSystem()
    manager = ProducerIdManager(tmp_path, fs, block_size=1)
    await manager.start()
    fs.fsync_error = errno.EIO
    assert await manager.generate_producer_id() == 0  # its prefetch of block 1 fails
    await manager.close()
    with pytest.raises(KafkaError) as excinfo:
        await manager.generate_producer_id()
    assert excinfo.value.code == Error.COORDINATOR_LOAD_IN_PROGRESS
    fs.clear_faults()
    assert await manager.generate_producer_id() == 1
    await manager.close()
    restarted = ProducerIdManager(tmp_path)
    await restarted.start()
    assert await restarted.generate_producer_id() == 3  # block 2 was prefetched, then lost


async def test_unreadable_block_file_stops_the_start(tmp_path):
    (tmp_path / BLOCK_FILE).write_text('{"version": 1, "broker": 0}')
    with pytest.raises(RuntimeError, match="producer ids could repeat"):
        await ProducerIdManager(tmp_path).start()


def test_block_format_and_arithmetic():
    block = next_block(None, 3, 1000)
    assert block == ProducerIdBlock(3, 0, 999) and block.size == 1000
    assert ProducerIdBlock.decode(block.encode()) == block
    assert next_block(block, 3, 1000) == ProducerIdBlock(3, 1000, 1999)
    with pytest.raises(ValueError):
        ProducerIdBlock.decode(b'{"version": 2, "broker": 0, "block_start": "0", "block_end": "9"}')
    with pytest.raises(KafkaError):
        next_block(ProducerIdBlock(0, 0, 2**63 - 10), 0, 1000)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 25), min_size=1, max_size=6), st.integers(1, 9))
def test_ids_never_repeat_across_restarts(tmp_path_factory, runs, block_size):
    # (SIGKILL: tests/broker/test_idempotent_wire.py; nothing is written at close, so a
    # clean stop and a crash leave the same file)
    import asyncio

    directory = tmp_path_factory.mktemp("ids")

    async def run():
        seen: list[int] = []
        for count in runs:
            manager = ProducerIdManager(directory, block_size=block_size)
            await manager.start()
            seen.extend([await manager.generate_producer_id() for _ in range(count)])
            await manager.close()  # a background block write must not outlive the "process"
        return seen

    seen = asyncio.run(run())
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)
