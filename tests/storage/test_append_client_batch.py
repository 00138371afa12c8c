"""PartitionLog.append_client_batch (the produce fast path's fused check-and-append)
against validate_client_append + append: on random sequences of client batches - plain,
idempotent in order, retried, out of order, from a new epoch, transactional, compressed,
corrupt, too old, keyless on a compacted topic, too large - two logs, one trying the fused
append first, end with the same answers, bytes, producer state and offsets. Also
is_valid_client_batch against validate_batches on mutated batches."""

from __future__ import annotations

import random

import pytest

from semel.protocol.errors import KafkaError
from semel.protocol.records import BatchHeader, build_batch, is_valid_client_batch, validate_batches
from semel.protocol.records import InvalidRecordError as RecordsError
from semel.storage.config import LogConfig
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
