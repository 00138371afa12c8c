"""The cleaner's key map stays within log.cleaner.dedupe.buffer.size, refuses new keys when
full (the round ends there) and keeps updating the keys it has."""

from __future__ import annotations

import tracemalloc

from semel.storage.cleaner.offset_map import OffsetMap


def test_a_full_map_stays_within_its_buffer():
    buffer = 1 << 20
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        m = OffsetMap(buffer)
        i = 0
        while m.put(b"some-key-%d" % i, 2**40 + i):
            i += 1
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert i == m.capacity > 5000
    assert used <= buffer, f"{used} bytes for a {buffer}-byte buffer"


def test_full_map_updates_known_keys_and_refuses_new_ones():
    m = OffsetMap(144 * 4)  # 3 keys at the 0.9 load factor
    assert [m.put(k, o) for o, k in enumerate([b"a", b"b", b"c", b"d"])] == [True] * 3 + [False]
    assert m.full and m.put(b"a", 10) and m.get(b"a") == 10 and m.get(b"d") == -1
    assert m.latest_offset == 10
