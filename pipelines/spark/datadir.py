"""``format("semel-log")``: the committed records of a stopped broker's data directory, read
from its segment files without a broker (offline analysis, backups).

    spark.read.format("semel-log").load("/var/lib/semel")          # every non-internal topic
    spark.read.format("semel-log").option("subscribe", "orders").load("/backups/semel")

Options: ``path`` (the data directory; ``load(path)`` sets it), ``subscribe`` (topic names,
comma-separated; internal ones may be named) or ``subscribePattern`` (a regular expression
a whole topic name matches; internal topics excluded), else every topic but the internal
ones (``__`` names); ``includeHeaders`` (default false). The columns are the Kafka source's
(``pipelines.spark.schema``), the rows what a read_committed consumer of the broker reads
from each partition's log start: one Spark partition per ``<topic>-<partition>/`` directory.

Each partition's ``%020d.log`` segments are mapped read-only and walked twice, in offset
order; nothing in the directory is ever written (no index rebuilt, no tail cut):
1. ``scan_partition`` walks the batches as recovery does (``iter_batches`` strict: whole
   batches with valid CRCs). The first torn or corrupt batch ends the log there: recovery
   truncates at it and drops the segments after it. Kafka's producer state, reduced to what
   a reader needs (``TransactionScan``), finds the transactions with no COMMIT/ABORT marker
   (the broker stopped mid-transaction): the last stable offset is the first offset of the
   oldest of them, and a read_committed consumer reads nothing at or past it.
2. ``read_partition`` decodes the records from the log start offset (the broker's
   ``log-start-offset-checkpoint``) below the last stable offset, except control batches and
   the batches of aborted transactions: a transactional batch of producer P at offset O is
   aborted when an aborted transaction of P has first_offset <= O <= last_offset, per the
   segments' ``.txnindex`` (what a read_committed fetch reports), and per the ABORT markers
   the scan met, which recovery would index again when a crash took their entries.

Limits: a cleaner's swap that a crash interrupted (``.swap`` files, which the broker
completes when it starts) is not completed here: the segments read are the ``.log`` files.
A directory a running broker has locked is refused; its files change while they are read.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import logging
import mmap
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from semel.pipelines.spark.options import OptionError, _bool, _lower
from semel.pipelines.spark.schema import RecordColumns, source_schema
from semel.protocol.records import (
    BatchHeader,
    ControlType,
    CorruptRecordError,
    control_key_type,
    iter_batches,
    iter_records,
)
from semel.storage.checkpoint import read_offset_checkpoint
from semel.storage.fs import RealFileSystem
from semel.storage.log_manager import LOCK_FILE, LOG_START_OFFSET_CHECKPOINT
from semel.storage.offset_index import CorruptIndexError
from semel.storage.partition_log import parse_partition_dir_name
from semel.storage.segment import LOG_SUFFIX, TXN_INDEX_SUFFIX, parse_segment_file_name
from semel.storage.topic_partition import TopicPartition
from semel.storage.transaction_index import AbortedTxn, decode_entries

log = logging.getLogger("pipelines.spark.datadir")

NAME = "semel-log"
OPTIONS = {"path", "subscribe", "subscribepattern", "includeheaders"}
INTERNAL_PREFIX = "__"
BATCH_RECORDS = 8192  # records per Arrow batch handed to Spark
BATCH_BYTES = 8 << 20  # or fewer when they are large


# -- options -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DataDirOptions:
    path: str
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str | None = None  # subscribePattern
    include_headers: bool = False

    def selects(self, topic: str) -> bool:
        if self.topics:
            return topic in self.topics
        if topic.startswith(INTERNAL_PREFIX):
            return False
        return self.pattern is None or re.fullmatch(self.pattern, topic) is not None


def datadir_options(raw: Mapping[str, str]) -> DataDirOptions:
    """Check the options; raises OptionError naming the one that is wrong."""
    options = _lower(raw)
    for name in options:
        if name not in OPTIONS:
            known = "path, subscribe, subscribePattern, includeHeaders"
            raise OptionError(f"unknown {NAME} option '{name}' (known: {known})")
    path = options.get("path", "").strip()
    if not path:
        raise OptionError(f"option 'path' must name a data directory: "
                          f"spark.read.format({NAME!r}).load('/path/to/data-dir')")
    if "subscribe" in options and "subscribepattern" in options:
        raise OptionError("options 'subscribe' and 'subscribePattern' cannot both be given")
    topics = ()
    if "subscribe" in options:
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
    pattern = options.get("subscribepattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(
                f"option 'subscribePattern' is not a regular expression: {e}") from None
    return DataDirOptions(path, topics, pattern, _bool(options, "includeheaders", False))


# -- the data source -----------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionDir(InputPartition):
    """One task: a partition's directory, read from its log start offset."""

    topic: str
    partition: int
    directory: str
    log_start_offset: int


class DataDirDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        # asked when the DataFrame is defined: mistakes show before any query runs
        options = datadir_options(self.options)
        _check_data_dir(options.path)
        return source_schema(options.include_headers)

    def reader(self, schema) -> DataSourceReader:
        return DataDirReader(datadir_options(self.options))


class DataDirReader(DataSourceReader):
    def __init__(self, options: DataDirOptions) -> None:
        self.options = options

    def partitions(self) -> list[PartitionDir]:
        return plan(self.options)

    def read(self, partition: PartitionDir) -> Iterator:
        if not isinstance(partition, PartitionDir):
            return iter(())  # no partition selected: Spark reads one InputPartition(None)
        return read_partition(partition, self.options.include_headers)


def _check_data_dir(path: str) -> None:
    if not os.path.isdir(path):
        what = "is not a directory" if os.path.exists(path) else "does not exist"
        raise FileNotFoundError(f"semel data directory {path!r} {what}")
    lock = os.path.join(path, LOCK_FILE)
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return  # no lock file: no broker has it (a backup, say)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise RuntimeError(
                f"a running broker holds {lock}: stop it first, or read its topics through "
                f"format('semel')") from None
    finally:
        os.close(fd)  # releases the shared lock, if taken


def plan(options: DataDirOptions) -> list[PartitionDir]:
    """A PartitionDir per selected partition directory, in (topic, partition) order."""
    _check_data_dir(options.path)
    found: dict[TopicPartition, str] = {}
    for name in os.listdir(options.path):
        tp = parse_partition_dir_name(name)
        directory = os.path.join(options.path, name)
        if tp is not None and options.selects(tp.topic) and os.path.isdir(directory):
            found[tp] = directory
    missing = set(options.topics) - {tp.topic for tp in found}
    if missing:
        raise ValueError(f"option 'subscribe': no partition directory of topic(s) "
                         f"{sorted(missing)} in {options.path!r}")
    starts = _log_start_offsets(options.path)
    return [PartitionDir(tp.topic, tp.partition, found[tp], starts.get(tp, 0))
            for tp in sorted(found)]


def _log_start_offsets(path: str) -> dict[TopicPartition, int]:
    checkpoint = os.path.join(path, LOG_START_OFFSET_CHECKPOINT)
    try:
        return read_offset_checkpoint(RealFileSystem(), checkpoint)  # reads only
    except ValueError as exc:  # the broker ignores it too
        log.error("ignoring malformed %s: %s", checkpoint, exc)
        return {}


# -- pass 1: where the log ends, and where it stops being stable ------------------------------


@dataclass
class TransactionScan:
    """Kafka's producer state, reduced to a reader's needs: fed every batch in offset order,
    it knows which producers have a transaction open (a transactional data batch opens one,
    a COMMIT or ABORT marker of its producer closes it) and which closed transactions an
    ABORT marker ended."""

    ongoing: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    aborted: list[AbortedTxn] = field(default_factory=list)

    def data_batch(self, header: BatchHeader) -> None:
        if header.is_transactional and header.producer_id not in self.ongoing:
            self.ongoing[header.producer_id] = header.base_offset

    def marker(self, header: BatchHeader, control_type: int) -> None:
        if control_type not in (ControlType.ABORT, ControlType.COMMIT):
            return
        first = self.ongoing.pop(header.producer_id, None)
        if first is not None and control_type == ControlType.ABORT:
            self.aborted.append(AbortedTxn(header.producer_id, first, header.base_offset, -1))

    def last_stable_offset(self, log_end_offset: int) -> int:
        return min(self.ongoing.values(), default=log_end_offset)


class AbortedRanges:
    """The aborted transactions' [first offset, marker offset] ranges, per producer id.

    A transaction found both in a ``.txnindex`` and by its marker counts once, with the
    lower first offset (the scan starts later than the index when retention removed the
    transaction's first batches); one producer's transactions then never overlap."""

    def __init__(self, txns: Iterable[AbortedTxn]) -> None:
        first_by_marker: dict[tuple[int, int], int] = {}
        for txn in txns:
            key = (txn.producer_id, txn.last_offset)
            first_by_marker[key] = min(txn.first_offset, first_by_marker.get(key, txn.first_offset))
        ranges: dict[int, list[tuple[int, int]]] = {}
        for (producer_id, last), first in sorted(first_by_marker.items(), key=lambda kv: kv[1]):
            ranges.setdefault(producer_id, []).append((first, last))
        self._ranges = ranges
        self._firsts = {pid: [first for first, _ in r] for pid, r in ranges.items()}

    def contains(self, producer_id: int, offset: int) -> bool:
        firsts = self._firsts.get(producer_id)
        if not firsts:
            return False
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self._ranges[producer_id][i][1]


@dataclass(frozen=True)
class Segment:
    base_offset: int
    log_path: str
    txn_index_path: str
    valid_size: int  # bytes of whole, CRC-valid batches from the start


@dataclass(frozen=True)
class PartitionScan:
    segments: tuple[Segment, ...]  # the readable ones, in offset order
    log_end_offset: int
    last_stable_offset: int
    aborted: AbortedRanges


def segment_paths(directory: str) -> list[tuple[int, str, str]]:
    """(base offset, .log path, .txnindex path) of each segment, in offset order."""
    bases = sorted(parsed[0] for name in os.listdir(directory)
                   if (parsed := parse_segment_file_name(name)) and parsed[1] == LOG_SUFFIX)
    return [(base, os.path.join(directory, f"{base:020d}{LOG_SUFFIX}"),
             os.path.join(directory, f"{base:020d}{TXN_INDEX_SUFFIX}")) for base in bases]


def scan_partition(directory: str) -> PartitionScan:
    scan = TransactionScan()
    segments: list[Segment] = []
    log_end = 0
    for base, log_path, txn_path in segment_paths(directory):
        log_end = max(log_end, base)
        valid_size, intact = 0, True
        with _mapped(log_path) as data:
            try:
                with contextlib.closing(iter_batches(data, strict=True)) as batches:
                    for header in batches:
                        if header.is_control:
                            scan.marker(header, _control_type(data, header))
                        else:
                            scan.data_batch(header)
                        valid_size, log_end = header.position + header.size, header.next_offset
            except CorruptRecordError as exc:
                log.warning("%s: %s; the log ends there (recovery would truncate it there "
                            "and drop the later segments)", log_path, exc)
                intact = False
        segments.append(Segment(base, log_path, txn_path, valid_size))
        if not intact:
            break
    indexed = [txn for s in segments for txn in _aborted_txns(s.txn_index_path)
               if txn.last_offset < log_end]  # a marker the log lost: its transaction is open
    return PartitionScan(tuple(segments), log_end, scan.last_stable_offset(log_end),
                         AbortedRanges(indexed + scan.aborted))


def _control_type(data, header: BatchHeader) -> int:
    records = list(iter_records(data, header))
    return control_key_type(records[0].key) if records else -1


def _aborted_txns(path: str) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` (none when there is no file); a torn last entry is left
    out, as the index's open cuts it off. A corrupt index is ignored: recovery would rebuild it
    from the ABORT markers, which the scan reads anyway."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    try:
        return decode_entries(data)
    except CorruptIndexError as exc:
        log.warning("%s: %s; using the ABORT markers alone", path, exc)
        return []


# -- pass 2: the committed records -----------------------------------------------------------


def read_partition(part: PartitionDir, include_headers: bool) -> Iterator:
    """The committed records of ``part`` as Arrow record batches."""
    scan = scan_partition(part.directory)
    start, end = part.log_start_offset, scan.last_stable_offset
    columns = RecordColumns(part.topic, part.partition, include_headers)
    size = 0
    for segment in scan.segments:
        if segment.base_offset >= end:
            break
        with (_mapped(segment.log_path, segment.valid_size) as data,
              contextlib.closing(iter_batches(data)) as batches):
            for header in batches:
                if header.base_offset >= end:
                    break
                if (header.last_offset < start or header.is_control or (
                        header.is_transactional
                        and scan.aborted.contains(header.producer_id, header.base_offset))):
                    continue
                for record in list(iter_records(data, header)):
                    if record.offset < start or record.offset >= end:
                        continue
                    columns.add(record.key, record.value, record.offset, record.timestamp,
                                header.timestamp_type,
                                record.headers if include_headers else None)
                    size += len(record.value) if record.value else 0
                if len(columns) >= BATCH_RECORDS or size >= BATCH_BYTES:
                    yield columns.take()
                    size = 0
    if len(columns):
        yield columns.take()


@contextlib.contextmanager
def _mapped(path: str, size: int | None = None) -> Iterator[memoryview]:
    """The file's first ``size`` bytes (default: all), mapped read-only."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield memoryview(b"")  # an empty file cannot be mapped
            return
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mapped)[:size]
    try:
        yield view
    finally:
        # views still held (by an exception in flight) keep the mapping until they go
        with contextlib.suppress(BufferError):
            view.release()
            mapped.close()


__all__ = [
    "DataDirDataSource",
    "DataDirOptions",
    "PartitionDir",
    "TransactionScan",
    "datadir_options",
    "plan",
    "read_partition",
    "scan_partition",
]
