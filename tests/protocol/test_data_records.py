"""records.data_records (the fetch path's MessagesOut count): the C walker's and the pure
Python version agree with the batches' own headers, control batches left out, on whole and
cut buffers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from semel.protocol import records
from semel.protocol.records import build_batch, build_control_batch, iter_batches

COUNTERS = [records._data_records_py]
if records.data_records is not records._data_records_py:
    COUNTERS.append(records.data_records)


def expected(data: bytes) -> int:
    return sum(h.record_count for h in iter_batches(data) if not h.is_control)


@pytest.mark.parametrize("count", COUNTERS)
@given(st.lists(st.one_of(st.integers(1, 20), st.just(0)), max_size=8), st.integers(0, 200))
def test_counts_the_records_of_whole_data_batches(count, sizes, cut):
    data = b""
    for n in sizes:
        data += bytes(build_control_batch(commit=True, producer_id=1, producer_epoch=0,
                                          coordinator_epoch=0, timestamp_ms=0) if n == 0 else
                      build_batch([(b"k", b"v" * n, None, 0)] * n))
    assert count(data) == expected(data)
    cut_data = data[:max(0, len(data) - cut)]
    whole = b""
    for batch in iter_batches(data):
        end = len(whole) + batch.size
        if end > len(cut_data):
            break
        whole = data[:end]
    assert count(memoryview(cut_data)) == expected(whole)
