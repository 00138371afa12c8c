"""Micro-benchmarks of the produce-path record code (plain script: prints ns/op).

    .venv/bin/python bench/bench_protocol_records.py

Measures, for one 16 KiB uncompressed batch: BatchHeader construction; validate_batches
(header checks + CRC32C); the same checks without the CRC (iter_batches, which skips it);
crc32c over the 16 KiB alone; set_base_offset in place. Best of several repeats, so
other load on the machine inflates the numbers less.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crc32c import crc32c

from protocol.records import (
    ATTRIBUTES_OFFSET,
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


if __name__ == "__main__":
    main()
