"""The broker: storage, listener, connections, background tasks; start and graceful stop.

``Broker(config)`` is usable in-process (``await broker.start()`` / ``await broker.stop()``,
or ``async with``); the CLI wraps it. Stop is graceful: stop accepting, let requests in
flight finish (bounded), close connections, flush and close the logs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Self

from semel.broker.config import BrokerConfig
from semel.broker.connection import Connection, RateLimitedLog
from semel.broker.dispatch import Dispatcher
from semel.broker.dynamic_config import DynamicConfigs, apply_to_broker
from semel.broker.features import TRANSACTION_VERSION, FeatureStore
from semel.broker.fetch_wait import FetchWaiters
from semel.broker.metrics import BrokerMetrics
from semel.broker.quotas import ClientQuotas
from semel.broker.request_memory import RequestMemory
from semel.broker.security.credentials import ScramCredentialStore
from semel.broker.security.endpoint import ListenerEndpoint
from semel.coordinator.group import GroupConfig, GroupCoordinator
from semel.coordinator.producer_id import ProducerIdManager
from semel.coordinator.producer_principal import ProducerPrincipals
from semel.coordinator.share import SHARE_GROUP_STATE_TOPIC_NAME
from semel.coordinator.transaction import LogMarkerWriter, TransactionCoordinator, TxnConfig
from semel.storage.config import LogConfig
from semel.storage.log_manager import LogManager

log = logging.getLogger("broker.server")

# broker property -> topic-level default it sets (Kafka's "log." prefix mapping)
TOPIC_DEFAULTS_FROM_BROKER = {
    "segment.bytes": "log_segment_bytes",
    "segment.ms": "log_roll_ms",
    "retention.ms": "log_retention_ms",
    "retention.bytes": "log_retention_bytes",
    "index.interval.bytes": "log_index_interval_bytes",
    "segment.index.bytes": "log_index_size_max_bytes",
    "max.message.bytes": "message_max_bytes",
    "message.timestamp.type": "log_message_timestamp_type",
    "cleanup.policy": "log_cleanup_policy",
    "min.cleanable.dirty.ratio": "log_cleaner_min_cleanable_ratio",
    "delete.retention.ms": "log_cleaner_delete_retention_ms",
    "min.compaction.lag.ms": "log_cleaner_min_compaction_lag_ms",
    "max.compaction.lag.ms": "log_cleaner_max_compaction_lag_ms",
}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def listening_socket(host: str, port: int) -> socket.socket | None:
    """A socket bound to ``host`` (an IP address literal) and ``port``, or None when ``host``
    is a name, which ``create_server`` resolves. uvloop encodes every str host with the idna
    codec, whose import (stringprep, unicodedata) costs a start about 1% of its
    instructions (issue 18); an address needs no resolving. The options are
    ``create_server``'s: SO_REUSEADDR, and IPV6_V6ONLY for IPv6."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        return sock
    return None


class Broker:
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], int] = wall_clock_ms,
                 monotonic: Callable[[], int] = monotonic_ms, fs=None) -> None:
        self.config = config
        self.clock = clock
        self.monotonic_ms = monotonic
        self.metrics = BrokerMetrics()
        # tests' request interception (semel.broker.testing.Faults); None in production
        self.interceptor = None
        self.metrics_port: int | None = None
        # broker.security.authorizer.Authorizer when authorizer.class.name is set, else None
        self.authorizer = None
        self.connections: set[Connection] = set()
        self.connections_per_ip: dict[str, int] = {}
        queued = config.queued_max_request_bytes
        self.request_memory = RequestMemory(None if queued == -1 else queued,
                                            self._request_memory_changed)
        self.bad_input_log = RateLimitedLog(logging.getLogger("broker.connection"), monotonic)
        self.memory_log = RateLimitedLog(log, monotonic, burst=1)
        self.metrics.register_connections(self.connections, self.request_memory)
        overrides = {topic_key: str(getattr(config, attr))
                     for topic_key, attr in TOPIC_DEFAULTS_FROM_BROKER.items()}
        self.default_log_config = LogConfig.from_overrides(LogConfig(), overrides)
        self.log_manager = LogManager(
            Path(config.log_dirs), default_config=self.default_log_config,
            flush_mode=config.log_flush_mode, fs=fs, clock=clock,
            retention_check_interval_ms=config.log_retention_check_interval_ms,
            producer_id_expiration_ms=config.producer_id_expiration_ms,
            producer_id_expiration_check_interval_ms=(
                config.producer_id_expiration_check_interval_ms),
            cleaner_enable=config.log_cleaner_enable,
            cleaner_backoff_ms=config.log_cleaner_backoff_ms,
            cleaner_dedupe_buffer_size=config.log_cleaner_dedupe_buffer_size,
            cleaner_io_buffer_load_factor=config.log_cleaner_io_buffer_load_factor,
            cleaner_io_max_bytes_per_second=config.log_cleaner_io_max_bytes_per_second,
            cleaner_max_cpu_share=config.log_cleaner_max_cpu_share,
            cleaner_io_buffer_size=config.log_cleaner_io_buffer_size)
        self.metrics.register_cleaner(self.log_manager, clock)
        # SCRAM credentials in the first log dir (read on first use; see its load())
        self.scram_credentials = ScramCredentialStore(Path(config.log_dirs), self.log_manager.fs)
        self.producer_id_manager = ProducerIdManager(
            Path(config.log_dirs), self.log_manager.fs, broker_id=config.node_id)
        # beyond Kafka: producer id -> the principal that obtained it, enforced by the
        # handlers; None while the authorizer is off or producer.id.principal.binding.enable
        # is false (nothing recorded, nothing checked)
        self.producer_principals = (
            ProducerPrincipals(Path(config.log_dirs), self.log_manager.fs,
                               expiration_ms=config.producer_id_expiration_ms)
            if config.authorizer_enabled and config.producer_id_principal_binding_enable
            else None)
        # dynamic broker and group configs (AlterConfigs), read from the data dir at start
        self.dynamic_configs = DynamicConfigs(config, Path(config.log_dirs), self.log_manager.fs)
        # finalized feature levels (UpdateFeatures), read from the data dir at start
        self.features = FeatureStore(Path(config.log_dirs), self.log_manager.fs, config.node_id)
        self.fetch_waiters = FetchWaiters()
        # client quotas (broker/quotas/), read from the data directory at start
        self.quotas = ClientQuotas.from_config(config, self.log_manager.fs)
        self.metrics.register_quotas(self.quotas)
        # group coordinator (consumer groups, committed offsets in __consumer_offsets)
        self.group_coordinator = GroupCoordinator(
            self.log_manager, GroupConfig.from_broker_config(config), clock=clock,
            group_configs=self.dynamic_configs.group_overrides)
        # share groups (KIP-932): share-partitions (state in __share_group_state), share
        # sessions, membership (in __consumer_offsets; group ids shared with the group
        # coordinator's); made at start when the state topic exists, else on first use:
        # see share_manager and share_membership
        self._share_manager = None
        self._share_open = False  # from start to stop: a share manager made starts at once
        self._share_membership = None
        self.group_coordinator.share_group = self._is_share_group
        # transaction coordinator (transactional ids in __transaction_state); markers go
        # to the partition logs, those of __consumer_offsets through the group coordinator
        self.txn_coordinator = TransactionCoordinator(
            self.log_manager, self.producer_id_manager,
            TxnConfig.from_broker_config(config),
            clock, LogMarkerWriter(self.log_manager, self.group_coordinator, clock=clock),
            principals=self.producer_principals,
            transaction_version=lambda: self.features.level(TRANSACTION_VERSION))
        self.log_manager.on_high_watermark = self.fetch_waiters.notify
        self.dispatcher = Dispatcher(self)
        self.metrics.bind(self)  # scrapes read the broker's groups and configuration
        self._servers: list[asyncio.base_events.Server] = []
        self.endpoints = [
            ListenerEndpoint(config.listener_security(listener.name), listener.host,
                             listener.port, self.scram_credentials)
            for listener in config.listeners]
        self._tasks: list[asyncio.Task] = []
        self.host = ""
        self.port = 0
        self.advertised_host = ""
        self.advertised_port = 0

    @property
    def cluster_id(self) -> str:
        return self.log_manager.cluster_id

    @property
    def node_id(self) -> int:
        return self.config.node_id

    async def start(self) -> None:
        self.dynamic_configs.load()  # a damaged dynamic configs file stops the start here
        apply_to_broker(self, self.dynamic_configs.effective())
        await self.log_manager.start()
        await self.producer_id_manager.start()  # the data directory is locked now
        self.scram_credentials.load()  # a damaged credentials file stops the start here
        self.features.load()  # as does a damaged feature levels file
        self.quotas.load()  # as does a damaged client quotas file
        if self.producer_principals is not None:
            self.producer_principals.load()  # as does a damaged producer principal file
        await self.group_coordinator.start()
        if self._share_manager is not None \
                or SHARE_GROUP_STATE_TOPIC_NAME in self.log_manager.topics:
            await self.share_manager.start()  # its state is loaded before any request
        self._share_open = True
        await self.txn_coordinator.start()
        if self.config.authorizer_enabled:  # its modules load only when it is configured
            from semel.broker.security.authorizer import Authorizer

            self.authorizer = Authorizer.open(
                self.config.log_dirs, self.config.super_users,
                self.config.allow_everyone_if_no_acl_found, self.log_manager.fs)
        loop = asyncio.get_running_loop()
        try:
            for endpoint in self.endpoints:
                factory = lambda endpoint=endpoint: Connection(self, endpoint)
                sock = listening_socket(endpoint.host, endpoint.port) if endpoint.host else None
                if sock is not None:
                    server = await loop.create_server(factory, sock=sock,
                                                      ssl=endpoint.ssl_context, backlog=1024)
                else:
                    server = await loop.create_server(
                        factory, endpoint.host or None, endpoint.port,
                        ssl=endpoint.ssl_context, reuse_address=True, backlog=1024)
                self._servers.append(server)
                endpoint.port = server.sockets[0].getsockname()[1]
                if not endpoint.host:
                    endpoint.host = server.sockets[0].getsockname()[0]
                adv = self.config.advertised_listener(endpoint.port, endpoint.name)
                endpoint.advertised_host = adv.host or endpoint.host
                endpoint.advertised_port = adv.port
        except OSError as e:
            for server in self._servers:
                server.close()
            await self.txn_coordinator.stop()
            self._share_open = False
            if self._share_manager is not None:
                await self._share_manager.stop()
            await self.group_coordinator.stop()
            await self.log_manager.close()
            raise OSError(e.errno, f"cannot listen on {endpoint.host}:{endpoint.port} "
                                   f"({endpoint.name}): {e.strerror}") from None
        first = self.endpoints[0]
        self.host, self.port = self._servers[0].sockets[0].getsockname()[:2]
        self.advertised_host, self.advertised_port = first.advertised_host, first.advertised_port
        self._tasks.append(loop.create_task(self._close_idle_connections()))
        if self.producer_principals is not None:
            self._tasks.append(loop.create_task(self._expire_producer_principals()))
        self.metrics.register_exactly_once(self.log_manager, self.txn_coordinator, loop)
        endpoint = self.config.metrics_listener
        if endpoint is not None:
            self.metrics_port = self.metrics.serve(endpoint.host, endpoint.port)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def advertised(self, listener: str) -> tuple[str, int]:
        """(host, port) metadata gives a client connected to ``listener``."""
        for endpoint in self.endpoints:
            if endpoint.name == listener:
                return endpoint.advertised_host, endpoint.advertised_port
        return self.advertised_host, self.advertised_port

    async def stop(self, grace_s: float = 5.0) -> None:
        for server in self._servers:
            server.close()
        for task in self._tasks:
            task.cancel()
        # transactions being completed may still need the group coordinator (markers)
        await self.txn_coordinator.stop(grace_s)
        self._share_open = False
        if self._share_membership is not None:
            await self._share_membership.stop()
            self._share_membership = None
        if self._share_manager is not None:
            await self._share_manager.stop()
        # parked JoinGroup/SyncGroup requests are answered (NOT_COORDINATOR) before waiting
        await self.group_coordinator.stop()
        in_flight = [t for c in self.connections for t in c.tasks]
        if in_flight:
            await asyncio.wait(in_flight, timeout=grace_s)
        for conn in list(self.connections):
            conn.close()
        self.fetch_waiters.wake_all()
        self.metrics.close()
        await self.producer_id_manager.close()
        if self.producer_principals is not None:
            await self.producer_principals.close()
        await self.log_manager.close()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    @property
    def share_manager(self):
        """The share-partitions (coordinator/share/manager.py), made on first use - a share
        request, on the event loop - and started at once while the broker runs (a manager
        made before ``start`` starts with it; one made while stopping never starts, and
        its ``active`` stays False). Made at start instead when ``__share_group_state`` is
        on disk, so its state is loaded before any request. Until made, the broker has no
        share-partition state: what only reads it uses ``share_manager_if_made``, so a
        broker without share groups never loads the share modules (issue 18)."""
        if self._share_manager is None:
            from semel.coordinator.share.config import ShareGroupConfig
            from semel.coordinator.share.manager import SharePartitionManager

            self._share_manager = SharePartitionManager(
                self.log_manager, ShareGroupConfig.from_broker_config(self.config),
                clock=self.clock, group_settings=self._share_group_settings)
            if self._share_open:
                self._share_manager.start_now()
        return self._share_manager

    @property
    def share_manager_if_made(self):
        """The share-partition manager, or None while nothing needed it (no share state)."""
        return self._share_manager

    @property
    def share_membership(self):
        """Share group membership (ShareGroupHeartbeat) over the share sessions
        (``share_service``), made on first use - on the event loop, by a share group
        request - so the share codecs load then rather than at broker start (issue 18)."""
        if self._share_membership is None:
            from semel.coordinator.share.membership import (
                ShareGroupMembership,
                ShareMembershipConfig,
            )
            from semel.coordinator.share.service import ShareService

            self._share_membership = ShareGroupMembership(
                ShareService(self.share_manager), self.log_manager, clock=self.clock,
                config=ShareMembershipConfig.from_broker_config(self.config),
                other_group=self._other_group, group_settings=self._share_group_settings,
                records=self.group_coordinator.share_records,
                write=self.group_coordinator.write_share_records)
            self._share_membership.start()
        return self._share_membership

    @property
    def share_membership_if_made(self):
        """Share group membership, or None while no share group request made it."""
        return self._share_membership

    @property
    def share_service(self):
        """ShareFetch / ShareAcknowledge: share sessions over ``share_manager``."""
        return self.share_membership.service

    def share_admin(self, create: bool = True):
        """Share group administration (coordinator/share/admin.py). With ``create`` False
        (ListGroups, DescribeGroups, DeleteGroups) None while no share group was ever seen,
        so those APIs load no share code on a broker without share groups."""
        loaded = self.group_coordinator.has_share_groups()  # share groups in the log
        manager = self._share_manager
        if not create and self._share_membership is None \
                and (manager is None or not manager.store.states) and not loaded:
            return None
        from semel.coordinator.share.admin import ShareGroupAdmin

        membership = self.share_membership if create or loaded else self._share_membership
        if membership is not None:
            membership.ensure_loaded()
        return ShareGroupAdmin(membership, self.share_manager, self.log_manager,
                               other_group=self._other_group)

    def _share_group_settings(self, group_id: str):
        """A share group's own share.* configs (GROUP resource overrides): a
        ``ShareGroupSettings``, whose module the share manager has loaded."""
        from semel.coordinator.share.config import ShareGroupSettings

        return ShareGroupSettings.from_configs(self.dynamic_configs.group_overrides(group_id))

    def _is_share_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a share group: one with members or durable state."""
        membership = self._share_membership
        if membership is not None and group_id in membership.groups:
            return True
        if self.group_coordinator.knows_share_group(group_id):
            return True
        manager = self._share_manager  # none made: no share-partition state
        return manager is not None and any(key.group_id == group_id
                                           for key in manager.store.states)

    def _other_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic or consumer group (not a share group)."""
        shard = self.group_coordinator.shard
        return shard is not None and (group_id in shard.group_manager.groups
                                      or group_id in shard.consumer_manager.groups)

    async def expire_producer_principals(self) -> int:
        """Forget the principals of idempotent producer ids issued longer than
        producer.id.expiration.ms ago that no partition's producer state knows any more."""
        live = {pid for plog in self.log_manager.logs.values()
                for pid in plog.producer_state.producers}
        return await self.producer_principals.expire(self.clock(), live)

    async def _expire_producer_principals(self) -> None:
        while True:
            await asyncio.sleep(self.config.producer_id_expiration_check_interval_ms / 1000)
            try:
                await self.expire_producer_principals()
            except Exception:
                log.exception("producer principal expiration failed")

    async def run_time_jobs(self) -> None:
        """Run now every job that acts on the clock's time: group timers that are due,
        transaction timeouts (and the completions they start), transactional id and
        producer id expiry, retention and the log cleaner. The periodic tasks run the same
        jobs on their own schedule; a test that moved the clock (semel.broker.testing's
        virtual time) calls this so their effects follow at once."""
        self.group_coordinator.fire_due_timers()
        if self._share_membership is not None:
            await self._share_membership.expire_members()
        if self._share_manager is not None:
            await self._share_manager.expire_locks()
        await self.txn_coordinator.abort_timed_out_transactions()
        await self.txn_coordinator.wait_completions()
        await self.txn_coordinator.remove_expired_transactional_ids()
        await self.log_manager.run_producer_expiration()
        if self.producer_principals is not None:
            await self.expire_producer_principals()
        await self.log_manager.run_retention()
        if self.log_manager.cleaner_enable:
            for _ in range(len(self.log_manager.logs) + 1):  # each cleaning lowers the dirt
                if await self.log_manager.run_cleaner_once() is None:
                    break
        await self.group_coordinator.wait_writes()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    # -- connections ------------------------------------------------------------------------

    def admit(self, conn: Connection) -> str | None:
        """Count a new connection in, or say why it is refused (max.connections,
        max.connections.per.ip)."""
        config = self.config
        per_ip = self.connections_per_ip.get(conn.ip, 0)
        if len(self.connections) >= config.max_connections:
            return (f"refusing {conn.peer}: {len(self.connections)} connections open "
                    f"(max.connections={config.max_connections})")
        if per_ip >= config.max_connections_per_ip:
            return (f"refusing {conn.peer}: {per_ip} connections open from {conn.ip} "
                    f"(max.connections.per.ip={config.max_connections_per_ip})")
        self.connections.add(conn)
        self.connections_per_ip[conn.ip] = per_ip + 1
        return None

    def forget(self, conn: Connection) -> None:
        self.connections.discard(conn)
        left = self.connections_per_ip.get(conn.ip, 1) - 1
        if left > 0:
            self.connections_per_ip[conn.ip] = left
        else:
            self.connections_per_ip.pop(conn.ip, None)

    def _request_memory_changed(self) -> None:
        memory = self.request_memory
        if memory.large_full:
            self.memory_log.warning(
                f"request memory at {memory.used} of queued.max.request.bytes="
                f"{memory.capacity}: reading paused on "
                f"{'every connection' if memory.full else 'connections sending large requests'}")
        for conn in list(self.connections):
            conn.memory_changed()

    def close_stale_connections(self) -> None:
        """Close connections idle past connections.max.idle.ms, those whose current
        request has not arrived whole within socket.request.read.timeout.ms, and those whose
        failed authentication's delay is over."""
        now = self.monotonic_ms()
        idle_ms = self.config.connections_max_idle_ms
        read_timeout_ms = self.config.socket_request_read_timeout_ms
        for conn in list(self.connections):
            started = conn.partial_since
            if conn.close_at is not None:
                conn.close_if_due()
            elif started is not None and now - started > read_timeout_ms:
                conn.bad_input("read_timeout", (
                    f"closing {conn.peer}: request not received whole within "
                    f"{read_timeout_ms} ms ({conn.reader.buffered} bytes so far)"))
                conn.close()
            elif conn.idle and now - conn.last_active > idle_ms:
                log.info("closing idle connection %s", conn.peer)
                conn.close()

    async def _close_idle_connections(self) -> None:
        config = self.config
        period_s = min(config.connections_max_idle_ms, config.socket_request_read_timeout_ms,
                       40_000) / 1000 / 4
        while True:
            await asyncio.sleep(period_s)
            self.close_stale_connections()
