"""Fault injection for tests, on a running broker: ``Faults``.

Built on three seams the broker already has, each idle (``None``) in production:
- request interception: ``Broker.interceptor`` is asked about every request after it is
  decoded (``Dispatcher.dispatch``); a rule can answer it with an error instead of running
  it, delay its response, drop its response, close the connection instead of answering,
  or (in a broker subprocess) SIGKILL the broker before the response leaves;
- the file system: ``InjectableFileSystem`` fails the next N fsyncs or writes (EIO, or
  ENOSPC for a full disk);
- the transaction coordinator's hooks between PREPARE_* and the markers, and between the
  markers and COMPLETE_*: a transaction can be held there (``pause_transaction``) or the
  broker SIGKILLed there.

Rules are added from the test's thread and read on the broker's loop (a lock guards them).
Every injection is logged at WARNING on the ``semel.faults`` logger, naming the rule.
"""

from __future__ import annotations

import asyncio
import errno as errno_codes
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from semel.broker.dispatch import CloseConnection
from semel.protocol import api
from semel.protocol.errors import Error
from semel.storage.fs import RealFileSystem

if TYPE_CHECKING:
    from semel.broker.server import Broker

log = logging.getLogger("semel.faults")

#: named points where a broker subprocess can be SIGKILLed (besides request:/response:)
TRANSACTION_POINTS = {
    "txn.prepared": "PREPARE_COMMIT/PREPARE_ABORT is durable, no marker written yet",
    "txn.markers-written": "every marker is written, COMPLETE_* not yet",
}


def api_key_of(api_name: str | int) -> int:
    """``"EndTxn"`` (Kafka's name, any case, with or without "Request") or a key -> key."""
    if isinstance(api_name, int):
        if api_name not in api.BY_KEY:
            raise ValueError(f"unknown api key {api_name}")
        return api_name
    wanted = api_name.lower().removesuffix("request").replace("_", "")
    for name, spec in api.BY_NAME.items():
        if name.lower() == wanted:
            return spec.key
    raise ValueError(f"unknown api {api_name!r} (Kafka's names: Produce, Fetch, EndTxn, ...)")


def error_of(error: Error | int | str) -> Error:
    if isinstance(error, str):
        try:
            return Error[error.upper()]
        except KeyError:
            raise ValueError(f"unknown Kafka error {error!r}") from None
    return Error(error)


def kill_self(reason: str) -> None:
    """SIGKILL this process, saying where first (the line reaches the parent's log)."""
    print(f"fault injection: SIGKILL at {reason}", flush=True)
    log.warning("fault injection: SIGKILL at %s", reason)
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


# -- request rules -------------------------------------------------------------------------

@dataclass
class Rule:
    """What to do to the requests of one API that match the filters, ``times`` times
    (None: until removed). Made by ``Faults``; ``fired`` counts the requests it hit."""

    api_key: int
    times: int | None
    error: Error | None = None
    delay_s: float = 0.0
    drop: bool = False
    disconnect: bool = False
    kill: bool = False
    topic: str | None = None
    partition: int | None = None
    transactional_id: str | None = None
    group_id: str | None = None
    client_id: str | None = None
    fired: int = 0
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def name(self) -> str:
        what = (f"fail with {self.error.name}" if self.error is not None
                else "SIGKILL before the response" if self.kill
                else "close the connection instead of the response" if self.disconnect
                else "drop the response" if self.drop
                else f"delay the response {self.delay_s:g} s")
        filters = ", ".join(f"{k}={v!r}" for k, v in (
            ("topic", self.topic), ("partition", self.partition),
            ("transactional_id", self.transactional_id), ("group_id", self.group_id),
            ("client_id", self.client_id)) if v is not None)
        api_name = api.BY_KEY[self.api_key].name
        return f"{api_name}: {what}" + (f" ({filters})" if filters else "")

    def wait(self, timeout: float = 30) -> bool:
        """Until the rule has fired ``times`` times (True), or the timeout (False)."""
        return self._done.wait(timeout)

    def matches(self, api_key: int, client_id: str | None, request: Any) -> bool:
        if api_key != self.api_key:
            return False
        if self.client_id is not None and client_id != self.client_id:
            return False
        if self.transactional_id is not None and \
                getattr(request, "transactional_id", None) != self.transactional_id:
            return False
        if self.group_id is not None and not _has_group(request, self.group_id):
            return False
        return self.topic is None or _touches(request, self.topic, self.partition)


def _has_group(request: Any, group_id: str) -> bool:
    if getattr(request, "group_id", None) == group_id:
        return True
    groups = getattr(request, "groups", None) or ()
    return any(getattr(g, "group_id", g) == group_id for g in groups)


_TOPIC_LISTS = ("topics", "topic_data", "topic_partitions")
_PARTITION_LISTS = ("partitions", "partition_data", "partition_indexes")
_PARTITION_INDEX = ("index", "partition", "partition_index")


def _touches(request: Any, topic: str, partition: int | None) -> bool:
    """Whether a decoded request names ``topic`` (and ``partition``): the generated
    messages list topics in ``topics``/``topic_data`` entries named ``name``/``topic``, and
    their partitions as entries with an index or as plain ints."""
    for attr in _TOPIC_LISTS:
        for entry in getattr(request, attr, None) or ():
            name = getattr(entry, "name", None) or getattr(entry, "topic", None)
            if name != topic:
                continue
            if partition is None or partition in _partitions_of(entry):
                return True
    # AddPartitionsToTxn v4+: per-transaction entries holding topics
    for txn in getattr(request, "transactions", None) or ():
        if _touches(txn, topic, partition):
            return True
    return False


def _partitions_of(entry: Any) -> Iterable[int]:
    for attr in _PARTITION_LISTS:
        for p in getattr(entry, attr, None) or ():
            if isinstance(p, int):
                yield p
            else:
                for index in _PARTITION_INDEX:
                    value = getattr(p, index, None)
                    if isinstance(value, int):
                        yield value
                        break


class Fault:
    """The decision for one request: answered with ``error`` instead of being run, or run
    and then delayed, dropped, cut off or killed (``after_handling``)."""

    __slots__ = ("delay_s", "disconnect", "drop", "error", "kill", "what")

    def __init__(self, rule: Rule) -> None:
        self.error = rule.error
        self.delay_s = rule.delay_s
        self.drop = rule.drop
        self.disconnect = rule.disconnect
        self.kill = rule.kill
        self.what = rule.name

    async def after_handling(self) -> bool:
        """Run once the request was handled; True: send no response."""
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.kill:
            kill_self(f"response:{self.what.split(':')[0]}")
        if self.disconnect:
            raise CloseConnection(f"fault injection: {self.what}", "fault_injection")
        return self.drop


# -- file system -----------------------------------------------------------------------------

class InjectableFileSystem(RealFileSystem):
    """The real file system, failing the next N fsyncs or writes when told to (optionally
    only of paths containing a substring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fsync_faults: list[list] = []  # [errno, times left or None, path substring]
        self._write_faults: list[list] = []

    def fail_fsyncs(self, times: int | None, code: int, path_contains: str | None) -> None:
        with self._lock:
            self._fsync_faults.append([code, times, path_contains])

    def fail_writes(self, times: int | None, code: int, path_contains: str | None) -> None:
        with self._lock:
            self._write_faults.append([code, times, path_contains])

    def clear(self) -> None:
        with self._lock:
            self._fsync_faults.clear()
            self._write_faults.clear()

    def _take(self, faults: list[list], path: str) -> int | None:
        if not faults:
            return None
        with self._lock:
            for fault in faults:
                code, left, contains = fault
                if contains is not None and contains not in path:
                    continue
                if left is not None:
                    fault[1] = left - 1
                    if fault[1] <= 0:
                        faults.remove(fault)
                return code
        return None

    def _raise(self, kind: str, code: int, path: str) -> None:
        log.warning("fault injection: %s of %s fails with %s", kind, path,
                    errno_codes.errorcode.get(code, code))
        raise OSError(code, os.strerror(code), path)

    def _write_at(self, handle, view, position):
        code = self._take(self._write_faults, handle.path)
        if code is not None:
            self._raise("write", code, handle.path)
        return super()._write_at(handle, view, position)

    def _fsync(self, handle) -> None:
        code = self._take(self._fsync_faults, handle.path)
        if code is not None:
            self._raise("fsync", code, handle.path)
        super()._fsync(handle)

    def fsync_async_then(self, handles, aio, done, future=None):
        """The flusher's AIO fsync (storage/aio_fsync.py), failed as `_fsync` would be (the
        failure handed to ``done`` at once)."""
        for handle in handles:
            code = self._take(self._fsync_faults, handle.path)
            if code is not None:
                log.warning("fault injection: fsync of %s fails with %s", handle.path,
                            errno_codes.errorcode.get(code, code))
                done(OSError(code, os.strerror(code), handle.path))
                return True
        aio.start([handle.fd for handle in handles], done, future)
        return True


# -- the public API ---------------------------------------------------------------------------

class Faults:
    """Fault injection into one running broker (``BrokerThread.faults``).

    Request rules take Kafka's API names ("Produce", "EndTxn", "TxnOffsetCommit", ...) and
    error names ("NOT_ENOUGH_REPLICAS") or codes, and can be narrowed to a topic (and
    partition), a transactional id, a group id or a client id. Each returns its ``Rule``:
    ``rule.fired`` counts hits, ``rule.wait()`` waits until it fired ``times`` times.
    """

    def __init__(self, broker: Broker, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.broker = broker
        self.loop = loop
        self.rules: list[Rule] = []
        self._lock = threading.Lock()
        # client id last seen per session (by id(): sessions take no weak references), so
        # disconnect(client_id=...) finds the connections; pruned by disconnect()
        self._client_ids: dict[int, str] = {}
        self._pauses: list[Pause] = []
        self._kill_points: dict[str, int] = {}  # transaction point -> hits to skip
        broker.interceptor = self
        coordinator = broker.txn_coordinator
        coordinator.before_markers = self._at_point("txn.prepared")
        coordinator.before_complete = self._at_point("txn.markers-written")

    # -- rules ---------------------------------------------------------------------------

    def fail(self, api_name: str | int, error: Error | int | str, *, times: int | None = 1,
             **filters) -> Rule:
        """Answer the next ``times`` matching requests with ``error`` without running
        them (every partition of the request gets it, as the API's error response)."""
        return self._add(Rule(api_key_of(api_name), times, error=error_of(error), **filters))

    def delay(self, api_name: str | int, seconds: float, *, times: int | None = 1,
              **filters) -> Rule:
        """Run the next matching requests, then hold their responses ``seconds``."""
        return self._add(Rule(api_key_of(api_name), times, delay_s=seconds, **filters))

    def drop_response(self, api_name: str | int, *, times: int | None = 1,
                      disconnect: bool = False, **filters) -> Rule:
        """Run the next matching requests (their effect stays) and send no response:
        the client times out (``request.timeout.ms``); with ``disconnect`` the connection
        is closed instead, which clients notice at once. E.g. the EndTxn response after
        the commit took effect."""
        return self._add(Rule(api_key_of(api_name), times, drop=not disconnect,
                              disconnect=disconnect, **filters))

    def kill_before_response(self, api_name: str | int, **filters) -> Rule:
        """SIGKILL the broker process after running the next matching request, before its
        response leaves. Only where the broker runs in its own process (BrokerProcess with
        kill points, ``python -m semel.broker.testing serve``)."""
        return self._add(Rule(api_key_of(api_name), 1, kill=True, **filters))

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self.rules.append(rule)
        log.warning("fault injection armed: %s%s", rule.name,
                    "" if rule.times is None else f", {rule.times} time(s)")
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock:
            if rule in self.rules:
                self.rules.remove(rule)

    def clear(self) -> None:
        """Remove every rule and file system fault, release every pause."""
        with self._lock:
            self.rules.clear()
            self._kill_points.clear()
        fs = self.broker.log_manager.fs
        if isinstance(fs, InjectableFileSystem):
            fs.clear()
        for pause in list(self._pauses):
            pause.release()

    @property
    def quiet(self) -> bool:
        """No request rule is waiting: the dispatcher may take Produce's fast path, which
        does not ask ``intercept`` (the client ids it records come from the requests a
        connection opens with)."""
        return not self.rules

    def intercept(self, api_key: int, header, request, session) -> Fault | None:
        """The dispatcher's question for each decoded request (on the broker's loop)."""
        client_id = getattr(header, "client_id", None)
        if client_id is not None:
            self._client_ids[id(session)] = client_id
        if not self.rules:
            return None
        with self._lock:
            for rule in self.rules:
                if rule.matches(api_key, client_id, request):
                    rule.fired += 1
                    if rule.times is not None and rule.fired >= rule.times:
                        self.rules.remove(rule)
                        rule._done.set()
                    break
            else:
                return None
        log.warning("fault injection: %s (request %d from client %r)", rule.name,
                    getattr(header, "correlation_id", -1), client_id)
        return Fault(rule)

    # -- connections ---------------------------------------------------------------------

    def disconnect(self, client_id: str | None = None) -> int:
        """Close the connections of one client id (every connection: None) now; how many.
        Call from the test's thread."""
        async def close() -> int:
            closed = 0
            live = {id(conn.session): conn for conn in self.broker.connections}
            for key in set(self._client_ids) - set(live):
                del self._client_ids[key]
            for key, conn in live.items():
                if client_id is None or self._client_ids.get(key) == client_id:
                    conn.close()
                    closed += 1
            log.warning("fault injection: closed %d connection(s)%s", closed,
                        "" if client_id is None else f" of client {client_id!r}")
            return closed
        return self._on_loop(close())

    # -- disk ----------------------------------------------------------------------------

    def fail_fsync(self, *, times: int | None = 1, errno: int = errno_codes.EIO,
                   path_contains: str | None = None) -> None:
        """Fail the next ``times`` fsyncs (None: every one until ``clear``) with ``errno``.
        The broker fsyncs segments only with log.flush.mode=fsync (the test fixtures' default
        is none); metadata files (checkpoints, snapshots) are fsynced in every mode."""
        self._fs().fail_fsyncs(times, errno, path_contains)
        log.warning("fault injection armed: fsync fails with %s%s",
                    errno_codes.errorcode.get(errno, errno), _times(times))

    def disk_full(self, *, times: int | None = None, path_contains: str | None = None) -> None:
        """Writes fail with ENOSPC (the next ``times``; None: until ``clear``)."""
        self._fs().fail_writes(times, errno_codes.ENOSPC, path_contains)
        log.warning("fault injection armed: disk full (writes fail with ENOSPC)%s",
                    _times(times))

    def _fs(self) -> InjectableFileSystem:
        fs = self.broker.log_manager.fs
        if not isinstance(fs, InjectableFileSystem):
            raise RuntimeError(  # noqa: TRY004 - a broker set up without the seam
                "this broker was not started on semel.broker.faults.InjectableFileSystem "
                "(BrokerThread does that by default)")
        return fs

    # -- the transaction coordinator -----------------------------------------------------

    def pause_transaction(self, transactional_id: str | None = None, *,
                          at: str = "txn.prepared") -> Pause:
        """Hold the next completing transaction (of ``transactional_id``, or any) at a
        point: "txn.prepared" (PREPARE_* durable, no marker written: EndTxn has been
        answered, read_committed consumers do not see it yet) or "txn.markers-written"
        (markers written, COMPLETE_* not). ``pause.wait()`` until it is held there,
        ``pause.release()`` to let it go on (also on leaving a ``with`` block)."""
        if at not in TRANSACTION_POINTS:
            raise ValueError(f"unknown point {at!r}: {', '.join(TRANSACTION_POINTS)}")
        pause = Pause(self, transactional_id, at)
        with self._lock:
            self._pauses.append(pause)
        log.warning("fault injection armed: hold transaction %s at %s",
                    transactional_id or "(any)", at)
        return pause

    def kill_at(self, point: str, *, skip: int = 0) -> None:
        """SIGKILL the broker process at a named point (``TRANSACTION_POINTS``, or
        "request:Api" / "response:Api"), after ``skip`` earlier hits. Broker subprocess
        only."""
        kind, _, name = point.partition(":")
        if kind in ("request", "response") and name:
            rule = _KillRule(api_key_of(name), skip, before=kind == "request")
            with self._lock:
                self.rules.append(rule)
        elif point in TRANSACTION_POINTS:
            with self._lock:
                self._kill_points[point] = skip
        else:
            raise ValueError(f"unknown kill point {point!r}: request:Api, response:Api, "
                             f"{', '.join(TRANSACTION_POINTS)}")
        log.warning("fault injection armed: SIGKILL at %s%s", point,
                    f" after {skip} hit(s)" if skip else "")

    def _at_point(self, point: str):
        async def hook(transactional_id: str, md) -> None:
            with self._lock:
                skip = self._kill_points.get(point)
                if skip is not None:
                    if skip > 0:
                        self._kill_points[point] = skip - 1
                    else:
                        del self._kill_points[point]
                pause = next((p for p in self._pauses if p.point == point and not p.used and
                              p.transactional_id in (None, transactional_id)), None)
                if pause is not None:
                    pause.used = True
            if skip == 0:
                kill_self(f"{point} ({transactional_id!r})")
            if pause is not None:
                await pause.hold(transactional_id)
        return hook

    def _on_loop(self, coro):
        if self.loop is None:
            raise RuntimeError("Faults was made without the broker's loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)


class _KillRule(Rule):
    """SIGKILL at the first matching request after ``skip`` others: as it arrives
    (``before``), or once it has run, before its response leaves."""

    def __init__(self, api_key: int, skip: int, before: bool) -> None:
        super().__init__(api_key, None, kill=True)
        self.skip = skip
        self.before = before

    @property
    def name(self) -> str:
        return (f"{api.BY_KEY[self.api_key].name}: SIGKILL "
                f"{'as the request arrives' if self.before else 'before the response'}")

    def matches(self, api_key, client_id, request) -> bool:
        if api_key != self.api_key:
            return False
        if self.skip > 0:
            self.skip -= 1
            return False
        if self.before:
            kill_self(f"request:{api.BY_KEY[api_key].name}")
        return True


class Pause:
    """A transaction held at a coordinator point; see ``Faults.pause_transaction``."""

    def __init__(self, faults: Faults, transactional_id: str | None, point: str) -> None:
        self.faults = faults
        self.transactional_id = transactional_id
        self.point = point
        self.used = False
        self.held: str | None = None  # the transactional id held
        self._held = threading.Event()
        self._released = threading.Event()
        self._release_event: asyncio.Event | None = None

    async def hold(self, transactional_id: str) -> None:
        self._release_event = asyncio.Event()
        if self._released.is_set():
            return
        self.held = transactional_id
        log.warning("fault injection: transaction %r held at %s", transactional_id, self.point)
        self._held.set()
        await self._release_event.wait()
        log.warning("fault injection: transaction %r released at %s", transactional_id,
                    self.point)

    def wait(self, timeout: float = 30) -> bool:
        """Until a transaction is held here (True), or the timeout (False)."""
        return self._held.wait(timeout)

    def release(self) -> None:
        self._released.set()
        with self.faults._lock:
            if self in self.faults._pauses:
                self.faults._pauses.remove(self)
        event, loop = self._release_event, self.faults.loop
        if event is not None and loop is not None:
            loop.call_soon_threadsafe(event.set)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _times(times: int | None) -> str:
    return " until cleared" if times is None else f", {times} time(s)"
