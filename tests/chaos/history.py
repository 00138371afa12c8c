"""Histories: every operation of a chaos run as JSON lines, one event per line.

Each event is an object with
  t     wall-clock seconds (time.time(); comparable across the processes of one machine)
  p     the process: a workload thread, a copier process, "nemesis", "final"
  type  "invoke" | "ok" | "fail" | "info"   (Jepsen's: fail = definitely did not happen,
        info = outcome unknown; an invoke without completion is unknown as well)
  f     the operation, below
  id    per-process operation number pairing an invoke with its completion (optional for
        single events)

Operations (fields besides the above):
  send     invoke {topic, value, key, producer, txn[, partition][, tombstone]}; ok {partition,
           offset}; fail/info {error}
           producer = one producer instance (a "session"); txn = transaction id or null;
           key = the record's key; tombstone: true for a null value, whose identity (value
           here) travels in the record's header "tombstone"
  begin    info {txn, producer}: a transaction starts
  commit   invoke {txn, producer, writes: [[topic, value], ...]}; ok / fail / info {error}
  abort    invoke {txn, producer}; ok / info
  poll     ok {c, iso, records: [[topic, partition, offset, value, txn], ...]}
           c = one consumer instance; iso = "read_committed" | "read_uncommitted"
  seek     info {c, partitions: [[topic, partition, offset], ...]}: a consumer moved back on
           purpose (copier abort, rebalance); order checks restart from here
  lso      ok {topic, partition, lso, hw, batches: [[base, last, producer_id, transactional,
           control], ...]}: a raw read_committed fetch (undecided-read check)
  fault    info {fault, ...}: something the nemesis did (kill, pause, proxy, disk, ...)
  power_loss info {flush_mode, before: {"topic/p": [log_end_offset, high_watermark]},
           after: {"topic/p": log_end_offset}}: files were cut back to their fsynced length
  topic    info {topic, configs}: a topic created with these configs (a compacted one: the
           checker applies the compaction rules to it)
  phase    info {name}: run phases (start, heal, final, final read done)

Records written with a transactional producer carry a header "txn" = the transaction id, so
a reader can tell which transaction a record came from; values are unique per topic except
for the copier, whose output repeats input values (identity there is (value, txn)). Readers
report a tombstone's value as its "tombstone" header.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

Event = dict[str, Any]


class History:
    """Appends events to a JSON-lines file (thread-safe) and keeps them in memory.

    Listeners (`on_event`) see every event as it is recorded, e.g. the nemesis that kills
    the broker right after a commit completes."""

    def __init__(self, path: Path | None = None, *, stream: IO[str] | None = None,
                 keep: bool = True) -> None:
        """Into the file `path`, or line by line (flushed) into `stream` (a copier process's
        stdout, read by the runner), or only in memory."""
        self.path = path
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._file = (open(path, "a", buffering=1 << 16)  # noqa: SIM115
                      if path is not None else stream)
        self._flush_each = stream is not None
        self._keep = keep
        self._ids = itertools.count(1)
        self.listeners: list[Callable[[Event], None]] = []

    def next_id(self) -> int:
        return next(self._ids)

    def record(self, p: str, type_: str, f: str, *, t: float | None = None,
               **fields: Any) -> Event:
        """Record an event now (or at `t`, for an event recorded after the fact)."""
        event = {"t": time.time() if t is None else t, "p": p, "type": type_, "f": f, **fields}
        line = json.dumps(event, separators=(",", ":"))
        with self._lock:
            if self._keep:
                self.events.append(event)
            if self._file is not None:
                self._file.write(line + "\n")
                if self._flush_each:
                    self._file.flush()
        for listener in list(self.listeners):
            listener(event)
        return event

    def add(self, event: Event) -> None:
        """Record an event made elsewhere (a copier process's line), keeping its time."""
        line = json.dumps(event, separators=(",", ":"))
        with self._lock:
            if self._keep:
                self.events.append(event)
            if self._file is not None:
                self._file.write(line + "\n")
                if self._flush_each:
                    self._file.flush()
        for listener in list(self.listeners):
            listener(event)

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_events(source: Path | Iterable[str]) -> Iterator[Event]:
    """Events of a JSON-lines file or stream of lines; lines that are not JSON objects (a
    process killed in the middle of a line, a client's own output) are skipped."""
    if isinstance(source, (str, Path)):
        with open(source, errors="replace") as f:
            yield from read_events(f)
        return
    for line in source:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and "f" in event and "t" in event:
            yield event


def merge(streams: Iterable[Iterable[Event]]) -> list[Event]:
    """One history from several (the runner's and each copier process's), in time order;
    events of one process keep their relative order."""
    events = [e for stream in streams for e in stream]
    events.sort(key=lambda e: e["t"])  # stable: equal times keep their file order
    return events


def write_events(path: Path, events: Iterable[Event]) -> None:
    with open(path, "w") as f:
        f.writelines(json.dumps(event, separators=(",", ":")) + "\n" for event in events)
