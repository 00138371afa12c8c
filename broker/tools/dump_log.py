"""``semel dump-log PATH...``: print what a partition's files hold, like Kafka's
``kafka-dump-log.sh`` (DumpLogSegments), for files written by semel or by Apache Kafka.

File types, by suffix (``.deleted``, ``.cleaned`` and ``.swap`` after it are allowed):
``.log`` batches (and records with ``--deep-iteration``; keys and values with
``--print-data``; ``__consumer_offsets`` / ``__transaction_state`` records decoded with
``--offsets-decoder`` / ``--transaction-log-decoder``), each batch's CRC checked; ``.index``
and ``.timeindex`` entries, each checked against the batch it points at in the segment's
``.log`` beside it; ``.txnindex`` aborted transactions; ``.snapshot`` producer state.

Every file is read through the storage layer's readers (storage.segment.LogFileReader,
offset_index/time_index/transaction_index.decode_entries, producer_state.read_snapshot)
and protocol.records (validate_batches for the CRC, iter_records, parse_control_record),
read-only and without a lock, so a segment a running broker is appending to can be dumped.

Output: Kafka's text lines by default; ``--json`` prints JSON Lines instead (one object per
line, each with ``kind`` and ``path``; docs/DUMP_LOG.md has the schema). Problems found in
the data (a CRC mismatch, invalid bytes at the end of a log, an index entry pointing at the
wrong batch, a corrupt snapshot) are reported (stderr in Kafka's wording, or ``problem``
objects) and the next file is dumped, as Kafka does. Exit status: 0 nothing wrong, 1 a
problem was found in the data, 2 a path could not be dumped (missing, a directory, an
unknown file type) or bad usage; a path error is one line on stderr.
"""

from __future__ import annotations

import argparse
import base64
import bisect
import json
import os
import struct
import sys
from typing import Any

from semel.broker.tools import coordinator_records
from semel.protocol.errors import ProtocolError
from semel.protocol.records import (
    LOG_APPEND_TIME,
    NO_SEQUENCE,
    BatchHeader,
    ControlType,
    CorruptRecordError,
    InvalidRecordError,
    Record,
    iter_records,
    parse_control_record,
    validate_batches,
)
from semel.storage import offset_index, time_index, transaction_index
from semel.storage.offset_index import CorruptIndexError
from semel.storage.producer_state import CorruptSnapshotError, read_snapshot
from semel.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogFileBatch,
    LogFileReader,
    parse_segment_file_name,
)

PROG = "semel dump-log"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX)
STATE_SUFFIXES = (".deleted", ".cleaned", ".swap")  # a segment file being deleted or swapped
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
_INT32_MAX = 2**31 - 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Print the batches and records of .log files and the entries of .index, .timeindex, "
        ".txnindex and .snapshot files (Kafka's kafka-dump-log.sh), checking CRCs and indexes."
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files to dump")
    parser.add_argument("--files", metavar="FILE1,FILE2",
                        help="comma-separated files to dump (Kafka's spelling; adds to PATH)")
    parser.add_argument("--print-data", "--print-data-log", action="store_true",
                        dest="print_data", help="print record keys and values (implies "
                        "--deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print the records inside each batch, not just the batches")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="text output: print record keys and values without offsets, "
                        "timestamps, sizes and control markers")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="index files: check the entries without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="index files: only run the check a broker runs when it opens them")
    parser.add_argument("--max-bytes", type=_positive_int, metavar="N",
                        help="read at most the first N bytes of each .log file")
    decoders = parser.add_mutually_exclusive_group()
    decoders.add_argument("--offsets-decoder", action="store_true",
                          help="decode records as __consumer_offsets records (implies "
                          "--print-data)")
    decoders.add_argument("--transaction-log-decoder", action="store_true",
                          help="decode records as __transaction_state records (implies "
                          "--print-data)")
    parser.add_argument("--json", action="store_true",
                        help="JSON Lines output: one object per line (see docs/DUMP_LOG.md)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value}")
    return value


def run(args: argparse.Namespace) -> int:
    paths = list(args.paths)
    if args.files:
        paths += [p.strip() for p in args.files.split(",") if p.strip()]
    if not paths:
        print(f"{PROG}: no files given (dump-log PATH...)", file=sys.stderr)
        return 2
    dumper = Dumper(args)
    try:
        for path in paths:
            dumper.dump(path)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    if dumper.path_errors:
        return 2
    return 1 if dumper.problems else 0


class PathError(Exception):
    """A path that cannot be dumped at all: one line on stderr, exit status 2."""


class Dumper:
    def __init__(self, args: argparse.Namespace) -> None:
        self.json = args.json
        self.offsets_decoder = args.offsets_decoder
        self.txn_log_decoder = args.transaction_log_decoder
        self.print_data = args.print_data or self.offsets_decoder or self.txn_log_decoder
        self.deep = args.deep_iteration or self.print_data
        self.skip_metadata = args.skip_record_metadata
        self.verify_only = args.verify_index_only
        self.sanity_only = args.index_sanity_check
        self.max_bytes = args.max_bytes
        self.out = sys.stdout
        self.problems = 0
        self.path_errors = 0

    # -- output ---------------------------------------------------------------------------

    def emit(self, text: str | None, obj: dict[str, Any] | None) -> None:
        """One line of output: `text` in text mode, `obj` as a JSON line with --json."""
        if self.json:
            if obj is not None:
                self.out.write(json.dumps(obj) + "\n")  # ASCII: no U+2028 in a line
        elif text is not None:
            self.out.write(text + "\n")

    def problem(self, path: str, message: str, lines: list[str] | None = None,
                **details: Any) -> None:
        """A problem in the data: on stderr in text mode (`lines`, Kafka's wording where it
        has one, else "semel dump-log: PATH: message"), a `problem` object with --json;
        either way the exit status becomes 1."""
        self.problems += 1
        if self.json:
            self.emit(None, {"kind": "problem", "path": path, "message": message, **details})
        else:
            self.out.flush()
            for line in lines or [f"{PROG}: {path}: {message}"]:
                print(line, file=sys.stderr)

    # -- dispatch -------------------------------------------------------------------------

    def dump(self, path: str) -> None:
        try:
            suffix, base_offset, state_suffix = _classify(path)
            _check_file(path)
            if base_offset is None and suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                raise PathError(f"cannot tell the base offset from the file name (expected "
                                f"a name like 00000000000000000000{suffix})")
            self.emit(f"Dumping {path}", {"kind": "file", "path": path, "fileType": suffix[1:],
                                          "baseOffset": base_offset})
            if suffix == LOG_SUFFIX:
                self.dump_log(path, base_offset)
            elif suffix == TXN_INDEX_SUFFIX:
                self.dump_txn_index(path)
            elif suffix == SNAPSHOT_SUFFIX:
                self.dump_snapshot(path)
            elif suffix == INDEX_SUFFIX:
                self.dump_index(path, base_offset, _companion(path, LOG_SUFFIX + state_suffix))
            else:
                self.dump_time_index(path, base_offset,
                                     _companion(path, LOG_SUFFIX + state_suffix))
        except PathError as exc:
            self._path_error(path, str(exc))
        except BrokenPipeError:
            raise
        except OSError as exc:
            self._path_error(path, exc.strerror or str(exc))

    def _path_error(self, path: str, message: str) -> None:
        self.path_errors += 1
        self.out.flush()
        print(f"{PROG}: {path}: {message}", file=sys.stderr)
        self.emit(None, {"kind": "error", "path": path, "message": message})

    # -- .log -----------------------------------------------------------------------------

    def dump_log(self, path: str, base_offset: int | None) -> None:
        if base_offset is not None:
            self.emit(f"Log starting offset: {base_offset}", None)
        batches = records = 0
        last_record_offset: int | None = None
        gaps: list[tuple[int, int]] = []
        with LogFileReader(path) as reader:
            for batch in reader.batches(0, self.max_bytes):
                batches += 1
                records += max(batch.header.record_count, 0)
                decoded = self._dump_batch(path, batch)
                for record in decoded:
                    if last_record_offset is not None and record.offset != last_record_offset + 1:
                        gaps.append((last_record_offset, record.offset))
                    last_record_offset = record.offset
            end = reader.size if self.max_bytes is None else min(reader.size, self.max_bytes)
            invalid = end - reader.valid_end if reader.stop_reason else 0
            name = os.path.basename(path)
            if reader.stop_reason:
                self.emit(f"Found {invalid} invalid bytes at the end of {name}", None)
                self.problem(path, reader.stop_reason, position=reader.valid_end,
                             invalidBytes=invalid)
            if gaps and not self.json:  # as Kafka; compaction leaves gaps: not a problem
                self.out.flush()
                print(f"Non-consecutive offsets in {os.path.abspath(path)}", file=sys.stderr)
                for first, second in gaps:
                    print(f"  {first} is followed by {second}", file=sys.stderr)
            self.emit(None, {
                "kind": "summary", "path": path, "batches": batches, "records": records,
                "validBytes": reader.valid_end, "fileBytes": reader.size,
                "invalidBytes": invalid, "stopReason": reader.stop_reason,
                "nonConsecutiveOffsets": [list(g) for g in gaps]})

    def _dump_batch(self, path: str, batch: LogFileBatch) -> list[Record]:
        h = batch.header
        invalid_reason = _batch_error(batch)
        timestamp_type = "LogAppendTime" if h.timestamp_type == LOG_APPEND_TIME else "CreateTime"
        codec = CODEC_NAMES[h.compression] if h.compression < len(CODEC_NAMES) else (
            f"unknown({h.compression})")
        delete_horizon = h.base_timestamp if h.has_delete_horizon else None
        text = (
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
            f"deleteHorizonMs: {_optional_long(delete_horizon)} position: {batch.position} "
            f"{timestamp_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {codec} crc: {h.crc} isvalid: {_bool(invalid_reason is None)}"
        )
        obj: dict[str, Any] = {
            "kind": "batch", "path": path, "baseOffset": h.base_offset,
            "lastOffset": h.last_offset, "count": h.record_count,
            "baseSequence": h.base_sequence, "lastSequence": h.last_sequence,
            "producerId": h.producer_id, "producerEpoch": h.producer_epoch,
            "partitionLeaderEpoch": h.partition_leader_epoch,
            "isTransactional": h.is_transactional, "isControl": h.is_control,
            "deleteHorizonMs": delete_horizon, "position": batch.position,
            "timestampType": timestamp_type, "baseTimestamp": h.base_timestamp,
            "maxTimestamp": h.max_timestamp, "size": h.size, "magic": h.magic,
            "compresscodec": codec, "crc": h.crc, "isvalid": invalid_reason is None,
        }
        if invalid_reason is not None:
            obj["invalidReason"] = invalid_reason
        records: list[Record] = []
        error: str | None = None
        if self.deep:
            try:
                records.extend(iter_records(batch.data, h))
            except ProtocolError as exc:
                error = str(exc)
            if self.json:
                obj["records"] = [self._record_json(h, r) for r in records]
                if error is not None:
                    obj["recordError"] = error
        self.emit(text, obj)
        if self.deep and not self.json:
            for record in records:
                line = self._record_text(h, record, timestamp_type)
                if line is not None:
                    self.emit(line, None)
        if invalid_reason is not None:
            self.problem(path, f"batch at position {batch.position}: {invalid_reason}",
                         position=batch.position)
        if error is not None:
            self.problem(path, f"records of the batch at position {batch.position}: {error}",
                         position=batch.position)
        return records

    def _record_text(self, h: BatchHeader, record: Record, timestamp_type: str) -> str | None:
        if h.is_control and self.skip_metadata:
            return None
        parts: list[str] = []
        if not self.skip_metadata:
            parts.append(
                f"| offset: {record.offset} {timestamp_type}: {record.timestamp} "
                f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
                f"sequence: {_sequence(h, record)} "
                f"headerKeys: [{','.join(k for k, _ in record.headers)}]"
            )
            if h.is_control:
                parts.append(_control_text(record))
        if self.print_data and not h.is_control:
            key, payload = self._parse(record)
            if key is not None:
                parts.append(("| " if not parts else "") + f"key: {key}")
            if payload is not None:
                parts.append(("| " if not parts else "") + f"payload: {payload}")
        return " ".join(parts) if parts else "|"

    def _record_json(self, h: BatchHeader, record: Record) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "offset": record.offset, "timestamp": record.timestamp,
            "keySize": _size(record.key), "valueSize": _size(record.value),
            "sequence": _sequence(h, record), "headerKeys": [k for k, _ in record.headers],
        }
        if h.is_control:
            try:
                control_type, coordinator_epoch = parse_control_record(record)
            except ProtocolError as exc:
                obj["controlError"] = str(exc)
            else:
                obj["controlType"] = _control_name(control_type)
                if coordinator_epoch is not None:
                    obj["coordinatorEpoch"] = coordinator_epoch
            return obj
        if self.print_data:
            obj["keyBase64"] = _b64(record.key)
            obj["payloadBase64"] = _b64(record.value)
            obj["headers"] = [{"key": k, "value": _text(v), "valueBase64": _b64(v)}
                              for k, v in record.headers]
            if self.offsets_decoder or self.txn_log_decoder:
                key, payload, error = self._decode(record)
                obj["key"], obj["payload"] = key, payload
                if error is not None:
                    obj["decodeError"] = error
            else:
                obj["key"], obj["payload"] = _text(record.key), _text(record.value)
        return obj

    def _parse(self, record: Record) -> tuple[str | None, str | None]:
        """Kafka's MessageParser: key and payload as printed (None: not printed)."""
        if not (self.offsets_decoder or self.txn_log_decoder):
            return _text(record.key), _text(record.value)
        key, payload, error = self._decode(record)
        if error is not None:
            return error, None
        return _compact(key), "<DELETE>" if payload is None else _compact(payload)

    def _decode(self, record: Record) -> tuple[Any, Any, str | None]:
        """(key JSON, value JSON or None for a tombstone, error) via the coordinators' codecs,
        in the shape of Kafka's coordinator record JSON."""
        if record.key is None:
            return None, None, (f"Failed to decode message at offset {record.offset} using the "
                                f"specified decoder (message had a missing key)")
        decode = coordinator_records.decode_offsets_record if self.offsets_decoder else coordinator_records.decode_txn_log_record
        try:
            key, value = decode(record.key, record.value)
        except coordinator_records.UnknownRecordType as exc:
            return None, None, (f"Unknown record type {exc.record_type} at offset "
                                f"{record.offset}, skipping.")
        except (ProtocolError, struct.error, UnicodeDecodeError) as exc:
            return None, None, f"Error at offset {record.offset}, skipping. {exc}"
        return key, value, None

    # -- .index ---------------------------------------------------------------------------

    def dump_index(self, path: str, base_offset: int, log_path: str) -> None:
        data = _read(path)
        entries = offset_index.decode_entries(data, base_offset)
        reader = _open_reader(log_path)
        try:
            if self.sanity_only:
                self._sanity(path, _index_sanity(path, data, entries, base_offset, reader))
                return
            if not data:
                self.emit(f"{path} is empty.", None)
                self.emit(None, {"kind": "summary", "path": path, "entries": 0,
                                 "verified": reader is not None, "mismatches": []})
                return
            self._partial_entry(path, data, offset_index.ENTRY_SIZE)
            if reader is None:
                self._unverified(path, log_path)
            mismatches: list[tuple[int, int]] = []
            shown = 0
            for i, (offset, position) in enumerate(entries):
                if offset == base_offset and i > 0:  # zeros of a preallocated index (Kafka)
                    break
                shown += 1
                log_offset = None
                if reader is not None:
                    try:
                        log_offset = reader.header_at(position).last_offset
                    except CorruptRecordError:
                        log_offset = -1
                    if log_offset != offset:
                        mismatches.append((offset, log_offset))
                if not self.verify_only:
                    obj: dict[str, Any] = {"kind": "indexEntry", "path": path,
                                           "offset": offset, "position": position}
                    if reader is not None:
                        obj["logOffset"] = log_offset
                        obj["matches"] = log_offset == offset
                    self.emit(f"offset: {offset} position: {position}", obj)
            if mismatches:
                lines = [f"Mismatches in :{os.path.abspath(path)}"] + [
                    f"  Index offset: {i}, log offset: {lo}" for i, lo in mismatches]
                self.problem(path, f"{len(mismatches)} index entries do not point at the "
                             "batch ending at their offset", lines,
                             mismatches=[{"indexOffset": i, "logOffset": lo}
                                         for i, lo in mismatches])
            self.emit(None, {"kind": "summary", "path": path, "entries": shown,
                             "verified": reader is not None,
                             "mismatches": [{"indexOffset": i, "logOffset": lo}
                                            for i, lo in mismatches]})
        finally:
            if reader is not None:
                reader.close()

    def _sanity(self, path: str, error: str | None) -> None:
        if error is None:
            self.emit(f"{path} passed sanity check.",
                      {"kind": "sanityCheck", "path": path, "passed": True})
        else:
            self.emit(None, {"kind": "sanityCheck", "path": path, "passed": False,
                             "reason": error})
            self.problem(path, f"failed sanity check: {error}")

    def _partial_entry(self, path: str, data: bytes, entry_size: int) -> None:
        if len(data) % entry_size:
            message = (f"{len(data) % entry_size} bytes at the end are not a whole "
                       f"{entry_size}-byte entry")
            self.problem(path, message)

    def _unverified(self, path: str, log_path: str) -> None:
        if self.verify_only:
            raise PathError(f"cannot verify: no log file {log_path}")
        self.out.flush()
        print(f"{PROG}: {path}: no log file {log_path}: entries not checked", file=sys.stderr)

    # -- .timeindex -----------------------------------------------------------------------

    def dump_time_index(self, path: str, base_offset: int, log_path: str) -> None:
        data = _read(path)
        entries = time_index.decode_entries(data, base_offset)
        reader = _open_reader(log_path)
        try:
            if self.sanity_only:
                self._sanity(path, _time_index_sanity(path, data, entries, base_offset))
                return
            self._partial_entry(path, data, time_index.ENTRY_SIZE)
            if reader is None:
                self._unverified(path, log_path)
            index_path = _companion(path, INDEX_SUFFIX + _state_suffix(path))
            index_entries = (offset_index.decode_entries(_read(index_path), base_offset)
                             if os.path.isfile(index_path) else [])
            index_offsets = [offset for offset, _ in index_entries]
            not_found: list[tuple[int, int]] = []
            mismatches: list[tuple[int, int]] = []
            out_of_order: list[tuple[int, int]] = []
            previous = -1
            shown = 0
            for i, (timestamp, offset) in enumerate(entries):
                if offset == base_offset and i > 0:  # zeros of a preallocated index (Kafka)
                    break
                shown += 1
                if reader is not None:
                    floor = bisect.bisect_right(index_offsets, offset) - 1
                    position = index_entries[floor][1] if floor >= 0 else 0
                    header = _first_batch_reaching(reader, position, offset)
                    if header is None:
                        not_found.append((offset, -1))
                    elif header.last_offset != offset:
                        not_found.append((offset, header.last_offset))
                    else:
                        if header.max_timestamp != timestamp:
                            mismatches.append((timestamp, header.max_timestamp))
                        if previous >= timestamp:
                            out_of_order.append((timestamp, previous))
                if not self.verify_only:
                    self.emit(f"timestamp: {timestamp} offset: {offset}",
                              {"kind": "timeIndexEntry", "path": path, "timestamp": timestamp,
                               "offset": offset})
                previous = timestamp
            where = os.path.abspath(path)
            if mismatches:
                self.problem(
                    path, f"{len(mismatches)} entries do not carry their batch's max timestamp",
                    [f"Found timestamp mismatch in :{where}"]
                    + [f"  Index timestamp: {t}, log timestamp: {lt}" for t, lt in mismatches],
                    mismatches=[{"indexTimestamp": t, "logTimestamp": lt}
                                for t, lt in mismatches])
            if out_of_order:
                self.problem(
                    path, f"{len(out_of_order)} entries are not after the previous entry",
                    [f"Found out of order timestamp in :{where}"]
                    + [f"  Index timestamp: {t}, Previously indexed timestamp: {p}"
                       for t, p in out_of_order],
                    outOfOrder=[{"indexTimestamp": t, "previousTimestamp": p}
                                for t, p in out_of_order])
            if not_found:
                self.problem(
                    path, f"{len(not_found)} indexed offsets are not the last offset of a batch",
                    ["The following indexed offsets are not found in the log."]
                    + [f"Indexed offset: {o}, found log offset: {lo}" for o, lo in not_found],
                    notFound=[{"indexOffset": o, "logOffset": lo} for o, lo in not_found])
            self.emit(None, {"kind": "summary", "path": path, "entries": shown,
                             "verified": reader is not None})
        finally:
            if reader is not None:
                reader.close()

    # -- .txnindex ------------------------------------------------------------------------

    def dump_txn_index(self, path: str) -> None:
        data = _read(path)
        try:
            entries = transaction_index.decode_entries(data)
        except CorruptIndexError as exc:
            self.problem(path, str(exc))
            entries = []
        self._partial_entry(path, data, transaction_index.ENTRY_SIZE)
        version = transaction_index.CURRENT_VERSION
        for txn in entries:
            self.emit(
                f"version: {version} producerId: {txn.producer_id} firstOffset: "
                f"{txn.first_offset} lastOffset: {txn.last_offset} lastStableOffset: "
                f"{txn.last_stable_offset}",
                {"kind": "abortedTxn", "path": path, "version": version,
                 "producerId": txn.producer_id, "firstOffset": txn.first_offset,
                 "lastOffset": txn.last_offset, "lastStableOffset": txn.last_stable_offset})
        self.emit(None, {"kind": "summary", "path": path, "entries": len(entries)})

    # -- .snapshot ------------------------------------------------------------------------

    def dump_snapshot(self, path: str) -> None:
        data = _read(path)
        try:
            entries = read_snapshot(data)
        except CorruptSnapshotError as exc:
            self.problem(path, str(exc), [str(exc)])
            entries = []
        for e in entries:
            batches = list(e.batch_metadata)
            txn = e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
            text = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                    f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: "
                    f"{_optional_long(txn)} lastTimestamp: {e.last_timestamp} ")
            if batches:  # the newest batch: what a broker loading this file keeps last
                text += _batch_metadata_text(batches[-1])
            self.emit(text, {
                "kind": "producer", "path": path, "producerId": e.producer_id,
                "producerEpoch": e.producer_epoch, "coordinatorEpoch": e.coordinator_epoch,
                "currentTxnFirstOffset": txn, "lastTimestamp": e.last_timestamp,
                "batches": [{"firstSequence": b.first_seq, "lastSequence": b.last_seq,
                             "lastOffset": b.last_offset, "offsetDelta": b.offset_delta,
                             "timestamp": b.timestamp} for b in batches]})
            for b in batches[:-1]:  # older retained batches (semel keeps up to five)
                self.emit("| retained " + _batch_metadata_text(b), None)
        self.emit(None, {"kind": "summary", "path": path, "entries": len(entries)})


# -- file names ---------------------------------------------------------------------------------


def _state_suffix(path: str) -> str:
    name = os.path.basename(path)
    return next((s for s in STATE_SUFFIXES if name.endswith(s)), "")


def _classify(path: str) -> tuple[str, int | None, str]:
    """(file type suffix, base offset from the name or None, trailing state suffix)."""
    state = _state_suffix(path)
    name = os.path.basename(path)[: len(os.path.basename(path)) - len(state)]
    stem, dot, ext = name.rpartition(".")
    suffix = "." + ext
    if not dot or suffix not in SUFFIXES:
        raise PathError(f"unknown file type (expected {', '.join(SUFFIXES)})")
    parsed = parse_segment_file_name(name)
    base_offset = parsed[0] if parsed is not None else (int(stem) if stem.isdigit() else None)
    return suffix, base_offset, state


def _companion(path: str, suffix: str) -> str:
    """The file of another type beside `path` (same base offset)."""
    name = os.path.basename(path)
    return os.path.join(os.path.dirname(path), name.split(".", 1)[0] + suffix)


def _check_file(path: str) -> None:
    if os.path.isdir(path):
        raise PathError("is a directory")
    if not os.path.exists(path):
        raise PathError("no such file")


def _read(path: str) -> bytes:
    if os.path.isdir(path):
        raise PathError("is a directory")
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise PathError("no such file") from None


def _open_reader(log_path: str) -> LogFileReader | None:
    try:
        return LogFileReader(log_path)
    except FileNotFoundError:
        return None


# -- checks -------------------------------------------------------------------------------------


def _batch_error(batch: LogFileBatch) -> str | None:
    """Why the batch is not valid (CRC mismatch, unknown codec), or None."""
    try:
        validate_batches(batch.data, from_client=False)
    except InvalidRecordError as exc:
        return exc.reason
    return None


def _first_batch_reaching(reader: LogFileReader, position: int, offset: int) -> BatchHeader | None:
    """The header of the first batch from `position` whose last offset is >= `offset`."""
    for batch in reader.batches(position):
        if batch.header.last_offset >= offset:
            return batch.header
    return None


def _index_sanity(path: str, data: bytes, entries: list[tuple[int, int]], base_offset: int,
                  reader: LogFileReader | None) -> str | None:
    """Kafka's OffsetIndex.sanityCheck, plus semel's check on open (the last entry lies
    inside the segment and after the one before it): semel rebuilds an index failing it.
    The zero tail of an index Kafka preallocated fails the second part."""
    if len(data) % offset_index.ENTRY_SIZE:
        return (f"Index file {os.path.abspath(path)} is corrupt, found {len(data)} bytes which "
                f"is neither positive nor a multiple of {offset_index.ENTRY_SIZE}")
    if not entries:
        return None
    last_offset, last_position = entries[-1]
    if last_offset < base_offset:
        return (f"Corrupt index found, index file {os.path.abspath(path)} has non-zero size "
                f"but the last offset is {last_offset} which is less than the base offset "
                f"{base_offset}")
    if reader is not None and last_position >= max(reader.size, 1):
        return f"the last entry's position {last_position} is past the log's {reader.size} bytes"
    if len(entries) >= 2:
        previous_offset, previous_position = entries[-2]
        if previous_offset >= last_offset or previous_position >= last_position:
            return "the last two entries are not increasing"
    return None


def _time_index_sanity(path: str, data: bytes, entries: list[tuple[int, int]],
                       base_offset: int) -> str | None:
    """Kafka's TimeIndex.sanityCheck."""
    where = os.path.abspath(path)
    if entries:
        first_timestamp = entries[0][0]
        last_timestamp, last_offset = entries[-1]
        if last_timestamp < first_timestamp:
            return (f"Corrupt time index found, time index file ({where}) has non-zero size but "
                    f"the last timestamp is {last_timestamp} which is less than the first "
                    f"timestamp {first_timestamp}")
        if last_offset < base_offset:
            return (f"Corrupt time index found, time index file ({where}) has non-zero size but "
                    f"the last offset is {last_offset} which is less than the first offset "
                    f"{base_offset}")
    if len(data) % time_index.ENTRY_SIZE:
        return (f"Time index file {where} is corrupt, found {len(data)} bytes which is neither "
                f"positive nor a multiple of {time_index.ENTRY_SIZE}")
    return None


# -- formatting ---------------------------------------------------------------------------------


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    """Java's OptionalLong.toString, as Kafka prints it."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _sequence(h: BatchHeader, record: Record) -> int:
    """Kafka's DefaultRecord.sequence: base sequence + offset delta, wrapping past 2^31-1."""
    if h.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    sequence = h.base_sequence + (record.offset - h.base_offset)
    return sequence - 2**31 if sequence > _INT32_MAX else sequence


def _text(data: bytes | None) -> str | None:
    """Kafka's StringDecoder: UTF-8, invalid bytes replaced."""
    return None if data is None else data.decode("utf-8", "replace")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _control_name(control_type: int) -> str:
    return control_type.name if isinstance(control_type, ControlType) else str(control_type)


def _control_text(record: Record) -> str:
    try:
        control_type, coordinator_epoch = parse_control_record(record)
    except ProtocolError as exc:
        return f"controlError: {exc}"
    if coordinator_epoch is not None:
        return f"endTxnMarker: {_control_name(control_type)} coordinatorEpoch: {coordinator_epoch}"
    return f"controlType: {_control_name(control_type)}({int(control_type)})"


def _batch_metadata_text(b: Any) -> str:
    return (f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: "
            f"{b.last_offset} offsetDelta: {b.offset_delta} timestamp: {b.timestamp}")
