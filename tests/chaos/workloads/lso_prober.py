"""Raw read_committed fetches straight from the broker (no proxy), recorded as `lso` events:
each response's last stable offset, high watermark and the batches it returned (base and
last offset, producer id, transactional and control flags). The checker's undecided-read
test: nothing at or above the reported LSO, and no transactional data whose producer had
not yet asked to end its transaction.

Each round fetches every partition from a little below the LSO seen last time, where
transactions are being decided.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tests.chaos.history import History

BACK_OFFSETS = 20


def probe_lso(direct: Callable[[], str], history: History, topic: str, partitions: int,
              stop_event: threading.Event, interval_s: float = 0.1) -> None:
    from semel.protocol.records import iter_batches
    from tests.kafka_wire import FETCH, KafkaWire, fetch_request

    position = dict.fromkeys(range(partitions), 0)
    wire = None
    while not stop_event.wait(interval_s):
        try:
            if wire is None:
                wire = KafkaWire.connect(direct(), timeout=3)
            resp = wire.request(FETCH, 12, fetch_request(
                [(topic, p, position[p]) for p in range(partitions)],
                isolation_level=1, partition_max_bytes=256 * 1024))
        except Exception:  # noqa: BLE001 - the broker is down or paused: try again
            if wire is not None:
                wire.close()
            wire = None
            continue
        t = time.time()  # after the answer: lenient for the "ended before" test
        for topic_response in resp.responses:
            for part in topic_response.partitions:
                if part.error_code:
                    continue
                data = bytes(part.records or b"")
                batches = [[h.base_offset, h.last_offset, h.producer_id, h.is_transactional,
                            h.is_control] for h in iter_batches(data)]
                history.record("lso", "ok", "lso", t=t, topic=topic,
                               partition=part.partition_index, lso=part.last_stable_offset,
                               hw=part.high_watermark, batches=batches)
                position[part.partition_index] = max(0, part.last_stable_offset - BACK_OFFSETS)
    if wire is not None:
        wire.close()
