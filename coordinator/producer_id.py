"""Producer id allocation: every id handed out is unique forever on this broker.

Ids come from blocks of `block_size` (Kafka's 1000). The latest block ever allocated is
recorded in `<data_dir>/producer_id_block.json` - the layout of Kafka's ZooKeeper-era
`/latest_producer_id_block` node:
    {"version": 1, "broker": <node id>, "block_start": "<first id>", "block_end": "<last id>"}
(ids as decimal strings, end inclusive). A block is written (temp file, fsync, rename, fsync
of the directory) before any id of it is handed out, so after any restart - clean or SIGKILL -
allocation resumes after the last recorded block and never repeats an id; ids of a block
that was not used up are skipped. The next block is reserved in the background once 90% of
the current one is used (Kafka's RPCProducerIdManager prefetch), so allocation rarely waits.
When no recorded block is at hand (being written, or the write failed), allocation raises
KafkaError(COORDINATOR_LOAD_IN_PROGRESS), Kafka's answer while no block is available; the
client retries.

`ProducerIdBlock` and `next_block` are the pure part; `ProducerIdManager` is the shell on the
event loop (files are written in the default executor). `generate_producer_id_nowait()` is
for synchronous callers (the transaction coordinator's pure core), `generate_producer_id()`
waits for a block being written.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from semel.protocol.errors import Error, KafkaError
from semel.storage.fs import MetadataFileError, RealFileSystem

log = logging.getLogger("coordinator.producer_id")

BLOCK_FILE = "producer_id_block.json"
PRODUCER_ID_BLOCK_SIZE = 1000
PREFETCH_THRESHOLD = 0.9  # reserve the next block once this share of the current is used
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    broker: int
    block_start: int
    block_end: int  # inclusive

    @property
    def size(self) -> int:
        return self.block_end - self.block_start + 1

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "broker": self.broker,
                "block_start": str(self.block_start),
                "block_end": str(self.block_end),
            }
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> ProducerIdBlock:
        try:
            doc = json.loads(data)
            if doc.get("version") != 1:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            block = cls(int(doc["broker"]), int(doc["block_start"]), int(doc["block_end"]))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a producer id block: {exc}") from None
        if block.block_start < 0 or block.block_end < block.block_start - 1:
            raise ValueError(f"impossible producer id block {block}")
        return block


def next_block(previous: ProducerIdBlock | None, broker: int, size: int) -> ProducerIdBlock:
    """The block after `previous` (the first block starts at 0)."""
    start = 0 if previous is None else previous.block_end + 1
    if start > _LONG_MAX - size:
        raise KafkaError(
            Error.UNKNOWN_SERVER_ERROR,
            "Exhausted all producerIds as the next block's end producerId would exceed the "
            "long type limit",
        )
    return ProducerIdBlock(broker, start, start + size - 1)


class ProducerIdManager:
    def __init__(
        self,
        data_dir: Path | str,
        fs: RealFileSystem | None = None,
        *,
        broker_id: int = 0,
        block_size: int = PRODUCER_ID_BLOCK_SIZE,
    ):
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.path = Path(data_dir) / BLOCK_FILE
        self.fs = fs if fs is not None else RealFileSystem()
        self.broker_id = broker_id
        self.block_size = block_size
        self._latest: ProducerIdBlock | None = None  # latest block recorded on disk
        self._current: ProducerIdBlock | None = None  # block ids are handed out from
        self._next_id = 0
        self._prefetched: ProducerIdBlock | None = None  # recorded, not yet in use
        self._reserving: asyncio.Task | None = None

    # -- start ----------------------------------------------------------------------------

    def load(self) -> None:
        """Read the latest recorded block (no file: none yet). Ids are only handed out from
        blocks recorded after it, so nothing recorded before is ever reused."""
        if not self.fs.exists(self.path):
            self._latest = None
            return
        try:
            self._latest = ProducerIdBlock.decode(self.fs.read_file(self.path))
        except ValueError as exc:
            raise MetadataFileError(
                f"{self.path}: {exc}; refusing to start (producer ids could repeat)"
            ) from None

    async def start(self) -> None:
        """Load the file and reserve the first block, so ids are available at once."""
        self.load()
        self._reserving = asyncio.get_running_loop().create_task(self._reserve())
        await asyncio.shield(self._reserving)
        if self._current is None:
            self._current, self._prefetched = self._prefetched, None
            if self._current is not None:
                self._next_id = self._current.block_start

    @property
    def latest_block(self) -> ProducerIdBlock | None:
        return self._latest

    @property
    def current_block(self) -> ProducerIdBlock | None:
        return self._current

    # -- allocation -----------------------------------------------------------------------

    def generate_producer_id_nowait(self) -> int:
        """A producer id never handed out before on this broker, without waiting (Kafka's
        ProducerIdManager.generateProducerId): when the current block is used up and the
        next one is not recorded yet, its reservation starts and KafkaError
        (COORDINATOR_LOAD_IN_PROGRESS, retriable) is raised."""
        current = self._current
        if current is None or self._next_id > current.block_end:
            block, self._prefetched = self._prefetched, None
            if block is None:
                self._maybe_reserve()
                raise KafkaError(
                    Error.COORDINATOR_LOAD_IN_PROGRESS,
                    "Producer ID block is not available yet",
                )
            current = self._current = block
            self._next_id = block.block_start
        producer_id = self._next_id
        self._next_id += 1
        if producer_id - current.block_start + 1 >= current.size * PREFETCH_THRESHOLD:
            self._maybe_reserve()
        return producer_id

    async def generate_producer_id(self) -> int:
        """Like `generate_producer_id_nowait`, but waits for a block being recorded; raises
        KafkaError(COORDINATOR_LOAD_IN_PROGRESS) only if recording it failed."""
        while True:
            try:
                return self.generate_producer_id_nowait()
            except KafkaError as exc:
                reserving = self._reserving
                if exc.code != Error.COORDINATOR_LOAD_IN_PROGRESS or reserving is None:
                    raise
                await asyncio.shield(reserving)
                if self._prefetched is None and (
                    self._current is None or (self._next_id > self._current.block_end)
                ):
                    raise

    def _maybe_reserve(self) -> None:
        if self._prefetched is None and self._reserving is None:
            self._reserving = asyncio.get_running_loop().create_task(self._reserve())

    async def _reserve(self) -> None:
        block = next_block(self._latest, self.broker_id, self.block_size)
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._persist, block)
        except OSError as exc:
            log.error("could not record producer id block %s: %s", block, exc)
            return
        finally:
            self._reserving = None
        self._latest = self._prefetched = block
        log.info(
            "reserved producer ids %d..%d in %s", block.block_start, block.block_end, self.path
        )

    def _persist(self, block: ProducerIdBlock) -> None:
        self.fs.write_file_atomic(self.path, block.encode())

    async def close(self) -> None:
        if self._reserving is not None:
            await asyncio.shield(self._reserving)


__all__ = [
    "BLOCK_FILE",
    "PRODUCER_ID_BLOCK_SIZE",
    "ProducerIdBlock",
    "ProducerIdManager",
    "next_block",
]
