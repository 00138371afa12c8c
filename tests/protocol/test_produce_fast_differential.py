"""The produce fast path's C accelerator (protocol/_recordwalk.c: produce_parse,
batch_header, the header getters, valid_client_batch, crc32c, quick) against pure Python,
the reference: the same inputs - valid frames and batches as clients send them, and
truncated, bit-flipped, lying and hostile ones - give the same results and the same errors
through both. The pure-Python side is tested on its own by the other protocol tests."""

from __future__ import annotations

import contextlib
import random
import struct

import pytest
from crc32c import crc32c
from walk_fixtures import T0, batch, body, varint

from semel.protocol import api, produce_fast, records, validator
from semel.protocol.messages.produce_request import PartitionProduceData, TopicProduceData
from semel.protocol.records import (
    HEADER,
    HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    build_batch,
)
from tests.kafka_wire import message

pytestmark = pytest.mark.skipif(validator._recordwalk is None,
                                reason="the C accelerator is not built")

PRODUCE = 0
VERSIONS = range(3, 13)
_INT64_MAX = 2**63 - 1


@contextlib.contextmanager
def native(enabled: bool):
    """Every accelerated function of the three modules from C (True) or pure Python."""
    for module in (records, validator, produce_fast):
        module._use_accelerator(enabled)
    try:
        yield
    finally:
        for module in (records, validator, produce_fast):
            module._use_accelerator(True)


def outcome(fn, *args, **kw):
    """What a call gives: ("ok", value) or the error's class, message and position."""
    try:
        return ("ok", fn(*args, **kw))
    except Exception as e:  # noqa: BLE001 - the errors themselves are compared
        return (type(e).__name__, str(e), getattr(e, "position", None))


def both(fn, *args, **kw):
    """(C outcome, Python outcome) of ``fn()`` (looked up at call time)."""
    with native(True):
        c = outcome(fn(), *args, **kw)
    with native(False):
        py = outcome(fn(), *args, **kw)
    return c, py


# -- produce_fast.parse ---------------------------------------------------------------------


def _request(rng: random.Random, transactional_id=None):
    topics = []
    for t in range(rng.randint(0, 3)):
        partitions = [PartitionProduceData(index=rng.randint(-5, 1 << 31 - 1),
                                           records=rng.randbytes(rng.choice((0, 1, 70, 300))))
                      for _ in range(rng.randint(0, 3))]
        name = rng.choice(["t", "topic-é", "x" * 200]) + str(t)
        topics.append(TopicProduceData(name=name, partition_data=partitions))
    return message(PRODUCE, "request", transactional_id=transactional_id,
                   acks=rng.choice([-1, 0, 1, 7]), timeout_ms=rng.randint(-(2**31), 2**31 - 1),
                   topic_data=topics)


def _frame(version: int, body_, client_id: str | None = "client") -> bytes:
    return bytes(api.encode_request(PRODUCE, version, 7, client_id, body_))[4:]


def _shape(parsed, frame):
    """A parse answer as plain data; records must be views into the frame's own buffer."""
    if parsed[0] != "ok" or parsed[1] is None:
        return parsed
    p = parsed[1]
    assert type(p) is produce_fast.ParsedProduce
    topics = []
    for topic in p.topics:
        assert type(topic) is produce_fast.Topic
        partitions = []
        for partition in topic.partitions:
            assert type(partition) is produce_fast.Partition
            data = partition.records
            assert type(data) is type(frame[0:0])
            if isinstance(frame, memoryview):
                assert data.obj is frame.obj
            partitions.append((partition.index, bytes(data)))
        topics.append((topic.name, partitions))
    return ("ok", (p.transactional_id, p.acks, p.timeout_ms, topics))


def parse_both(frame, version: int):
    c, py = both(lambda: produce_fast.parse, frame, version)
    return _shape(c, frame), _shape(py, frame)


def _mutations(rng: random.Random, frame: bytes, n: int):
    yield frame
    yield frame + b"\x00"
    for cut in range(len(frame)):
        yield frame[:cut]
    for _ in range(n):
        broken = bytearray(frame)
        kind = rng.randrange(4)
        i = rng.randrange(len(broken))
        if kind == 0:
            broken[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            broken[i] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif kind == 2:
            broken[i:i] = rng.choice((b"\xff" * 6, b"\x80\x80\x80\x80\x80\x01", b"\x00",
                                      b"\xff\xfe", rng.randbytes(3)))
        else:
            del broken[i:i + rng.randint(1, 8)]
        yield bytes(broken)


@pytest.mark.parametrize("version", VERSIONS)
def test_parse_agrees_on_valid_and_mutated_frames(version: int) -> None:
    rng = random.Random(1000 + version)
    seen = {"parsed": 0, "refused": 0}
    for i in range(40):
        body_ = _request(rng, transactional_id=None if i % 3 else f"txn-{i}")
        frame = _frame(version, body_, client_id=None if i % 5 == 0 else "c" * (i % 40))
        for j, variant in enumerate(_mutations(rng, frame, 60)):
            holder = (bytes, bytearray, memoryview)[j % 3]
            data = memoryview(bytearray(variant)) if holder is memoryview else holder(variant)
            c, py = parse_both(data, version)
            assert c == py, (version, i, j)
            seen["parsed" if c[1] is not None else "refused"] += 1
    assert seen["parsed"] > 40 and seen["refused"] > 1000


def _flexible_frame(parts: list[bytes], flexible: bool) -> bytes:
    header = struct.pack(">hhih", PRODUCE, 11 if flexible else 7, 1, 3) + b"cid"
    return header + (b"\x00" if flexible else b"") + b"".join(parts)


@pytest.mark.parametrize("flexible", [True, False])
def test_parse_agrees_on_hostile_fields(flexible: bool) -> None:
    """Lengths and counts that lie, overlong varints, invalid UTF-8, tagged fields."""
    version = 11 if flexible else 7

    def string(data: bytes | None, length: int | None = None) -> bytes:
        n = (-1 if data is None else len(data)) if length is None else length
        if flexible:
            return uvarint(n + 1)
        return struct.pack(">h", n)

    def count(n: int) -> bytes:
        return uvarint(n + 1) if flexible else struct.pack(">i", n)

    def uvarint(n: int) -> bytes:
        out = bytearray()
        n &= (1 << 64) - 1
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        return bytes(out)

    tag = b"\x00" if flexible else b""
    records_ = b"r" * 70
    good_partition = struct.pack(">i", 0) + count(len(records_)) + records_ + tag
    good_topic = string(b"t") + b"t" + count(1) + good_partition + tag
    acks = struct.pack(">hi", -1, 30000)
    cases = [
        [string(None), acks, count(1), good_topic, tag],  # valid
        [string(b"txn"), b"txn", acks, count(1), good_topic, tag],
        [string(b"\xff\xfe"), b"\xff\xfe", acks, count(1), good_topic, tag],  # bad UTF-8
        [string(None), acks, count(1), string(b"\xc3(") + b"\xc3(" + count(0) + tag, tag],
        [string(None), acks, count(1), string(b"\xed\xa0\x80") + b"\xed\xa0\x80" + count(0)
         + tag, tag],  # a surrogate
        [string(None), acks, count(2**31 - 1), good_topic, tag],  # count past the frame
        [string(None), acks, count(-7), tag],
        [string(None), acks, count(1), string(b"t") + b"t" + count(2**31 - 1) + good_partition
         + tag, tag],
        [string(None), acks, count(1), string(b"t") + b"t" + count(1) + struct.pack(">i", 0)
         + count(2**30) + records_ + tag + tag, tag],  # records length past the frame
        [string(None), acks, count(1), string(b"t") + b"t" + count(1) + struct.pack(">i", 0)
         + count(-1) + tag + tag, tag],  # null records
        [string(None, length=-5), acks, count(0), tag],  # negative string length
        [string(None, length=30_000), acks, count(0), tag],  # past the frame
        [string(None), acks, count(0), b"\x01\x05\x01z"],  # a tagged field
        [string(None), acks, count(0), tag, b"trailing"],
        [string(None), acks, count(1), string(b"t", length=-3) + b"t" + count(0), tag],
    ]
    if flexible:
        cases += [
            [b"\x80\x80\x80\x80\x80\x01", acks, count(0), tag],  # a varint of 6 bytes
            [b"\xff\xff\xff\xff\x7f", acks, count(0), tag],  # 5 bytes: 2^35 - 1
            [string(None), acks, b"\x80\x80\x80\x80\x10", tag],  # 5-byte count
            [string(None), acks, count(1), b"\x80\x80\x80\x80\x80\x80" + b"t", tag],
        ]
    for parts in cases:
        frame = _flexible_frame(parts, flexible)
        for variant in (frame, frame[:-1], frame + b"\x00"):
            c, py = parse_both(memoryview(bytearray(variant)), version)
            assert c == py, parts
    # a client id longer than the frame, a header cut in the middle
    for frame in (b"", b"\x00" * 9, struct.pack(">hhih", 0, 11, 1, 300) + b"x",
                  struct.pack(">hhih", 0, 11, 1, -1) + b"\x00"):
        assert parse_both(memoryview(frame), version)[0] == parse_both(memoryview(frame),
                                                                      version)[1]


# -- BatchHeader and its properties ------------------------------------------------------------


def test_header_construction_agrees() -> None:
    """Every buffer length around a header, every position (negative ones count from the
    end, as struct does), and the truncation error itself."""
    rng = random.Random(7)
    for _ in range(300):
        buf = rng.randbytes(rng.randint(0, 140))
        for position in (0, 1, 60, 61, 79, len(buf) - 61, len(buf), -1, -61, -62, -len(buf),
                         -len(buf) - 1, rng.randint(-150, 150)):
            for holder in (bytes, bytearray, memoryview):
                data = holder(buf) if holder is not memoryview else memoryview(buf)
                c, py = both(lambda: BatchHeader, data, position)
                assert c == py, (len(buf), position)
                if c[0] == "ok":
                    assert type(c[1]) is BatchHeader
                    c_read, _ = both(lambda: records.read_header, data, position)
                    assert c_read == c
    c, py = both(lambda: BatchHeader, b"\x00" * 61)  # the default position
    assert c == py and c[1].position == 0
    c, py = both(lambda: BatchHeader, b"\x00" * 10)
    assert c == py and c[0] == "CorruptRecordError"
    with native(True), pytest.raises(CorruptRecordError) as error:
        records.read_header(b"abc", 0)
    assert error.value.position == 0 and "truncated batch header: 3 bytes" in str(error.value)


PROPERTIES = ("compression", "timestamp_type", "is_transactional", "size", "last_sequence",
              "is_control", "has_producer_id", "last_offset", "next_offset")


def _properties(header):
    return [outcome(getattr, header, name) for name in PROPERTIES]


def test_header_properties_agree() -> None:
    rng = random.Random(11)
    headers = [BatchHeader(rng.randbytes(61)) for _ in range(2000)]
    edge = (0, 1, -1, 7, 8, 0x10, 0x1F, 2**31 - 1, -(2**31), 2**31 - 2, _INT64_MAX,
            -(2**63), 2**40, 2**41, -(2**41), 2**70, -(2**70))
    for _ in range(2000):  # hand-made tuples (pickled headers): any int, the Python answer
        values = [rng.choice(edge) for _ in range(14)]
        headers.append(tuple.__new__(BatchHeader, values))
    for header in headers:
        c, py = both(lambda h=header: _properties, header)
        assert c == py, header


# -- is_valid_client_batch and the CRC -------------------------------------------------------


def test_crc32c_agrees_with_the_package() -> None:
    rng = random.Random(3)
    data = rng.randbytes(20_000)
    lengths = [*range(80), *range(740, 800), *range(4070, 4110), 10_000, 16_500]
    for n in lengths:
        for offset in (0, 1, 3, 7):
            region = memoryview(data)[offset:offset + n]
            assert validator._recordwalk.crc32c(region) == crc32c(region), (n, offset)


def _client_batches(rng: random.Random):
    values = [b"", b"0123456789", b"u" * 690, b"v" * 1000, b"w" * 4030, b"y" * 16_000]
    for value in values:
        for kw in ({}, {"producer_id": 1000, "producer_epoch": 0, "base_sequence": 5},
                   {"producer_id": 7, "producer_epoch": 2, "base_sequence": 2**31 - 1,
                    "is_transactional": True},
                   {"producer_id": 7, "base_sequence": -1},
                   {"is_control": True}, {"compression": 3}, {"compression": 4},
                   {"timestamp_type": 1}):
            n = rng.choice((1, 1, 3))
            yield build_batch([(None, value, None, T0 + i) for i in range(n)], **kw)


def _header_edits(data: bytes):
    """The batch with each header field set to values that break one rule."""
    fields = [f[0] for f in records._FIELDS]
    values = list(HEADER.unpack_from(data))
    edits = {"batch_length": [0, 48, 49, values[1] - 1, values[1] + 1, -1, 2**31 - 1],
             "magic": [0, 1, 3, -1], "crc": [0, values[4] ^ 1],
             "attributes": [5, 6, 7, 0x20, 0x10, 0x08, -1, 0x7FFF],
             "last_offset_delta": [-1, values[6] + 1, 2**31 - 1],
             "record_count": [0, -1, values[12] + 1, 2**31 - 1],
             "producer_id": [-2, 0, 2**63 - 1], "base_sequence": [-1, -5, 2**31 - 1]}
    for name, choices in edits.items():
        for value in choices:
            changed = list(values)
            changed[fields.index(name)] = value
            out = bytearray(data)
            HEADER.pack_into(out, 0, *changed)
            yield bytes(out)


def test_valid_client_batch_agrees() -> None:
    rng = random.Random(5)
    checked = {True: 0, False: 0}
    for data in _client_batches(rng):
        variants = [data, data + b"\x00", data[:-1], data[:61], *_header_edits(data)]
        for _ in range(20):
            flipped = bytearray(data)
            i = rng.randrange(len(flipped))
            flipped[i] ^= 1 << rng.randrange(8)
            variants.append(bytes(flipped))
        for variant in variants:
            view = memoryview(bytearray(variant))
            header = BatchHeader(view, 0)
            c, py = both(lambda: records.is_valid_client_batch, view, header)
            assert c == py
            checked[c[1]] += 1
        # a header read elsewhere than at the start is never the batch's
        header = BatchHeader(b"\x00" + data, 1)
        assert both(lambda: records.is_valid_client_batch, memoryview(data), header) == (
            ("ok", False), ("ok", False))
    assert checked[True] >= 10 and checked[False] >= 500


# -- validator.quick_summary ----------------------------------------------------------------

BOUNDS = [None, (T0 - 3, T0 + 3), (-(2**41), 2**41), (T0 - _INT64_MAX, T0 + _INT64_MAX),
          (T0 + 10, T0 - 10), (-(2**70), 2**70), (2**63, 2**70), (-(2**70), -(2**63) - 1),
          (-(2**63), _INT64_MAX), (T0, T0)]


def _walk_batches(rng: random.Random):
    """Batches of hand-built records: valid, lying and mutated; timestamps at the int64
    edges."""
    for _ in range(120):
        n = rng.randint(1, 6)
        bodies = [body(i, key=rng.choice((None, b"", b"k")),
                       value=rng.choice((None, b"v", rng.randbytes(rng.randint(0, 300)))),
                       headers=rng.choice(([], [(b"h", b"x")], [(b"a", None), (b"b", b"")])),
                       ts_delta=rng.choice((0, 1, 2, -1, 5, -1 - T0, 2**62, -(2**62))))
                  for i in range(n)]
        data = bytearray(b"".join(varint(len(b)) + b for b in bodies))
        count = n
        kind = rng.randrange(6)
        if kind == 1 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 2 and data:
            del data[rng.randrange(len(data)):]
        elif kind == 3:
            count = rng.randint(1, n + 2)
        elif kind == 4:
            i = rng.randrange(len(data) + 1)
            data[i:i] = rng.choice((b"\xff" * 5, b"\x80" * 10 + b"\x01", b"\x00"))
        base = rng.choice((T0, 0, -1, _INT64_MAX, -(2**63), _INT64_MAX - 3, 2**62))
        yield batch(bytes(data), count, base_timestamp=base,
                    compression=rng.choice((0, 0, 0, 3)),
                    log_append_time=rng.random() < 0.1,
                    max_timestamp=rng.choice((None, -1, T0)))
    yield batch(b"", 0)  # a header alone, declaring no records (count 0)
    yield batch(b"", 0, base_timestamp=_INT64_MAX)
    yield batch(b"", 1)


def test_quick_summary_agrees() -> None:
    rng = random.Random(9)
    seen = set()
    for data in _walk_batches(rng):
        for lead in (b"", b"\x01\x02\x03"):
            buf = lead + data
            header = BatchHeader(buf, len(lead))
            for bounds in BOUNDS:
                for require_keys in (False, True):
                    for log_append_time in (False, True):
                        kw = {"require_keys": require_keys, "timestamp_bounds": bounds,
                              "log_append_time": log_append_time}
                        c, py = both(lambda: validator.quick_summary, buf, header, **kw)
                        assert c == py, (header, kw)
                        seen.add("summary" if c[1] is not None else "deferred")
    assert seen == {"summary", "deferred"}


def test_quick_summary_agrees_on_lying_headers() -> None:
    """Lengths below a header's, counts that do not match the records. (A batch running
    past the buffer is not a question for quick_summary: the header checks refuse it
    first, and the C call hands it to Python.)"""
    rng = random.Random(13)
    data = batch(b"".join(varint(len(b)) + b for b in (body(0), body(1))), 2)
    values = list(HEADER.unpack_from(data))
    for _ in range(300):
        changed = list(values)
        changed[1] = rng.choice((0, 48, 49, 50, values[1] - 1, values[1] - 5, -3))
        changed[12] = rng.choice((0, 1, 2, 3, -1, 2**31 - 1))
        changed[7] = rng.choice((T0, _INT64_MAX, -(2**63)))
        buf = bytearray(data)
        HEADER.pack_into(buf, 0, *changed)
        header = BatchHeader(buf, 0)
        for bounds in BOUNDS:
            c, py = both(lambda: validator.quick_summary, bytes(buf), header,
                         timestamp_bounds=bounds)
            assert c == py, (changed, bounds)


def test_the_java_shape_takes_the_c_path() -> None:
    """The tiny idempotent batch of a Java producer is summarized by the one C call."""
    data = memoryview(bytearray(build_batch([(None, b"0123456789", None, T0)],
                                            producer_id=1000, producer_epoch=0,
                                            base_sequence=0)))
    header = records.read_header(data, 0)
    calls = []
    python = validator._quick_summary_py
    with native(True):
        quick = validator.quick_summary.func  # (fallback, RecordsSummary) bound by partial
        summary = quick(lambda *a, **kw: calls.append(a) or python(*a, **kw),
                        validator.RecordsSummary, data, header, require_keys=False,
                        timestamp_bounds=(T0 - 1000, T0 + 1000), max_uncompressed=1 << 20)
    assert summary == (T0, 1, len(data) - HEADER_SIZE) and not calls
    assert type(summary) is validator.RecordsSummary
    assert records.is_valid_client_batch is validator._recordwalk.valid_client_batch
