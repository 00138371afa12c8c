"""Hostile bytes, no I/O: requests of every supported (API key, version) filled with default
or random values and then mutated; raw garbage; lying record batches; compression bombs.

Everything is driven by a `random.Random`, so a seed reproduces a run's frames exactly.

Names in generated requests (topics, groups, transactional ids) never equal the real
clients' (`fz-...`, empty, long, non-ASCII), so a request that survives its mutation and is
executed (a DeleteTopics, a WriteTxnMarkers, an EndTxn...) cannot touch the exactly-once
workload: the soak judges the broker, not a legitimate admin request that deletes a topic.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable

from crc32c import crc32c

from semel.protocol import api
from semel.protocol.frame import DEFAULT_MAX_FRAME_SIZE, encode_request_header
from semel.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
)

SIZE = struct.Struct(">i")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
UINT32_LE = struct.Struct("<I")
CASES: list[tuple[int, int]] = [(a.key, v) for a in api.APIS
                                for v in range(a.min_version, a.max_version + 1)]
UNKNOWN_KEYS = (-32768, -1, 4, 5, 6, 7, 34, 38, 50, 57, 67, 72, 999, 32767)
INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1),
}
NAMES = ("", "fz-a", "fz-topic-é", "fz-ünïcode ✓", "fz-" + "x" * 240, "fz-.", "fz-__x")
# 4-byte values written over a frame at random: huge and negative lengths and counts
LENGTH_LIES = (b"\x7f\xff\xff\xff", b"\xff\xff\xff\xfe", b"\x80\x00\x00\x00",
               b"\xff\xff\xff\xff", b"\x00\x10\x00\x00")
SHORT_LIES = (b"\x7f\xff", b"\xff\xfe", b"\x80\x00", b"\xff\xff")
VARINT_LIES = (b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80",
               b"\xfe\xff\xff\xff\x07")


# ------------------------------------------------------------------ requests


def random_value(mod, ktype: str, rng: random.Random, depth: int):
    if ktype.startswith("[]"):
        n = rng.choice((0, 1, 1, 2, 3)) if depth < 3 else 0
        return [random_value(mod, ktype[2:], rng, depth + 1) for _ in range(n)]
    if ktype in INT_RANGES:
        lo, hi = INT_RANGES[ktype]
        return rng.choice([lo, hi, 0, 0, 1, -1 if lo < 0 else 2, rng.randint(lo, hi)])
    if ktype == "bool":
        return rng.random() < 0.5
    if ktype == "float64":
        return rng.choice([0.0, -1.0, 1e300, rng.uniform(-1e9, 1e9)])
    if ktype == "string":
        return rng.choice(NAMES)
    if ktype in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 1, 17, 61, 200]))
    if ktype == "uuid":
        return rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))])
    return random_struct(mod, ktype, rng, depth + 1)


def random_struct(mod, name: str, rng: random.Random, depth: int = 0):
    cls = getattr(mod, name)
    return cls(**{attr: random_value(mod, ktype, rng, depth)
                  for attr, ktype in mod.FIELD_TYPES[name].items()})


def request_payload(key: int, version: int, rng: random.Random, correlation_id: int,
                    *, default: bool = False, client_id: str | None = "hostile") -> bytes:
    """Header + body of a request (no size prefix), default-valued or random-valued."""
    mod = api.codec(key, "request")
    msg = mod.MESSAGE() if default else random_struct(mod, mod.MESSAGE.__name__, rng)
    out = bytearray(encode_request_header(key, version, correlation_id, client_id,
                                          api.request_header_version(key, version)))
    mod.encode(version, msg, out)
    return bytes(out)


def framed(payload: bytes, size: int | None = None) -> bytes:
    return SIZE.pack(len(payload) if size is None else size) + payload


def _overwrite(data: bytearray, rng: random.Random, pieces: tuple[bytes, ...],
               lo: int = 0) -> None:
    if len(data) <= lo:
        data += rng.choice(pieces)
        return
    i = rng.randrange(lo, len(data))
    data[i:i + 4] = rng.choice(pieces)


def mutate(payload: bytes, key: int, version: int, rng: random.Random) -> tuple[bytes, str, bool]:
    """A mutated frame of ``payload`` (size prefix included), the mutation's name, and
    whether the frame desynchronises the stream (its size prefix lies)."""
    data = bytearray(payload)
    kind = rng.choice(("none", "bitflip", "bitflip", "truncate", "extend", "int32_lie",
                       "int32_lie", "int16_lie", "varint_lie", "swap_version", "swap_key",
                       "header_only", "size_lie", "zero_body"))
    if kind == "bitflip":
        for _ in range(rng.choice((1, 1, 2, 4, 8))):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(8, len(data) + 1) if len(data) > 8 else len(data):]
    elif kind == "extend":
        data += rng.randbytes(rng.choice((1, 3, 8, 100, 4000)))
    elif kind == "int32_lie":
        _overwrite(data, rng, LENGTH_LIES, lo=8)
    elif kind == "int16_lie":
        _overwrite(data, rng, SHORT_LIES, lo=8)
    elif kind == "varint_lie":
        _overwrite(data, rng, VARINT_LIES, lo=8)
    elif kind == "swap_version":
        lo, hi = api.SUPPORTED[key]
        other = rng.choice([v for v in range(lo, hi + 1) if v != version] or [hi + 1])
        INT16.pack_into(data, 2, other)
    elif kind == "swap_key":
        INT16.pack_into(data, 0, rng.choice([k for k, _ in CASES]))
    elif kind == "header_only":
        del data[8 + 2 + len("hostile") + (1 if api.request_header_version(key, version) >= 2
                                           else 0):]
    elif kind == "zero_body":
        head = 8 + 2 + len("hostile")
        data[head:] = bytes(len(data) - head)
    if kind == "size_lie":
        size = len(data) + rng.choice((-7, -1, 1, 50, 1 << 16))
        return framed(bytes(data), max(size, 0)), kind, True
    return framed(bytes(data)), kind, False


class FuzzFrames:
    """Every supported (key, version) in a shuffled cycle; each a default- or random-valued
    request, usually mutated."""

    def __init__(self, rng: random.Random,
                 advertised: dict[int, tuple[int, int]] | None = None) -> None:
        """``advertised``: the broker's ApiVersions ranges (default: all of protocol.api)."""
        self.rng = rng
        ranges = advertised or api.SUPPORTED
        self.all_cases = [(k, v) for k, v in CASES
                          if k in ranges and ranges[k][0] <= v <= ranges[k][1]]
        self.cases: list[tuple[int, int]] = []
        self.correlation_id = 0

    def next(self) -> tuple[bytes, str, int, int, bool]:
        """(frame, mutation, api key, version, desynchronising)."""
        if not self.cases:
            self.cases = list(self.all_cases)
            self.rng.shuffle(self.cases)
        key, version = self.cases.pop()
        self.correlation_id += 1
        payload = request_payload(key, version, self.rng, self.correlation_id,
                                  default=self.rng.random() < 0.25)
        frame, kind, desync = mutate(payload, key, version, self.rng)
        return frame, kind, key, version, desync


# ------------------------------------------------------------------ raw garbage


def garbage(rng: random.Random,
            advertised: dict[int, tuple[int, int]] | None = None) -> tuple[str, bytes]:
    """(kind, bytes) of one hostile frame that is not a mutated request. ``advertised``: the
    broker's ApiVersions ranges; protocol.api's keys it does not advertise are sent as
    "unadvertised_key" (default-valued request of such a key)."""
    unadvertised = [k for k in api.SUPPORTED if advertised and k not in advertised]
    kind = rng.choice(("size0", "short_header", "negative_size", "random_bytes", "unknown_key",
                       "unsupported_version", "api_versions_unsupported", "client_id_lie",
                       "oversize_prefix", "tagged_header_lie")
                      + (("unadvertised_key",) if unadvertised else ()))
    if kind == "unadvertised_key":
        key = rng.choice(unadvertised)
        lo, hi = api.SUPPORTED[key]
        return kind, framed(request_payload(key, rng.randint(lo, hi), rng, 1, default=True))
    if kind == "size0":
        return kind, SIZE.pack(0)
    if kind == "short_header":
        n = rng.randrange(1, 8)
        return kind, SIZE.pack(n) + rng.randbytes(n)
    if kind == "negative_size":
        return kind, SIZE.pack(rng.choice((-1, -2, -(2**31)))) + rng.randbytes(8)
    if kind == "random_bytes":
        return kind, rng.randbytes(rng.choice((1, 3, 5, 64, 1000)))
    if kind == "unknown_key":
        head = struct.pack(">hhi", rng.choice(UNKNOWN_KEYS), rng.randrange(0, 20), 1)
        return kind, framed(head + INT16.pack(7) + b"hostile" + rng.randbytes(20))
    if kind in ("unsupported_version", "api_versions_unsupported"):
        ranges = advertised or api.SUPPORTED
        key = 18 if kind == "api_versions_unsupported" else rng.choice(sorted(ranges))
        lo, hi = ranges[key]
        version = rng.choice([hi + 1, 99, 32767, -1] + ([lo - 1] if lo > 0 else []))
        head = struct.pack(">hhi", key, version, 1)
        return kind, framed(head + INT16.pack(7) + b"hostile" + b"\x00" * 16)
    if kind == "client_id_lie":
        head = struct.pack(">hhi", 18, 0, 1)
        return kind, framed(head + INT16.pack(rng.choice((32767, -2, 100))) + b"x" * 4)
    if kind == "oversize_prefix":
        return kind, SIZE.pack(DEFAULT_MAX_FRAME_SIZE + rng.choice((1, 1 << 20))) + b"\x00" * 8
    # flexible header (ApiVersions v3) whose tagged-field count/size lies
    head = struct.pack(">hhi", 18, 3, 1) + INT16.pack(7) + b"hostile"
    return kind, framed(head + rng.choice(VARINT_LIES) + b"\x01\x7f")


# ------------------------------------------------------------------ record batches


def zigzag(value: int) -> bytes:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def record(offset_delta: int, value: bytes | None, *, key: bytes | None = None,
           ts_delta: int = 0, length_delta: int = 0) -> bytes:
    body = bytearray(b"\x00")
    body += zigzag(ts_delta) + zigzag(offset_delta)
    for part in (key, value):
        if part is None:
            body += zigzag(-1)
        else:
            body += zigzag(len(part)) + part
    body += zigzag(0)  # headers
    return zigzag(len(body) + length_delta) + bytes(body)


def wrap_batch(payload: bytes, *, record_count: int, last_offset_delta: int,
               compression: int = 0, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, timestamp: int = 1_700_000_000_000) -> bytes:
    """A v2 batch header around ``payload`` (records, compressed or not) with a valid CRC,
    whatever the payload holds."""
    batch = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(batch, 0, 0, MIN_BATCH_LENGTH + len(payload), -1, MAGIC, 0, compression,
                     last_offset_delta, timestamp, timestamp, producer_id, producer_epoch,
                     base_sequence, record_count)
    batch[HEADER_SIZE:] = payload
    UINT32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def compress(codec: int, data: bytes, *, declare_size: bool = True) -> bytes:
    """Kafka's framing for each codec; ``declare_size=False``: an lz4/zstd frame that does
    not state its content size, a gzip stream whose ISIZE trailer lies (says 1000)."""
    import cramjam

    if codec == 1:
        out = bytearray(cramjam.gzip.compress(data, level=9))
        if not declare_size:
            UINT32_LE.pack_into(out, len(out) - 4, 1000)
        return bytes(out)
    if codec == 2:
        from semel.protocol.compression import compress as kafka_compress

        return kafka_compress(2, data)
    if codec == 3:
        import lz4.frame

        return lz4.frame.compress(data, compression_level=16,
                                  block_size=lz4.frame.BLOCKSIZE_MAX4MB,
                                  content_checksum=False, block_linked=False,
                                  store_size=declare_size)
    if codec == 4:
        if not declare_size:
            import zstandard

            return zstandard.ZstdCompressor(level=19, write_content_size=False).compress(data)
        return bytes(cramjam.zstd.compress(data, level=19))
    raise ValueError(codec)


def _lies(rng: random.Random) -> dict[str, Callable[[], bytes]]:
    def vals(n: int) -> list[bytes]:
        return [b"lie-%d" % rng.randrange(10**9) for _ in range(n)]

    def plain(deltas: list[int], count: int | None = None, **kw) -> bytes:
        payload = b"".join(record(d, v) for d, v in zip(deltas, vals(len(deltas)), strict=True))
        n = len(deltas) if count is None else count
        return wrap_batch(payload, record_count=n, last_offset_delta=n - 1, **kw)

    return {
        "garbage_records": lambda: wrap_batch(rng.randbytes(rng.choice((7, 40, 300))),
                                              record_count=3, last_offset_delta=2),
        "count_more_than_records": lambda: plain([0, 1, 2], count=5),
        "count_less_than_records": lambda: plain([0, 1, 2, 3, 4], count=3),
        "offset_deltas_out_of_order": lambda: plain([0, 2, 1]),
        "offset_deltas_repeated": lambda: plain([0, 0, 1]),
        "offset_delta_beyond_last": lambda: plain([0, 1, 7]),
        "record_length_too_long": lambda: wrap_batch(
            record(0, b"a") + record(1, b"b", length_delta=50), record_count=2,
            last_offset_delta=1),
        "record_length_too_short": lambda: wrap_batch(
            record(0, b"abc", length_delta=-2) + record(1, b"b"), record_count=2,
            last_offset_delta=1),
        "trailing_bytes": lambda: wrap_batch(record(0, b"a") + rng.randbytes(9),
                                             record_count=1, last_offset_delta=0),
        "varint_too_long": lambda: wrap_batch(b"\xff" * 11 + record(0, b"a"), record_count=1,
                                              last_offset_delta=0),
        "key_length_huge": lambda: wrap_batch(
            zigzag(9) + b"\x00\x00\x00" + zigzag(2**31 - 1) + b"abcd", record_count=1,
            last_offset_delta=0),
        "header_count_huge": lambda: wrap_batch(
            zigzag(7) + b"\x00\x00\x00" + zigzag(-1) + zigzag(-1) + zigzag(2**31 - 1),
            record_count=1, last_offset_delta=0),
        "compressed_garbage": lambda: wrap_batch(rng.randbytes(64), record_count=2,
                                                 last_offset_delta=1,
                                                 compression=rng.choice((1, 2, 3, 4))),
        "compressed_count_lie": lambda: wrap_batch(
            compress(c := rng.choice((1, 3, 4)), record(0, b"a") + record(1, b"b")),
            record_count=4, last_offset_delta=3, compression=c),
        "compressed_offsets_out_of_order": lambda: wrap_batch(
            compress(c := rng.choice((1, 3, 4)), record(1, b"a") + record(0, b"b")),
            record_count=2, last_offset_delta=1, compression=c),
    }


BOMB_BYTES = 100 * 1024 * 1024 + 4096


class Bombs:
    """Compressed batches a few KB (zstd), ~100 KB (gzip) or ~400 KB (lz4) long that expand
    to over 100 MiB: zeros (garbage records) and one legitimate record with a 100 MiB value,
    each with its size declared in the compressed stream and without it (lz4/zstd frames
    with no content size, a gzip ISIZE that lies). Built once (a few seconds)."""

    def __init__(self) -> None:
        self.batches: dict[str, bytes] = {}
        for what in ("zeros", "record"):
            data = bytes(BOMB_BYTES) if what == "zeros" else record(0, bytes(BOMB_BYTES))
            for codec, name in ((4, "zstd"), (1, "gzip"), (3, "lz4")):
                for declared in (True, False):
                    suffix = "" if declared else "_size_hidden"
                    self.batches[f"bomb_{what}_{name}{suffix}"] = wrap_batch(
                        compress(codec, data, declare_size=declared), record_count=1,
                        last_offset_delta=0, compression=codec)
            del data


class LyingBatches:
    """Lying batches (valid header and CRC, records that lie) and bombs, in a shuffled cycle."""

    def __init__(self, rng: random.Random, *, bombs: bool = True, bomb_every: int = 8) -> None:
        self.rng = rng
        self.lies = _lies(rng)
        self.bombs = Bombs().batches if bombs else {}
        self.bomb_every = bomb_every
        self.n = 0
        self.order: list[str] = []
        self.bomb_order: list[str] = []

    def next(self) -> tuple[str, bytes]:
        self.n += 1
        if self.bombs and self.n % self.bomb_every == 0:
            if not self.bomb_order:
                self.bomb_order = sorted(self.bombs)
                self.rng.shuffle(self.bomb_order)
            name = self.bomb_order.pop()
            return name, self.bombs[name]
        if not self.order:
            self.order = sorted(self.lies)
            self.rng.shuffle(self.order)
        name = self.order.pop()
        return name, self.lies[name]()
