"""Opening a partition directory: Kafka's LogLoader for one replica.

Runs in an executor thread at start-up, before the partition serves anything:

1. Complete the cleaner's interrupted swaps: a `%020d.log.swap` replaces the segments in
   its offset range and takes its own name (storage/cleaner, PartitionLog.replace_segments).
   Then remove leftovers: `*.deleted` (segments whose deletion was interrupted), `*.cleaned`
   (a cleaning that did not reach its swap), other `*.swap`, `*.tmp`, and index files whose
   `.log` is gone.
2. Open every `%020d.log` in offset order. A segment whose `.index`/`.timeindex` is missing,
   not a whole number of entries, or fails Kafka's last-entry sanity check is recovered
   (every batch CRC-checked, indexes rebuilt, invalid tail truncated).
3. After an unclean shutdown (no clean-shutdown marker) the active segment is recovered in
   full; every older segment gets a tail check from its last offset index entry (CRC of
   the batches there, index entries rebuilt) plus a continuity check with the next
   segment's base offset. Any truncation or gap drops the segments after it: their data
   was written after bytes that a crash took back and was never acknowledged.
   After a clean shutdown nothing is scanned but the active segment's tail (from its last
   index entry), so a clean restart costs O(segments), not O(data).
4. Everything recovery changed is fsynced, so the high watermark may start at the end.
5. Producer state (producer_state.py): the newest valid `%020d.snapshot` within
   (log start, log end] is loaded (corrupt ones and ones past the recovered end are
   deleted) and the log after it replayed; with none, the whole log is scanned. A fresh
   snapshot at the log end is written and fsynced when anything was replayed.
6. Aborted-transaction indexes: recovering a segment cuts its `.txnindex` back to the data
   kept. The producer state replay indexes every ABORT marker it meets that the index
   lacks (Kafka's LogSegment.recover with the producer state), so a marker written after
   the last snapshot is indexed again even if its entry was lost. A `.txnindex` that fails
   Kafka's sanity check (an entry before the segment, an unknown version) is emptied and
   the replay starts no later than its segment (later snapshots are dropped) to rebuild
   it. A `.txnindex` deleted by hand from a segment the replay does not reach goes
   unnoticed, as in Kafka.

Logger `storage.recovery` reports what was rebuilt, truncated or dropped.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from semel.storage.config import LogConfig
from semel.storage.fs import RealFileSystem
from semel.storage.offset_index import CorruptIndexError
from semel.storage.partition_log import PartitionLog
from semel.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from semel.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
)
from semel.storage.topic_partition import TopicPartition

log = logging.getLogger("storage.recovery")

_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def open_partition_log(
    fs: RealFileSystem,
    directory: str,
    topic_partition: TopicPartition,
    config: LogConfig,
    *,
    clock: Callable[[], int],
    clean_shutdown: bool,
    log_start_offset: int = 0,
    durable: bool = True,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
) -> PartitionLog:
    """Load (creating if needed) and recover the partition log in `directory`, with its
    producer state."""
    fs.mkdir(directory)
    segments = load_segments(
        fs,
        directory,
        config,
        now_ms=clock(),
        clean_shutdown=clean_shutdown,
        log_start_offset=log_start_offset,
        name=str(topic_partition),
    )
    log_end_offset = segments[-1].next_offset
    start = max(log_start_offset, segments[0].base_offset)
    if start > log_end_offset:
        log.warning(
            "%s: log start offset %d beyond the log end %d; using the end",
            topic_partition,
            start,
            log_end_offset,
        )
        start = log_end_offset
    producer_state = ProducerStateManager(
        topic_partition,
        directory,
        fs,
        producer_id_expiration_ms=producer_id_expiration_ms,
        clock=clock,
    )
    plog = PartitionLog(
        directory,
        topic_partition,
        config,
        segments,
        log_start_offset=start,
        fs=fs,
        clock=clock,
        durable=durable,
        producer_state=producer_state,
    )
    plog.load_producer_state()
    return plog


def load_segments(
    fs: RealFileSystem,
    directory: str,
    config: LogConfig,
    *,
    now_ms: int,
    clean_shutdown: bool,
    log_start_offset: int = 0,
    name: str = "",
) -> list[LogSegment]:
    name = name or os.path.basename(directory)
    changed_dir = _complete_swaps(fs, directory, config, now_ms, name)
    names = fs.listdir(directory)
    bases: list[int] = []
    for file_name in names:
        path = os.path.join(directory, file_name)
        if file_name.endswith(_LEFTOVER_SUFFIXES):
            log.info("%s: removing leftover file %s", name, file_name)
            fs.remove(path)
            changed_dir = True
            continue
        parsed = parse_segment_file_name(file_name)
        if parsed is not None and parsed[1] == LOG_SUFFIX:
            bases.append(parsed[0])
    for file_name in names:
        parsed = parse_segment_file_name(file_name)
        if (
            parsed is not None
            and parsed[1] in _INDEX_SUFFIXES
            and parsed[0] not in bases
            and fs.exists(os.path.join(directory, file_name))
        ):
            log.info("%s: removing orphaned index file %s", name, file_name)
            fs.remove(os.path.join(directory, file_name))
            changed_dir = True
    bases.sort()

    def open_segment(base: int) -> LogSegment:
        kwargs = {
            "index_interval_bytes": config.index_interval_bytes,
            "max_index_size": config.segment_index_bytes,
            "created_ms": now_ms,
        }
        try:
            return LogSegment(fs, directory, base, **kwargs)
        except CorruptIndexError as exc:
            log.warning("%s: %s; rebuilding", name, exc)
            for suffix in _INDEX_SUFFIXES:
                path = os.path.join(directory, f"{base:020d}{suffix}")
                if fs.exists(path):
                    fs.remove(path)
            return LogSegment(fs, directory, base, **kwargs)

    segments: list[LogSegment] = []
    touched: list[LogSegment] = []
    cut_after: int | None = None  # index of the last segment to keep
    for i, base in enumerate(bases):
        segment = open_segment(base)
        segments.append(segment)
        last = i == len(bases) - 1
        next_base = None if last else bases[i + 1]
        truncated = 0
        if not segment.has_index_files():
            log.info("%s: segment %d has no index; rebuilding", name, base)
            truncated = segment.recover(0)
            touched.append(segment)
            changed_dir = True
        elif not clean_shutdown and last:
            truncated = segment.recover(0)
            touched.append(segment)
        else:
            try:
                segment.sanity_check(next_base)
                if not clean_shutdown:
                    truncated = _tail_check(segment)
                    touched.append(segment)
            except CorruptIndexError as exc:
                log.warning("%s: corrupt index in segment %d (%s); rebuilding", name, base, exc)
                truncated = segment.recover(0)
                touched.append(segment)
        if truncated:
            log.warning(
                "%s: truncated %d invalid bytes at the end of segment %d "
                "(log now ends at offset %d)",
                name,
                truncated,
                base,
                segment.next_offset,
            )
        # a gap before the next segment is a lost tail, unless the log is compacted: the
        # cleaner leaves gaps wherever it removed the last records of a segment
        gap = not last and segment.next_offset != next_base and (
            "compact" not in config.cleanup_policy or segment.next_offset > next_base)
        if not clean_shutdown and not last and (truncated or gap):
            log.warning(
                "%s: segment %d ends at offset %d but the next starts at %d; "
                "dropping the segments after it",
                name,
                base,
                segment.next_offset,
                next_base,
            )
            cut_after = i
            break
    if cut_after is not None:
        for base in bases[cut_after + 1 :]:
            for suffix in (LOG_SUFFIX, *_INDEX_SUFFIXES):
                path = os.path.join(directory, f"{base:020d}{suffix}")
                if fs.exists(path):
                    fs.remove(path)
        changed_dir = True
    if not segments:
        segments.append(
            LogSegment(
                fs,
                directory,
                log_start_offset,
                index_interval_bytes=config.index_interval_bytes,
                max_index_size=config.segment_index_bytes,
                created_ms=now_ms,
                create=True,
            )
        )
        touched.append(segments[-1])
        changed_dir = True
    for segment in touched:
        segment.flush(with_indexes=True)
    if changed_dir:
        fs.fsync_dir(directory)
    if touched and not clean_shutdown:
        log.info(
            "%s: recovered %d segment(s); log end offset %d",
            name,
            len(touched),
            segments[-1].next_offset,
        )
    return segments


def _complete_swaps(fs: RealFileSystem, directory: str, config: LogConfig, now_ms: int,
                    name: str) -> bool:
    """Finish the cleaner's swaps a crash interrupted (Kafka's LogLoader for ``.swap``
    files): a ``<base>.log.swap`` was fsynced whole, with its ``.txnindex``, before it got
    that name, so it replaces every segment in its offset range and takes its own names
    (offset and time indexes rebuilt; its ``.txnindex`` kept, whether the crash left it
    ``.swap`` or still ``.cleaned``). A ``.txnindex.swap`` beside a log that already has its
    own name is given its own name too. Other ``.swap`` files are left for the leftover
    sweep."""
    swaps = sorted(parsed[0] for file_name in fs.listdir(directory)
                   if (parsed := parse_segment_file_name(file_name)) is not None
                   and parsed[1] == LOG_SUFFIX + SWAP_SUFFIX)
    for base in swaps:
        # the log is renamed first: a crash part way through the renaming to .swap leaves
        # the other files .cleaned (fsynced whole, like the log); the .txnindex is kept
        txn_swap = os.path.join(directory, f"{base:020d}{TXN_INDEX_SUFFIX}{SWAP_SUFFIX}")
        txn_cleaned = os.path.join(directory, f"{base:020d}{TXN_INDEX_SUFFIX}{CLEANED_SUFFIX}")
        if not fs.exists(txn_swap) and fs.exists(txn_cleaned):
            fs.rename(txn_cleaned, txn_swap)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # rebuilt from the log below
            path = os.path.join(directory, f"{base:020d}{suffix}{SWAP_SUFFIX}")
            if fs.exists(path):
                fs.remove(path)
        swap = LogSegment(fs, directory, base, index_interval_bytes=config.index_interval_bytes,
                          max_index_size=config.segment_index_bytes, created_ms=now_ms,
                          file_suffix=SWAP_SUFFIX)
        swap.recover(0)
        end = swap.next_offset
        for file_name in fs.listdir(directory):
            parsed = parse_segment_file_name(file_name)
            if (parsed is not None and base <= parsed[0] < end
                    and parsed[1] in (LOG_SUFFIX, *_INDEX_SUFFIXES)):
                fs.remove(os.path.join(directory, file_name))
        swap.flush()
        swap.change_file_suffix("")
        swap.close()
        log.info("%s: completed the swap of cleaned segment %d (offsets %d to %d)", name, base,
                 base, end)
    # a crash part way through the last renaming (.swap -> own names, log first) leaves
    # the log named and some indexes .swap: the old segments are .deleted by then, so a
    # .txnindex.swap beside its named log and no .txnindex is the cleaned one's
    named = 0
    for file_name in fs.listdir(directory):
        parsed = parse_segment_file_name(file_name)
        if parsed is None or parsed[1] != TXN_INDEX_SUFFIX + SWAP_SUFFIX:
            continue
        stem = os.path.join(directory, f"{parsed[0]:020d}")
        if (fs.exists(stem + LOG_SUFFIX) and not fs.exists(stem + LOG_SUFFIX + SWAP_SUFFIX)
                and not fs.exists(stem + TXN_INDEX_SUFFIX)):
            fs.rename(stem + TXN_INDEX_SUFFIX + SWAP_SUFFIX, stem + TXN_INDEX_SUFFIX)
            named += 1
    if swaps or named:
        fs.fsync_dir(directory)
    return bool(swaps or named)


def _tail_check(segment: LogSegment) -> int:
    """Verify a non-active segment from its last offset index entry after an unclean
    shutdown; falls back to a full recovery if the index does not match the log."""
    position = segment.offset_index.last_position
    try:
        return segment.recover(position)
    except CorruptIndexError:
        return segment.recover(0)
