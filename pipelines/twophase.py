"""KIP-939 two-phase commit: the two calls an external transaction coordinator makes.

A transactional producer (any client: confluent-kafka, Java, ...) writes its transaction and
flushes it without committing; the external coordinator (a database's XA manager, a workflow
engine) then drives both phases with InitProducerId v6 on the transactional id's coordinator:

- ``prepare``: InitProducerId(enable2Pc=true, keepPreparedTxn=true). The ongoing transaction
  is kept, not aborted; it becomes a two-phase one whose timeout is 2^31-1 ms, so the
  timeout reaper never aborts it; the epoch is bumped, which fences the producer instance
  that wrote it. The response's ``ongoing_txn_producer_id/epoch`` name the transaction (the
  pair its records were written with): that ``PreparedTxn`` (``to_json``) is what the
  external coordinator stores next to its own decision.
- ``complete``: the same InitProducerId again (after a crash, from any process), then, as
  Kafka's ``completeTransaction``: if the ongoing pair equals the stored one, EndTxn (v4 at
  most) with the producer id/epoch the response returned; if another transaction is ongoing it is
  aborted (the stored one was completed earlier); with none ongoing nothing is done. A second
  ``complete`` after a successful one therefore answers ``NOTHING_ONGOING``.

Every InitProducerId bumps the epoch, also when no transaction is ongoing, so a producer
still using the transactional id is fenced by either call. CONCURRENT_TRANSACTIONS (markers
of an earlier EndTxn still being written), COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR and
COORDINATOR_NOT_AVAILABLE and lost connections are retried with backoff within ``timeout_s``
(all but the first two after finding the coordinator again); other errors raise
``TwoPhaseCommitError``.

The broker must allow two-phase commit (``transaction.two.phase.commit.enable=true``; with an
authorizer the principal needs WRITE and TWO_PHASE_COMMIT on the transactional id), else it
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Apache Kafka 4.x brokers answer keepPreparedTxn
with UNSUPPORTED_VERSION today, so ``prepare``/``complete`` need semel or a broker that
implements KIP-939 fully. Plain TCP or TLS (``ssl_context``); no SASL.
Blocking, stdlib sockets, semel's codecs (``protocol``): one connection per broker, used by
one thread at a time.
"""

from __future__ import annotations

import enum
import json
import socket
import ssl
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Self

from semel.protocol import api
from semel.protocol.errors import Error
from semel.protocol.frame import recv_frame

__all__ = ["NoOngoingTransaction", "Outcome", "PreparedTxn", "TwoPhaseCommitClient",
           "TwoPhaseCommitError", "TxnDescription"]

FIND_COORDINATOR, API_VERSIONS, INIT_PRODUCER_ID, END_TXN = 10, 18, 22, 26
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS = 61, 65
TRANSACTION_KEY_TYPE = 1  # FindCoordinator key_type of transactional ids
TWO_PHASE_TXN_TIMEOUT_MS = 2**31 - 1  # Integer.MAX_VALUE: never timed out
END_TXN_MAX_VERSION = 4  # v5 is transaction version 2, whose EndTxn bumps the epoch itself
RETRIABLE = {Error.CONCURRENT_TRANSACTIONS, Error.COORDINATOR_LOAD_IN_PROGRESS,
             Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE, Error.NETWORK_EXCEPTION}
REFIND_COORDINATOR = {Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE,
                      Error.NETWORK_EXCEPTION}
_HINTS = {
    Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        "two-phase commit needs transaction.two.phase.commit.enable=true on the broker and, "
        "with an authorizer, the WRITE and TWO_PHASE_COMMIT ACLs on the transactional id",
    Error.UNSUPPORTED_VERSION:
        "the broker does not implement KIP-939's keepPreparedTxn (Apache Kafka 4.x refuses it)",
    Error.PRODUCER_FENCED: "another InitProducerId on the transactional id came in between",
    Error.INVALID_PRODUCER_EPOCH: "another InitProducerId on the transactional id came in between",
}


class TwoPhaseCommitError(Exception):
    """A call failed; ``error_name`` is Kafka's error name (``None`` when it is not one)."""

    def __init__(self, error_name: str | None, message: str) -> None:
        super().__init__(f"{error_name}: {message}" if error_name else message)
        self.error_name = error_name


class NoOngoingTransaction(TwoPhaseCommitError):
    """``prepare`` found no ongoing transaction under the transactional id."""


@dataclass(frozen=True)
class PreparedTxn:
    """A prepared transaction: the (producer id, epoch) its records were written with."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PreparedTxn:
        d = json.loads(text)
        if not (isinstance(d, dict) and isinstance(d.get("transactional_id"), str)
                and d["transactional_id"] and type(d.get("producer_id")) is int
                and d["producer_id"] >= 0 and type(d.get("producer_epoch")) is int
                and 0 <= d["producer_epoch"] <= 32767):
            raise ValueError(f"not a prepared transaction: {text!r}")
        return cls(d["transactional_id"], d["producer_id"], d["producer_epoch"])


class Outcome(enum.Enum):
    COMMITTED = "committed"  # the prepared transaction was committed now
    ABORTED = "aborted"  # the prepared transaction was aborted now (commit=False)
    MISMATCH_ABORTED = "mismatch-aborted"  # another transaction was ongoing: aborted
    NOTHING_ONGOING = "nothing-ongoing"  # none ongoing (completed earlier, or by an admin)


@dataclass(frozen=True)
class TxnDescription:
    """DescribeTransactions v0 for one transactional id (``state`` as Kafka names it:
    "Empty", "Ongoing", "PrepareCommit", "CompleteCommit", ...)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    partitions: frozenset[tuple[str, int]]


class _Connection:
    """One blocking connection: ApiVersions on connect, then request/response in turn."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None,
                 client_id: str, timeout_s: float) -> None:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock = ssl_context.wrap_socket(sock, server_hostname=host) if ssl_context else sock
        except ssl.SSLError as e:  # a certificate or protocol mismatch: retrying cannot help
            sock.close()
            raise TwoPhaseCommitError(None, f"TLS handshake with {host}:{port} failed: {e}") from e
        self.client_id = client_id
        self.correlation_id = 0
        try:
            resp = self.request(API_VERSIONS, 3, _message(
                API_VERSIONS, client_software_name="semel-2pc", client_software_version="1"))
            if resp.error_code == Error.UNSUPPORTED_VERSION:  # the body lists its versions
                resp = self.request(API_VERSIONS, 0, _message(API_VERSIONS))
        except BaseException:
            self.sock.close()
            raise
        if resp.error_code:
            self.sock.close()
            raise TwoPhaseCommitError(_name(_error(resp.error_code)), "ApiVersions failed")
        # api key -> the broker's highest version
        self.versions = {k.api_key: k.max_version for k in resp.api_keys}

    def version(self, api_key: int, minimum: int, maximum: int) -> int:
        """The highest version both sides speak, at least ``minimum``."""
        v = min(maximum, api.SUPPORTED[api_key][1], self.versions.get(api_key, -1))
        if v < minimum:
            what = api.BY_KEY[api_key].name
            if api_key == INIT_PRODUCER_ID:
                raise TwoPhaseCommitError("UNSUPPORTED_VERSION", "the broker does not support "
                                          "KIP-939 two-phase commit (InitProducerId v6)")
            raise TwoPhaseCommitError("UNSUPPORTED_VERSION", f"the broker lacks {what} v{minimum}")
        return v

    def request(self, api_key: int, version: int, body, deadline: float | None = None):
        if deadline is not None:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        self.correlation_id += 1
        self.sock.sendall(api.encode_request(api_key, version, self.correlation_id,
                                             self.client_id, body))
        got, response = api.decode_response(api_key, version, recv_frame(self.sock))
        if got != self.correlation_id:
            raise ConnectionError(f"response to request {got}, expected {self.correlation_id}")
        return response

    def close(self) -> None:
        self.sock.close()


class TwoPhaseCommitClient:
    """Prepare and complete transactions of other producers (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, *, ssl_context: ssl.SSLContext | None = None,
                 client_id: str = "semel-2pc", timeout_s: float = 30.0) -> None:
        self.bootstrap = [_host_port(s) for s in bootstrap_servers.split(",") if s.strip()]
        if not self.bootstrap:
            raise ValueError("bootstrap_servers names no host:port")
        self.ssl_context = ssl_context
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}  # transactional id -> address

    def prepare(self, transactional_id: str) -> PreparedTxn:
        """Turn the ongoing transaction of ``transactional_id`` into a prepared two-phase one
        (never timed out), fence the producer that wrote it and return its identity. Call it
        once the producer has flushed and is no longer used. Raises ``NoOngoingTransaction``
        when none is open (the epoch is bumped all the same)."""
        resp = self._init_producer_id(transactional_id)
        if resp.ongoing_txn_producer_id < 0:
            raise NoOngoingTransaction(None, f"no ongoing transaction under {transactional_id!r}")
        return PreparedTxn(transactional_id, resp.ongoing_txn_producer_id,
                           resp.ongoing_txn_producer_epoch)

    def complete(self, prepared: PreparedTxn, commit: bool = True) -> Outcome:
        """Commit (or abort) a prepared transaction; idempotent (see ``Outcome``)."""
        txn_id = prepared.transactional_id
        resp = self._init_producer_id(txn_id)
        if resp.ongoing_txn_producer_id < 0:
            return Outcome.NOTHING_ONGOING
        ours = (resp.ongoing_txn_producer_id, resp.ongoing_txn_producer_epoch) == (
            prepared.producer_id, prepared.producer_epoch)
        committed = commit and ours
        self._call(txn_id, END_TXN, lambda conn: (
            conn.version(END_TXN, 0, END_TXN_MAX_VERSION), _message(
                END_TXN, transactional_id=txn_id, producer_id=resp.producer_id,
                producer_epoch=resp.producer_epoch, committed=committed)))
        if committed:
            return Outcome.COMMITTED
        return Outcome.ABORTED if ours else Outcome.MISMATCH_ABORTED

    def describe(self, transactional_id: str) -> TxnDescription:
        """The coordinator's view of the transactional id (DescribeTransactions v0)."""
        resp = self._call(transactional_id, DESCRIBE_TRANSACTIONS, lambda conn: (
            conn.version(DESCRIBE_TRANSACTIONS, 0, 0),
            _message(DESCRIBE_TRANSACTIONS, transactional_ids=[transactional_id])),
            error_of=lambda r: r.transaction_states[0].error_code)
        s = resp.transaction_states[0]
        return TxnDescription(s.transactional_id, s.transaction_state, s.producer_id,
                              s.producer_epoch, s.transaction_timeout_ms,
                              s.transaction_start_time_ms,
                              frozenset((t.topic, p) for t in s.topics for p in t.partitions))

    def open_transaction_starts(self, partitions: Iterable[tuple[str, int]]
                                ) -> dict[tuple[str, int], dict[int, int]]:
        """For each (topic, partition): the producer ids with a transaction open there and
        the offset it starts at (DescribeProducers, sent to a bootstrap broker: right where
        one broker leads every partition, as with semel; partitions it answers with an error
        are left out)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        deadline = time.monotonic() + self.timeout_s
        conn = self._any_bootstrap(deadline)
        request = _message(DESCRIBE_PRODUCERS, topics=[
            api.codec(DESCRIBE_PRODUCERS, "request").TopicRequest(
                name=topic, partition_indexes=sorted(ids)) for topic, ids in by_topic.items()])
        resp = conn.request(DESCRIBE_PRODUCERS, conn.version(DESCRIBE_PRODUCERS, 0, 0),
                            request, deadline)
        return {(t.name, p.partition_index): {
                    s.producer_id: s.current_txn_start_offset for s in p.active_producers
                    if s.current_txn_start_offset >= 0}
                for t in resp.topics for p in t.partitions if p.error_code == Error.NONE}

    def close(self) -> None:
        self._close_connections()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests -----------------------------------------------------------------------

    def _init_producer_id(self, transactional_id: str):
        return self._call(transactional_id, INIT_PRODUCER_ID, lambda conn: (
            conn.version(INIT_PRODUCER_ID, 6, 6), _message(
                INIT_PRODUCER_ID, transactional_id=transactional_id,
                transaction_timeout_ms=TWO_PHASE_TXN_TIMEOUT_MS, producer_id=-1,
                producer_epoch=-1, enable2_pc=True, keep_prepared_txn=True)))

    def _call(self, transactional_id: str, api_key: int, build, *,
              error_of=lambda resp: resp.error_code):
        """Send ``build(conn) -> (version, body)`` to the coordinator of ``transactional_id``,
        retrying retriable errors with backoff until ``timeout_s`` has passed."""
        deadline = time.monotonic() + self.timeout_s
        backoff = 0.02
        while True:
            resp, detail = None, None
            try:
                conn = self._coordinator(transactional_id, deadline)
                version, body = build(conn)
                resp = conn.request(api_key, version, body, deadline)
                error = _error(error_of(resp))
            except _CoordinatorError as e:
                error, detail = _error(e.code), str(e)
            except OSError as e:  # refused, lost, timed out: connect again
                error, detail = Error.NETWORK_EXCEPTION, f"{type(e).__name__}: {e}"
                self._close_connections()
            if error == Error.NONE:
                return resp
            if error in REFIND_COORDINATOR:
                self._coordinators.pop(transactional_id, None)
            if error not in RETRIABLE or time.monotonic() + backoff > deadline:
                hints = [detail, _HINTS.get(error),
                         f"still failing after {self.timeout_s} s" if error in RETRIABLE else None]
                raise TwoPhaseCommitError(_name(error), f"{api.BY_KEY[api_key].name} of "
                                          f"{transactional_id!r} failed: "
                                          + "; ".join(h for h in hints if h))
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _coordinator(self, transactional_id: str, deadline: float) -> _Connection:
        address = self._coordinators.get(transactional_id)
        if address is None:
            conn = self._any_bootstrap(deadline)
            version = conn.version(FIND_COORDINATOR, 1, 6)
            if version >= 4:
                body = _message(FIND_COORDINATOR, key_type=TRANSACTION_KEY_TYPE,
                                coordinator_keys=[transactional_id])
            else:
                body = _message(FIND_COORDINATOR, key=transactional_id,
                                key_type=TRANSACTION_KEY_TYPE)
            resp = conn.request(FIND_COORDINATOR, version, body, deadline)
            found = resp.coordinators[0] if version >= 4 else resp
            if found.error_code:
                raise _CoordinatorError(found.error_code, found.error_message)
            address = self._coordinators[transactional_id] = (found.host, found.port)
        return self._connect(address, deadline)

    def _any_bootstrap(self, deadline: float) -> _Connection:
        for address in self._connections:  # any broker is a bootstrap broker
            return self._connections[address]
        failures = []
        for address in self.bootstrap:
            try:
                return self._connect(address, deadline)
            except OSError as e:
                failures.append(f"{address[0]}:{address[1]}: {e}")
        raise ConnectionError("no bootstrap server reachable: " + "; ".join(failures))

    def _connect(self, address: tuple[str, int], deadline: float) -> _Connection:
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = _Connection(
                *address, self.ssl_context, self.client_id,
                max(deadline - time.monotonic(), 0.001))
        return conn

    def _close_connections(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._coordinators.clear()


class _CoordinatorError(Exception):
    """FindCoordinator answered an error (retried when it is retriable)."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(f"FindCoordinator: {_name(_error(code))}"
                         + (f" ({message})" if message else ""))
        self.code = code


def _message(api_key: int, **fields):
    return getattr(api.codec(api_key, "request"), api.BY_KEY[api_key].name + "Request")(**fields)


def _error(code: int) -> Error | int:
    try:
        return Error(code)
    except ValueError:
        return code  # newer than our table: not retriable


def _name(error: Error | int) -> str:
    return error.name if isinstance(error, Error) else f"UNKNOWN_ERROR_{error}"


def _host_port(server: str) -> tuple[str, int]:
    host, _, port = server.strip().rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"bootstrap server {server!r} is not host:port")
    return host.strip("[]"), int(port)
