"""`semel dump-log` on files not written by semel, and on damaged files.

- A segment written by Apache Kafka's own record code (kafka-clients 3.9.1: batches from
  MemoryRecordsBuilder, markers from MemoryRecords.withEndTransactionMarker, written by
  FileRecords.append as Kafka's LogSegment does; KafkaLogWriter.java): dump-log's text is
  line for line what Kafka's objects say in kafka-dump-log.sh's line format, and its JSON
  holds the same batches and records. No Kafka broker or storage jar is available here, so
  the index, time index, transaction index and producer snapshot beside it are built in
  this test from Kafka's documented formats (and a preallocated index's zero tail).
- The record batches real clients sent in tests/golden/ (Java, librdkafka, kafka-python,
  aiokafka; every codec; plain, idempotent, transactional) laid out as segments.
- Damage: a flipped byte (isvalid: false), a torn tail, bytes that are not a batch, an
  index entry pointing at the wrong batch, a corrupt snapshot; and paths that cannot be
  dumped (missing, a directory, an unknown type), through the real `semel` command.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from crc32c import crc32c

from semel.protocol.api import codec, request_header_version
from semel.protocol.frame import parse_request_header, peek_api_key_version
from semel.protocol.records import build_batch, set_base_offset, validate_batches
from tests.golden.capture import PRODUCER_ID, RECORDS, record_headers, record_key, record_value
from tests.javaclient import JVM_OPTIONS, jar_paths, require_java
from tests.tools_dumplog.dumplog_helpers import data_records, dump, dump_cli

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "golden"
LOG = f"{0:020d}.log"
PRODUCE_NAME = re.compile(r"produce_request_v\d+_(?P<codec>[a-z0-9]+)_(?P<kind>[a-z]+)_\d{3}\.bin")


# -- a segment written by Kafka's record code ----------------------------------------------------


@pytest.fixture(scope="module")
def kafka_dir(tmp_path_factory) -> Path:
    """A directory holding 00000000000000000000.log written by kafka-clients, Kafka's own
    view of it (kafka-view.txt, kafka-view.jsonl)."""
    require_java()
    jars = ":".join(str(p) for p in jar_paths())
    classes = tmp_path_factory.mktemp("kafka-writer-classes")
    subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(classes), "-cp", jars,
                    str(HERE / "KafkaLogWriter.java")], check=True, capture_output=True)
    out = tmp_path_factory.mktemp("kafka-written")
    done = subprocess.run(["java", *JVM_OPTIONS, "-cp", f"{classes}:{jars}", "KafkaLogWriter",
                           str(out)], check=True, capture_output=True, text=True, timeout=120)
    (out / "kafka-view.jsonl").write_text(done.stdout)
    return out


def kafka_view(kafka_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (kafka_dir / "kafka-view.jsonl").read_text().splitlines()]


@pytest.fixture
def segment_dir(kafka_dir, tmp_path) -> Path:
    """A copy of the Kafka-written segment that a test may damage."""
    shutil.copy(kafka_dir / LOG, tmp_path / LOG)
    return tmp_path


def test_kafka_written_segment_text_is_kafkas_own_view(kafka_dir):
    path = kafka_dir / LOG
    result = dump("--print-data", path)
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    assert lines[2:] == (kafka_dir / "kafka-view.txt").read_text().splitlines()
    # the markers and a LogAppendTime batch are in there
    assert any("endTxnMarker: ABORT coordinatorEpoch: 6" in line for line in lines)
    assert any(" LogAppendTime: 9000 " in line for line in lines)


def test_kafka_written_segment_json_matches_kafkas_view(kafka_dir):
    result = dump("--json", "--print-data", kafka_dir / LOG)
    assert result.rc == 0, result.err
    batches = result.of_kind("batch")
    expected = kafka_view(kafka_dir)
    fields = ("baseOffset", "lastOffset", "count", "producerId", "producerEpoch", "baseSequence",
              "isTransactional", "isControl", "position", "size", "crc", "compresscodec",
              "maxTimestamp")
    assert [{f: b[f] for f in fields} for b in batches] == [{f: e[f] for f in fields}
                                                            for e in expected]
    assert all(b["isvalid"] for b in batches)
    for batch, kafka in zip(batches, expected, strict=True):
        if batch["isControl"]:
            continue
        assert [(r["offset"], r["timestamp"], r["sequence"], r["keyBase64"], r["payloadBase64"],
                 [[h["key"], h["valueBase64"]] for h in r["headers"]]) for r in batch["records"]
                ] == [(r["offset"], r["timestamp"], r["sequence"], r["key"], r["value"],
                       r["headers"]) for r in kafka["records"]]
    controls = [(b["producerId"], b["records"][0]["controlType"],
                 b["records"][0]["coordinatorEpoch"]) for b in batches if b["isControl"]]
    assert controls == [(8000, "COMMIT", 5), (8001, "ABORT", 6)]
    summary = result.of_kind("summary")[0]
    assert summary["batches"] == len(expected)
    assert summary["records"] == sum(len(e["records"]) for e in expected)
    assert summary["validBytes"] == summary["fileBytes"] == (kafka_dir / LOG).stat().st_size


def write_kafka_indexes(directory: Path, batches: list[dict], *, zero_entries: int) -> None:
    """.index and .timeindex as Kafka writes them (big-endian int32 relative offset + int32
    position; int64 timestamp + int32 relative offset), one entry per batch after the first,
    followed by the zero entries of an index Kafka preallocated and has not trimmed yet."""
    index, times = bytearray(), bytearray()
    largest = -1
    for b in batches[1:]:
        index += struct.pack(">ii", b["lastOffset"], b["position"])
        if b["maxTimestamp"] > largest:
            largest = b["maxTimestamp"]
            times += struct.pack(">qi", largest, b["lastOffset"])
    (directory / f"{0:020d}.index").write_bytes(bytes(index) + bytes(8 * zero_entries))
    (directory / f"{0:020d}.timeindex").write_bytes(bytes(times) + bytes(12 * zero_entries))


def kafka_snapshot(entries: list[tuple]) -> bytes:
    """Kafka's producer snapshot v1: version int16, crc uint32 (CRC32C of what follows),
    entries [int32 count; producer id int64, epoch int16, last sequence int32, last offset
    int64, offset delta int32, timestamp int64, coordinator epoch int32, current transaction
    first offset int64]."""
    body = struct.pack(">i", len(entries)) + b"".join(
        struct.pack(">qhiqiqiq", *e) for e in entries)
    return struct.pack(">hI", 1, crc32c(body)) + body


def test_kafka_format_index_files(segment_dir):
    batches = dump("--json", segment_dir / LOG).of_kind("batch")
    write_kafka_indexes(segment_dir, batches, zero_entries=4)
    index, times = segment_dir / f"{0:020d}.index", segment_dir / f"{0:020d}.timeindex"
    result = dump(index, times)
    assert result.rc == 0, result.err
    lines = result.out.splitlines()
    expected_index = [f"offset: {b['lastOffset']} position: {b['position']}" for b in batches[1:]]
    assert lines[: len(expected_index) + 1] == [f"Dumping {index}", *expected_index]
    rest = lines[len(expected_index) + 1:]
    assert rest[0] == f"Dumping {times}"
    assert rest[1:] and all(re.fullmatch(r"timestamp: \d+ offset: \d+", line) for line in rest[1:])
    assert rest[-1] == f"timestamp: 9000 offset: {batches[-1]['lastOffset']}"
    # the zero tail of a preallocated index fails the check a broker runs on open (so it
    # rebuilds the index); trimmed, as Kafka leaves a closed segment's indexes, they pass
    for path in (index, times):
        sanity = dump("--index-sanity-check", path)
        assert sanity.rc == 1 and sanity.out.splitlines() == [f"Dumping {path}"]
        assert "failed sanity check: " in sanity.err
    write_kafka_indexes(segment_dir, batches, zero_entries=0)
    for path in (index, times):
        sanity = dump("--index-sanity-check", path)
        assert sanity.rc == 0 and sanity.out.splitlines()[1] == f"{path} passed sanity check."
    write_kafka_indexes(segment_dir, batches, zero_entries=4)
    # an entry pointing at the wrong batch: Kafka's mismatch report, exit status 1
    data = bytearray(index.read_bytes())
    struct.pack_into(">i", data, 12, batches[1]["position"])  # entry 1 -> batch 1's position
    index.write_bytes(bytes(data))
    bad = dump("--verify-index-only", index)
    assert bad.rc == 1
    assert bad.out.splitlines() == [f"Dumping {index}"]
    assert bad.err.splitlines() == [
        f"Mismatches in :{index}",
        f"  Index offset: {batches[2]['lastOffset']}, log offset: {batches[1]['lastOffset']}"]
    as_json = dump("--json", index).of_kind("indexEntry")
    assert [e["matches"] for e in as_json] == [i != 1 for i in range(len(batches) - 1)]
    # a time index entry whose timestamp is not its batch's: Kafka's report
    tdata = bytearray(times.read_bytes())
    struct.pack_into(">q", tdata, 0, 1)
    times.write_bytes(bytes(tdata))
    bad_times = dump("--verify-index-only", times)
    assert bad_times.rc == 1
    assert bad_times.err.splitlines()[0] == f"Found timestamp mismatch in :{times}"


def test_kafka_format_txnindex_and_snapshot(segment_dir):
    batches = dump("--json", segment_dir / LOG).of_kind("batch")
    abort = next(b for b in batches if b["isControl"] and b["producerId"] == 8001)
    aborted_first = next(b for b in batches if not b["isControl"] and b["producerId"] == 8001)
    txnindex = segment_dir / f"{0:020d}.txnindex"
    # Kafka's AbortedTxn: version int16, producer id, first offset, last offset, LSO (int64s)
    txnindex.write_bytes(struct.pack(">hqqqq", 0, 8001, aborted_first["baseOffset"],
                                     abort["baseOffset"], abort["baseOffset"] + 1))
    snapshot = segment_dir / f"{abort['lastOffset'] + 1:020d}.snapshot"
    snapshot.write_bytes(kafka_snapshot([
        (7000, 3, 2, 13, 2, 3002, -1, -1),   # idempotent producer: sequences 0..2
        (8001, 2, 1, 18, 1, 5001, 6, 17),    # a transaction still open at offset 17
    ]))
    result = dump(txnindex, snapshot)
    assert result.rc == 0, result.err
    assert result.out.splitlines() == [
        f"Dumping {txnindex}",
        (f"version: 0 producerId: 8001 firstOffset: {aborted_first['baseOffset']} "
         f"lastOffset: {abort['baseOffset']} lastStableOffset: {abort['baseOffset'] + 1}"),
        f"Dumping {snapshot}",
        ("producerId: 7000 producerEpoch: 3 coordinatorEpoch: -1 currentTxnFirstOffset: "
         "OptionalLong.empty lastTimestamp: 3002 firstSequence: 0 lastSequence: 2 lastOffset: 13 "
         "offsetDelta: 2 timestamp: 3002"),
        ("producerId: 8001 producerEpoch: 2 coordinatorEpoch: 6 currentTxnFirstOffset: "
         "OptionalLong[17] lastTimestamp: 5001 firstSequence: 0 lastSequence: 1 lastOffset: 18 "
         "offsetDelta: 1 timestamp: 5001"),
    ]
    producers = dump("--json", snapshot).of_kind("producer")
    assert [(p["producerId"], p["currentTxnFirstOffset"]) for p in producers] == [
        (7000, None), (8001, 17)]
    # one flipped byte: the CRC says so (Kafka's message), exit status 1
    data = bytearray(snapshot.read_bytes())
    data[-3] ^= 0x01
    snapshot.write_bytes(bytes(data))
    bad = dump(snapshot)
    assert bad.rc == 1
    assert bad.err.startswith("Snapshot is corrupt (CRC is no longer valid). Stored crc: ")


# -- damaged segments --------------------------------------------------------------------------


def test_flipped_byte_makes_one_batch_invalid(segment_dir):
    path = segment_dir / LOG
    batches = dump("--json", path).of_kind("batch")
    victim = batches[3]
    data = bytearray(path.read_bytes())
    data[victim["position"] + victim["size"] - 5] ^= 0x40  # inside its records
    path.write_bytes(bytes(data))
    result = dump("--json", path)
    assert result.rc == 1
    after = result.of_kind("batch")
    assert [b["isvalid"] for b in after] == [i != 3 for i in range(len(batches))]
    assert after[3]["crc"] == victim["crc"] and "crc mismatch" in after[3]["invalidReason"]
    problems = result.of_kind("problem")
    assert problems[0]["position"] == victim["position"]
    text = dump(path)
    assert text.rc == 1
    batch_lines = [line for line in text.out.splitlines() if line.startswith("baseOffset: ")]
    assert batch_lines[3].endswith(f"crc: {victim['crc']} isvalid: false")
    assert all(line.endswith("isvalid: true") for i, line in enumerate(batch_lines) if i != 3)
    assert f"batch at position {victim['position']}: crc mismatch" in text.err


def test_torn_tail_is_reported(segment_dir):
    path = segment_dir / LOG
    batches = dump("--json", path).of_kind("batch")
    size = path.stat().st_size
    cut = size - 10  # the last batch loses its last 10 bytes
    with open(path, "r+b") as f:
        f.truncate(cut)
    result = dump(path)
    assert result.rc == 1
    lines = result.out.splitlines()
    assert sum(line.startswith("baseOffset: ") for line in lines) == len(batches) - 1
    torn = cut - batches[-1]["position"]
    assert lines[-1] == f"Found {torn} invalid bytes at the end of {LOG}"
    assert result.err.strip() == (
        f"semel dump-log: {path}: torn tail: the batch at position {batches[-1]['position']} "
        f"needs {batches[-1]['size']} bytes, {torn} remain")
    # a tail shorter than a batch header
    with open(path, "r+b") as f:
        f.truncate(batches[-1]["position"] + 10)
    summary = dump("--json", path).of_kind("summary")[0]
    assert (summary["invalidBytes"], summary["validBytes"]) == (10, batches[-1]["position"])
    assert summary["stopReason"].startswith("torn tail: 10 bytes remain")


def test_bytes_that_are_not_a_batch(segment_dir):
    path = segment_dir / LOG
    good = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00" * 8 + struct.pack(">i", 100) + b"\x00" * 4 + b"\x07" + b"\x00" * 100)
    result = dump("--json", path)
    assert result.rc == 1
    summary = result.of_kind("summary")[0]
    assert summary["validBytes"] == good and summary["invalidBytes"] == 117
    assert summary["stopReason"] == f"invalid magic 7 at position {good}"
    # a file that is no log at all (a wrong file under a .log name)
    text = segment_dir / f"{5:020d}.log"
    text.write_text("this is a text file, not a Kafka log segment\n" * 3)
    result = dump(text)
    assert result.rc == 1
    found = f"Found {text.stat().st_size} invalid bytes at the end of {text.name}"
    assert result.out.splitlines() == [f"Dumping {text}", "Log starting offset: 5", found]
    assert "at position 0" in result.err and len(result.err.splitlines()) == 1


def test_batches_larger_than_a_read(tmp_path):
    """Batches bigger than the reader's chunks (64 KiB first, 1 MiB at most) around small
    ones; then the big one torn."""
    big = os.urandom(1536 * 1024)
    data = b"".join([
        build_batch([(b"a", b"small", None, 1)], base_offset=0),
        build_batch([(b"b", big, None, 2)], base_offset=1),
        build_batch([(b"c", b"small", None, 3)], base_offset=2),
        build_batch([(b"d", big[:100_000], None, 4)], base_offset=3),
    ])
    path = tmp_path / LOG
    path.write_bytes(data)
    result = dump("--json", "--print-data", path)
    assert result.rc == 0, result.err
    records = data_records(result.of_kind("batch"))
    assert [(r["offset"], r["valueSize"]) for r in records] == [
        (0, 5), (1, len(big)), (2, 5), (3, 100_000)]
    assert records[1]["payloadBase64"] == base64.b64encode(big).decode()
    path.write_bytes(data[: len(data) - 50_000])  # the last batch loses half its bytes
    summary = dump("--json", path).of_kind("summary")[0]
    assert summary["batches"] == 3 and summary["stopReason"].startswith("torn tail: the batch")


def test_max_bytes_stops_early_without_complaint(kafka_dir):
    batches = dump("--json", kafka_dir / LOG).of_kind("batch")
    limit = batches[2]["position"] + batches[2]["size"] + 10  # three batches and a bit
    result = dump("--json", "--max-bytes", limit, kafka_dir / LOG)
    assert result.rc == 0, result.err
    assert len(result.of_kind("batch")) == 3
    assert result.of_kind("summary")[0]["stopReason"] is None


# -- the golden captures: batches as real clients built them --------------------------------------


def produce_batches(frame: bytes) -> list[bytes]:
    """The record batches of a captured Produce request frame."""
    api_key, version, _ = peek_api_key_version(frame)
    _, pos = parse_request_header(frame, request_header_version(api_key, version))
    request, _ = codec(api_key, "request").decode(version, frame, pos)
    out = []
    for topic in request.topic_data:
        for partition in topic.partition_data:
            records = bytes(partition.records or b"")
            out.extend(records[h.position:h.position + h.size] for h in validate_batches(records))
    return out


def test_golden_client_batches(tmp_path):
    """Every Produce frame of tests/golden/ laid out as one segment per client, codec and
    kind (offsets assigned as a broker would): every CRC valid, the records the capture
    scheme wrote, the producer id the capture server handed out."""
    segments: dict[tuple[str, str, str], bytearray] = defaultdict(bytearray)
    offsets: dict[tuple[str, str, str], int] = defaultdict(int)
    for path in sorted(GOLDEN.glob("*/produce_request_*.bin")):
        match = PRODUCE_NAME.fullmatch(path.name)
        key = (path.parent.name, match["codec"], match["kind"])
        for batch in produce_batches(path.read_bytes()):
            data = bytearray(batch)
            set_base_offset(data, 0, offsets[key])
            offsets[key] += validate_batches(data)[0].record_count
            segments[key] += data
    assert {client for client, _, _ in segments} == {"java", "confluent", "kafka-python",
                                                     "aiokafka"}
    paths = {}
    for (client, codec_name, kind), data in segments.items():
        directory = tmp_path / f"golden-{client}-{codec_name}-{kind}-0"
        directory.mkdir()
        paths[directory / LOG] = (client, codec_name, kind)
        (directory / LOG).write_bytes(bytes(data))
    result = dump("--json", "--print-data", *paths)
    assert result.rc == 0, result.err
    by_path: dict[str, list[dict]] = defaultdict(list)
    for batch in result.of_kind("batch"):
        by_path[batch["path"]].append(batch)
    for path, (client, codec_name, kind) in paths.items():
        batches = by_path[str(path)]
        assert batches and all(b["isvalid"] for b in batches), (client, codec_name, kind)
        assert {b["compresscodec"] for b in batches} == {codec_name}
        records = data_records(batches)
        assert [b["count"] for b in batches] == [
            len(b["records"]) for b in batches]
        assert [(r["offset"], r["key"], r["payload"], [(h["key"], h["value"]) for h in r["headers"]])
                for r in records] == [
            (i, record_key(i).decode(), record_value(client, codec_name, kind, i).decode(),
             [(k, v.decode()) for k, v in record_headers(i)]) for i in range(RECORDS)]
        assert {b["producerId"] for b in batches} == {-1 if kind == "plain" else PRODUCER_ID}
        assert {b["isTransactional"] for b in batches} == {kind == "txn"}
        if kind != "plain":
            assert [r["sequence"] for r in records] == list(range(RECORDS))


# -- paths that cannot be dumped, usage --------------------------------------------------------


def test_path_errors_are_one_line_and_the_rest_is_dumped(kafka_dir, tmp_path):
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello")
    unnamed = tmp_path / "foo.index"
    unnamed.write_bytes(bytes(8))
    missing = tmp_path / f"{0:020d}.log"
    good = kafka_dir / LOG
    result = dump_cli(missing, tmp_path, unknown, unnamed, good)
    assert result.rc == 2
    types = "unknown file type (expected .log, .index, .timeindex, .txnindex, .snapshot)"
    assert result.err.splitlines() == [
        f"semel dump-log: {missing}: no such file",
        f"semel dump-log: {tmp_path}: {types}",
        f"semel dump-log: {unknown}: {types}",
        (f"semel dump-log: {unnamed}: cannot tell the base offset from the file name "
         "(expected a name like 00000000000000000000.index)"),
    ]
    assert f"Dumping {good}" in result.out and "Traceback" not in result.err
    directory = tmp_path / f"{3:020d}.log"
    directory.mkdir()
    assert dump_cli(directory).err == f"semel dump-log: {directory}: is a directory\n"
    as_json = dump("--json", missing).objects
    assert as_json == [{"kind": "error", "path": str(missing), "message": "no such file"}]


def test_usage_errors():
    none = dump_cli()
    assert none.rc == 2 and none.err == "semel dump-log: no files given (dump-log PATH...)\n"
    both = dump_cli("--offsets-decoder", "--transaction-log-decoder", "x.log")
    assert both.rc == 2 and len(both.err.splitlines()) == 1 and "not allowed" in both.err
    assert dump_cli("--max-bytes", "0", "x.log").rc == 2


def test_deleted_segment_files_are_read(kafka_dir, tmp_path):
    """A segment renamed for deletion (.deleted) is still a segment, and its index's log is
    the .log.deleted beside it."""
    shutil.copy(kafka_dir / LOG, tmp_path / f"{LOG}.deleted")
    batches = dump("--json", tmp_path / f"{LOG}.deleted").of_kind("batch")
    assert len(batches) == len(kafka_view(kafka_dir))
    index = tmp_path / f"{0:020d}.index.deleted"
    index.write_bytes(struct.pack(">ii", batches[1]["lastOffset"], batches[1]["position"]))
    entries = dump("--json", index).of_kind("indexEntry")
    assert [e["matches"] for e in entries] == [True]
