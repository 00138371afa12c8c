"""One cleaning end to end (storage/cleaner/cleaner.py): a compacted partition log written
through the append path, cleaned from its checkpoint to its cleanable end with the work in a
worker thread, swapped in, checkpointed; then the delete horizon's second pass."""

from __future__ import annotations

import os

import pytest

from semel.protocol.records import BatchHeader
from semel.storage.checkpoint import read_offset_checkpoint
from semel.storage.cleaner.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanerCheckpoint,
    _aborted_transactions,
    clean_partition,
)
from semel.storage.cleaner.process import CleanerError, CleanerProcess, CleanerThread
from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.log_manager import LogManager
from semel.storage.topic_partition import TopicPartition
from tests.storage.cleaner.history import T0, History, read
from tests.storage.cleaner.test_filter import latest_per_key
from tests.storage.log_helpers import TP, FakeClock, open_log, read_all

DAY = 86_400_000


def build(directory, history: History, **overrides):
    config = LogConfig.from_overrides(LogConfig(), {
        "segment.bytes": "700", "index.interval.bytes": "100", "cleanup.policy": "compact",
        "delete.retention.ms": str(DAY), **overrides})
    plog = open_log(directory, config, clock=FakeClock(T0))
    for batch in history.batches:
        control = BatchHeader(memoryview(batch)).is_control
        plog.append(bytearray(batch), origin="coordinator" if control else "client")
    return plog


def history() -> History:
    h = History(codec=4)
    for i in range(80):
        h.data([(b"k%d" % (i % 9), b"v%d" % i)], pid=5)
        if i % 11 == 2:
            h.data([(b"k3", b"txn-%d" % i), (b"z", b"txn")], pid=9, transactional=True)
        if i % 11 == 5:
            h.end(9, commit=i % 22 == 5)
        if i == 70:
            h.data([(b"k4", None)])  # a tombstone
    return h


def batches_of(plog) -> list[bytes]:
    data = read_all(plog)
    out, pos = [], 0
    while pos < len(data):
        size = BatchHeader(memoryview(data), pos).size
        out.append(data[pos : pos + size])
        pos += size
    return out


@pytest.fixture(params=["process", "thread"])
async def worker(request):
    """The broker's cleaner process, and the test thread the unit tests use."""
    worker = CleanerProcess() if request.param == "process" else CleanerThread()
    yield worker
    await worker.close()


async def test_a_cleaning_keeps_the_latest_values_and_checkpoints(tmp_path, worker):
    h = history()
    plog = build(tmp_path / "t-0", h)
    fs = RealFileSystem()
    checkpoint = CleanerCheckpoint(fs, str(tmp_path / CLEANER_OFFSET_CHECKPOINT))
    before = batches_of(plog)
    aborted_before = _aborted_transactions(plog.segments)
    segments_before = len(plog.segments)
    result = await clean_partition(plog, checkpoint, worker, dedupe_buffer_bytes=1 << 20,
                                   now_ms=T0 + 1, fs=fs)
    assert result is not None and result.bytes_after < result.bytes_before / 2
    assert result.stats.aborted_records_removed > 0
    after = batches_of(plog)
    aborted_after = _aborted_transactions(plog.segments)
    end = result.end_offset
    # below the cleaned end: latest value per key, nothing aborted; above: untouched
    assert latest_per_key(read(after, aborted_after, committed=True)) == latest_per_key(
        read(before, aborted_before, committed=True))
    assert not {o for o, _, _ in read(after, [], committed=False)} & h.aborted_offsets
    assert [b for b in after if BatchHeader(memoryview(b)).base_offset >= end] == [
        b for b in before if BatchHeader(memoryview(b)).base_offset >= end]
    assert len(plog.segments) == segments_before  # full segments: one group each
    assert read_offset_checkpoint(fs, tmp_path / CLEANER_OFFSET_CHECKPOINT) == {TP: end}
    # nothing dirty left below the active segment: nothing to do
    assert await clean_partition(plog, checkpoint, worker, dedupe_buffer_bytes=1 << 20,
                                 now_ms=T0 + 2, fs=fs) is None
    # past the delete horizon, from the log start again: the tombstone goes
    checkpoint.forget(TP)
    assert (None, b"k4") in [(v, k) for _, k, v in read(after, [], committed=True)]
    await clean_partition(plog, checkpoint, worker, dedupe_buffer_bytes=1 << 20,
                          now_ms=T0 + 2 + DAY, fs=fs)
    final = batches_of(plog)
    assert (None, b"k4") not in [(v, k) for _, k, v in read(final, [], committed=True)]
    assert len(plog.segments) < segments_before  # the small cleaned segments merged
    for path in set(plog.take_deleted_files()):  # a base offset cleaned twice: one name
        os.remove(path)
    plog.close()
    again = open_log(tmp_path / "t-0", plog.config, clock=FakeClock(T0), clean=False)
    assert batches_of(again) == final
    again.close()


class DeletingWorker:
    """The cleaning's worker with a DeleteRecords of the log's first two segments racing it:
    just before the worker reads them, or after it wrote their cleaned copy (before the
    swap)."""

    def __init__(self, inner, plog, when: str) -> None:
        self.inner, self.plog, self.when = inner, plog, when

    def delete(self) -> None:
        self.plog.delete_records_before(self.plog.segments[2].base_offset)

    async def run(self, job):
        if self.when == "before":
            self.delete()
        output = await self.inner.run(job)
        if self.when == "after":
            self.delete()
        return output


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_deletion_racing_a_cleaning(tmp_path, worker, when):
    h = history()
    plog = build(tmp_path / "t-0", h)
    fs = RealFileSystem()
    checkpoint = CleanerCheckpoint(fs, str(tmp_path / CLEANER_OFFSET_CHECKPOINT))
    racing = DeletingWorker(worker, plog, when)
    start = plog.segments[2].base_offset
    if when == "before":  # the worker finds its files gone: the cleaning is abandoned
        with pytest.raises(CleanerError):
            await clean_partition(plog, checkpoint, racing, dedupe_buffer_bytes=1 << 20,
                                  now_ms=T0 + 1, fs=fs)
        assert plog.log_start_offset == start
    else:  # the groups still in the log are swapped, the others' copies dropped
        before = batches_of(plog)
        result = await clean_partition(plog, checkpoint, racing, dedupe_buffer_bytes=1 << 20,
                                       now_ms=T0 + 1, fs=fs)
        assert result is not None and result.segments_before > 2
        after = batches_of(plog)
        kept_before = [b for b in before if BatchHeader(memoryview(b)).base_offset >= start]
        aborted = _aborted_transactions(plog.segments)
        assert latest_per_key(read(after, aborted, committed=True)) == latest_per_key(
            read(kept_before, aborted, committed=True))
        assert len(after) < len(kept_before)  # something was cleaned
    assert TP not in checkpoint.offsets  # not advanced past groups that were not swapped
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith((".cleaned", ".swap"))]
    plog.close()


async def test_an_abort_marker_past_the_cleanable_range_still_removes_its_data(tmp_path, worker):
    """The ABORT marker is in the active segment, its data in the range cleaned: the data
    goes and the committed value before it stays the key's latest (the aborted transactions
    come from every segment's .txnindex, as Kafka's collectAbortedTransactions; found by the
    chaos suite)."""
    h = History()
    h.data([(b"k", b"committed")])
    h.data([(b"k", b"aborted")], pid=9, transactional=True)
    h.end(9, commit=False)
    config = LogConfig.from_overrides(LogConfig(), {"cleanup.policy": "compact"})
    plog = open_log(tmp_path / "t-0", config, clock=FakeClock(T0))
    for i, batch in enumerate(h.batches):
        if i == 2:
            plog.roll()  # the marker opens the active segment
        control = BatchHeader(memoryview(batch)).is_control
        plog.append(bytearray(batch), origin="coordinator" if control else "client")
    fs = RealFileSystem()
    checkpoint = CleanerCheckpoint(fs, str(tmp_path / CLEANER_OFFSET_CHECKPOINT))
    result = await clean_partition(plog, checkpoint, worker, dedupe_buffer_bytes=1 << 20,
                                   now_ms=T0 + 1, fs=fs)
    assert result is not None and result.stats.aborted_records_removed == 1
    assert read(batches_of(plog), [], committed=False) == [(0, b"k", b"committed")]
    plog.close()


async def test_compact_and_delete_both_apply(tmp_path):
    """cleanup.policy=compact,delete: retention deletes the old segments by time, the
    cleaner compacts what is left (Kafka applies both)."""
    plog = build(tmp_path / "t-0", history(),
                 **{"cleanup.policy": "compact,delete", "retention.ms": "1000"})
    before = batches_of(plog)
    # the first ~40 offsets' segments are past retention (timestamps T0 + offset)
    assert plog.apply_retention(T0 + 40 + 1000) > 0
    start = plog.log_start_offset
    assert start > 0
    kept = [b for b in before if BatchHeader(memoryview(b)).base_offset >= start]
    assert batches_of(plog) == kept
    fs = RealFileSystem()
    checkpoint = CleanerCheckpoint(fs, str(tmp_path / CLEANER_OFFSET_CHECKPOINT))
    result = await clean_partition(plog, checkpoint, CleanerThread(),
                                   dedupe_buffer_bytes=1 << 20, now_ms=T0 + 41 + 1000, fs=fs)
    assert result is not None and result.bytes_after < result.bytes_before
    after = batches_of(plog)
    aborted = _aborted_transactions(plog.segments)
    assert latest_per_key(read(after, aborted, committed=True)) == latest_per_key(
        read(kept, aborted, committed=True))
    assert BatchHeader(memoryview(after[0])).base_offset >= start
    plog.close()


class FailingFor:
    """The thread worker, failing the jobs of one partition's directory with ``error``."""

    def __init__(self, directory_part: str, error: CleanerError) -> None:
        self.inner = CleanerThread()
        self.directory_part = directory_part
        self.error = error

    async def run(self, job):
        if self.directory_part in job.directory:
            raise self.error
        return await self.inner.run(job)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize("error_type,transient", [("CorruptRecordError", False),
                                                  ("FileNotFoundError", True),
                                                  ("died", True)])
async def test_a_partition_that_cannot_be_cleaned_does_not_stop_the_others(
        tmp_path, error_type, transient):
    """Kafka's markPartitionUncleanable: a cleaning that fails for good (corrupt data) marks
    its partition uncleanable and the cleaner goes on with the others; a transient failure
    (the worker died, a file went) leaves it to be tried again."""
    worker = FailingFor("bad-0", CleanerError(f"{error_type}: injected", error_type))
    manager = LogManager(tmp_path, default_config=LogConfig(), flush_mode="none",
                         clock=FakeClock(T0 + 1), cleaner_worker=worker)
    await manager.start()
    try:
        configs = {"cleanup.policy": "compact", "segment.bytes": "700",
                   "min.cleanable.dirty.ratio": "0.01"}
        manager.create_topic("bad", 1, configs)
        manager.create_topic("good", 1, configs)
        h = history()
        for topic, batches in (("bad", h.batches), ("good", h.batches[:60])):  # bad: dirtier
            plog = manager.logs[TopicPartition(topic, 0)]
            for batch in batches:
                control = BatchHeader(memoryview(batch)).is_control
                plog.append(bytearray(batch), origin="coordinator" if control else "client")
        with pytest.raises(CleanerError):
            await manager.run_cleaner_once()
        if transient:
            assert manager.cleaner_stats.uncleanable == set()
            with pytest.raises(CleanerError):  # still the dirtiest: tried again
                await manager.run_cleaner_once()
        else:
            assert manager.cleaner_stats.uncleanable == {TopicPartition("bad", 0)}
            result = await manager.run_cleaner_once()
            assert result is not None and result.topic_partition == TopicPartition("good", 0)
    finally:
        await manager.close()


def test_log_manager_defaults_are_the_cleaners():
    """LogManager names the cleaner's defaults without importing the cleaner's modules."""
    import inspect

    from semel.storage.cleaner.offset_map import DEFAULT_LOAD_FACTOR
    from semel.storage.cleaner.worker import UNLIMITED

    params = inspect.signature(LogManager).parameters
    assert params["cleaner_io_buffer_load_factor"].default == DEFAULT_LOAD_FACTOR
    assert params["cleaner_io_max_bytes_per_second"].default == UNLIMITED
