"""Record values for the compressed produce rows: compressible, but not trivially.

One deterministic text (seeded ``random.Random``) of words separated by spaces: 2048
made-up words (2-10 letters drawn with English-like letter frequencies) and 2048 numbers
(1-9 digits), picked with Zipf-like frequencies (the k-th most common one 1/k as often as
the first). A producer cuts it into consecutive ``size``-byte values (cut anywhere, mid-word
included) and cycles through them, so no two records of one batch are equal (the text is
4 MB: 3,906 values of 1 KiB, 40,000 of 100 B, more than a 1 MB batch holds). lz4 shrinks
it about 1.9x in 16 KiB batches (the Java client's batch.size) and 2.6x in 1 MB ones
(librdkafka's), zstd about 2.5x and 3.3x: ``ratios()`` measures it, the report prints it.

The text is written once to .cache/bench/ (gitignored), where both the Python (librdkafka)
and the Java load generators read it: both clients send the same bytes.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "bench"
VERSION = 1  # bump when the generator changes: the cached file is named after it
TEXT_BYTES = 4_000_000
SEED = 12


def generate(total: int = TEXT_BYTES, seed: int = SEED) -> bytes:
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    letter_weights = [12, 9, 8, 8, 7, 7, 6, 6, 6, 4, 4, 3, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1,
                      1, 1]
    words = ["".join(rng.choices(letters, letter_weights, k=rng.randint(2, 10)))
             for _ in range(2048)]
    words += [str(rng.randrange(10 ** rng.randint(1, 9))) for _ in range(2048)]
    rng.shuffle(words)
    cum = list(itertools.accumulate(1 / (k + 1) for k in range(len(words))))
    text = bytearray()
    while len(text) < total:
        text += " ".join(rng.choices(words, cum_weights=cum, k=100_000)).encode() + b" "
    return bytes(text[:total])


def text_path() -> Path:
    """The cached text, written (atomically) on first use."""
    path = CACHE / f"words-v{VERSION}-{SEED}-{TEXT_BYTES}.bin"
    if not path.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(generate())
        partial.replace(path)
    return path


def values(size: int, path: Path | None = None) -> list[bytes]:
    """The text cut into ``size``-byte values (the tail shorter than ``size`` dropped)."""
    text = (path or text_path()).read_bytes()
    return [text[i:i + size] for i in range(0, len(text) - size + 1, size)]


def ratios() -> dict[str, float]:
    """Compression ratios (input / output) of the text in 16 KiB and 1 MB batches."""
    import cramjam

    text = text_path().read_bytes()
    out = {}
    for label, chunk in (("16KiB", 16384), ("1MB", 1_000_000)):
        pieces = [text[i:i + chunk] for i in range(0, len(text) - chunk + 1, chunk)][:8]
        raw = sum(map(len, pieces))
        out[f"lz4_{label}"] = raw / sum(len(bytes(cramjam.lz4.compress(p))) for p in pieces)
        out[f"zstd_{label}"] = raw / sum(len(bytes(cramjam.zstd.compress(p, level=3)))
                                         for p in pieces)
    return out


if __name__ == "__main__":
    print(text_path())
    print({k: round(v, 2) for k, v in ratios().items()})
