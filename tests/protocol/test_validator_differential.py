"""The C record walker (protocol/_recordwalk.c) and the pure-Python one give identical
results and identical errors (class, message, record errors), and both agree with the
reference: every record read by the careful reader alone. Random valid batches and mutated
ones: bit flips, truncations, inserted bytes, lying counts, varint garbage."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from walk_fixtures import T0, batch, body, varint

from semel.protocol import validator
from semel.protocol.records import BatchHeader, InvalidRecordError
from semel.protocol.validator import DONE, INCOMPLETE, SUSPECT, validate_records

pytestmark = pytest.mark.skipif(validator._recordwalk is None, reason="the C walker is not built")


def _careful_only(buf, pos, end, index, count, *_args):
    """A walker that accepts nothing: every record goes through _careful_record."""
    max_delta = _args[-3]
    if index >= count:
        return pos, index, max_delta, 0, 0, DONE
    return pos, index, max_delta, 0, 0, SUSPECT if pos < end else INCOMPLETE


WALKERS = {
    "C": lambda: validator._recordwalk.walk,
    "python": lambda: validator._walk_py,
    "reference": lambda: _careful_only,
}


def outcome(walker: str, data: bytes, codec: int, chunk: int, window: int, **kw):
    saved = validator._walk, validator.STREAM_CHUNK, validator.WINDOW
    validator._walk = WALKERS[walker]()
    validator.STREAM_CHUNK, validator.WINDOW = chunk, window
    try:
        return ("ok", validate_records(data, BatchHeader(data), **kw))
    except InvalidRecordError as e:
        return (type(e).__name__, str(e), e.record_errors)
    finally:
        validator._walk, validator.STREAM_CHUNK, validator.WINDOW = saved


small = st.integers(-3, 3)
varints = st.one_of(small, st.integers(-(2**31), 2**31 - 1))


@st.composite
def record_bodies(draw, index: int):
    key = draw(st.one_of(st.none(), st.binary(max_size=6)))
    value = draw(st.one_of(st.none(), st.binary(max_size=200)))
    headers = draw(st.lists(st.tuples(st.binary(max_size=4),
                                      st.one_of(st.none(), st.binary(max_size=4))), max_size=3))
    ts = draw(st.one_of(st.integers(-5, 5), st.integers(-(2**40), 2**40),
                        st.just(-1 - T0)))  # fmt: skip
    return body(index, key=key, value=value, headers=headers, ts_delta=ts)


@st.composite
def batches(draw):
    n = draw(st.integers(1, 12))
    bodies = [draw(record_bodies(i)) for i in range(n)]
    data = bytearray(b"".join(varint(len(b)) + b for b in bodies))
    count = n
    mutation = draw(st.sampled_from(["none", "flip", "truncate", "insert", "count", "varint",
                                     "splice"]))  # fmt: skip
    if mutation == "flip" and data:
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
    elif mutation == "truncate" and data:
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif mutation == "insert":
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.binary(min_size=1, max_size=6))
    elif mutation == "count":
        count = draw(st.integers(1, n + 3))
    elif mutation == "varint":
        i = draw(st.integers(0, len(data)))
        data[i:i] = draw(st.sampled_from([b"\xff" * 5, b"\x80" * 10 + b"\x01", b"\xff\xff\xff\xff\x7f",
                                          varint(draw(varints))]))  # fmt: skip
    elif mutation == "splice":
        i = draw(st.integers(0, len(data)))
        data[i:] = draw(st.binary(max_size=40))
    codec = draw(st.sampled_from([0, 0, 1, 3, 4, 2]))
    return bytes(data), count, codec


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=batches(), chunk=st.sampled_from([1, 2, 7, 64, 1 << 18]),
       window=st.sampled_from([0, 16, 1 << 20]), require_keys=st.booleans(),
       bounds=st.sampled_from([None, (T0 - 3, T0 + 3), (-(2**41), 2**41)]))  # fmt: skip
def test_c_python_and_reference_agree(case, chunk, window, require_keys, bounds):
    data, count, codec = case
    full = batch(data, count, compression=codec)
    kw = {"require_keys": require_keys, "timestamp_bounds": bounds, "topic_partition": "t-0"}
    results = {w: outcome(w, full, codec, chunk, window, **kw) for w in WALKERS}
    event(results["C"][0] if results["C"][0] == "ok" else results["C"][1].split(":")[0][:40])
    assert results["C"] == results["python"] == results["reference"]
    # the chunking never changes the answer
    assert outcome("C", full, codec, 1 << 18, 1 << 20, **kw) == results["C"]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), count=st.integers(0, 40), index=st.integers(0, 3),
       pos=st.integers(0, 20), require_keys=st.booleans(), mode=st.integers(0, 2),
       dlow=st.integers(-100, 100), dhigh=st.integers(-100, 100),
       room=st.integers(0, 3))  # fmt: skip
def test_walkers_agree_on_raw_windows(data, count, index, pos, require_keys, mode, dlow, dhigh,
                                      room):  # fmt: skip
    """The window walkers themselves, on arbitrary bytes: same stop, same status, same
    record errors."""
    pos = min(pos, len(data))
    args = (data, pos, len(data), index, count, dlow, dhigh, -1 - T0, mode, require_keys,
            -(2**63))  # fmt: skip
    c_errors, py_errors = [], []
    c = validator._recordwalk.walk(*args, c_errors, room)
    py = validator._walk_py(*args, py_errors, room)
    assert c == py
    assert c_errors == py_errors


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=batches(), walker=st.sampled_from(["C", "python"]), require_keys=st.booleans(),
       bounds=st.sampled_from([None, (T0 - 3, T0 + 3), (-(2**41), 2**41)]),
       lead=st.binary(max_size=9))  # fmt: skip
def test_quick_walk_agrees_or_defers(case, walker, require_keys, bounds, lead):
    """The produce path's one-call walk (compressed batches decompressed whole) either gives
    the full walk's summary or defers (None) to it; it never accepts what the full walk
    refuses. The batch sits after other bytes, as
    the second batch of a request does."""
    data, count, codec = case
    buf = lead + batch(data, count, compression=codec)
    header = BatchHeader(buf, len(lead))
    kw = {"require_keys": require_keys, "timestamp_bounds": bounds}
    saved = validator._walk
    validator._walk = WALKERS[walker]()
    try:
        quick = validator.quick_summary(buf, header, **kw)
        try:
            full = ("ok", validate_records(buf, header, **kw))
        except InvalidRecordError as e:
            full = ("refused", str(e))
    finally:
        validator._walk = saved
    event("quick" if quick is not None else f"deferred ({full[0]})")
    if quick is not None:
        assert full == ("ok", quick)
    if full[0] == "ok":  # a small valid batch always takes the quick walk, compressed or not
        assert quick is not None
