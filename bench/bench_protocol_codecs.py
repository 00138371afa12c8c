"""Micro-benchmark of the generated codecs on the hot paths (ns/op, best of 5 runs).

- Produce v9 request with one 16 KiB batch: request header + body decode + batch header
  validation without CRC, against the CRC32C of the batch alone.
- Fetch v12 response encode with 10 partitions of 16 KiB each.

Run: ``python bench/bench_protocol_codecs.py``.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import crc32c

from semel.protocol import api
from semel.protocol.frame import encode_request_header, parse_request_header
from semel.protocol.messages import fetch_response as fr
from semel.protocol.messages import produce_request as pr
from semel.protocol.records import BatchHeader, build_batch


def best_ns(fn, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9


def main() -> None:
    batch = build_batch([(None, bytes(1000), [], 1_700_000_000_000 + i) for i in range(16)],
                        producer_id=7, producer_epoch=0, base_sequence=0)
    request = pr.ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
        pr.TopicProduceData(name="bench", partition_data=[
            pr.PartitionProduceData(index=0, records=batch)])])
    frame = bytes(encode_request_header(0, 9, 1, "bench", 2) + pr.encode(9, request))
    view = memoryview(frame)
    hv = api.request_header_version(0, 9)

    def decode_produce() -> None:
        _header, pos = parse_request_header(view, hv)
        msg, _ = pr.decode(9, view, pos)
        BatchHeader(msg.topic_data[0].partition_data[0].records)

    response = fr.FetchResponse(responses=[fr.FetchableTopicResponse(topic="bench", partitions=[
        fr.PartitionData(partition_index=p, high_watermark=1000, last_stable_offset=1000,
                         log_start_offset=0, records=batch) for p in range(10)])])

    def encode_fetch() -> None:
        fr.encode(12, response)

    print(f"batch size: {len(batch)} bytes")
    print(f"produce v9 decode (header + body + batch header): {best_ns(decode_produce, 20000):8.0f} ns/op")
    print(f"crc32c of the batch:                              {best_ns(lambda: crc32c.crc32c(batch), 20000):8.0f} ns/op")
    print(f"fetch v12 response encode, 10 x 16 KiB:           {best_ns(encode_fetch, 5000):8.0f} ns/op")


if __name__ == "__main__":
    main()
