"""Synthetic partition histories for the cleaner's tests: plain, idempotent and
transactional batches (some transactions committed, some aborted, interleaved), written at
consecutive offsets as the log would hold them, with the aborted-transaction index entries
and the producers' last batches."""

from __future__ import annotations

from dataclasses import dataclass, field

from semel.protocol.records import BatchHeader, build_batch, build_control_batch, iter_records
from semel.storage.cleaner.filter import BatchFilter, build_offset_map
from semel.storage.cleaner.offset_map import OffsetMap
from semel.storage.transaction_index import AbortedTxn

T0 = 1_700_000_000_000


@dataclass
class History:
    codec: int = 0
    batches: list[bytes] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)
    aborted_offsets: set[int] = field(default_factory=set)  # data of aborted transactions
    last_batch: dict[int, int] = field(default_factory=dict)  # producer id -> last offset
    next_offset: int = 0
    sequences: dict[int, int] = field(default_factory=dict)
    open_txns: dict[int, tuple[int, list[int]]] = field(default_factory=dict)  # pid -> first, offsets

    def data(self, records: list[tuple[bytes | None, bytes | None]], *, pid: int = -1,
             transactional: bool = False) -> None:
        sequence = -1
        if pid >= 0:
            sequence = self.sequences.get(pid, 0)
            self.sequences[pid] = sequence + len(records)
        base = self.next_offset
        self.batches.append(build_batch(
            [(k, v, [], T0 + base + i) for i, (k, v) in enumerate(records)], base_offset=base,
            producer_id=pid, producer_epoch=0 if pid >= 0 else -1, base_sequence=sequence,
            is_transactional=transactional, compression=self.codec))
        offsets = list(range(base, base + len(records)))
        self.next_offset += len(records)
        if pid >= 0:
            self.last_batch[pid] = offsets[-1]
        if transactional:
            first, seen = self.open_txns.get(pid, (base, []))
            self.open_txns[pid] = (first, seen + offsets)

    def end(self, pid: int, commit: bool) -> None:
        first, offsets = self.open_txns.pop(pid)
        offset = self.next_offset
        self.batches.append(build_control_batch(
            commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
            timestamp_ms=T0 + offset, base_offset=offset))
        self.next_offset += 1
        if not commit:
            self.aborted.append(AbortedTxn(pid, first, offset, first))
            self.aborted_offsets.update(offsets)


def headers(batches: list[bytes | memoryview]) -> list[tuple[bytes | memoryview, BatchHeader]]:
    return [(b, BatchHeader(memoryview(b))) for b in batches]


def clean(batches: list[bytes], aborted: list[AbortedTxn], last_batch: dict[int, int], *,
          now_ms: int, retention_ms: int, map_bytes: int = 1 << 20
          ) -> tuple[list[bytes], list[AbortedTxn]]:
    """One cleaning of the whole log, in as many rounds as the map needs: each round builds
    the map from where the last one ended and filters [0, the map's latest offset]."""
    start = 0
    while True:
        offset_map = OffsetMap(map_bytes)
        # as the cleaner reads it: from the batch holding the first dirty offset, with every
        # aborted transaction of the log (markers before the dirty range included)
        dirty = [b for b in batches if BatchHeader(memoryview(b)).last_offset >= start]
        full = build_offset_map(headers(dirty), aborted, start, offset_map)
        if offset_map.latest_offset < 0:
            return batches, aborted
        end = offset_map.latest_offset
        f = BatchFilter(offset_map, aborted, now_ms=now_ms, delete_retention_ms=retention_ms,
                        last_batch_of_producer=last_batch)
        out = []
        for buf, header in headers(batches):
            if header.base_offset > end:
                out.append(buf)
                continue
            kept = f.filter(buf, header)
            if kept is not None:
                out.append(bytes(kept))
        aborted = f.tracker.kept_aborted + [t for t in aborted if t.last_offset > end]
        batches = out
        start = end + 1
        if not full:
            return batches, aborted


def read(batches: list[bytes], aborted: list[AbortedTxn], *, committed: bool
         ) -> list[tuple[int, bytes | None, bytes | None]]:
    """What a consumer from offset 0 gets: (offset, key, value) of data records; with
    ``committed`` it skips the batches of the aborted transactions listed, as read_committed
    fetches do with the aborted transactions the broker returns."""
    out = []
    for buf, header in headers(batches):
        if header.is_control:
            continue
        if committed and header.is_transactional and any(
                t.producer_id == header.producer_id
                and t.first_offset <= header.base_offset <= t.last_offset for t in aborted):
            continue
        out += [(r.offset, r.key, r.value) for r in iter_records(buf, header)]
    return out
