"""Golden request frames captured from real clients (tests/golden/, see its README).

Every frame decodes (header via protocol.frame, body via the generated codec) with nothing
left over and re-encodes to the same bytes; every record batch in a captured Produce request
passes validate_batches and holds exactly the records the capture scheme wrote; corrupted
batches are refused with a precise reason; and hostile variants of the frames (split into
single bytes, bit flips, truncation) never raise anything but ProtocolError.
"""

from __future__ import annotations

import json
import random
import re
import struct
from collections import defaultdict
from pathlib import Path

import pytest
from crc32c import crc32c

from semel.protocol.api import BY_KEY, SUPPORTED, codec, request_header_version, snake
from semel.protocol.errors import Error, ProtocolError
from semel.protocol.frame import (
    FrameDecoder,
    encode_request_header,
    parse_request_header,
    peek_api_key_version,
    size_prefix,
)
from semel.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    MAGIC_OFFSET,
    CorruptRecordError,
    InvalidRecordError,
    iter_records,
    validate_batches,
)
from tests.golden.capture import (
    CLIENTS,
    CODEC_IDS,
    KINDS,
    PRODUCER_ID,
    RECORDS,
    record_headers,
    record_key,
    record_value,
    topic_name,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NAME = re.compile(
    r"(?P<api>[a-z_]+)_request_v(?P<version>\d+)"
    r"(?:_(?P<codec>none|gzip|snappy|lz4|zstd)_(?P<kind>plain|idem|txn))?"
    r"(?:_trailing(?P<trailing>\d+))?_(?P<n>\d{3})\.bin"
)
FRAMES = sorted(GOLDEN.glob("*/*.bin"))
MANIFEST = json.loads((GOLDEN / "manifest.json").read_text())
PRODUCE = [p for p in FRAMES if p.name.startswith("produce_request_")]


def frame_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def decode_frame(frame: bytes):
    """(header, header version, body start, message, body end) of a request frame."""
    api_key, version, _ = peek_api_key_version(frame)
    header_version = request_header_version(api_key, version)
    header, pos = parse_request_header(frame, header_version)
    message, end = codec(api_key, "request").decode(version, frame, pos)
    return header, header_version, pos, message, end


def name_parts(path: Path) -> re.Match:
    match = NAME.fullmatch(path.name)
    assert match, f"unexpected golden file name {path.name}"
    return match


def test_every_client_was_captured() -> None:
    assert FRAMES, "no golden frames: run tests/golden/capture.py"
    assert {p.parent.name for p in FRAMES} == set(CLIENTS)
    for client in CLIENTS:
        names = {name_parts(p)["api"] for p in FRAMES if p.parent.name == client}
        for api in ("api_versions", "metadata", "produce", "fetch", "init_producer_id",
                    "add_partitions_to_txn", "end_txn", "join_group", "sync_group",
                    "offset_commit", "offset_fetch", "heartbeat", "leave_group",
                    "create_topics", "delete_topics", "describe_configs"):
            assert api in names, f"{client} sent no {api} request"
        variants = {(m["codec"], m["kind"])
                    for m in (name_parts(p) for p in PRODUCE if p.parent.name == client)}
        codecs = MANIFEST["clients"][client]["codecs"]
        assert variants == {(c, k) for c in codecs for k in KINDS}


@pytest.mark.parametrize("path", FRAMES, ids=frame_id)
def test_frame_decodes_and_reencodes_exactly(path: Path) -> None:
    frame = path.read_bytes()
    parts = name_parts(path)
    header, header_version, pos, message, end = decode_frame(frame)
    assert snake(BY_KEY[header.api_key].name) == parts["api"]
    assert header.api_version == int(parts["version"])
    trailing = int(parts["trailing"] or 0)
    assert len(frame) - end == trailing
    if trailing:
        # librdkafka's Metadata v9+ "all topics" request: of the 4 bytes it reserves for the
        # topic count only the first is written (compact null), 3 zero bytes stay, so the
        # rest of the body is read shifted (as Kafka reads it: allow_auto_topic_creation
        # false) and its real last 3 bytes are left over; Kafka ignores bytes after a body.
        assert (header.api_key, trailing, message.topics) == (3, 3, None)
        assert frame[pos:pos + 4] == bytes(4)
        unshifted = frame[:pos + 1] + frame[pos + 4:]
        intended, intended_end = codec(3, "request").decode(header.api_version, unshifted, pos)
        assert intended_end == len(unshifted)
        assert intended.topics is None and intended.allow_auto_topic_creation
    reencoded = encode_request_header(
        header.api_key, header.api_version, header.correlation_id, header.client_id,
        header_version) + codec(header.api_key, "request").encode(header.api_version, message)
    assert reencoded == frame[:end]
    # bytes after a body are not part of it (Kafka ignores them; the caller sees `end`)
    again, again_end = codec(header.api_key, "request").decode(
        header.api_version, frame + b"\x00\xff\x7f", pos)
    assert (again, again_end) == (message, end)


def produce_records(path: Path):
    """(request, [(partition index, batch header, records bytes)]) of a Produce frame."""
    _, _, _, request, _ = decode_frame(path.read_bytes())
    batches = []
    for topic in request.topic_data:
        for partition in topic.partition_data:
            records = bytes(partition.records)
            for header in validate_batches(records):
                batches.append((topic.name, partition.index, header, records))
    return request, batches


@pytest.mark.parametrize("path", PRODUCE, ids=frame_id)
def test_produce_batches_are_what_the_client_wrote(path: Path) -> None:
    client, parts = path.parent.name, name_parts(path)
    codec_name, kind = parts["codec"], parts["kind"]
    request, batches = produce_records(path)
    assert request.acks == (1 if kind == "plain" else -1)
    if kind == "txn":
        assert request.transactional_id == f"golden-{client}-{codec_name}"
    else:
        assert request.transactional_id is None
    assert batches
    for topic, partition, header, records in batches:
        assert (topic, partition) == (topic_name(codec_name, kind), 0)
        assert header.magic == 2
        assert header.compression == CODEC_IDS[codec_name]
        assert header.is_transactional == (kind == "txn")
        assert not header.is_control
        assert header.timestamp_type == 0
        if kind == "plain":
            assert (header.producer_id, header.producer_epoch) == (-1, -1)
        else:
            assert (header.producer_id, header.producer_epoch) == (PRODUCER_ID, 0)
        decoded = list(iter_records(records, header))
        assert len(decoded) == header.record_count
        for delta, record in enumerate(decoded):
            assert record.offset == header.base_offset + delta
            if kind != "plain":  # the sequence number says which record this is
                i = header.base_sequence + delta
                assert record.value == record_value(client, codec_name, kind, i)
            assert header.base_timestamp <= record.timestamp <= header.max_timestamp


def test_each_producer_sent_exactly_its_records() -> None:
    """All Produce frames of one client and scenario hold records 0..RECORDS-1 in order."""
    sent: dict[tuple[str, str, str], list] = defaultdict(list)
    for path in PRODUCE:
        parts = name_parts(path)
        for _, _, header, records in produce_records(path)[1]:
            key = (path.parent.name, parts["codec"], parts["kind"])
            sent[key].extend((r.key, r.value, r.headers) for r in iter_records(records, header))
    assert len(sent) == len(CLIENTS) * len(CODEC_IDS) * len(KINDS)
    for (client, codec_name, kind), records in sent.items():
        expected = [
            (record_key(i), record_value(client, codec_name, kind, i), record_headers(i))
            for i in range(RECORDS)
        ]
        assert records == expected, (client, codec_name, kind)


def first_batch(path: Path) -> bytearray:
    _, batches = produce_records(path)
    _, _, header, records = batches[0]
    return bytearray(records[header.position:header.position + header.size])


@pytest.mark.parametrize("path", PRODUCE, ids=frame_id)
def test_corrupted_batches_are_refused_with_a_precise_reason(path: Path) -> None:
    batch = first_batch(path)
    stored_crc = struct.unpack_from(">I", batch, CRC_OFFSET)[0]

    flipped_crc = bytearray(batch)
    flipped_crc[CRC_OFFSET + 3] ^= 0x01
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(flipped_crc)
    assert e.value.reason == (
        f"crc mismatch: stored {stored_crc ^ 0x01:#010x} computed {stored_crc:#010x}")
    assert e.value.position == 0
    assert e.value.error_code == Error.CORRUPT_MESSAGE

    flipped_record = bytearray(batch)
    flipped_record[HEADER_SIZE] ^= 0x40
    with pytest.raises(CorruptRecordError, match="crc mismatch"):
        validate_batches(flipped_record)

    truncated = batch[:-1]
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(truncated)
    assert e.value.reason == (
        f"truncated batch: batch length {len(batch) - 12} needs {len(batch)} bytes, "
        f"{len(batch) - 1} remain")

    header_only = batch[:HEADER_SIZE - 1]
    with pytest.raises(CorruptRecordError) as e:
        validate_batches(header_only)
    assert e.value.reason == (
        f"truncated batch: {HEADER_SIZE - 1} bytes remain, a batch header needs {HEADER_SIZE}")

    magic_1 = bytearray(batch)
    magic_1[MAGIC_OFFSET] = 1
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(magic_1)
    assert e.value.reason == "magic 1 not supported, only magic 2"
    assert e.value.error_code == Error.INVALID_RECORD

    second = batch + magic_1  # the second batch of a request is named by its position
    with pytest.raises(InvalidRecordError) as e:
        validate_batches(second)
    assert e.value.position == len(batch)


@pytest.mark.parametrize(
    "path", [p for p in PRODUCE if "_none_" not in p.name], ids=frame_id)
def test_corrupt_compressed_payload_with_valid_crc_fails_on_decompression(path: Path) -> None:
    batch = first_batch(path)
    payload = HEADER_SIZE + (len(batch) - HEADER_SIZE) // 2
    for i in range(payload, min(payload + 8, len(batch))):
        batch[i] ^= 0xFF
    batch[HEADER_SIZE:HEADER_SIZE + 4] = b"\x00\x00\x00\x00"  # no codec's magic any more
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    (header,) = validate_batches(batch)  # the CRC is right, the header is sane
    with pytest.raises(ProtocolError):
        list(iter_records(batch, header, max_uncompressed=1 << 20))


# --- hostile input ------------------------------------------------------------------


def test_stream_of_all_frames_fed_byte_by_byte() -> None:
    frames = [p.read_bytes() for p in FRAMES]
    stream = b"".join(size_prefix(len(f)) + f for f in frames)
    decoder = FrameDecoder()
    out = []
    for i in range(len(stream)):
        out.extend(bytes(f) for f in decoder.feed(stream[i:i + 1]))
    assert out == frames
    assert decoder.buffered == 0
    whole = FrameDecoder()
    assert [bytes(f) for f in whole.feed(bytearray(stream))] == frames


def decode_everything(frame: bytes) -> None:
    """What the broker does with a frame: header, body and, for Produce, every record."""
    api_key, version, _ = peek_api_key_version(frame)
    low, high = SUPPORTED.get(api_key, (0, -1))
    if not low <= version <= high:
        return  # dispatch answers UNSUPPORTED_VERSION without decoding
    _, _, _, message, _ = decode_frame(frame)
    if api_key == 0:
        for topic in message.topic_data:
            for partition in topic.partition_data:
                records = partition.records
                if records is None:
                    continue
                for header in validate_batches(records):
                    for _ in iter_records(records, header, max_uncompressed=1 << 20):
                        pass


def only_protocol_errors(frame: bytes) -> bool:
    """True when decoding succeeded, False when it raised ProtocolError (anything else fails)."""
    try:
        decode_everything(frame)
    except ProtocolError:
        return False
    return True


@pytest.mark.parametrize("path", FRAMES, ids=frame_id)
def test_every_truncation_is_refused(path: Path) -> None:
    frame = path.read_bytes()
    _, _, _, _, end = decode_frame(frame)
    for cut in range(end):
        assert not only_protocol_errors(frame[:cut]), f"prefix of {cut} bytes decoded"


@pytest.mark.parametrize("path", FRAMES, ids=frame_id)
def test_mutated_frames_raise_only_protocol_errors(path: Path) -> None:
    frame = path.read_bytes()
    rng = random.Random(f"golden-{frame_id(path)}")
    for _ in range(150):
        data = bytearray(frame)
        for _ in range(rng.choice((1, 1, 2, 4))):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            del data[rng.randrange(len(data)):]
        only_protocol_errors(bytes(data))
