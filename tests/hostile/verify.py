"""After the soak: read every partition of every topic back raw and require each stored batch
to walk cleanly.

A batch walks cleanly when `protocol.records.iter_records` decodes it (decompressing under
the broker's `message.max.uncompressed.bytes`) without an error, it holds exactly
`recordCount` records, and their offsets are the batch's base offset + 0, 1, ... in order
with the last at `lastOffsetDelta`. Anything else stored is an invalid batch the broker
accepted (a lying batch or a compression bomb that got through).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from semel.protocol.records import iter_batches, iter_records
from tests.kafka_wire import (
    FETCH,
    LIST_OFFSETS,
    METADATA,
    KafkaWire,
    fetch_request,
    list_offsets_request,
    message,
)


@dataclass
class WalkReport:
    topics: int = 0
    partitions: int = 0
    batches: int = 0
    records: int = 0
    invalid: list[dict] = field(default_factory=list)  # first examples
    invalid_count: int = 0
    errors: list[str] = field(default_factory=list)  # partitions that could not be read

    def to_json(self) -> dict:
        return {"topics": self.topics, "partitions": self.partitions, "batches": self.batches,
                "records": self.records, "invalid_batches": self.invalid_count,
                "invalid_examples": self.invalid[:10], "read_errors": self.errors[:10]}


def check_batch(data: bytes, header, max_uncompressed: int) -> str | None:
    """Why the stored batch does not walk cleanly, or None."""
    try:
        records = list(iter_records(data, header, max_uncompressed))
    except Exception as e:  # noqa: BLE001 - any failure to walk is the finding
        return f"{type(e).__name__}: {e}"
    if len(records) != header.record_count:
        return f"{len(records)} records, recordCount {header.record_count}"
    offsets = [r.offset for r in records]
    expected = list(range(header.base_offset, header.base_offset + len(records)))
    if offsets != expected:
        return f"offsets {offsets[:6]} are not {expected[:6]} (deltas out of order)"
    if records and header.last_offset_delta != len(records) - 1:
        return f"lastOffsetDelta {header.last_offset_delta} with {len(records)} records"
    return None


def all_topics(wire: KafkaWire) -> dict[str, int]:
    resp = wire.request(METADATA, 12, message(METADATA, "request", topics=None))
    return {t.name: len(t.partitions) for t in resp.topics if t.error_code == 0}


def walk_partition(wire: KafkaWire, topic: str, partition: int, report: WalkReport,
                   max_uncompressed: int) -> None:
    resp = wire.request(LIST_OFFSETS, 7, list_offsets_request(topic, partition, -1))
    part = resp.topics[0].partitions[0]
    if part.error_code:
        report.errors.append(f"{topic}/{partition}: ListOffsets error {part.error_code}")
        return
    hw = part.offset
    offset = 0
    while offset < hw:
        resp = wire.request(FETCH, 12, fetch_request([(topic, partition, offset)],
                                                     partition_max_bytes=8 << 20))
        p = resp.responses[0].partitions[0]
        if p.error_code == 1:  # OFFSET_OUT_OF_RANGE: start from the log start offset
            offset = max(offset + 1, p.log_start_offset)
            continue
        if p.error_code:
            report.errors.append(f"{topic}/{partition}@{offset}: Fetch error {p.error_code}")
            return
        data = bytes(p.records or b"")
        start = offset
        try:
            for header in iter_batches(data):
                report.batches += 1
                why = check_batch(data, header, max_uncompressed)
                if why is not None:
                    report.invalid_count += 1
                    if len(report.invalid) < 20:
                        report.invalid.append({
                            "partition": f"{topic}/{partition}", "base_offset": header.base_offset,
                            "record_count": header.record_count,
                            "compression": header.compression, "bytes": header.size,
                            "why": why[:300]})
                else:
                    report.records += header.record_count
                offset = max(offset, header.next_offset)
        except Exception as e:  # noqa: BLE001 - a batch header the reader cannot frame
            report.invalid_count += 1
            report.invalid.append({"partition": f"{topic}/{partition}", "offset": offset,
                                   "why": f"unframeable: {type(e).__name__}: {e}"[:300]})
            return
        if offset == start:
            report.errors.append(f"{topic}/{partition}@{offset}: no progress below hw {hw}")
            return


def walk_all(direct: str, max_uncompressed: int) -> WalkReport:
    report = WalkReport()
    wire = KafkaWire.connect(direct, timeout=60, client_id="hostile-verify")
    try:
        topics = all_topics(wire)
        report.topics = len(topics)
        for topic, n in sorted(topics.items()):
            for partition in range(n):
                report.partitions += 1
                try:
                    walk_partition(wire, topic, partition, report, max_uncompressed)
                except (OSError, ConnectionError, AssertionError) as e:
                    report.errors.append(f"{topic}/{partition}: {type(e).__name__}: {e}")
                    wire.close()
                    wire = KafkaWire.connect(direct, timeout=60, client_id="hostile-verify")
    finally:
        wire.close()
    return report
