"""The log cleaner's record spans: the C reader (protocol/_recordwalk.c ``spans``) gives the
same spans as the Python one, and whatever it finds irregular (it answers None) the Python
reader rejects too, with the one exception it leaves to Python on purpose: a 10-byte
timestamp delta. Random valid records data and mutated data (bit flips, truncations,
inserted bytes, lying counts, lying lengths)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from walk_fixtures import body, record, varint

from semel.protocol import records
from semel.protocol.errors import ProtocolError
from semel.protocol.records import RecordSpan, _record_spans_py, record_spans

pytestmark = pytest.mark.skipif(records._recordwalk is None, reason="the C walker is not built")


def python_outcome(data: bytes, count: int):
    try:
        return _record_spans_py(data, count)
    except ProtocolError:
        return None


@st.composite
def records_data(draw):
    count = draw(st.integers(0, 6))
    parts = []
    for i in range(count):
        key = draw(st.one_of(st.none(), st.binary(max_size=8)))
        value = draw(st.one_of(st.none(), st.binary(max_size=40)))
        ts = draw(st.one_of(st.integers(-5, 5), st.integers(-(2**40), 2**40)))
        offset = draw(st.one_of(st.just(i), st.integers(-(2**31), 2**31 - 1)))
        parts.append(record(i, key=key, value=value, ts_delta=ts, offset_delta=offset))
    return b"".join(parts), count


@st.composite
def mutated(draw):
    data, count = draw(records_data())
    data = bytearray(data)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "count"]))
        if kind == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "cut" and data:
            del data[draw(st.integers(0, len(data) - 1)):]
        elif kind == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(min_size=1, max_size=6))
        elif kind == "count":
            count = draw(st.integers(0, 8))
    return bytes(data), count


def check(data: bytes, count: int) -> None:
    expected = python_outcome(data, count)
    got = records._recordwalk.spans(data, count, RecordSpan)
    assert got == expected
    if got is not None:
        assert all(type(s) is RecordSpan for s in got)
        assert record_spans(memoryview(data), count) == expected


@given(records_data())
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_valid_records_give_the_same_spans(case):
    data, count = case
    check(data, count)
    assert records._recordwalk.spans(data, count, RecordSpan) is not None


@given(mutated())
@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_records_agree(case):
    check(*case)


def test_a_ten_byte_timestamp_delta_is_left_to_python():
    b = bytearray(body(0))
    ts = varint(2**62)  # 10 bytes
    assert len(ts) == 10
    b[1:2] = ts  # the delta 0 was one byte
    data = varint(len(b)) + bytes(b)
    assert records._recordwalk.spans(data, 1, RecordSpan) is None
    assert record_spans(data, 1)[0].timestamp_delta == 2**62
