"""Which principal obtained each producer id: semel's binding of producer ids to principals.

Kafka has none ("we cannot prevent a malicious producer from hijacking the PID of another
producer"); see docs/TRANSACTIONS.md. With the authorizer on, the handlers refuse Produce,
AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit and EndTxn carrying a producer id bound
to another principal; an id without a binding is allowed, as in Kafka.

In memory one dict, producer id -> principal name (``User:alice``), so the produce path pays
one lookup per batch. It is filled from two durable sources:

- producer ids of transactional ids: the transaction coordinator binds the producer id (and
  the previous and next one) of each transactional id from ``TxnMetadata.principal``, which
  travels in the ``__transaction_state`` value record as a tagged field
  (coordinator/transaction/log.py): as durable as the producer id itself, loaded with it at
  start, and unbound when the transactional id expires.
- idempotent producer ids (Kafka persists nothing for them): ``<data_dir>/`` + ``FILE``,
      {"version": 1, "producers": {"<producer id>": ["<principal>", <issued at, ms>], ...}}
  rewritten (temp file, fsync, rename, fsync of the directory) before InitProducerId
  answers; the InitProducerIds that arrive while a write is under way share the next one
  (group commit). ``expire`` forgets bindings issued more than ``expiration_ms``
  (producer.id.expiration.ms) ago whose id no partition's producer state knows any more.

Owned by the event loop; files are written in the default executor.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from pathlib import Path

from semel.protocol.errors import Error, KafkaError
from semel.storage.fs import MetadataFileError, RealFileSystem

log = logging.getLogger("coordinator.producer_principal")

FILE = "__semel_producer_principals.json"


def encode(bindings: dict[int, tuple[str, int]]) -> bytes:
    return json.dumps({
        "version": 1,
        "producers": {str(pid): [principal, issued]
                      for pid, (principal, issued) in sorted(bindings.items())},
    }).encode("utf-8")


def decode(data: bytes) -> dict[int, tuple[str, int]]:
    try:
        doc = json.loads(data)
        if doc.get("version") != 1:
            raise ValueError(f"unknown version {doc.get('version')!r}")
        bindings = {}
        for pid, (principal, issued) in doc["producers"].items():
            if not isinstance(principal, str) or int(pid) < 0:
                raise ValueError(f"bad binding {pid!r}: {principal!r}")
            bindings[int(pid)] = (principal, int(issued))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a producer principal file: {exc}") from None
    return bindings


class ProducerPrincipals:
    def __init__(self, data_dir: Path | str, fs: RealFileSystem | None = None, *,
                 expiration_ms: int = 86_400_000) -> None:
        self.path = Path(data_dir) / FILE
        self.fs = fs if fs is not None else RealFileSystem()
        self.expiration_ms = expiration_ms
        self._owners: dict[int, str] = {}  # every binding: the produce path's lookup
        self._idempotent: dict[int, tuple[str, int]] = {}  # the file's content
        self._changes = 0  # changes made to _idempotent ...
        self._saved = 0  # ... and how many of them are on disk
        self._writing: asyncio.Task | None = None

    def load(self) -> None:
        """Read the file (none: no idempotent bindings yet); a damaged file stops the start
        rather than silently unbinding every idempotent producer id."""
        if not self.fs.exists(self.path):
            return
        try:
            self._idempotent = decode(self.fs.read_file(self.path))
        except ValueError as exc:
            raise MetadataFileError(f"{self.path}: {exc}; refusing to start") from None
        for pid, (principal, _) in self._idempotent.items():
            self._owners[pid] = principal

    # -- the produce path -----------------------------------------------------------------

    def owner(self, producer_id: int) -> str | None:
        """The principal that obtained ``producer_id``, None if nobody is known to have."""
        return self._owners.get(producer_id)

    def __len__(self) -> int:
        return len(self._owners)

    # -- transactional ids (persisted in __transaction_state by the coordinator) ----------

    def bind(self, producer_ids: Iterable[int], principal: str) -> None:
        for pid in producer_ids:
            if pid >= 0:
                self._owners[pid] = principal

    def unbind(self, producer_ids: Iterable[int], principal: str) -> None:
        for pid in producer_ids:
            if self._owners.get(pid) == principal and pid not in self._idempotent:
                del self._owners[pid]

    # -- idempotent producer ids (persisted here) -----------------------------------------

    async def bind_idempotent(self, producer_id: int, principal: str, now_ms: int) -> None:
        """Bind a new idempotent producer id and wait until the binding is on disk; if that
        fails the binding is dropped and KafkaError(COORDINATOR_LOAD_IN_PROGRESS) raised (the
        id is never handed out; the client retries InitProducerId)."""
        self._idempotent[producer_id] = (principal, now_ms)
        self._owners[producer_id] = principal
        self._changes += 1
        try:
            await self._save()
        except OSError as exc:
            log.error("could not record the principal of producer id %d in %s: %s",
                      producer_id, self.path, exc)
            self._idempotent.pop(producer_id, None)
            if self._owners.get(producer_id) == principal:
                del self._owners[producer_id]
            raise KafkaError(Error.COORDINATOR_LOAD_IN_PROGRESS,
                             "the producer id's principal could not be recorded") from None

    async def expire(self, now_ms: int, live_producer_ids: set[int]) -> int:
        """Forget idempotent bindings issued more than ``expiration_ms`` ago whose id is
        not in ``live_producer_ids`` (the ids some partition's producer state still knows);
        returns how many."""
        cutoff = now_ms - self.expiration_ms
        expired = [pid for pid, (_, issued) in self._idempotent.items()
                   if issued < cutoff and pid not in live_producer_ids]
        if not expired:
            return 0
        for pid in expired:
            principal, _ = self._idempotent.pop(pid)
            if self._owners.get(pid) == principal:
                del self._owners[pid]
        self._changes += 1
        await self._save()
        return len(expired)

    async def _save(self) -> None:
        target = self._changes
        while self._saved < target:
            if self._writing is None:
                self._writing = asyncio.get_running_loop().create_task(self._write())
            await asyncio.shield(self._writing)

    async def _write(self) -> None:
        changes = self._changes
        data = encode(self._idempotent)
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, self.fs.write_file_atomic, self.path, data)
        finally:
            self._writing = None
        self._saved = max(self._saved, changes)

    async def close(self) -> None:
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)


__all__ = ["FILE", "ProducerPrincipals", "decode", "encode"]
