"""The cleaner's decisions (storage/cleaner/filter.py) over synthetic partition histories:
latest value per key, no aborted data, tombstones and markers removed in two passes,
producers' last batches kept; then against a model over random histories (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semel.protocol.records import BatchHeader, ControlType, iter_records, validate_batches
from semel.storage.cleaner.filter import build_offset_map, control_type
from semel.storage.cleaner.offset_map import ENTRY_BYTES, OffsetMap
from tests.storage.cleaner.history import T0, History, clean, headers, read

DAY = 86_400_000
IDEMPOTENT, TX1, TX2 = 7, 11, 12


def latest_per_key(records) -> dict[bytes, tuple[int, bytes | None]]:
    latest = {}
    for offset, key, value in records:
        if key is not None:
            latest[key] = (offset, value)
    return latest


def test_latest_value_per_key_and_no_aborted_data():
    h = History()
    h.data([(b"a", b"1"), (b"b", b"1")])
    h.data([(b"a", b"2")], pid=TX1, transactional=True)
    h.data([(b"b", b"aborted")], pid=TX2, transactional=True)
    h.end(TX1, commit=True)
    h.end(TX2, commit=False)
    h.data([(b"c", b"1"), (b"a", b"3")], pid=IDEMPOTENT)
    batches, aborted = clean(h.batches, h.aborted, h.last_batch, now_ms=T0, retention_ms=DAY)
    assert read(batches, aborted, committed=True) == [(1, b"b", b"1"), (6, b"c", b"1"),
                                                       (7, b"a", b"3")]
    # no aborted record even for read_uncommitted: the cleaner removed it
    assert all(value != b"aborted" for _, _, value in read(batches, aborted, committed=False))
    offsets = [BatchHeader(memoryview(b)).base_offset for b in batches]
    assert offsets == sorted(offsets)


def test_tombstone_stays_until_its_delete_horizon():
    h = History()
    h.data([(b"a", b"1")])
    h.data([(b"a", None)])
    batches, aborted = clean(h.batches, h.aborted, h.last_batch, now_ms=T0, retention_ms=DAY)
    assert read(batches, aborted, committed=True) == [(1, b"a", None)]
    tombstone = BatchHeader(memoryview(batches[0]))
    assert tombstone.has_delete_horizon and tombstone.base_timestamp == T0 + DAY
    assert [r.timestamp for r in iter_records(batches[0], tombstone)] == [T0 + 1]  # unchanged
    again, _ = clean(batches, aborted, h.last_batch, now_ms=T0 + DAY - 1, retention_ms=DAY)
    assert read(again, aborted, committed=True) == [(1, b"a", None)]
    gone, _ = clean(batches, aborted, h.last_batch, now_ms=T0 + DAY, retention_ms=DAY)
    assert read(gone, aborted, committed=True) == []


def test_abort_marker_outlives_the_aborted_data_by_the_retention():
    """Pass 1 removes the aborted data but keeps the marker (a consumer part way through the
    transaction must still meet it); pass 2 finds it removable and stamps a delete horizon;
    a pass after the horizon removes it."""
    h = History()
    h.data([(b"k", b"x")], pid=TX1, transactional=True)
    h.end(TX1, commit=False)
    h.data([(b"k", b"y")])
    last = {}  # the producer is no longer active: its batches may go
    b1, a1 = clean(h.batches, h.aborted, last, now_ms=T0, retention_ms=DAY)
    kinds = [(BatchHeader(memoryview(b)).is_control, BatchHeader(memoryview(b)).record_count)
             for b in b1]
    assert kinds == [(True, 1), (False, 1)] and a1 == h.aborted
    b2, a2 = clean(b1, a1, last, now_ms=T0 + 1, retention_ms=DAY)
    marker = BatchHeader(memoryview(b2[0]))
    assert marker.is_control and marker.has_delete_horizon
    assert marker.base_timestamp == T0 + 1 + DAY and a2 == []
    b3, _ = clean(b2, a2, last, now_ms=T0 + DAY, retention_ms=DAY)
    assert BatchHeader(memoryview(b3[0])).is_control  # horizon not reached
    b4, _ = clean(b2, a2, last, now_ms=T0 + 1 + DAY, retention_ms=DAY)
    assert [BatchHeader(memoryview(b)).is_control for b in b4] == [False]


def test_commit_marker_goes_once_its_data_is_gone():
    h = History()
    h.data([(b"k", b"1")], pid=TX1, transactional=True)
    h.end(TX1, commit=True)
    h.data([(b"k", b"2")])
    b1, a1 = clean(h.batches, h.aborted, {}, now_ms=T0, retention_ms=0)
    assert [BatchHeader(memoryview(b)).is_control for b in b1] == [True, False]
    b2, a2 = clean(b1, a1, {}, now_ms=T0, retention_ms=0)  # stamped: horizon = now
    b3, _ = clean(b2, a2, {}, now_ms=T0, retention_ms=0)
    assert [BatchHeader(memoryview(b)).is_control for b in b3] == [False]


def test_last_batch_of_an_active_producer_is_kept_empty():
    h = History()
    h.data([(b"k", b"1"), (b"j", b"1")], pid=IDEMPOTENT)
    h.data([(b"k", b"2"), (b"j", b"2")])
    batches, _ = clean(h.batches, h.aborted, h.last_batch, now_ms=T0, retention_ms=DAY)
    first = BatchHeader(memoryview(batches[0]))
    assert (first.producer_id, first.record_count, first.base_offset, first.last_offset,
            first.last_sequence) == (IDEMPOTENT, 0, 0, 1, 1)
    assert first.compression == 0 and list(iter_records(batches[0], first)) == []


@pytest.mark.parametrize("codec", [0, 3, 4])
def test_rebuilt_batches_keep_offsets_producer_fields_and_codec(codec):
    h = History(codec=codec)
    h.data([(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")], pid=IDEMPOTENT)
    h.data([(b"b", b"2")])
    batches, _ = clean(h.batches, h.aborted, h.last_batch, now_ms=T0, retention_ms=DAY)
    header = BatchHeader(memoryview(batches[0]))
    assert (header.base_offset, header.last_offset, header.record_count, header.compression,
            header.base_sequence, header.producer_id) == (0, 3, 2, codec, 0, IDEMPOTENT)
    assert [(r.offset, r.key, r.timestamp) for r in iter_records(batches[0], header)] == [
        (2, b"a", T0 + 2), (3, b"c", T0 + 3)]


def test_a_small_map_cleans_in_rounds():
    h = History()
    for i in range(40):
        h.data([(b"k%d" % (i % 10), b"v%d" % i)])
    small = OffsetMap(ENTRY_BYTES * 4).capacity  # 3 keys a round
    assert small == 3
    batches, _ = clean(h.batches, h.aborted, h.last_batch, now_ms=T0, retention_ms=DAY,
                       map_bytes=ENTRY_BYTES * 4)
    assert latest_per_key(read(batches, [], committed=True)) == latest_per_key(
        read(h.batches, [], committed=True))
    assert len(read(batches, [], committed=True)) == 10


def test_the_map_of_a_later_cleaning_ignores_aborts_before_the_dirty_range():
    """A cleaning's map reads from the first dirty offset, with every aborted transaction of
    the segments' .txnindex files: one whose ABORT marker it never meets must not make the
    producer's later committed data look aborted (found by the Java compaction test)."""
    h = History()
    h.data([(b"a", b"aborted")], pid=9, transactional=True)
    h.end(9, commit=False)
    h.data([(b"a", b"v1")], pid=9, transactional=True)
    h.end(9, commit=True)
    start = h.next_offset
    h.data([(b"a", b"v2")], pid=9, transactional=True)
    h.end(9, commit=True)
    dirty = [b for b in h.batches if BatchHeader(memoryview(b)).last_offset >= start]
    offset_map = OffsetMap(1 << 20)
    build_offset_map(headers(dirty), h.aborted, start, offset_map)
    assert offset_map.get(b"a") == start


# -- against a model ---------------------------------------------------------------------------

KEYS = [b"k0", b"k1", b"k2", b"k3", None]


@st.composite
def histories(draw):
    h = History(codec=draw(st.sampled_from([0, 0, 3, 4])))
    producers = [IDEMPOTENT, TX1, TX2, 13]
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["plain", "idempotent", "txn", "txn", "end"]))
        records = draw(st.lists(st.tuples(st.sampled_from(KEYS),
                                          st.one_of(st.none(), st.binary(min_size=1, max_size=3))),
                                min_size=1, max_size=3))
        if kind == "plain":
            h.data(records)
        elif kind == "idempotent":
            h.data(records, pid=IDEMPOTENT)
        elif kind == "txn":
            h.data(records, pid=draw(st.sampled_from(producers[1:])), transactional=True)
        elif h.open_txns:
            h.end(draw(st.sampled_from(sorted(h.open_txns))), commit=draw(st.booleans()))
    for pid in sorted(h.open_txns):
        h.end(pid, commit=draw(st.booleans()))
    return h


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.booleans(), st.sampled_from([1 << 20, ENTRY_BYTES * 4]))
def test_cleaning_matches_the_model(h, producers_active, map_bytes):
    original = read(h.batches, h.aborted, committed=True)
    originals = {offset: (key, value) for offset, key, value in read(h.batches, [], committed=False)}
    last = h.last_batch if producers_active else {}
    batches, aborted = h.batches, h.aborted
    now = T0
    for _ in range(4):
        batches, aborted = clean(batches, aborted, last, now_ms=now, retention_ms=1000,
                                 map_bytes=map_bytes)
        offsets = [BatchHeader(memoryview(b)).base_offset for b in batches]
        assert offsets == sorted(set(offsets))
        assert len(validate_batches(b"".join(batches), from_client=False)) == len(batches)
        seen = read(batches, aborted, committed=True)
        for offset, key, value in read(batches, aborted, committed=False):
            assert originals[offset] == (key, value)  # nothing moves or changes
        assert not {o for o, _, _ in seen} & h.aborted_offsets  # never aborted data
        # every key's latest committed value is still there (tombstones until the horizon)
        model = {k: v for k, v in latest_per_key(original).items()}
        got = latest_per_key(seen)
        for key, (offset, value) in model.items():
            if value is not None:
                assert got.get(key) == (offset, value)
        for pid, last_offset in last.items():
            assert any(BatchHeader(memoryview(b)).producer_id == pid
                       and BatchHeader(memoryview(b)).last_offset == last_offset for b in batches)
        now += 1001
    final = latest_per_key(read(batches, aborted, committed=True))
    assert final == {k: v for k, v in latest_per_key(original).items() if v[1] is not None}
    # records without a key go, up to the last keyed record a round's map can reach
    keyed = [o for o, k, _ in read(h.batches, h.aborted, committed=True) if k is not None]
    assert all(key is not None or offset > max(keyed, default=-1)
               for offset, key, _ in read(batches, aborted, committed=True))


# -- a read_committed consumer reading while the cleaner runs ---------------------------------


class Reader:
    """A read_committed consumer as the clients implement one: each fetch returns whole
    batches from its position and the aborted transactions (from the log's aborted-transaction
    index) overlapping them; a producer id becomes aborted at its transaction's first offset
    and stays so until that producer's ABORT marker."""

    def __init__(self) -> None:
        self.position = 0
        self.aborted_pids: set[int] = set()
        self.delivered: list[tuple[int, bytes | None, bytes | None]] = []

    def fetch(self, batches: list[bytes], aborted, count: int) -> None:
        fetched = [b for b in batches if BatchHeader(memoryview(b)).last_offset >= self.position]
        fetched = fetched[:count]
        if not fetched:
            return
        last = BatchHeader(memoryview(fetched[-1])).last_offset
        pending = sorted((t for t in aborted
                          if t.first_offset <= last and t.last_offset >= self.position),
                         key=lambda t: t.first_offset)
        for buf in fetched:
            header = BatchHeader(memoryview(buf))
            while pending and pending[0].first_offset <= header.last_offset:
                self.aborted_pids.add(pending.pop(0).producer_id)
            if header.is_control:
                kind = control_type(buf, header)
                if kind == ControlType.ABORT:
                    self.aborted_pids.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in self.aborted_pids):
                self.delivered += [(r.offset, r.key, r.value) for r in iter_records(buf, header)
                                   if r.offset >= self.position]
            self.position = header.last_offset + 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.lists(st.tuples(st.integers(1, 4), st.integers(0, 400)), min_size=1,
                             max_size=30))
def test_a_consumer_reading_while_the_cleaner_runs_sees_no_aborted_data(h, steps):
    """Between two fetches the cleaner runs with the clock moved on, but less than
    delete.retention.ms (the time Kafka gives a consumer to finish reading through a
    transaction): the consumer never delivers aborted data, and delivers every record that is
    its key's latest committed one (never cleaned away) past where it started."""
    retention = 1000
    batches, aborted, now = h.batches, h.aborted, T0
    reader = Reader()
    for count, elapsed in steps:
        reader.fetch(batches, aborted, count)
        now += elapsed
        batches, aborted = clean(batches, aborted, h.last_batch, now_ms=now,
                                 retention_ms=retention)
    while reader.position < h.next_offset and any(
            BatchHeader(memoryview(b)).last_offset >= reader.position for b in batches):
        reader.fetch(batches, aborted, 4)
    assert not {o for o, _, _ in reader.delivered} & h.aborted_offsets
    committed = read(h.batches, h.aborted, committed=True)
    delivered = set(reader.delivered)
    for key, (offset, value) in latest_per_key(committed).items():
        if key is not None and value is not None:
            assert (offset, key, value) in delivered
