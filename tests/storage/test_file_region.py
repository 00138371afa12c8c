"""File regions (storage/file_region.py): what ``PartitionLog.read(..., region_min=n)``
returns as a region of a segment file is exactly what a plain read returns as bytes, with the
same data-record count (from batch headers only), the same end offset and the same aborted
transactions; and a region keeps its bytes while the segment is deleted by retention, the log
is closed, or the log is truncated after a failed fsync (which only cuts above the high
watermark), until it is released."""

from __future__ import annotations

import errno
import gc
import os
import random
import shutil
import socket
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import FakeClock, headers, make_batch, open_log

from semel.protocol.records import build_batch, build_control_batch, data_records
from semel.storage import segment as segment_module
from semel.storage.config import LogConfig
from semel.storage.file_region import FileRegion
from semel.storage.fs import FaultyFileSystem


def txn_batch(pid: int, seq: int, count: int, value_size: int) -> bytes:
    return make_batch(count, producer_id=pid, producer_epoch=0, base_sequence=seq,
                      is_transactional=True, value_size=value_size)


def marker(commit: bool, pid: int) -> bytes:
    return build_control_batch(commit=commit, producer_id=pid, producer_epoch=0,
                               coordinator_epoch=0, timestamp_ms=1_700_000_000_500)


def mixed_batch(rng: random.Random, count: int, value_size: int) -> bytes:
    return build_batch([(None, rng.randbytes(value_size), None, 1_700_000_000_000 + i)
                        for i in range(count)])


def fill(plog, ops, rng: random.Random) -> None:
    """Append plain batches, transactional ones, their COMMIT/ABORT markers and rolls."""
    sequences: dict[int, int] = {}
    open_txns: set[int] = set()
    for kind, a, b in ops:
        if kind == "plain":
            plog.append(mixed_batch(rng, a, b))
        elif kind == "txn":
            pid = 1 + a % 3
            seq = sequences.get(pid, 0)
            plog.append(txn_batch(pid, seq, 1 + b % 5, b))
            sequences[pid] = seq + 1 + b % 5
            open_txns.add(pid)
        elif kind == "end" and open_txns:
            pid = sorted(open_txns)[a % len(open_txns)]
            plog.append(marker(bool(b % 2), pid), origin="coordinator")
            open_txns.discard(pid)
        elif kind == "roll":
            plog.roll()


op = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 40), st.integers(0, 200)),
    st.tuples(st.just("plain"), st.integers(1, 2), st.integers(5_000, 20_000)),
    st.tuples(st.just("txn"), st.integers(0, 2), st.integers(0, 3_000)),
    st.tuples(st.just("end"), st.integers(0, 2), st.integers(0, 1)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(op, min_size=1, max_size=40), seed=st.integers(0, 2**16),
       index_interval=st.sampled_from([64, 1_000, 4_096, 1 << 20]),
       segment_bytes=st.sampled_from([60_000, 400_000]),
       piece=st.sampled_from([300, 4_096, segment_module.COUNT_PIECE]),
       from_header=st.sampled_from([100, 2_000, segment_module.COUNT_FROM_HEADER]),
       data=st.data())
def test_region_reads_match_byte_reads(ops, seed, index_interval, segment_bytes, piece,
                                        from_header, data):
    directory = Path(tempfile.mkdtemp(prefix="semel-region-"))
    plog = open_log(directory, LogConfig(segment_bytes=segment_bytes,
                                         index_interval_bytes=index_interval))
    try:
        fill(plog, ops, random.Random(seed))
        with mock.patch.object(segment_module, "COUNT_PIECE", piece), \
                mock.patch.object(segment_module, "COUNT_FROM_HEADER", from_header):
            for _ in range(data.draw(st.integers(1, 8))):
                offset = data.draw(st.integers(plog.log_start_offset, plog.log_end_offset))
                max_bytes = data.draw(st.integers(0, 300_000))
                min_one = data.draw(st.booleans())
                bound = data.draw(st.sampled_from([plog.high_watermark, plog.last_stable_offset]))
                region_min = data.draw(st.sampled_from([0, 1, 5_000, 50_000]))
                check_region_read(plog, offset, max_bytes, min_one, bound, region_min)
        assert not any(s.pinned for s in plog.segments)
    finally:
        plog.close(flush=False)
        shutil.rmtree(directory, ignore_errors=True)


def check_region_read(plog, offset, max_bytes, min_one, bound, region_min) -> None:
    plain = plog.read(offset, max_bytes, upper_bound=bound, min_one_batch=min_one).records
    result = plog.read(offset, max_bytes, upper_bound=bound, min_one_batch=min_one,
                       region_min=region_min)
    records = result.records
    if not isinstance(records, FileRegion):
        assert bytes(records) == bytes(plain)
        assert not plain or len(plain) < max(region_min, 1)
        return
    try:
        assert len(records) >= region_min and len(records) == len(plain)
        assert records.read() == bytes(plain)
        assert records.data_records() == data_records(plain)
        assert records.end_offset() == headers(bytes(plain))[-1].next_offset
        assert (plog.aborted_transactions_in(offset, records)
                == plog.aborted_transactions_in(offset, plain))
    finally:
        records.release()


def big_log(directory: Path, **kw):
    """Three segments of ~1 MB batches (one per roll), plus the empty active one."""
    plog = open_log(directory, LogConfig(segment_bytes=100 << 20), **kw)
    rng = random.Random(1)
    for _ in range(3):
        plog.append(mixed_batch(rng, 15, 64 * 1024))
        plog.roll()
    return plog


def sent_through_socket(region: FileRegion) -> bytes:
    """The region's bytes as os.sendfile puts them on a socket (what the connection does)."""
    a, b = socket.socketpair()
    with a, b:
        b.setblocking(False)
        got = bytearray()
        sent = 0
        while sent < region.size:
            sent += os.sendfile(a.fileno(), region.fd, region.position + sent,
                                min(region.size - sent, 64 * 1024))
            while True:
                try:
                    got += b.recv(1 << 20)
                except BlockingIOError:
                    break
        return bytes(got)


def test_a_region_keeps_a_segment_deleted_by_retention(tmp_path):
    plog = big_log(tmp_path)
    region = plog.read(0, 10 << 20, region_min=1).records
    assert isinstance(region, FileRegion)
    segment = plog.segments[0]
    expected = segment.read(region.position, region.size)
    plog.delete_records_before(plog.log_end_offset)
    assert segment not in plog.segments and segment.pinned
    first_log = segment.path(".log")
    assert first_log.endswith(".log.deleted") and os.path.exists(first_log)
    removed = plog.take_deleted_files()
    assert first_log not in removed  # its renamed files wait for the region
    for path in removed:
        os.remove(path)
    assert region.read() == expected
    assert sent_through_socket(region) == expected
    region.release()
    region.release()  # idempotent
    assert not segment.pinned
    removed = plog.take_deleted_files()
    assert first_log in removed
    for path in removed:
        os.remove(path)
    plog.close()


def test_a_region_outlives_the_closing_of_its_log(tmp_path):
    plog = big_log(tmp_path)
    region = plog.read(0, 10 << 20, region_min=1).records
    expected = region.read()
    segment = plog.segments[0]
    plog.close()
    assert sent_through_socket(region) == expected
    region.release()
    assert segment._log is None  # closed with its last reader


def test_a_dropped_region_unpins_its_segment(tmp_path):
    plog = big_log(tmp_path)
    region = plog.read(0, 10 << 20, region_min=1).records
    segment = plog.segments[0]
    assert segment.pinned
    del region
    gc.collect()
    assert not segment.pinned
    plog.close()


def test_truncation_after_a_failed_fsync_spares_a_region_below_the_high_watermark(tmp_path):
    fs = FaultyFileSystem()
    plog = open_log(tmp_path, LogConfig(), fs=fs, durable=True)
    rng = random.Random(2)
    plog.append(mixed_batch(rng, 10, 10_000))
    plog.flush()
    durable_end = plog.log_end_offset
    assert plog.high_watermark == durable_end
    plog.append(mixed_batch(rng, 10, 10_000))  # not yet fsynced: above the high watermark
    region = plog.read(0, 10 << 20, region_min=1).records
    assert isinstance(region, FileRegion) and region.end_offset() == durable_end
    expected = region.read()
    fs.fsync_error = errno.EIO
    job = plog.begin_flush()
    with pytest.raises(OSError):
        plog.run_flush(job)
    plog.complete_flush(job, OSError(errno.EIO, "fsync failed"))
    assert plog.log_end_offset == durable_end  # the unsynced batch was cut
    assert region.read() == expected
    assert sent_through_socket(region) == expected
    region.release()
    fs.clear_faults()
    plog.close()


def test_regions_never_reach_past_the_high_watermark(tmp_path):
    plog = open_log(tmp_path, LogConfig(), durable=True)
    plog.append(make_batch(100, value_size=1000))
    assert plog.high_watermark == 0
    with pytest.raises(ValueError, match="high watermark"):
        plog.read(0, 1 << 20, upper_bound=plog.log_end_offset, region_min=1)
    assert plog.read(0, 1 << 20, region_min=1).records == b""
    plog.close()


def test_small_reads_and_cut_reads(tmp_path):
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=4096))
    for i in range(50):
        plog.append(make_batch(10, value_size=100 * (i % 7 + 1), fill=i))
    whole = plog.read(0, 1 << 20).records
    sizes = [h.size for h in headers(whole)]
    # below region_min: bytes, as before
    small = plog.read(0, sizes[0], region_min=sizes[0] + 1).records
    assert isinstance(small, bytes) and small == whole[: sizes[0]]
    # a limit inside a batch: the region ends at the last whole batch before it
    limit = sum(sizes[:20]) + sizes[20] // 2
    cut = plog.read(0, limit, region_min=1).records
    assert isinstance(cut, FileRegion) and cut.read() == whole[: sum(sizes[:20])]
    assert cut.end_offset() == headers(whole)[19].next_offset
    cut.release()
    # not even the first batch fits and none is owed: nothing
    assert plog.read(0, sizes[0] - 1, min_one_batch=False, region_min=1).records == b""
    plog.close()


def test_data_records_leave_out_control_batches(tmp_path):
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=128), clock=FakeClock())
    plog.append(txn_batch(7, 0, 3, 20_000))  # a large batch: counted from its header
    plog.append(txn_batch(7, 3, 4, 10))
    plog.append(marker(False, 7), origin="coordinator")
    plog.append(make_batch(5, value_size=10))
    region = plog.read(0, 1 << 20, region_min=1).records
    assert region.data_records() == 3 + 4 + 5
    assert plog.aborted_transactions_in(0, region) == [(7, 0)]
    region.release()
    plog.close()
