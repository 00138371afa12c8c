"""Hypothesis: random appends, reads, rolls, DeleteRecords, timestamp lookups and clean or
unclean restarts against a plain in-memory model of the partition."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from log_helpers import FakeClock, headers, open_log, read_all

from semel.protocol.records import build_batch, iter_batches, iter_records
from semel.storage.config import LogConfig

T0 = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=64, segment_index_bytes=8 * 5)

records_strategy = st.lists(
    st.tuples(st.integers(0, 5_000), st.binary(max_size=90)), min_size=1, max_size=4
)


def decode(data: bytes) -> list[tuple[int, int, bytes]]:
    return [
        (r.offset, r.timestamp, r.value) for h in iter_batches(data) for r in iter_records(data, h)
    ]


class PartitionLogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="semel-model-"))
        self.clock = FakeClock(T0)
        self.plog = open_log(self.dir, CONFIG, clock=self.clock)
        self.records: list[tuple[int, int, bytes]] = []  # (offset, timestamp, value)
        self.log_start_offset = 0

    def teardown(self):
        self.plog.close(flush=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self) -> int:
        return len(self.records)

    @rule(batches=st.lists(records_strategy, min_size=1, max_size=3))
    def append(self, batches):
        data = b"".join(
            build_batch([(None, value, None, T0 - age) for age, value in batch])
            for batch in batches
        )
        result = self.plog.append(data)
        assert result.base_offset == self.end
        for batch in batches:
            for age, value in batch:
                self.records.append((len(self.records), T0 - age, value))
        assert result.last_offset == self.end - 1

    @precondition(lambda self: self.end > 0)
    @rule(data=st.data(), max_bytes=st.integers(0, 2000), min_one=st.booleans())
    def read(self, data, max_bytes, min_one):
        offset = data.draw(st.integers(self.log_start_offset, self.end))
        result = self.plog.read(offset, max_bytes, min_one_batch=min_one)
        assert result.high_watermark == self.end == result.log_end_offset
        assert result.log_start_offset == self.log_start_offset
        got = decode(result.records)
        if not got:
            assert offset == self.end or not min_one
            return
        batch_headers = headers(result.records)
        first = batch_headers[0]
        assert first.base_offset <= offset < first.next_offset
        assert len(result.records) <= max_bytes or len(batch_headers) == 1
        assert got == self.records[first.base_offset : batch_headers[-1].next_offset]

    @rule()
    def roll(self):
        self.plog.roll()

    @precondition(lambda self: self.end > 0)
    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(0, self.end))
        new_start = self.plog.delete_records_before(offset)
        self.log_start_offset = max(self.log_start_offset, offset)
        assert new_start == self.log_start_offset

    @rule(timestamp=st.integers(T0 - 5_100, T0 + 10))
    def offset_for_timestamp(self, timestamp):
        want = next(
            ((o, t) for o, t, _ in self.records if o >= self.log_start_offset and t >= timestamp),
            None,
        )
        assert self.plog.offset_for_timestamp(timestamp) == want

    @rule(clean=st.booleans())
    def restart(self, clean):
        self.plog.close(flush=clean)  # flush=False: files closed as a crash leaves them
        self.plog = open_log(
            self.dir, CONFIG, clock=self.clock, clean=clean, log_start_offset=self.log_start_offset
        )

    @invariant()
    def offsets_agree(self):
        assert self.plog.log_end_offset == self.plog.high_watermark == self.end
        assert self.plog.log_start_offset == self.log_start_offset
        segments = self.plog.segments
        for a, b in itertools.pairwise(segments):
            assert a.next_offset == b.base_offset

    @invariant()
    def everything_readable(self):
        got = [r for r in decode(read_all(self.plog)) if r[0] >= self.log_start_offset]
        assert got == self.records[self.log_start_offset :]


PartitionLogModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_partition_log_model = PartitionLogModel.TestCase
