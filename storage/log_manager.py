"""Log manager: every partition log of one data directory, topic metadata, background work.

Files in `<data_dir>/`:
  meta.properties               Kafka's KRaft format: version=1, node.id=0, cluster.id and
                                directory.id (22-char base64url UUIDs, as Kafka prints them)
  __semel_topics.json           topic metadata (msgspec JSON, written temp+fsync+rename+fsync
                                dir): {"version": 1, "topics": [{"name", "topic_id",
                                "num_partitions", "configs": {override: value}}]}
  log-start-offset-checkpoint   Kafka's checkpoint format: "0\\n<count>\\n<topic> <p> <offset>"
                                per line, for logs whose start is past their first segment
  .kafka_cleanshutdown          present only between a clean close and the next start
  .lock                         flock'd while a broker uses the directory
  <topic>-<partition>/          one partition log (partition_log.py); a deleted topic's dirs
                                are renamed `<dir>.<uuid hex>-delete` and removed off-loop

Background work started by `start()`: the flusher (group commit: one fsync per dirty
partition per round off the loop - through Linux native AIO for a job of log files'
fdatasyncs only (aio_fsync.py: no thread, the completion wakes the loop), else in the
long-lived fsync thread (sync_thread.py) for a round's only such job or the executor's
threads for several -, then high watermarks advance, waiters resolve and
`on_high_watermark(partition_log)` is called; a round starts three turns of the event loop
after the append that asked for it, or after the round before it ended with logs dirty
again, so what tasks woken meanwhile and clients just answered append shares it. Callbacks
drive it, no task: the common
round costs the loop the turn that starts it and the turn of its AIO completion; a task
runs only a round's rare parts - thread fsyncs, the log-start checkpoint, purging), the
retention check every
`retention_check_interval_ms`, and the producer-id expiration check every
`producer_id_expiration_check_interval_ms` (forgets producers idle for
`producer_id_expiration_ms`, then writes a producer snapshot for every partition whose state
moved since its last one: the periodic snapshot that bounds replay after a crash). Topic
operations are synchronous and run on the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import functools
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from semel.protocol.errors import Error, KafkaError
from semel.storage.checkpoint import read_offset_checkpoint, write_offset_checkpoint

# the cleaning itself (cleaner.py, the worker, selection) is imported on the first cleaning
from semel.storage.cleaner.state import CLEANER_OFFSET_CHECKPOINT, CleanerCheckpoint, CleanerStats
from semel.storage.config import LogConfig
from semel.storage.fs import AioUnsupported, MetadataFileError, RealFileSystem
from semel.storage.partition_log import FlushJob, PartitionLog, partition_dir_name
from semel.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from semel.storage.recovery import open_partition_log
from semel.storage.sync_thread import SyncThread
from semel.storage.topic_partition import TopicPartition

if TYPE_CHECKING:
    from semel.storage.aio_fsync import AioFsync
    from semel.storage.cleaner.cleaner import CleaningResult
    from semel.storage.cleaner.process import CleanerProcess, CleanerThread

log = logging.getLogger("storage.log_manager")

TOPICS_FILE = "__semel_topics.json"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LOCK_FILE = ".lock"
DELETE_DIR_SUFFIX = "-delete"
FLUSH_MODES = ("fsync", "none")
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_DELETE_DIR = re.compile(r".*\.[0-9a-f]{32}-delete")
MAX_FILE_NAME = 255  # bytes in one path component on common file systems
_IDLE, _SCHEDULED, _RUNNING = 0, 1, 2  # the flusher's round


def doomed_dir_name(directory: str, unique: str) -> str:
    """``<dir>.<unique>-delete``, the topic part of the name cut so the last component fits
    in MAX_FILE_NAME bytes (as Kafka does: a 249-character topic name leaves no room for the
    suffix)."""
    parent, _, base = directory.rpartition(os.sep)
    suffix = f".{unique}{DELETE_DIR_SUFFIX}"
    topic, _, partition = base.rpartition("-")
    room = MAX_FILE_NAME - len(suffix) - len(partition) - 1
    encoded = topic.encode("utf-8")
    if len(encoded) > room:
        topic = encoded[:room].decode("utf-8", "ignore")
    name = f"{topic}-{partition}{suffix}"
    return f"{parent}{os.sep}{name}" if parent or directory.startswith(os.sep) else name


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def random_kafka_uuid() -> uuid.UUID:
    """A random UUID Kafka would hand out (not zero, not the metadata topic id, and not
    printing with a leading '-')."""
    while True:
        value = uuid.uuid4()
        if value.int > 1 and not kafka_uuid_string(value).startswith("-"):
            return value


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)


@functools.cache
def _topics_schema():
    """(msgspec, the topics file's struct), made on first read or write of the file: an
    empty data directory starts without msgspec (issue 18). msgspec reads and writes the
    TopicInfo dataclass as it did the Struct it was: the same JSON, the same checks."""
    import msgspec

    return msgspec, msgspec.defstruct("_TopicsFile", [("version", int),
                                                      ("topics", list[TopicInfo])])


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate; raises KafkaError(INVALID_TOPIC_EXCEPTION)."""
    if not name:
        reason = "Topic name is illegal, it can't be empty"
    elif name in (".", ".."):
        reason = 'Topic name cannot be "." or ".."'
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
        )
    elif not _LEGAL_TOPIC.fullmatch(name):
        reason = (
            f'Topic name "{name}" is illegal, it contains a character other than '
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    else:
        return
    raise KafkaError(Error.INVALID_TOPIC_EXCEPTION, reason)


class LogManager:
    def __init__(
        self,
        data_dir: Path,
        *,
        default_config: LogConfig,
        flush_mode: str = "fsync",
        fs: RealFileSystem | None = None,
        clock: Callable[[], int] = wall_clock_ms,
        retention_check_interval_ms: int = 300000,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        producer_id_expiration_check_interval_ms: int = 600000,
        cleaner_enable: bool = False,
        cleaner_backoff_ms: int = 15000,
        cleaner_dedupe_buffer_size: int = 134217728,
        cleaner_io_buffer_load_factor: float = 0.9,  # offset_map.DEFAULT_LOAD_FACTOR
        cleaner_io_max_bytes_per_second: float = float("inf"),  # worker.UNLIMITED
        cleaner_max_cpu_share: float = 0.3,
        cleaner_io_buffer_size: int = 524288,
        cleaner_worker: CleanerProcess | CleanerThread | None = None,
    ):
        if flush_mode not in FLUSH_MODES:
            raise ValueError(f"flush mode must be one of {FLUSH_MODES}, not {flush_mode!r}")
        self.data_dir = Path(data_dir)
        self.default_config = default_config
        self.flush_mode = flush_mode
        self.fs = fs if fs is not None else RealFileSystem()
        self.clock = clock
        self.retention_check_interval_ms = retention_check_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self.cleaner_enable = cleaner_enable
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.cleaner_dedupe_buffer_size = cleaner_dedupe_buffer_size
        self.cleaner_io_buffer_load_factor = cleaner_io_buffer_load_factor
        self.cleaner_io_max_bytes_per_second = cleaner_io_max_bytes_per_second
        self.cleaner_max_cpu_share = cleaner_max_cpu_share
        self.cleaner_io_buffer_size = cleaner_io_buffer_size
        # the cleaner's heavy part: a child process, started at the first cleaning
        # the cleaner's process, started by the first cleaning (a test's CleanerThread)
        self._cleaner_worker = cleaner_worker
        self.cleaner_checkpoint: CleanerCheckpoint | None = None
        self.cleaner_stats = CleanerStats()
        self._cleaner: asyncio.Task | None = None
        self.cluster_id = ""
        self.directory_id = ""
        self.topics: dict[str, TopicInfo] = {}
        self.on_high_watermark: Callable[[PartitionLog], None] | None = None
        self._topic_configs: dict[str, LogConfig] = {}
        self._by_id: dict[uuid.UUID, TopicInfo] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dirty: dict[TopicPartition, PartitionLog] = {}
        # logs whose deleted files wait for removal (purge_deleted), kept in order
        self._deleting: dict[PartitionLog, None] = {}
        self._log_start_dirty = False
        self._doomed_dirs: list[str] = []
        self._executor: ThreadPoolExecutor | None = None
        self._sync_thread: SyncThread | None = None
        self._aio: AioFsync | None = None  # opened by the first round that can use it
        self._aio_usable = True
        # the flusher (group commit), driven by callbacks: _ask_round -> _schedule_round ->
        # (three turns) -> _begin_round -> each job's fsync completion -> _part_done ->
        # _round_over, which schedules the next round if logs became dirty meanwhile. A round's rare parts
        # (a thread's fsync, the log-start checkpoint, purging) run in a task (_round_task).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._rounds_on = False  # rounds may start (from start() until close/abandon)
        self._round_state = _IDLE
        self._round_left = 0  # parts of the running round not done yet
        self._round_epoch = 0  # abandon() moves it on: completions of older rounds are ignored
        self._round_task: asyncio.Task | None = None
        self._idle_waiters: list[asyncio.Future] = []  # close(): the last round is over
        self._retention: asyncio.Task | None = None
        self._producer_expiration: asyncio.Task | None = None
        self._lock_fd: int | None = None
        self.started = False

    @property
    def durable(self) -> bool:
        return self.flush_mode == "fsync"

    @property
    def live_producer_ids(self) -> int:
        """Producer ids with state on some partition, summed over partitions (a producer
        writing to n partitions counts n times, as Kafka's per-partition ProducerIdCount
        gauges add up)."""
        return sum(plog.producer_state.producer_id_count for plog in self._logs.values())

    # -- start / close ----------------------------------------------------------------------

    async def start(self) -> None:
        """Lock the directory, load metadata, recover every partition, start the tasks."""
        loop = asyncio.get_running_loop()
        fs = self.fs
        fs.mkdir(self.data_dir)
        self._lock()
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="semel-storage")
        self._sync_thread = SyncThread(loop)
        self._load_meta_properties()
        self._load_topics()
        clean = fs.exists(self._path(CLEAN_SHUTDOWN_FILE))
        log_starts = self._read_log_start_checkpoint()
        if not clean and self.topics:
            log.warning("no clean shutdown marker in %s: recovering logs", self.data_dir)
        for name in fs.listdir(self.data_dir):
            if _DELETE_DIR.fullmatch(name):
                self._doomed_dirs.append(str(self._path(name)))
        partitions = [
            TopicPartition(info.name, p)
            for info in self.topics.values()
            for p in range(info.num_partitions)
        ]
        opened = await asyncio.gather(
            *(
                loop.run_in_executor(
                    self._executor, self._open_log, tp, clean, log_starts.get(tp, 0)
                )
                for tp in partitions
            )
        )
        for tp, plog in zip(partitions, opened, strict=True):
            self._attach(tp, plog)
        if clean:
            fs.remove(self._path(CLEAN_SHUTDOWN_FILE))
            fs.fsync_dir(self.data_dir)
        self._loop = loop
        self._rounds_on = True
        self._retention = loop.create_task(self._retention_loop(), name="semel-log-retention")
        self._producer_expiration = loop.create_task(
            self._producer_expiration_loop(), name="semel-producer-expiration"
        )
        self.cleaner_checkpoint = CleanerCheckpoint(fs, str(self._path(CLEANER_OFFSET_CHECKPOINT)))
        if self.cleaner_enable:
            self._cleaner = loop.create_task(self._cleaner_loop(), name="semel-log-cleaner")
        if self._doomed_dirs:
            self._ask_round()
        self.started = True

    async def close(self) -> None:
        """Flush everything, close every log, write the clean-shutdown marker."""
        if not self.started:
            return
        self.started = False
        for task in (self._retention, self._producer_expiration, self._cleaner):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._cleaner_worker is not None:
            await self._cleaner_worker.close()
        if self._rounds_on:  # a last round (what was appended before close), then no more
            idle = self._loop.create_future()
            self._idle_waiters.append(idle)
            self._ask_round()
            await idle
            self._rounds_on = False
        clean = True
        for plog in self._logs.values():
            try:
                plog.close()
            except KafkaError as exc:
                clean = False
                log.error("closing %s failed: %s", plog.topic_partition, exc)
        try:
            self._write_log_start_checkpoint()
            self._purge_now()
            if clean:
                self.fs.write_file_atomic(self._path(CLEAN_SHUTDOWN_FILE), b"")
        except OSError as exc:
            log.error("could not complete a clean shutdown of %s: %s", self.data_dir, exc)
        self._logs.clear()
        self._dirty.clear()
        self._stop_threads()
        self._unlock()

    async def abandon(self) -> None:
        """Stop without flushing or writing anything, as a crash would (tests): background
        tasks stop, files are closed unflushed, the directory lock is released."""
        if not self.started:
            return
        self.started = False
        self._rounds_on = False  # no round starts, none in flight completes
        self._round_epoch += 1
        self._round_state = _IDLE
        tasks = [
            t for t in (self._retention, self._producer_expiration, self._round_task,
                        self._cleaner)
            if t is not None
        ]
        self._round_task = None
        for task in tasks:  # cancel all before yielding
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._cleaner_worker is not None:
            await self._cleaner_worker.close()
        for plog in self._logs.values():
            plog.close(flush=False)
        self._logs.clear()
        self._dirty.clear()
        self._stop_threads()
        self._unlock()

    def _stop_threads(self) -> None:
        """Wait for the fsyncs in flight (AIO, the fsync thread, the executor) to finish."""
        if self._aio is not None:
            self._aio.close()
            self._aio = None
        self._aio_usable = True
        if self._sync_thread is not None:
            self._sync_thread.close()
            self._sync_thread = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    def _lock(self) -> None:
        fd = os.open(self._path(LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(
                f"Failed to acquire lock on {self._path(LOCK_FILE)}: another broker is using "
                f"{self.data_dir}"
            ) from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def _path(self, name: str) -> Path:
        return self.data_dir / name

    # -- meta.properties and topic metadata -------------------------------------------------

    def _load_meta_properties(self) -> None:
        path = self._path(META_PROPERTIES)
        if self.fs.exists(path):
            props = {}
            try:
                text = self.fs.read_file(path).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise MetadataFileError(f"{path}: not a meta.properties file ({exc})") from None
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "!")) and "=" in line:
                    key, _, value = line.partition("=")
                    props[key.strip()] = value.strip()
            if props.get("version") != "1" or not props.get("cluster.id"):
                raise MetadataFileError(
                    f"{path}: not a version 1 meta.properties with a cluster.id"
                )
            self.cluster_id = props["cluster.id"]
            self.directory_id = props.get("directory.id", "")
            return
        self.cluster_id = kafka_uuid_string(random_kafka_uuid())
        self.directory_id = kafka_uuid_string(random_kafka_uuid())
        stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
        text = (
            f"#\n#{stamp}\nnode.id=0\nversion=1\ncluster.id={self.cluster_id}\n"
            f"directory.id={self.directory_id}\n"
        )
        self.fs.write_file_atomic(path, text.encode("utf-8"))

    def _load_topics(self) -> None:
        path = self._path(TOPICS_FILE)
        self.topics.clear()
        self._by_id.clear()
        self._topic_configs.clear()
        if not self.fs.exists(path):
            return
        msgspec, file_type = _topics_schema()
        try:
            stored = msgspec.json.decode(self.fs.read_file(path), type=file_type)
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise MetadataFileError(
                f"{path}: unreadable topic metadata ({exc}); refusing to start (the topics it "
                "lists would be lost). Restore the file from a backup of the data directory."
            ) from None
        for info in stored.topics:
            self.topics[info.name] = info
            self._by_id[info.topic_id] = info
            self._topic_configs[info.name] = LogConfig.from_overrides(
                self.default_config, info.configs
            )

    def _store_topics(self, topics: list[TopicInfo]) -> None:
        msgspec, file_type = _topics_schema()
        data = msgspec.json.format(msgspec.json.encode(file_type(1, topics)))
        self.fs.write_file_atomic(self._path(TOPICS_FILE), data)

    def _read_log_start_checkpoint(self) -> dict[TopicPartition, int]:
        path = self._path(LOG_START_OFFSET_CHECKPOINT)
        try:
            return read_offset_checkpoint(self.fs, path)
        except ValueError as exc:
            log.error("ignoring malformed %s: %s", path, exc)
            return {}

    def _write_log_start_checkpoint(self) -> None:
        self._log_start_dirty = False
        write_offset_checkpoint(self.fs, self._path(LOG_START_OFFSET_CHECKPOINT), {
            tp: plog.log_start_offset for tp, plog in self._logs.items()
            if plog.log_start_offset > plog.segments[0].base_offset
        })

    # -- partition logs ---------------------------------------------------------------------

    def _open_log(self, tp: TopicPartition, clean: bool, log_start_offset: int) -> PartitionLog:
        return open_partition_log(
            self.fs,
            str(self._path(partition_dir_name(tp))),
            tp,
            self._topic_configs[tp.topic],
            clock=self.clock,
            clean_shutdown=clean,
            log_start_offset=log_start_offset,
            durable=self.durable,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )

    def _attach(self, tp: TopicPartition, plog: PartitionLog) -> None:
        plog.dirty_listener = self._on_dirty
        plog.deleted_listener = self._deleting.setdefault
        plog.high_watermark_listener = self._on_high_watermark
        plog.log_start_offset_listener = self._on_log_start_offset
        self._logs[tp] = plog

    def _on_dirty(self, plog: PartitionLog) -> None:
        self._dirty[plog.topic_partition] = plog
        if not self._round_state and self._rounds_on:
            self._ask_round()

    def _on_high_watermark(self, plog: PartitionLog) -> None:
        listener = self.on_high_watermark
        if listener is not None:
            try:
                listener(plog)
            except Exception:
                log.exception("high watermark listener failed for %s", plog.topic_partition)

    def _on_log_start_offset(self, plog: PartitionLog) -> None:
        self._log_start_dirty = True
        self._ask_round()

    def get_partition(self, topic: str, partition: int) -> PartitionLog | None:
        # a plain tuple hashes and compares as the TopicPartition keys do, and is cheaper to
        # make (once or more per Produce request)
        return self._logs.get((topic, partition))

    @property
    def logs(self) -> dict[TopicPartition, PartitionLog]:
        return dict(self._logs)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id)

    def topic_config(self, name: str) -> LogConfig:
        """The resolved config of topic `name` (defaults + its overrides)."""
        config = self._topic_configs.get(name)
        if config is None:
            raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic {name}")
        return config

    # -- topic operations -------------------------------------------------------------------

    def _require_started(self) -> None:
        if not self.started:
            raise KafkaError(Error.KAFKA_STORAGE_ERROR, "the log manager is not running")

    def validate_new_topic(
        self, name: str, num_partitions: int, configs: dict[str, str]
    ) -> LogConfig:
        """Every check create_topic makes, without creating (CreateTopics validateOnly)."""
        validate_topic_name(name)
        if name in self.topics:
            raise KafkaError(Error.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        unified = name.replace(".", "_")
        for existing in self.topics:
            if existing.replace(".", "_") == unified:
                raise KafkaError(
                    Error.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        if num_partitions < 1:
            raise KafkaError(
                Error.INVALID_PARTITIONS,
                "Number of partitions was set to an invalid non-positive value.",
            )
        return LogConfig.from_overrides(self.default_config, configs)

    def create_topic(
        self, name: str, num_partitions: int, configs: dict[str, str] | None = None
    ) -> TopicInfo:
        """Create a topic with `num_partitions` empty partitions and config overrides."""
        self._require_started()
        configs = dict(configs or {})
        config = self.validate_new_topic(name, num_partitions, configs)
        topic_id = random_kafka_uuid()
        while topic_id in self._by_id:
            topic_id = random_kafka_uuid()
        info = TopicInfo(name, topic_id, num_partitions, configs)
        self._topic_configs[name] = config
        created: list[tuple[TopicPartition, PartitionLog]] = []
        try:
            for p in range(num_partitions):
                tp = TopicPartition(name, p)
                created.append((tp, self._create_log(tp)))
            self._store_topics([*self.topics.values(), info])
        except OSError as exc:
            self._topic_configs.pop(name, None)
            for tp, plog in created:
                plog.close(flush=False)
                self._doom_dir(plog.dir)
            raise KafkaError(Error.KAFKA_STORAGE_ERROR, f"creating {name} failed: {exc}") from exc
        self.topics[name] = info
        self._by_id[topic_id] = info
        for tp, plog in created:
            self._attach(tp, plog)
        log.info(
            "created topic %s (%s) with %d partition(s)",
            name,
            kafka_uuid_string(topic_id),
            num_partitions,
        )
        return info

    def _create_log(self, tp: TopicPartition) -> PartitionLog:
        directory = str(self._path(partition_dir_name(tp)))
        if self.fs.exists(directory):  # a stale directory must not resurface as data
            log.warning("moving aside stale directory %s", directory)
            if not self._doom_dir(directory):
                raise KafkaError(Error.KAFKA_STORAGE_ERROR,
                                 f"cannot move aside the stale directory {directory}")
        plog = open_partition_log(
            self.fs,
            directory,
            tp,
            self._topic_configs[tp.topic],
            clock=self.clock,
            clean_shutdown=True,
            durable=self.durable,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        self.fs.fsync_dir(self.data_dir)
        return plog

    def _doom_dir(self, directory: str) -> bool:
        """Rename ``directory`` for deletion in the background; False if that failed."""
        doomed = doomed_dir_name(directory, uuid.uuid4().hex)
        try:
            self.fs.rename(directory, doomed)
        except OSError as exc:
            log.error("could not rename %s for deletion: %s", directory, exc)
            return False
        self._doomed_dirs.append(doomed)
        self._ask_round()
        return True

    def delete_topic(self, name: str) -> None:
        """Delete a topic: metadata first, then its directories are renamed
        `<dir>.<uuid>-delete` and removed in the background."""
        self._require_started()
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic {name}")
        try:
            self._store_topics([t for t in self.topics.values() if t.name != name])
        except OSError as exc:
            raise KafkaError(Error.KAFKA_STORAGE_ERROR, f"deleting {name} failed: {exc}") from exc
        del self.topics[name]
        self._by_id.pop(info.topic_id, None)
        self._topic_configs.pop(name, None)
        for p in range(info.num_partitions):
            tp = TopicPartition(name, p)
            plog = self._logs.pop(tp, None)
            if self.cleaner_checkpoint is not None:
                self.cleaner_checkpoint.forget(tp)
            self.cleaner_stats.last_cleaned_ms.pop(tp, None)
            self.cleaner_stats.uncleanable.discard(tp)
            self._dirty.pop(tp, None)
            if plog is not None:
                plog.close(flush=False)
                self._doom_dir(plog.dir)
                self._on_high_watermark(plog)  # parked fetches re-read and find it closed
        with contextlib.suppress(OSError):
            self.fs.fsync_dir(self.data_dir)
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, total: int) -> TopicInfo:
        """Grow topic `name` to `total` partitions (CreatePartitions)."""
        self._require_started()
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic {name}")
        if total == info.num_partitions:
            raise KafkaError(
                Error.INVALID_PARTITIONS, f"Topic already has {info.num_partitions} partitions."
            )
        if total < info.num_partitions:
            raise KafkaError(
                Error.INVALID_PARTITIONS,
                f"Topic currently has {info.num_partitions} partitions, which is higher than "
                f"the requested {total}.",
            )
        created: list[tuple[TopicPartition, PartitionLog]] = []
        grown = TopicInfo(info.name, info.topic_id, total, dict(info.configs))
        try:
            for p in range(info.num_partitions, total):
                tp = TopicPartition(name, p)
                created.append((tp, self._create_log(tp)))
            self._store_topics([grown if t.name == name else t for t in self.topics.values()])
        except OSError as exc:
            for tp, plog in created:
                plog.close(flush=False)
                self._doom_dir(plog.dir)
            raise KafkaError(
                Error.KAFKA_STORAGE_ERROR, f"adding partitions to {name} failed: {exc}"
            ) from exc
        info.num_partitions = total
        for tp, plog in created:
            self._attach(tp, plog)
        return info

    def set_default_config(self, default_config: LogConfig) -> None:
        """New broker-level topic defaults (a dynamic broker config): every topic's config is
        resolved again from its overrides, and its open logs use it at once."""
        self.default_config = default_config
        for name, info in self.topics.items():
            config = LogConfig.from_overrides(default_config, info.configs)
            self._topic_configs[name] = config
            for p in range(info.num_partitions):
                plog = self._logs.get(TopicPartition(name, p))
                if plog is not None:
                    plog.update_config(config)

    def alter_topic_configs(
        self,
        name: str,
        set_configs: dict[str, str] | None = None,
        delete_configs: list[str] | None = None,
        *,
        validate_only: bool = False,
    ) -> TopicInfo:
        """Set and remove config overrides of topic `name` (IncrementalAlterConfigs)."""
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(Error.UNKNOWN_TOPIC_OR_PARTITION, f"Unknown topic {name}")
        configs = dict(info.configs)
        configs.update(set_configs or {})
        for key in delete_configs or ():
            configs.pop(key, None)
        config = LogConfig.from_overrides(self.default_config, configs)
        if validate_only:
            return info
        self._require_started()
        updated = TopicInfo(info.name, info.topic_id, info.num_partitions, configs)
        try:
            self._store_topics([updated if t.name == name else t for t in self.topics.values()])
        except OSError as exc:
            raise KafkaError(Error.KAFKA_STORAGE_ERROR, f"altering {name} failed: {exc}") from exc
        info.configs = configs
        self._topic_configs[name] = config
        for p in range(info.num_partitions):
            plog = self._logs.get(TopicPartition(name, p))
            if plog is not None:
                plog.update_config(config)
        return info

    # -- background work --------------------------------------------------------------------

    def _ask_round(self) -> None:
        """Something waits for a round: schedule one (``_schedule_round``) unless one is
        scheduled or running (that one ends by scheduling the next if anything is left)."""
        if self._round_state == _IDLE and self._rounds_on:
            self._schedule_round()

    def _schedule_round(self) -> None:
        """Start a round three turns of the loop from now. Those turns are for the appends
        that would otherwise each wait a whole round more: tasks woken by this turn's work
        (a request let go by the append that asked), and after a round, the clients whose
        answers its completion just wrote - a pipelining producer's next requests arrive
        within them (bench/bench_request_cost.py --durable, 5 requests in flight: 3 turns
        against 2 took the broker's CPU per request from 37-45 to 32-35 us and raised
        requests/s 10%; a timer of 200 us instead cost more than it saved). A lone request
        pays three cheap loop turns."""
        self._round_state = _SCHEDULED
        loop = self._loop
        loop.call_soon(loop.call_soon, loop.call_soon, self._begin_round)

    def _take_jobs(self) -> list[tuple[PartitionLog, FlushJob]]:
        dirty = list(self._dirty.values())
        self._dirty.clear()
        return [(plog, job) for plog in dirty if (job := plog.begin_flush()) is not None]

    def _begin_round(self) -> None:
        """One group commit: fsync every dirty partition once, in parallel, off the loop -
        through AIO each job of log files only, straight from here (no task, no future);
        the rest in the round's task. Each job completes as its fsync returns."""
        if self._round_state != _SCHEDULED:  # abandoned meanwhile
            return
        self._round_state = _RUNNING
        self._round_left = 1  # this call's own part: done calls completing at once wait
        try:
            jobs = self._take_jobs()
        except Exception:
            log.exception("flush round failed")
            jobs = []
        slow = []
        epoch = self._round_epoch
        for plog, job in jobs:
            self._round_left += 1  # before the start: its callback may come at once
            done = functools.partial(self._job_done, plog, job, epoch)
            try:
                if self._aio_start(plog, job, done):
                    continue
            except Exception as exc:  # a bug: fail the job rather than stall rounds
                log.exception("flush round failed")
                self._job_done(plog, job, epoch, exc)
                continue
            self._round_left -= 1
            slow.append((plog, job))
        if slow:
            self._round_left += 1
            self._run_task(self._run_jobs(slow, False), self._part_done)
        self._part_done()

    def _job_done(self, plog: PartitionLog, job: FlushJob, epoch: int,
                  error: BaseException | None) -> None:
        """The fsync of one job returned (on the loop, from its completion)."""
        if epoch != self._round_epoch:  # abandoned: nothing of it is to be believed
            return
        try:
            plog.complete_flush(job, error)
        except Exception:
            log.exception("flush round failed")
        self._part_done()

    def _part_done(self) -> None:
        self._round_left -= 1
        if self._round_left:
            return
        if self._rounds_on and (self._log_start_dirty or self._deleting or self._doomed_dirs):
            self._run_task(self._round_tail(), self._round_over)
        else:
            self._round_over()

    def _round_over(self) -> None:
        """The round is done: the next is scheduled if logs became dirty meanwhile, else
        the flusher rests."""
        if self._rounds_on and (self._dirty or self._log_start_dirty or self._doomed_dirs):
            self._schedule_round()
            return
        self._round_state = _IDLE
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _run_task(self, coro, then: Callable[[], None]) -> None:
        """Run a rare part of the round in a task; ``then()`` once it is over (not if
        abandoned: cancelled)."""
        epoch = self._round_epoch

        def finished(task: asyncio.Task) -> None:
            if self._round_task is task:
                self._round_task = None
            if task.cancelled() or epoch != self._round_epoch:
                return
            if task.exception() is not None:
                log.error("flush round failed", exc_info=task.exception())
            then()

        task = self._round_task = self._loop.create_task(coro, name="semel-log-flush")
        task.add_done_callback(finished)

    async def _run_jobs(self, jobs: list[tuple[PartitionLog, FlushJob]], aio: bool) -> None:
        """Wait for the fsyncs of ``jobs`` (AIO tried first if ``aio``), complete each."""
        if len(jobs) == 1:  # no gather around one job
            plog, job = jobs[0]
            try:
                await self._start_job(plog, job, True, aio)
            except Exception as exc:  # noqa: BLE001 - the fsync's failure, handed to the log
                plog.complete_flush(job, exc)
            else:
                plog.complete_flush(job, None)
        elif jobs:
            started = []
            for plog, job in jobs:  # one failing to start fails alone; the rest still run
                try:
                    started.append(self._start_job(plog, job, False, aio))
                except Exception as exc:  # noqa: BLE001 - handed to the log below
                    failed = self._loop.create_future()
                    failed.set_exception(exc)
                    started.append(failed)
            results = await asyncio.gather(*started, return_exceptions=True)
            for (plog, job), result in zip(jobs, results, strict=True):
                plog.complete_flush(job, result if isinstance(result, BaseException) else None)

    async def _round_tail(self) -> None:
        """A round's rare end: the log-start checkpoint, removal of deleted files."""
        if self._log_start_dirty:
            try:
                await self._loop.run_in_executor(self._executor, self._write_log_start_checkpoint)
            except OSError as exc:
                log.error("writing %s failed: %s", LOG_START_OFFSET_CHECKPOINT, exc)
        if self._deleting or self._doomed_dirs:
            await self.purge_deleted()

    async def _flush_round(self) -> None:
        """A whole round as one coroutine (flush_all), beside the flusher's."""
        await self._run_jobs(self._take_jobs(), True)
        await self._round_tail()

    def _aio_context(self) -> AioFsync | None:
        """The AIO context, opened by the first round that can use it; None without one."""
        aio = self._aio
        if aio is None and self._aio_usable:
            from semel.storage.aio_fsync import AioFsync  # ctypes: on the first round

            aio = self._aio = AioFsync.open(self._loop)
            self._aio_usable = aio is not None
        return aio

    def _aio_start(self, plog: PartitionLog, job: FlushJob,
                   done: Callable[[BaseException | None], object] | None = None) -> asyncio.Future | bool | None:
        """Start ``job``'s fsyncs through native AIO where it can take them: with ``done``,
        `FileSystem.fsync_async_then` (True once started), else `FileSystem.fsync_async` (a
        future). None or False: nothing started, the job goes to a thread (a job with other
        than log files, no context, the kernel refusing FDSYNC - then never again - or no
        room). Raises what else the file system raises."""
        if job.handles is None or not self._aio_usable:
            return None
        aio = self._aio_context()
        if aio is None:
            return None
        try:
            if done is None:
                return self.fs.fsync_async(job.handles, aio)
            return self.fs.fsync_async_then(job.handles, aio, done)
        except AioUnsupported:
            log.info("the kernel refuses AIO fdatasync: flushing in a thread")
            self._aio_usable = False
        except OSError as exc:  # not queued (EAGAIN, say): nothing synced, no fault
            log.warning("%s: AIO fdatasync not queued (%s): flushing in a thread",
                        plog.topic_partition, exc)
        return None

    def _start_job(self, plog: PartitionLog, job: FlushJob, alone: bool,
                   aio: bool = True) -> asyncio.Future:
        """Start the fsyncs of one partition's round: a job of log files only through native
        AIO where the kernel offers it and ``aio`` (no thread at all), else in a thread -
        the fsync thread for a round's only job, the executor's threads for one of several
        (they run in parallel). The future fails with the fsync's error."""
        if aio:
            future = self._aio_start(plog, job)
            if future is not None:
                return future
        if alone:
            return self._sync_thread.submit(plog.run_flush, job)
        return self._loop.run_in_executor(self._executor, plog.run_flush, job)

    async def purge_deleted(self) -> None:
        """Remove deleted segment files and doomed directories, off the loop. The logs
        looked at are those that said they have deleted files (not every log: this runs
        after every fsync round); one whose segment a reader still pins stays listed."""
        files = []
        if self._deleting:
            logs = self._logs
            for plog in list(self._deleting):
                if logs.get(plog.topic_partition) is plog:
                    files += plog.take_deleted_files()
                if not (plog.has_deleted_files and logs.get(plog.topic_partition) is plog):
                    del self._deleting[plog]
        dirs, self._doomed_dirs = self._doomed_dirs, []
        if files or dirs:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._remove_paths, files, dirs
            )

    def _purge_now(self) -> None:
        files = [f for plog in self._logs.values() for f in plog.take_deleted_files()]
        dirs, self._doomed_dirs = self._doomed_dirs, []
        self._remove_paths(files, dirs)

    def _remove_paths(self, files: list[str], dirs: list[str]) -> None:
        for path in files:
            try:
                self.fs.remove(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("could not remove %s: %s", path, exc)
        for path in dirs:
            try:
                self.fs.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.error("could not remove %s: %s", path, exc)

    async def run_retention(self) -> int:
        """Apply retention to every partition now; returns the segments deleted."""
        now = self.clock()
        deleted = 0
        for plog in list(self._logs.values()):
            try:
                deleted += plog.apply_retention(now)
            except (KafkaError, OSError) as exc:
                log.error("retention of %s failed: %s", plog.topic_partition, exc)
        await self.purge_deleted()
        return deleted

    async def _retention_loop(self) -> None:
        while True:
            await asyncio.sleep(self.retention_check_interval_ms / 1000)
            try:
                await self.run_retention()
            except Exception:
                log.exception("retention check failed")

    @property
    def cleaner_worker(self) -> CleanerProcess | CleanerThread:
        if self._cleaner_worker is None:
            from semel.storage.cleaner.process import CleanerProcess

            self._cleaner_worker = CleanerProcess()
        return self._cleaner_worker

    async def run_cleaner_once(self) -> CleaningResult | None:
        """Clean the dirtiest compacted partition, if one needs it (Kafka's
        grabFilthiestCompactedLog, then a cleaning); None when none does. The cleaning's
        modules load with the first partition to clean (this also runs at start)."""
        from semel.storage.cleaner.selection import filthiest, log_to_clean

        now = self.clock()
        checkpoint = self.cleaner_checkpoint
        candidates = []
        for tp, plog in list(self._logs.items()):
            config = plog.config
            if ("compact" not in config.cleanup_policy or plog.closed
                    or tp in self.cleaner_stats.uncleanable):
                continue
            candidate, _ = log_to_clean(tp, plog, checkpoint.offsets.get(tp), now,
                                        min_compaction_lag_ms=config.min_compaction_lag_ms,
                                        max_compaction_lag_ms=config.max_compaction_lag_ms)
            candidates.append((candidate, config.min_cleanable_dirty_ratio))
        stats = self.cleaner_stats
        stats.last_run_ms = now
        stats.max_dirty_ratio = max((c.cleanable_ratio for c, _ in candidates), default=0.0)
        chosen = filthiest(candidates)
        plog = None if chosen is None else self._logs.get(chosen.topic_partition)
        if plog is None:
            return None
        from semel.storage.cleaner.cleaner import clean_partition
        from semel.storage.cleaner.process import CleanerError

        try:
            result = await clean_partition(
                plog, checkpoint, self.cleaner_worker,
                dedupe_buffer_bytes=self.cleaner_dedupe_buffer_size, now_ms=now, fs=self.fs,
                load_factor=self.cleaner_io_buffer_load_factor,
                max_io_bytes_per_second=self.cleaner_io_max_bytes_per_second,
                max_cpu_share=self.cleaner_max_cpu_share,
                read_chunk_bytes=max(self.cleaner_io_buffer_size // 2, 4096))
        except CleanerError as exc:
            if not exc.transient:  # Kafka's markPartitionUncleanable: the others go on
                stats.uncleanable.add(plog.topic_partition)
                log.error("%s is uncleanable until the broker restarts: %s",
                          plog.topic_partition, exc)
            raise
        if result is not None:
            stats.record(result, self.clock())
        await self.purge_deleted()
        return result

    async def _cleaner_loop(self) -> None:
        while True:
            try:
                result = await self.run_cleaner_once()
            except Exception:
                log.exception("log cleaning failed")
                result = None
            if result is None:
                await asyncio.sleep(self.cleaner_backoff_ms / 1000)

    async def run_producer_expiration(self) -> int:
        """Forget expired producers on every partition and snapshot the partitions whose
        producer state moved (the periodic task's body); returns the producers removed."""
        now = self.clock()
        removed = 0
        for plog in list(self._logs.values()):
            if plog.closed:
                continue
            removed += plog.remove_expired_producers(now)
            if not plog.offline:
                plog.take_producer_snapshot()
        return removed

    async def _producer_expiration_loop(self) -> None:
        while True:
            await asyncio.sleep(self.producer_id_expiration_check_interval_ms / 1000)
            try:
                await self.run_producer_expiration()
            except Exception:
                log.exception("producer id expiration check failed")

    async def flush_all(self) -> None:
        """Run a group-commit round for every partition now (tests, shutdown paths)."""
        for tp, plog in self._logs.items():
            self._dirty[tp] = plog
        await self._flush_round()
