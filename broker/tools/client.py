"""A small blocking Kafka admin client over semel's codecs, for the ``semel <tool>`` commands.

Speaks to any Kafka-compatible broker: every request is framed with ``protocol.frame`` and
encoded with the generated codecs (``protocol.api.codec``). Each connection sends ApiVersions
first (v3, falling back to v0 when the broker answers UNSUPPORTED_VERSION) and every request
then goes at the highest version both sides speak, within what a command needs
(``Connection.pick``). Routing as Kafka's admin client does it: Metadata from a bootstrap
server names the brokers and partition leaders; group and transaction requests go to the
coordinator FindCoordinator names; DescribeProducers, ListOffsets and WriteTxnMarkers go to the
partition's leader. Transient errors (a coordinator still loading, NOT_COORDINATOR, ...:
``RETRIED``) are retried with backoff until the command's deadline (``Admin.retry``).

Failures are exception types the command line maps to exit codes: ``KafkaCommandError`` (the
broker answered an error: exit 1, the message starts with the error's name), ``CommandFailed``
(the cluster's state refuses the command: exit 1) and ``ToolError`` (bad arguments, no
connection, a timeout: exit 2). Plaintext, TLS and SASL PLAIN/SCRAM (``tools.security``).
One thread, one request in flight per connection.
"""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, Self

from semel.protocol import api
from semel.protocol.errors import Error, ProtocolError
from semel.protocol.frame import recv_frame

METADATA, LIST_OFFSETS, FIND_COORDINATOR, API_VERSIONS = 3, 2, 10, 18
GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types
MAX_RESPONSE_BYTES = 256 * 1024 * 1024  # refuse a garbage size prefix (not a Kafka broker?)
# retried until the deadline: transient states of a healthy cluster (not, say,
# UNKNOWN_TOPIC_OR_PARTITION, which Kafka calls retriable but a typo never outgrows)
RETRIED = {Error.COORDINATOR_LOAD_IN_PROGRESS, Error.COORDINATOR_NOT_AVAILABLE,
           Error.NOT_COORDINATOR, Error.CONCURRENT_TRANSACTIONS, Error.LEADER_NOT_AVAILABLE,
           Error.NOT_LEADER_OR_FOLLOWER, Error.REQUEST_TIMED_OUT, Error.NETWORK_EXCEPTION,
           Error.UNSTABLE_OFFSET_COMMIT, Error.REBALANCE_IN_PROGRESS}
# errors after which the coordinator is looked up again
_REFIND = {Error.NOT_COORDINATOR, Error.COORDINATOR_NOT_AVAILABLE}


class ToolError(Exception):
    """A usage or connection problem: one line, exit code 2."""

    exit_code = 2


class BadResponse(ToolError):
    """A response that does not decode: not a Kafka broker, or not the version we asked."""


class CommandFailed(ToolError):
    """The cluster's state refuses the command (no committed offset to shift, ...): exit 1."""

    exit_code = 1


class KafkaCommandError(ToolError):
    """The broker answered an error: one line naming it, exit code 1."""

    exit_code = 1

    def __init__(self, error: Error | int, message: str) -> None:
        self.error = error
        super().__init__(f"{error_name(error)}: {message}")

    @property
    def retriable(self) -> bool:
        return self.error in RETRIED


def error_name(error: Error | int) -> str:
    return error.name if isinstance(error, Error) else f"UNKNOWN_ERROR_CODE_{error}"


def to_error(code: int) -> Error | int:
    try:
        return Error(code)
    except ValueError:
        return code


def check(code: int, what: str, message: str | None = None) -> None:
    """Raise ``KafkaCommandError`` when ``code`` is an error; ``what`` says what failed."""
    if code:
        raise KafkaCommandError(to_error(code), f"{what}: {message}" if message else what)


def message(api_key: int, kind: str = "request", class_name: str | None = None, /, **fields):
    """A generated message: ``message(METADATA, topics=None)``, or a nested struct by its
    class name: ``message(METADATA, "request", "MetadataRequestTopic", name="t")``."""
    module = api.codec(api_key, kind)
    return getattr(module, class_name or api.BY_KEY[api_key].name + kind.capitalize())(**fields)


def kafka_uuid(value) -> str:
    """A topic id as Kafka prints it (url-safe base64 of the 16 bytes, no padding)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out = []
    for server in servers.split(","):
        server = server.strip()
        if not server:
            continue
        host, sep, port = server.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ToolError(f"--bootstrap-server: {server!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ToolError("--bootstrap-server names no host:port")
    return out


class Connection:
    """One blocking connection to one broker."""

    def __init__(self, host: str, port: int, *, security, client_id: str,
                 deadline: float) -> None:
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.correlation_id = 0
        self.deadline = deadline
        try:
            sock = socket.create_connection((host, port), timeout=_left(deadline, self.address))
        except OSError as e:
            raise ToolError(f"cannot connect to {self.address}: {_reason(e)}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        try:
            if security is not None:
                self.sock = security.wrap(sock, host, self.address)
            self.versions = self._api_versions()
            if security is not None:
                security.authenticate(self)
        except BaseException:
            self.close()
            raise

    def _api_versions(self) -> dict[int, tuple[int, int]]:
        try:
            resp = self.request(API_VERSIONS, message(
                API_VERSIONS, client_software_name="semel-cli",
                client_software_version=_version()), version=3)
        except BadResponse:  # an older broker answers in v0 whatever we asked for
            resp = None
        if resp is None or resp.error_code == Error.UNSUPPORTED_VERSION:
            resp = self.request(API_VERSIONS, message(API_VERSIONS), version=0)
        check(resp.error_code, f"ApiVersions on {self.address}")
        return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def pick(self, api_key: int, minimum: int | None = None, maximum: int | None = None) -> int:
        """The highest version of ``api_key`` both sides speak, within [minimum, maximum]."""
        ours = api.SUPPORTED[api_key]
        theirs = self.versions.get(api_key)
        name = api.BY_KEY[api_key].name
        if theirs is None:
            raise KafkaCommandError(Error.UNSUPPORTED_VERSION,
                                    f"the broker at {self.address} does not support {name}")
        low = max(ours[0], theirs[0], minimum if minimum is not None else 0)
        high = min(ours[1], theirs[1], maximum if maximum is not None else ours[1])
        if low > high:
            need = f" (this command needs v{minimum}+)" if minimum else ""
            raise KafkaCommandError(
                Error.UNSUPPORTED_VERSION,
                f"the broker at {self.address} speaks {name} v{theirs[0]}-{theirs[1]}, "
                f"semel's codecs v{ours[0]}-{ours[1]}{need}")
        return high

    def request(self, api_key: int, body, version: int):
        self.correlation_id += 1
        frame = api.encode_request(api_key, version, self.correlation_id, self.client_id, body)
        name = api.BY_KEY[api_key].name
        try:
            self.sock.settimeout(_left(self.deadline, f"{name} to {self.address}"))
            self.sock.sendall(frame)
            data = recv_frame(self.sock, MAX_RESPONSE_BYTES)
        except ProtocolError as e:
            raise ToolError(f"{self.address} sent {e}: not a Kafka broker?") from None
        except TimeoutError:
            raise ToolError(f"timed out waiting for {name} from {self.address}") from None
        except OSError as e:
            raise ToolError(f"connection to {self.address} failed during {name}: "
                            f"{_reason(e)}") from None
        try:
            got, response = api.decode_response(api_key, version, data)
        except ProtocolError as e:
            raise BadResponse(f"cannot decode the {name} v{version} response from "
                              f"{self.address}: {e}") from None
        if got != self.correlation_id:
            raise BadResponse(f"{self.address} answered request {got}, expected "
                              f"{self.correlation_id}: not a Kafka broker?")
        return response

    def close(self) -> None:
        self.sock.close()


class Admin:
    """Connections to a cluster, found from ``bootstrap_servers`` (see the module docstring)."""

    def __init__(self, bootstrap_servers: str, *, security=None, timeout_ms: int = 30_000,
                 client_id: str = "semel-cli") -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.timeout_ms = timeout_ms
        self.deadline = time.monotonic() + timeout_ms / 1000
        self._connections: dict[tuple[str, int], Connection] = {}
        self.brokers: dict[int, tuple[str, int]] = {}  # node id -> (host, port), from Metadata
        self.cluster_id: str | None = None
        self.controller_id = -1
        self._coordinators: dict[tuple[int, str], int] = {}  # (key type, key) -> node id

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- connections ----------------------------------------------------------------------

    def any_broker(self) -> Connection:
        """A connection to any broker: an open one, else the first bootstrap server that
        answers."""
        for conn in self._connections.values():
            return conn
        failures = []
        for address in self.bootstrap:
            try:
                return self._connect(address)
            except KafkaCommandError:
                raise
            except ToolError as e:
                failures.append(str(e))
        raise ToolError("; ".join(failures))

    def broker(self, node_id: int) -> Connection:
        address = self.brokers.get(node_id)
        if address is None:
            self.metadata([])
            address = self.brokers.get(node_id)
            if address is None:
                raise KafkaCommandError(Error.BROKER_NOT_AVAILABLE,
                                        f"broker {node_id} is not in the cluster's metadata")
        return self._connect(address)

    def _connect(self, address: tuple[str, int]) -> Connection:
        conn = self._connections.get(address)
        if conn is None:
            conn = self._connections[address] = Connection(
                *address, security=self.security, client_id=self.client_id,
                deadline=self.deadline)
        return conn

    # -- requests -------------------------------------------------------------------------

    def send(self, conn: Connection, api_key: int, body: Any, *, minimum: int | None = None,
             maximum: int | None = None) -> tuple[int, Any]:
        """Send at the best version; ``body`` may be a function of the version."""
        version = conn.pick(api_key, minimum, maximum)
        if callable(body):
            body = body(version)
        return version, conn.request(api_key, body, version)

    def retry(self, fn: Callable[[], Any]) -> Any:
        """``fn()``, again after retriable Kafka errors until the deadline."""
        backoff = 0.05
        while True:
            try:
                return fn()
            except KafkaCommandError as e:
                if e.error in _REFIND:
                    self._coordinators.clear()
                if not e.retriable or time.monotonic() + backoff >= self.deadline:
                    raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def metadata(self, topics: Iterable[str] | None):
        """Metadata for ``topics`` (None: every topic); records the brokers. Per-topic
        errors are left in the response for the caller."""
        topic_list = None if topics is None else list(topics)

        def body(version: int):
            return message(METADATA, topics=None if topic_list is None else [
                message(METADATA, "request", "MetadataRequestTopic", name=t)
                for t in topic_list], allow_auto_topic_creation=False)

        def call():
            _, resp = self.send(self.any_broker(), METADATA, body, minimum=1)
            check(resp.error_code, "Metadata")
            return resp

        resp = self.retry(call)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        self.cluster_id = resp.cluster_id
        self.controller_id = resp.controller_id
        return resp

    def coordinator(self, key_type: int, key: str) -> tuple[int, Connection]:
        """(node id, connection) of the group (key type 0) or transaction (1) coordinator."""
        node = self._coordinators.get((key_type, key))
        if node is None:
            conn = self.any_broker()
            version, resp = self.send(conn, FIND_COORDINATOR, lambda v: message(
                FIND_COORDINATOR, key=key, key_type=key_type, coordinator_keys=[key]),
                minimum=1 if key_type else 0)
            found = resp.coordinators[0] if version >= 4 else resp
            kind = "transactional id" if key_type == TRANSACTION_KEY else "group"
            check(found.error_code, f"FindCoordinator for {kind} {key!r}", found.error_message)
            node = found.node_id
            self.brokers.setdefault(node, (found.host, found.port))
            self._coordinators[(key_type, key)] = node
        return node, self._connect(self.brokers[node])

    def leaders(self, partitions: Iterable[tuple[str, int]]
                ) -> dict[int, list[tuple[str, int]]]:
        """Partitions grouped by their leader's node id (Metadata); an unknown topic or
        partition raises UNKNOWN_TOPIC_OR_PARTITION, a partition without leader
        LEADER_NOT_AVAILABLE."""
        wanted = list(dict.fromkeys(partitions))
        resp = self.metadata(sorted({t for t, _ in wanted}))
        leader_of: dict[tuple[str, int], int] = {}
        for t in resp.topics:
            check(t.error_code, f"topic {t.name!r}", _topic_hint(t.error_code))
            for p in t.partitions:
                leader_of[(t.name, p.partition_index)] = p.leader_id
        out: dict[int, list[tuple[str, int]]] = {}
        missing = [tp for tp in wanted if tp not in leader_of]
        if missing:
            raise KafkaCommandError(Error.UNKNOWN_TOPIC_OR_PARTITION, "partition(s) "
                                    + ", ".join(f"{t}-{p}" for t, p in missing)
                                    + " do not exist")
        for tp in wanted:
            leader = leader_of[tp]
            if leader < 0:
                raise KafkaCommandError(Error.LEADER_NOT_AVAILABLE,
                                        f"partition {tp[0]}-{tp[1]} has no leader")
            out.setdefault(leader, []).append(tp)
        return out

    def list_offsets(self, partitions: Iterable[tuple[str, int]], timestamp: int,
                     isolation_level: int = 0) -> dict[tuple[str, int], int]:
        """ListOffsets at ``timestamp`` (-1 latest, -2 earliest, else the first offset at or
        after it; -1 when there is none) for each partition, asked of its leader."""
        out: dict[tuple[str, int], int] = {}
        for leader, tps in self.leaders(partitions).items():
            by_topic: dict[str, list[int]] = {}
            for t, p in tps:
                by_topic.setdefault(t, []).append(p)
            topics = [message(LIST_OFFSETS, "request", "ListOffsetsTopic", name=t, partitions=[
                message(LIST_OFFSETS, "request", "ListOffsetsPartition", partition_index=p,
                        timestamp=timestamp) for p in ps]) for t, ps in by_topic.items()]

            def call(leader=leader, topics=topics):
                _, resp = self.send(self.broker(leader), LIST_OFFSETS, message(
                    LIST_OFFSETS, replica_id=-1, isolation_level=isolation_level, topics=topics),
                    minimum=2 if isolation_level else 1)
                got = {}
                for t in resp.topics:
                    for p in t.partitions:
                        check(p.error_code, f"ListOffsets for {t.name}-{p.partition_index}")
                        got[(t.name, p.partition_index)] = p.offset
                return got

            out.update(self.retry(call))
        return out


def _topic_hint(code: int) -> str | None:
    return "does not exist" if code == Error.UNKNOWN_TOPIC_OR_PARTITION else None


def _left(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ToolError(f"timed out: {what}")
    return left


def _reason(e: OSError) -> str:
    if isinstance(e, socket.gaierror):
        return f"cannot resolve host ({e.strerror})"
    if isinstance(e, TimeoutError):
        return "timed out"
    return e.strerror or str(e) or type(e).__name__


def _version() -> str:
    from semel.broker import __version__

    return __version__
