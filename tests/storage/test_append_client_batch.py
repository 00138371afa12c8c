"""PartitionLog.append_client_batch (the produce fast path's fused check-and-append)
against validate_client_append + append: on random sequences of client batches - plain,
idempotent in order, retried, out of order, from a new epoch, transactional, compressed,
corrupt, too old, keyless on a compacted topic, too large - two logs, one trying the fused
append first, end with the same answers, bytes, producer state and offsets. Also
is_valid_client_batch against validate_batches on mutated batches."""

from __future__ import annotations

import errno
import random

import pytest

from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import BatchHeader, build_batch, is_valid_client_batch, validate_batches
from semel.protocol.records import InvalidRecordError as RecordsError
from semel.storage.config import LogConfig
from semel.storage.fs import FaultyFileSystem
from tests.storage.log_helpers import FakeClock, open_log, read_all

NOW = 1_700_000_000_000


def _append(plog, data: bytes, fused: bool):
    """(how it went, and whether the fused append took it)."""
    view = memoryview(bytearray(data))
    header = BatchHeader(view, 0)
    try:
        if fused:
            result = plog.append_client_batch(view, header, 1 << 20)
            if result is not None:
                return ("ok", tuple(result)), True
        validated = plog.validate_client_append(view)
        validated.run()
        return ("ok", tuple(plog.append(view, origin="client", validated=validated))), False
    except KafkaError as e:
        return ("error", e.code, e.message), False


def _batches(rng: random.Random, count: int) -> list[bytes]:
    sequences = {1000: 0, 1001: 0}
    epochs = {1000: 0, 1001: 0}
    out = []
    for _ in range(count):
        kind = rng.choice(["plain", "idem", "idem", "idem", "retry", "gap", "epoch", "txn",
                           "zstd", "corrupt", "old", "keyless", "big"])
        pid = rng.choice([1000, 1001])
        records = rng.randint(1, 4)
        keys = kind != "keyless"
        kw = {}
        ts = NOW + rng.randint(-1000, 1000)
        if kind == "old":
            ts = NOW - 10 * 365 * 86_400_000
        if kind in ("idem", "retry", "gap", "epoch", "txn", "zstd", "corrupt", "keyless"):
            sequence = sequences[pid]
            if kind == "retry":
                sequence = max(0, sequence - records)
            elif kind == "gap":
                sequence += 5
            elif kind == "epoch":
                epochs[pid] += 1
                sequence = 0
            kw = {"producer_id": pid, "producer_epoch": epochs[pid], "base_sequence": sequence,
                  "is_transactional": kind == "txn"}
            if kind not in ("retry", "gap", "corrupt"):
                sequences[pid] = sequence + records
        if kind == "zstd":
            kw["compression"] = 4
        size = 5000 if kind == "big" else rng.randint(1, 200)
        data = bytearray(build_batch(
            [(b"k" if keys else None, rng.randbytes(size), None, ts + i) for i in range(records)],
            **kw))
        if kind == "corrupt":
            data[-1] ^= 0x55
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("config", [
    LogConfig(),
    LogConfig(cleanup_policy=["compact"]),
    LogConfig(message_timestamp_type="LogAppendTime"),
    LogConfig(max_message_bytes=4000),
])
def test_fused_append_matches_the_full_one(tmp_path, seed: int, config: LogConfig) -> None:
    rng = random.Random(seed)
    batches = _batches(rng, 60)
    clock = FakeClock()
    clock.now_ms = NOW
    fused = open_log(tmp_path / "fused", config, clock=clock)
    full = open_log(tmp_path / "full", config, clock=clock)
    taken = 0
    for data in batches:
        got, by_fused = _append(fused, data, True)
        expected, _ = _append(full, data, False)
        assert got == expected
        taken += by_fused
    assert read_all(fused) == read_all(full)
    assert fused.log_end_offset == full.log_end_offset
    assert {pid: (e.producer_epoch, [repr(b) for b in e.batch_metadata])
            for pid, e in fused.producer_state.producers.items()} == \
        {pid: (e.producer_epoch, [repr(b) for b in e.batch_metadata])
         for pid, e in full.producer_state.producers.items()}
    if config.message_timestamp_type == "CreateTime":
        assert taken > 0  # the fused append did take the common batches


def test_validity_matches_validate_batches() -> None:
    rng = random.Random(7)
    base = bytearray(build_batch([(b"k", b"v" * 30, None, NOW)], producer_id=5,
                                 producer_epoch=0, base_sequence=0))
    for _ in range(3000):
        data = bytearray(base)
        for _ in range(rng.randint(0, 2)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.1:
            data = data[:rng.randrange(len(data))] if rng.random() < 0.5 else data + b"x"
        view = memoryview(data)
        if len(view) < 61:
            continue
        try:
            expected = len(validate_batches(view)) == 1
        except RecordsError:
            expected = False
        assert is_valid_client_batch(view, BatchHeader(view, 0)) == expected


def _bookkeeping(plog, calls: dict[str, int]) -> tuple:
    state = plog.producer_state
    return (plog.log_end_offset, plog.high_watermark, plog._hw_position[1],
            sorted((key, value[1]) for key, value in plog._unflushed.items()),
            plog._flush_asked, state.map_end_offset, dict(calls),
            {pid: (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset,
                   e.last_timestamp, [repr(b) for b in e.batch_metadata])
             for pid, e in state.producers.items()})


@pytest.mark.parametrize("durable", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_fused_append_bookkeeping_matches_the_full_one(tmp_path, seed: int,
                                                       durable: bool) -> None:
    """After every append: high watermark (flush none) or the flusher's marks and the
    dirty listener's calls (durable), the high-watermark listener's calls, the producer
    state's map end and every field of every producer entry; small segments, so appends
    also roll."""
    rng = random.Random(seed)
    clock = FakeClock()
    clock.now_ms = NOW
    config = LogConfig(segment_bytes=3000)
    logs = []
    for name in ("fused", "full"):
        plog = open_log(tmp_path / name, config, clock=clock, durable=durable)
        calls = {"dirty": 0, "high_watermark": 0}

        def dirty(_plog, calls=calls):
            calls["dirty"] += 1
            _plog._flush_asked = True  # as the flusher's listener does

        def high_watermark(_plog, calls=calls):
            calls["high_watermark"] += 1

        plog.dirty_listener = dirty
        plog.high_watermark_listener = high_watermark
        logs.append((plog, calls))
    (fused, fused_calls), (full, full_calls) = logs
    taken = 0
    for data in _batches(rng, 80):
        got, by_fused = _append(fused, data, True)
        expected, _ = _append(full, data, False)
        assert got == expected
        assert _bookkeeping(fused, fused_calls) == _bookkeeping(full, full_calls)
        taken += by_fused
        if rng.random() < 0.2:  # a flush round begins: the next append marks again
            fused._flush_asked = full._flush_asked = False
            fused._unflushed.clear()
            full._unflushed.clear()
    assert taken > 0
    assert len(fused._segments) > 1  # the appends rolled
    assert read_all(fused) == read_all(full)


def test_fused_append_write_failures(tmp_path) -> None:
    """A failed write in the fused append: KAFKA_STORAGE_ERROR with the log, its producer
    state and high watermark unchanged; when the segment cannot undo it either, the
    partition goes offline for writes."""
    fs = FaultyFileSystem()
    clock = FakeClock()
    clock.now_ms = NOW
    plog = open_log(tmp_path, fs=fs, clock=clock)

    def batch(sequence: int) -> memoryview:
        return memoryview(bytearray(build_batch([(b"k", b"v" * 10, None, NOW)], producer_id=9,
                                                producer_epoch=0, base_sequence=sequence)))

    assert _append(plog, bytes(batch(0)), True)[1] is False  # a new producer: the full way
    assert _append(plog, bytes(batch(1)), True)[1] is True
    before = (read_all(plog), plog.log_end_offset, plog.high_watermark,
              repr(list(plog.producer_state.producers[9].batch_metadata)))
    fs.write_error, fs.write_error_after = errno.ENOSPC, 20
    records = batch(2)
    with pytest.raises(KafkaError) as info:
        plog.append_client_batch(records, BatchHeader(records, 0), 1 << 20)
    assert info.value.code == Error.KAFKA_STORAGE_ERROR and not plog.offline
    assert (read_all(plog), plog.log_end_offset, plog.high_watermark,
            repr(list(plog.producer_state.producers[9].batch_metadata))) == before
    fs.clear_faults()
    assert _append(plog, bytes(batch(2)), True) == (("ok", (2, 2, -1, 0, False)), True)
    fs.write_error, fs.write_error_after, fs.truncate_error = errno.EIO, 20, errno.EIO
    records = batch(3)
    with pytest.raises(KafkaError) as info:
        plog.append_client_batch(records, BatchHeader(records, 0), 1 << 20)
    assert info.value.code == Error.KAFKA_STORAGE_ERROR and plog.offline
    fs.clear_faults()
    assert _append(plog, bytes(batch(3)), True)[0][:2] == ("error", Error.KAFKA_STORAGE_ERROR)
