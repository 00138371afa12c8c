"""Micro-benchmarks of the produce-path record code (plain script: prints ns/op).

    .venv/bin/python bench/bench_protocol_records.py

Measures, for one 16 KiB uncompressed batch: BatchHeader construction; validate_batches
(header checks + CRC32C); the same checks without the CRC (iter_batches, which skips it);
crc32c over the 16 KiB alone; set_base_offset in place. Then the record walk of the
produce path (protocol/validator.py) per MiB of records and as seconds of CPU per GiB, for
1 KiB and 100 B records, uncompressed, lz4 and zstd, with the C walker and the pure-Python
one, next to decompression alone (what any broker pays for a compressed batch). Best of
several repeats, so other load on the machine inflates the numbers less.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crc32c import crc32c

from semel.protocol import validator
from semel.protocol.compression import decompress
from semel.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    BatchHeader,
    build_batch,
    iter_batches,
    set_base_offset,
    validate_batches,
)


def batch_of(size: int) -> bytes:
    """One uncompressed batch of about ``size`` bytes (16 records)."""
    value = bytes(i % 251 for i in range(size // 16 - 30))
    records = [
        (f"key-{i}".encode(), value, [("h", b"v")], 1_700_000_000_000 + i) for i in range(16)
    ]
    return build_batch(records, producer_id=1, producer_epoch=0, base_sequence=0)


def ns_per_op(stmt, number: int) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=7)) / number * 1e9


def walk_rows() -> None:
    """The record walk per MiB of (uncompressed) records."""
    print(f"\nrecord walk, C walker built: {validator._recordwalk is not None}")
    print(f"{'records':>8s} {'codec':>5s} {'walker':>7s} {'ms/MiB':>8s} {'s/GiB':>7s}"
          f" {'decompress only s/GiB':>22s}")  # fmt: skip
    walkers = [("C", validator._recordwalk.walk)] if validator._recordwalk else []
    walkers.append(("python", validator._walk_py))
    for size in (1024, 100):
        n = (1 << 20) // size
        rows = [(b"key-%06d" % i, bytes((i + j) % 251 for j in range(size - 20)), [],
                 1_700_000_000_000 + i) for i in range(n)]  # fmt: skip
        for codec, name in ((0, "none"), (3, "lz4"), (4, "zstd")):
            data = build_batch(rows, compression=codec)
            header = BatchHeader(data)
            mib = len(build_batch(rows)) / (1 << 20)
            plain = 0.0
            if codec:
                payload = memoryview(data)[HEADER_SIZE:]
                plain = min(timeit.repeat(lambda c=codec, p=payload: decompress(c, p, 1 << 28),
                                          number=5, repeat=5)) / 5 / mib  # fmt: skip
            for walker, fn in walkers:
                validator._walk = fn
                number = 20 if walker == "C" else 3
                secs = min(timeit.repeat(
                    lambda d=data, h=header: validator.validate_records(
                        d, h, timestamp_bounds=(0, 2**62)),
                    number=number, repeat=5)) / number / mib  # fmt: skip
                print(f"{size:>7d}B {name:>5s} {walker:>7s} {secs * 1e3:8.3f} {secs * 1024:7.3f}"
                      f" {plain * 1024:22.3f}")  # fmt: skip
    validator._use_accelerator(True)


def main() -> None:
    batch = batch_of(16 * 1024)
    view = memoryview(batch)
    buf = bytearray(batch)
    crc_region = view[ATTRIBUTES_OFFSET:]
    assert len(validate_batches(view)) == 1
    n = 200_000
    rows = [
        ("BatchHeader(view) construction", lambda: BatchHeader(view)),
        ("validate_batches, one 16 KiB batch (with CRC)", lambda: validate_batches(view)),
        ("header walk without CRC (list(iter_batches))", lambda: list(iter_batches(view))),
        ("crc32c of the 16 KiB alone", lambda: crc32c(crc_region)),
        ("set_base_offset in place", lambda: set_base_offset(buf, 0, 123456789)),
    ]
    print(f"batch size {len(batch)} bytes, python {sys.version.split()[0]}")
    for name, fn in rows:
        print(f"{name:50s} {ns_per_op(fn, n):8.0f} ns/op")
    walk_rows()


if __name__ == "__main__":
    main()
