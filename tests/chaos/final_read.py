"""The final read of a run, after every fault is healed.

1. Wait (bounded) until no partition has an open transaction: last stable offset equal to
   the high watermark everywhere (transactions of dead producers are aborted by timeout).
2. Raw read straight from the broker (no proxy): every batch of every partition from offset
   0 to the high watermark, read_uncommitted, with each batch's producer id and
   transactional flag, each record's key (a tombstone: flagged, its value the tombstone
   header) and the type of each control record.
3. A real read_committed client (confluent-kafka, through the proxy) reads every partition
   from the beginning to its last stable offset.

Also raw helpers the runner uses: end offsets, last stable offsets, committed group offsets.
"""

from __future__ import annotations

import time

from semel.protocol.records import iter_batches, iter_records, parse_control_record
from tests.chaos.checker import FinalRead, LogRecord
from tests.chaos.workloads.common import TOMBSTONE_HEADER
from tests.group_wire import fetch_offsets
from tests.kafka_wire import FETCH, LIST_OFFSETS, KafkaWire, fetch_request, list_offsets_request

CONTROL_NAMES = {0: "ABORT", 1: "COMMIT"}


def _list_offset(wire: KafkaWire, topic: str, partition: int, isolation_level: int) -> int:
    resp = wire.request(LIST_OFFSETS, 7, list_offsets_request(
        topic, partition, -1, isolation_level=isolation_level))
    part = resp.topics[0].partitions[0]
    if part.error_code:
        raise RuntimeError(f"ListOffsets {topic}/{partition}: error {part.error_code}")
    return part.offset


def end_offsets(direct: str, topic: str, partitions: int,
                isolation_level: int = 0) -> dict[int, int]:
    with KafkaWire.connect(direct, timeout=10) as wire:
        return {p: _list_offset(wire, topic, p, isolation_level) for p in range(partitions)}


def committed_offsets(direct: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    with KafkaWire.connect(direct, timeout=10) as wire:
        error, offsets = fetch_offsets(wire, group, [(topic, p) for p in range(partitions)])
    if error:
        raise RuntimeError(f"OffsetFetch {group}: error {error}")
    return {p: offsets[(t, p)][0] for (t, p) in offsets if t == topic and not offsets[(t, p)][3]}


def wait_stable(direct: str, topics: dict[str, int], timeout_s: float) -> list[str]:
    """Wait until LSO == HW on every partition; the partitions still unstable at the end."""
    deadline = time.monotonic() + timeout_s
    unstable: list[str] = []
    while True:
        try:
            unstable = []
            for topic, n in topics.items():
                hw = end_offsets(direct, topic, n)
                lso = end_offsets(direct, topic, n, isolation_level=1)
                unstable += [f"{topic}/{p}: lso {lso[p]} < hw {hw[p]}"
                             for p in range(n) if lso[p] < hw[p]]
        except (OSError, RuntimeError) as e:
            unstable = [f"broker not answering: {e}"]
        if not unstable or time.monotonic() > deadline:
            return unstable
        time.sleep(0.5)


def raw_log(direct: str, topic: str, partition: int) -> list[LogRecord]:
    out: list[LogRecord] = []
    with KafkaWire.connect(direct, timeout=30) as wire:
        hw = _list_offset(wire, topic, partition, 0)
        offset = 0
        while offset < hw:
            resp = wire.request(FETCH, 12, fetch_request([(topic, partition, offset)],
                                                         partition_max_bytes=4 << 20))
            part = resp.responses[0].partitions[0]
            if part.error_code:
                raise RuntimeError(f"Fetch {topic}/{partition}@{offset}: error {part.error_code}")
            data = bytes(part.records or b"")
            start = offset
            for header in iter_batches(data):
                for r in iter_records(data, header):
                    if r.offset < offset:
                        continue
                    if header.is_control:
                        control_type, _ = parse_control_record(r)
                        out.append(LogRecord(r.offset, None, None, header.producer_id, True,
                                             CONTROL_NAMES.get(control_type, str(control_type))))
                    else:
                        headers = {k: v.decode() for k, v in r.headers if v is not None}
                        value = (headers.get(TOMBSTONE_HEADER) if r.value is None
                                 else r.value.decode(errors="replace"))
                        out.append(LogRecord(
                            r.offset, value, headers.get("txn"), header.producer_id,
                            header.is_transactional, None,
                            None if r.key is None else r.key.decode(errors="replace"),
                            r.value is None))
                offset = max(offset, header.next_offset)
            if offset == start:
                raise RuntimeError(f"Fetch {topic}/{partition}@{offset}: no progress below "
                                   f"the high watermark {hw}")
    return out


def client_read_committed(bootstrap: str, direct: str, topics: dict[str, int],
                          timeout_s: float = 120) -> dict[tuple[str, int], list[tuple]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from tests.chaos.workloads.common import consumer_config, record_of

    targets: dict[tuple[str, int], int] = {}
    for topic, n in topics.items():
        for p, lso in end_offsets(direct, topic, n, isolation_level=1).items():
            targets[(topic, p)] = lso
    out: dict[tuple[str, int], list[tuple]] = {tp: [] for tp in targets}
    consumer = Consumer(consumer_config(bootstrap, "chaos-final-read", log_level=0))
    try:
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in targets])
        deadline = time.monotonic() + timeout_s
        remaining = {tp for tp, end in targets.items() if end > 0}
        while remaining and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    continue
                topic, partition, offset, value, txn = record_of(m)
                out[(topic, partition)].append((offset, value, txn))
            positions = consumer.position([TopicPartition(t, p) for t, p in remaining])
            for tp in positions:
                if tp.offset >= targets[(tp.topic, tp.partition)]:
                    remaining.discard((tp.topic, tp.partition))
        if remaining:
            raise RuntimeError(f"read_committed client did not reach the LSO of {remaining}")
    finally:
        consumer.close()
    return out


def final_read(bootstrap: str, direct: str, topics: dict[str, int]) -> FinalRead:
    log = {(t, p): raw_log(direct, t, p) for t, n in topics.items() for p in range(n)}
    committed = client_read_committed(bootstrap, direct, topics)
    return FinalRead(log=log, committed=committed)
