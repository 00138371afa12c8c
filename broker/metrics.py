"""Prometheus metrics of one broker, served over HTTP at ``metrics.listener`` (``host:port``).

Each broker owns its own ``CollectorRegistry`` (several in-process brokers in one test run
must not collide). Nothing on the request path touches prometheus_client: handlers bump
plain ints in dicts (``topic_in``, ``topic_out``, ``errors``) and ``_Histogram`` bucket
lists, and ``BrokerStateCollector`` turns them into metric families when scraped, together
with the state it reads then (partitions, groups, transactions). Names are ``semel_``-prefixed;
where Kafka has a well-known metric the help text names it. The process collector's
``process_*`` metrics keep Prometheus' standard names.

Traffic (counted on the request path, read at scrape time):
  semel_requests_total{api}                     requests answered (acks=0 produce: none)
  semel_request_latency_seconds{api}            decoded request to encoded response
  semel_request_errors_total{api,error}         error codes in responses (see below)
  semel_request_queue_time_seconds              frame read whole -> its handling starts
  semel_topic_bytes_in_total{topic}             record batch bytes appended by Produce
  semel_topic_messages_in_total{topic}          records appended by Produce
  semel_topic_bytes_out_total{topic}            record bytes returned by Fetch
  semel_topic_messages_out_total{topic}         records (of data batches) returned by Fetch
State (read on the broker's event loop when scraped; the HTTP server's thread waits):
  semel_partition_{high_watermark,log_end_offset,log_start_offset,size_bytes,segments}
  semel_last_stable_offset{topic,partition}     per partition; internal topics' partitions
                                                only with metrics.internal.topics.enable
  semel_consumer_group_{committed_offset,lag}{group,topic,partition} (capped, see
  MAX_GROUP_PARTITION_SERIES), semel_consumer_group_lag_{sum,max}{group},
  semel_consumer_group_members{group}, semel_consumer_groups{state}
  semel_share_{inflight,acquired}_records{group,topic,partition} (share groups, KIP-932:
  records between a share-partition's start and end offsets, and those of them locked by
  a member; capped with the consumer group series), semel_share_inflight_records_sum{group},
  semel_share_{delivered,redelivered}_records_total{group} (records acquired by members,
  and of those the ones delivered again), semel_share_group_members{group}
  semel_live_producer_ids, semel_active_transactional_ids, semel_transactional_ids{state},
  semel_transaction_oldest_ongoing_age_seconds, semel_coordinator_partitions_loading,
  semel_two_phase_commit_{transactions,transactions_overdue,oldest_age_seconds}
Client quotas (broker/quotas/), by quota type produce / fetch / request:
  semel_quota_throttle_time_seconds_total{type}, semel_quota_throttled_responses_total{type}
Also: connections and request memory, the log cleaner's gauges, bad input by reason, and
``process_*`` (CPU seconds, resident memory, open and max file descriptors, start time).

``HEAD /metrics`` answers like GET without the body (prometheus_client's WSGI app answers
405 to HEAD, so it is wrapped).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import sys
import threading
from bisect import bisect_left

from semel.protocol.api import BY_KEY
from semel.protocol.errors import Error

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                   5, 10, 30)
QUEUE_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# (group, topic, partition) series of committed offset and lag per scrape; past it only the
# per-group lag_sum/lag_max (which always cover every partition) are exported
MAX_GROUP_PARTITION_SERIES = 10_000


class _Histogram:
    """Bucket counts for a Prometheus histogram, bumped without a lock (on the event loop)
    and read when scraped: the count is the buckets' total, so it always matches them."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: value <= bound
        self.sum += value

    def snapshot(self) -> tuple[list[int], float]:
        return list(self.counts), self.sum


class BrokerMetrics:
    """The broker's counters, and its prometheus_client ``registry``: that one (and
    prometheus_client with it) is made on first use, by ``serve`` or a test reading it, so
    a broker without ``metrics.listener`` never imports prometheus_client (start-up time).
    What is registered before then is registered when it is made, in the same order."""

    def __init__(self) -> None:
        self._registry = None  # CollectorRegistry, made by the registry property
        self._lock = threading.Lock()  # guards making it against registering/bad_input
        self._pending: list = []  # registry -> None, run in order when it is made
        self._bad_input_counts: dict[str, int] = {}  # reason -> count until it is made
        self.bad_inputs = None  # the semel_bad_input Counter, once the registry is made
        self.latency: dict[int, _Histogram] = {}  # api key -> its latency (and count)
        self.errors: dict[tuple[int, int], int] = {}  # (api key, error code) -> count
        self.queue_time = _Histogram(QUEUE_BUCKETS)
        self.topic_in: dict[str, list[int]] = {}  # topic -> [bytes, records] appended
        self.topic_out: dict[str, list[int]] = {}  # topic -> [bytes, records] fetched
        self.broker = None  # the Broker, for the group coordinator and config (bind)
        self._server = None
        self._state: BrokerStateCollector | None = None

    @property
    def registry(self):
        """The prometheus_client CollectorRegistry of this broker (made on first use)."""
        registry = self._registry
        if registry is None:
            with self._lock:
                if self._registry is None:
                    self._make_registry()
                registry = self._registry
        return registry

    def _make_registry(self) -> None:
        from prometheus_client import CollectorRegistry, Counter
        from prometheus_client.process_collector import ProcessCollector

        registry = CollectorRegistry()
        bad_inputs = Counter(
            "semel_bad_input", "Connections closed or refused for bad input, by reason.",
            ["reason"], registry=registry)
        for reason, n in self._bad_input_counts.items():
            bad_inputs.labels(reason).inc(n)
        ProcessCollector(registry=registry)
        for register in self._pending:
            register(registry)
        self._pending.clear()
        self._bad_input_counts.clear()
        self.bad_inputs = bad_inputs
        self._registry = registry

    def _on_registry(self, register) -> None:
        """``register(registry)`` now if the registry is made, else when it is."""
        with self._lock:
            if self._registry is None:
                self._pending.append(register)
                return
        register(self._registry)

    def bind(self, broker) -> None:
        """The broker whose group coordinator and configuration the scrape reads."""
        self.broker = broker

    # -- the request path -----------------------------------------------------------------

    def observe_request(self, api_key: int, seconds: float, response=None) -> None:
        histogram = self.latency.get(api_key)
        if histogram is None:
            histogram = self.latency[api_key] = _Histogram(LATENCY_BUCKETS)
        histogram.counts[bisect_left(histogram.bounds, seconds)] += 1  # observe, inline
        histogram.sum += seconds
        if response is not None:
            plan = _PLANS.get(response.__class__, _UNPLANNED)
            if plan is _UNPLANNED:
                plan = _error_plan(response.__class__)
            if plan is not None:
                _count_errors(response, plan, api_key, self.errors)

    def count_error(self, api_key: int, code: int) -> None:
        key = (api_key, code)
        self.errors[key] = self.errors.get(key, 0) + 1

    def bad_input(self, reason: str) -> None:
        with self._lock:
            if self.bad_inputs is None:  # counted into the Counter when it is made
                self._bad_input_counts[reason] = self._bad_input_counts.get(reason, 0) + 1
                return
        self.bad_inputs.labels(reason).inc()

    # -- registration -----------------------------------------------------------------------

    def register_connections(self, connections, request_memory) -> None:
        """Gauges read when scraped: open connections and request bytes held."""

        def register(registry) -> None:
            from prometheus_client import Gauge

            Gauge("semel_connections",
                  "Client connections open (Kafka's socket-server-metrics connection-count).",
                  registry=registry).set_function(lambda: len(connections))
            Gauge("semel_queued_request_bytes",
                  "Request bytes held over all connections (bounded by "
                  "queued.max.request.bytes).",
                  registry=registry).set_function(lambda: request_memory.used)

        self._on_registry(register)

    def register_quotas(self, quotas) -> None:
        """Client quota throttling by quota type (produce, fetch, request), read when
        scraped: Kafka's per-client ``throttle-time`` sensors summed over clients."""

        def register(registry) -> None:
            registry.register(QuotaThrottleCollector(quotas))

        self._on_registry(register)

    def register_cleaner(self, log_manager, clock) -> None:
        """The log cleaner's gauges (Kafka's kafka.log:type=LogCleaner and
        LogCleanerManager metrics), read when scraped."""
        stats = log_manager.cleaner_stats
        gauges = (
            ("semel_log_cleaner_runs", "Cleanings done since start.", lambda: stats.runs),
            ("semel_log_cleaner_bytes_read", "Bytes of segments cleaned since start.",
             lambda: stats.bytes_read),
            ("semel_log_cleaner_bytes_reclaimed",
             "Bytes removed by cleanings since start (read minus written).",
             lambda: stats.bytes_read - stats.bytes_written),
            ("semel_log_cleaner_max_dirty_ratio",
             "Dirty ratio of the dirtiest compacted partition at the last check.",
             lambda: stats.max_dirty_ratio),
            ("semel_log_cleaner_seconds_since_last_run",
             "Seconds since the cleaner last looked for work (-1: never).",
             lambda: -1 if stats.last_run_ms is None
             else (clock() - stats.last_run_ms) / 1000),
            ("semel_log_cleaner_uncleanable_partitions",
             ("Compacted partitions whose cleaning failed (corrupt data): skipped until a "
             "restart."), lambda: len(stats.uncleanable)),
            ("semel_log_cleaner_process_peak_rss_bytes",
             ("Peak memory of the cleaner process (its key map is bounded by "
             "log.cleaner.dedupe.buffer.size); 0 before its first cleaning."),
             lambda: stats.worker_max_rss_bytes),
        )

        def register(registry) -> None:
            from prometheus_client import Gauge

            for name, doc, read in gauges:
                Gauge(name, doc, registry=registry).set_function(read)
            registry.register(CleanedPartitionsCollector(stats, clock))

        self._on_registry(register)

    def register_exactly_once(self, log_manager, txn_coordinator,
                              loop: asyncio.AbstractEventLoop) -> None:
        """Called on the event loop at start: from now on scrapes read the broker's state
        (and the traffic counters) there."""
        old = self._state
        new = self._state = BrokerStateCollector(self, log_manager, txn_coordinator, loop)

        def register(registry) -> None:
            if old is not None:  # a restarted broker: read on the new loop
                registry.unregister(old)
            registry.register(new)

        self._on_registry(register)

    # -- HTTP -----------------------------------------------------------------------------

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics HTTP endpoint (a thread per scrape); returns the bound port."""
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        from prometheus_client import make_wsgi_app

        class QuietHandler(WSGIRequestHandler):
            def log_message(self, format, *args) -> None:
                """Scrapes are not logged."""

        class MetricsServer(ThreadingMixIn, WSGIServer):
            daemon_threads = True
            address_family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                flags=socket.AI_PASSIVE)[0][0]

        self._server = make_server(host, port, _with_head(make_wsgi_app(self.registry)),
                                   MetricsServer, handler_class=QuietHandler)
        threading.Thread(target=self._server.serve_forever, name="semel-metrics",
                         daemon=True).start()
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _with_head(app):
    """``app`` answering HEAD as it answers GET (status and headers, Content-Length of the
    body it would send), without the body."""

    def serve(environ, start_response):
        if environ.get("REQUEST_METHOD") != "HEAD":
            return app(environ, start_response)
        answer: list = []
        body = b"".join(app({**environ, "REQUEST_METHOD": "GET"},
                            lambda status, headers, exc_info=None: answer.append((status,
                                                                                  headers))))
        status, headers = answer[0]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [b""]

    return serve


# -- error codes in responses ---------------------------------------------------------------
#
# A response's error codes are its fields named *error_code (error_code,
# partition_error_code, ...) at any depth: top level, per topic, per partition, per group.
# Each non-zero one counts once under (api, error), as Kafka's RequestMetrics ErrorsPerSec
# counts a response's errorCounts() (which also counts NONE; semel does not). The walk
# follows a plan made once per response class from the generated codec's field types, and
# skips lists whose elements can hold no error code (fetched records, brokers, ...).

_UNPLANNED = object()
_PLANS: dict[type, tuple | None] = {}


def _error_plan(cls: type) -> tuple | None:
    plan = _PLANS[cls] = _build_plan(cls, frozenset())
    return plan


def _build_plan(cls: type, seen: frozenset) -> tuple | None:
    """(error code field names, ((field, is_list, plan of its struct), ...)) or None when
    no instance of ``cls`` can hold an error code."""
    module = sys.modules.get(cls.__module__)
    hints = getattr(cls.__init__, "__annotations__", {})
    codes, children = [], []
    for name, hint in hints.items():
        if name == "return":
            continue
        if name.endswith("error_code"):
            codes.append(name)
            continue
        text = str(hint).strip("'\"").removesuffix(" | None")
        many = text.startswith("list[") and text.endswith("]")
        child = getattr(module, text[5:-1] if many else text, None)
        if (isinstance(child, type) and child.__module__ == cls.__module__
                and child not in seen and child is not cls):
            sub = _build_plan(child, seen | {cls})
            if sub is not None:
                children.append((name, many, sub))
    if not codes and not children:
        return None
    return tuple(codes), tuple(children)


def _count_errors(obj, plan: tuple, api_key: int, counts: dict) -> None:
    codes, children = plan
    for name in codes:
        code = getattr(obj, name)
        if code:
            key = (api_key, code)
            counts[key] = counts.get(key, 0) + 1
    for name, many, sub in children:
        value = getattr(obj, name)
        if value is None:
            continue
        if many:
            for item in value:
                _count_errors(item, sub, api_key, counts)
        else:
            _count_errors(value, sub, api_key, counts)


def _error_name(code: int) -> str:
    try:
        return Error(code).name
    except ValueError:
        return str(code)


# -- collectors -----------------------------------------------------------------------------

class CleanedPartitionsCollector:
    """Seconds since each compacted partition's last cleaning, by topic and partition
    (partitions not cleaned since the broker started are absent)."""

    NAME = "semel_log_cleaner_partition_seconds_since_last_clean"

    def __init__(self, stats, clock) -> None:
        self.stats = stats
        self.clock = clock

    def describe(self):
        from prometheus_client.core import GaugeMetricFamily

        return [GaugeMetricFamily(self.NAME, "", labels=["topic", "partition"])]

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            self.NAME, "Seconds since the partition's last cleaning ended.",
            labels=["topic", "partition"])
        now = self.clock()
        for tp, ended in list(self.stats.last_cleaned_ms.items()):
            family.add_metric([tp.topic, str(tp.partition)], (now - ended) / 1000)
        yield family


class _Snapshot:
    """What one scrape shows, copied on the event loop."""

    def __init__(self) -> None:
        self.latency: list[tuple[str, list[int], float]] = []
        self.errors: list[tuple[str, str, int]] = []
        self.queue_time: tuple[list[int], float] = ([0] * (len(QUEUE_BUCKETS) + 1), 0.0)
        self.topics: list[tuple[str, int, int, int]] = []  # topic, bytes in, records, out
        self.partitions: list[tuple] = []  # topic, partition, hw, leo, start, lso, size, segs
        self.group_offsets: list[tuple[str, str, int, int, int]] = []  # + committed, lag
        self.group_lag: list[tuple[str, int, int]] = []  # group, sum, max
        self.group_members: list[tuple[str, int]] = []
        self.group_states: dict[str, int] = {}
        self.share_partitions: list[tuple[str, str, int, int, int]] = []  # + inflight, acq.
        self.share_inflight: dict[str, int] = {}  # group -> in-flight records, summed
        self.share_delivered: list[tuple[str, int, int]] = []  # group, acquired, redelivered
        self.share_members: list[tuple[str, int]] = []
        self.live_producer_ids: int | None = None
        self.txn_states: dict[str, int] = {}
        self.oldest_ongoing_ms = 0
        self.loading: dict[str, int] = {}
        self.two_phase = (0, 0, 0)


class QuotaThrottleCollector:
    """semel_quota_throttle_time_seconds_total{type} and
    semel_quota_throttled_responses_total{type}: responses throttled with that quota type
    as the cause (the longer throttle when two apply, as Kafka) and their throttle times."""

    def __init__(self, quotas) -> None:
        self.quotas = quotas

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        seconds = CounterMetricFamily(
            "semel_quota_throttle_time_seconds",
            "Throttle time given to clients by client quota type (Kafka's throttle-time).",
            labels=["type"])
        count = CounterMetricFamily(
            "semel_quota_throttled_responses",
            "Responses throttled (channel muted) by client quota type.", labels=["type"])
        for name, manager in self.quotas.managers().items():
            seconds.add_metric([name], manager.throttle_ms_total / 1000)
            count.add_metric([name], manager.throttled)
        yield seconds
        yield count


class BrokerStateCollector:
    """Every value the request path counts and every gauge of the broker's state, copied
    in one visit to the broker's event loop (which owns that state) per scrape. Construct
    it on the event loop's thread."""

    SCRAPE_TIMEOUT_S = 5.0

    def __init__(self, metrics: BrokerMetrics, log_manager, txn_coordinator,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.metrics = metrics
        self.log_manager = log_manager
        self.txn_coordinator = txn_coordinator
        self.loop = loop
        self._loop_thread = threading.get_ident()  # built on the loop (Broker.start)

    def describe(self):
        return _families(_Snapshot())  # names only (the registry checks collisions)

    def collect(self):
        if threading.get_ident() == self._loop_thread or self.loop.is_closed():
            return _families(self._read())
        answer: concurrent.futures.Future = concurrent.futures.Future()

        def read() -> None:
            try:
                answer.set_result(self._read())
            except Exception as e:  # noqa: BLE001 - handed to the scraping thread
                answer.set_exception(e)

        self.loop.call_soon_threadsafe(read)
        return _families(answer.result(self.SCRAPE_TIMEOUT_S))

    def _read(self) -> _Snapshot:
        """On the event loop: a consistent copy of what the metrics show."""
        from semel.broker.handlers.metadata import INTERNAL_TOPICS

        snap = _Snapshot()
        metrics = self.metrics
        broker = metrics.broker
        internal = (broker is not None and broker.config.metrics_internal_topics_enable)
        logs = self.log_manager.logs
        self._read_traffic(snap, {tp.topic for tp in logs})
        for tp, plog in sorted(logs.items()):
            if tp.topic in INTERNAL_TOPICS and not internal:
                continue
            snap.partitions.append((tp.topic, str(tp.partition), plog.high_watermark,
                                    plog.log_end_offset, plog.log_start_offset,
                                    plog.last_stable_offset, plog.size_in_bytes,
                                    len(plog.segments)))
        if broker is not None:
            self._read_groups(snap, broker.group_coordinator, internal)
            self._read_share_groups(snap, broker)
        self._read_transactions(snap)
        return snap

    def _read_traffic(self, snap: _Snapshot, topics: set[str]) -> None:
        metrics = self.metrics
        snap.latency = [(BY_KEY[key].name, *histogram.snapshot())
                        for key, histogram in sorted(metrics.latency.items())]
        snap.errors = [(BY_KEY[key].name, _error_name(code), n)
                       for (key, code), n in sorted(metrics.errors.items())]
        snap.queue_time = metrics.queue_time.snapshot()
        topic_in, topic_out = metrics.topic_in, metrics.topic_out
        for gone in [t for t in topic_in if t not in topics]:  # deleted topics' counters
            del topic_in[gone]
        for gone in [t for t in topic_out if t not in topics]:
            del topic_out[gone]
        for topic in sorted(topic_in.keys() | topic_out.keys()):
            bytes_in, records_in = topic_in.get(topic, (0, 0))
            bytes_out, records_out = topic_out.get(topic, (0, 0))
            snap.topics.append((topic, bytes_in, records_in, bytes_out, records_out))

    def _read_groups(self, snap: _Snapshot, coordinator, internal: bool) -> None:
        from semel.broker.handlers.metadata import INTERNAL_TOPICS

        shard = coordinator.shard
        snap.loading["group"] = len(coordinator.loading)
        if shard is None:
            return
        for group_id, group in sorted(shard.group_manager.groups.items()):
            state = str(group.state)
            if state == "Dead":
                continue
            snap.group_states[state] = snap.group_states.get(state, 0) + 1
            snap.group_members.append((group_id, len(group.members)))
        get_partition = self.log_manager.get_partition
        series = 0
        for group_id, offsets in sorted(shard.offset_manager.store.committed.items()):
            total = largest = 0
            for (topic, partition), value in sorted(offsets.items()):
                if topic in INTERNAL_TOPICS and not internal:
                    continue
                plog = get_partition(topic, partition)
                committed = value.committed_offset
                if plog is None or committed < 0:
                    continue
                lag = max(0, plog.high_watermark - committed)
                total += lag
                largest = max(largest, lag)
                if series < MAX_GROUP_PARTITION_SERIES:
                    series += 1
                    snap.group_offsets.append((group_id, topic, partition, committed, lag))
            snap.group_lag.append((group_id, total, largest))

    def _read_share_groups(self, snap: _Snapshot, broker) -> None:
        """The live share-partitions (those used since start) and the delivery counters;
        none while no share-partition manager was made (no share state: see the broker's
        share_manager)."""
        manager = broker.share_manager_if_made
        if manager is None:
            return
        series = len(snap.group_offsets)  # one cap over both kinds of per-partition series
        for key, sp in sorted(manager.partitions.items(),
                              key=lambda kv: (kv[0].group_id, str(kv[0].topic_id),
                                              kv[0].partition)):
            info = self.log_manager.topic_by_id(key.topic_id)
            if info is None:
                continue
            inflight = sp.in_flight_count
            snap.share_inflight[key.group_id] = snap.share_inflight.get(key.group_id, 0) \
                + inflight
            if series < MAX_GROUP_PARTITION_SERIES:
                series += 1
                snap.share_partitions.append((key.group_id, info.name, key.partition,
                                              inflight, sp.acquired_count))
        redelivered = manager.redelivered_records_total
        snap.share_delivered = [(group, n, redelivered.get(group, 0))
                                for group, n in sorted(manager.acquired_records_total.items())]
        membership = broker.share_membership_if_made
        if membership is not None:
            snap.share_members = [(group_id, len(group.members))
                                  for group_id, group in sorted(membership.groups.items())]

    def _read_transactions(self, snap: _Snapshot) -> None:
        coordinator = self.txn_coordinator
        snap.live_producer_ids = self.log_manager.live_producer_ids
        now = coordinator.clock()
        oldest = 0
        for md in list(coordinator.txns.values()):
            name = md.state.state_name
            snap.txn_states[name] = snap.txn_states.get(name, 0) + 1
            if name == "Ongoing" and md.txn_start_timestamp >= 0:
                oldest = max(oldest, now - md.txn_start_timestamp)
        snap.oldest_ongoing_ms = oldest
        snap.loading["transaction"] = len(coordinator.loading)
        open_2pc = coordinator.open_two_phase_commits()
        warn_age = coordinator.config.two_phase_commit_warn_age_ms
        ages = [now - md.txn_start_timestamp for _, md in open_2pc]
        snap.two_phase = (len(ages), sum(age > warn_age for age in ages), max(ages, default=0))


_PARTITION = (  # name, help: in the order of _Snapshot.partitions' values
    ("semel_partition_high_watermark",
     ("High watermark of the partition (Kafka's Partition HighWatermark; what ListOffsets "
      "latest answers).")),
    ("semel_partition_log_end_offset",
     "Log end offset of the partition (Kafka's Log LogEndOffset)."),
    ("semel_partition_log_start_offset",
     "Log start offset of the partition (Kafka's Log LogStartOffset)."),
    ("semel_last_stable_offset",
     ("Last stable offset of each partition (what ListOffsets latest answers "
      "read_committed).")),
    ("semel_partition_size_bytes", "Bytes of the partition's segments (Kafka's Log Size)."),
    ("semel_partition_segments", "Segments of the partition (Kafka's Log NumLogSegments)."),
)


def _families(s: _Snapshot) -> list:
    """The metric families of one snapshot (an empty one for describe())."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    out = []
    requests = CounterMetricFamily(
        "semel_requests", "Requests answered, by API (Kafka's RequestMetrics RequestsPerSec).",
        labels=["api"])
    latency = HistogramMetricFamily(
        "semel_request_latency_seconds",
        "Time from decoded request to encoded response, by API (Kafka's RequestMetrics "
        "TotalTimeMs, without the network).", labels=["api"])
    for api, counts, total in s.latency:
        requests.add_metric([api], sum(counts))
        latency.add_metric([api], _buckets(LATENCY_BUCKETS, counts), total)
    errors = CounterMetricFamily(
        "semel_request_errors",
        "Error codes in responses, by API and error: each non-zero error code field "
        "(top level, per topic, per partition, ...) counts once (Kafka's RequestMetrics "
        "ErrorsPerSec, without NONE).", labels=["api", "error"])
    for api, error, n in s.errors:
        errors.add_metric([api, error], n)
    queue_counts, queue_sum = s.queue_time
    queue = HistogramMetricFamily(
        "semel_request_queue_time_seconds",
        "Time from a request's frame being read whole to its handling starting (Kafka's "
        "RequestMetrics RequestQueueTimeMs, all APIs together).",
        buckets=_buckets(QUEUE_BUCKETS, queue_counts), sum_value=queue_sum)
    out += [requests, latency, errors, queue]

    topic = ["topic"]
    bytes_in = CounterMetricFamily(
        "semel_topic_bytes_in", "Record batch bytes appended by Produce requests, by topic "
        "(Kafka's BrokerTopicMetrics BytesInPerSec; retries answered as duplicates are not "
        "counted).", labels=topic)
    messages_in = CounterMetricFamily(
        "semel_topic_messages_in", "Records appended by Produce requests, by topic (Kafka's "
        "BrokerTopicMetrics MessagesInPerSec).", labels=topic)
    bytes_out = CounterMetricFamily(
        "semel_topic_bytes_out", "Record bytes returned by Fetch responses, by topic (Kafka's "
        "BrokerTopicMetrics BytesOutPerSec).", labels=topic)
    messages_out = CounterMetricFamily(
        "semel_topic_messages_out", "Records of data batches returned by Fetch responses, by "
        "topic, read from the batch headers (Kafka has no such meter; Redpanda's "
        "kafka_records_fetched).", labels=topic)
    for name, b_in, m_in, b_out, m_out in s.topics:
        bytes_in.add_metric([name], b_in)
        messages_in.add_metric([name], m_in)
        bytes_out.add_metric([name], b_out)
        messages_out.add_metric([name], m_out)
    out += [bytes_in, messages_in, bytes_out, messages_out]

    tp = ["topic", "partition"]
    partition_gauges = [GaugeMetricFamily(name, doc, labels=tp) for name, doc in _PARTITION]
    for name, partition, *values in s.partitions:
        for family, value in zip(partition_gauges, values, strict=True):
            family.add_metric([name, partition], value)
    out += partition_gauges

    gtp = ["group", "topic", "partition"]
    committed = GaugeMetricFamily(
        "semel_consumer_group_committed_offset", "Committed offset of a consumer group on a "
        "partition (kafka_exporter's kafka_consumergroup_current_offset).", labels=gtp)
    lag = GaugeMetricFamily(
        "semel_consumer_group_lag", "High watermark minus the group's committed offset, at "
        "least 0 (kafka_exporter's kafka_consumergroup_lag).", labels=gtp)
    for group, name, partition, offset, behind in s.group_offsets:
        committed.add_metric([group, name, str(partition)], offset)
        lag.add_metric([group, name, str(partition)], behind)
    lag_sum = GaugeMetricFamily("semel_consumer_group_lag_sum",
                                "Lag of a consumer group summed over its partitions.",
                                labels=["group"])
    lag_max = GaugeMetricFamily("semel_consumer_group_lag_max",
                                "Largest lag of a consumer group on one partition.",
                                labels=["group"])
    for group, total, largest in s.group_lag:
        lag_sum.add_metric([group], total)
        lag_max.add_metric([group], largest)
    members = GaugeMetricFamily("semel_consumer_group_members",
                                "Members of a consumer group (kafka_exporter's "
                                "kafka_consumergroup_members).", labels=["group"])
    for group, n in s.group_members:
        members.add_metric([group], n)
    groups = GaugeMetricFamily("semel_consumer_groups", "Consumer groups by state (Kafka's "
                               "GroupMetadataManager NumGroups<state>).", labels=["state"])
    for state, n in sorted(s.group_states.items()):
        groups.add_metric([state], n)
    out += [committed, lag, lag_sum, lag_max, members, groups, *_share_families(s)]

    producers = GaugeMetricFamily(
        "semel_live_producer_ids",
        "Producer ids with state on some partition, summed over partitions (Kafka's Log "
        "ProducerIdCount).", value=s.live_producer_ids)
    active = {name: n for name, n in s.txn_states.items() if name != "Dead"}
    total = GaugeMetricFamily(
        "semel_active_transactional_ids",
        "Transactional ids the transaction coordinator holds (not expired).",
        value=None if s.live_producer_ids is None else sum(active.values()))
    by_state = GaugeMetricFamily("semel_transactional_ids",
                                 "Transactional ids by transaction state.", labels=["state"])
    for name, n in sorted(active.items()):
        by_state.add_metric([name], n)
    loading = GaugeMetricFamily(
        "semel_coordinator_partitions_loading", "Partitions of __transaction_state or "
        "__consumer_offsets the coordinator is still loading (its requests wait).",
        labels=["coordinator"])
    for name, n in sorted(s.loading.items()):
        loading.add_metric([name], n)
    open_2pc, overdue, oldest_2pc_ms = s.two_phase
    out += [producers, total, by_state, loading,
            GaugeMetricFamily("semel_transaction_oldest_ongoing_age_seconds",
                              "How long the oldest ongoing transaction has been open (0: "
                              "none); it holds back its partitions' last stable offset.",
                              value=s.oldest_ongoing_ms / 1000),
            GaugeMetricFamily("semel_two_phase_commit_transactions",
                              "KIP-939 two-phase commit transactions open (the "
                              "coordinator never times them out).", value=open_2pc),
            GaugeMetricFamily("semel_two_phase_commit_transactions_overdue",
                              "Two-phase commit transactions open longer than "
                              "transaction.two.phase.commit.warn.age.ms.", value=overdue),
            GaugeMetricFamily("semel_two_phase_commit_oldest_age_seconds",
                              "How long the oldest open two-phase commit transaction has "
                              "been open (0: none).", value=oldest_2pc_ms / 1000)]
    return out


def _share_families(s: _Snapshot) -> list:
    """Share groups' families (KIP-932; Kafka's SharePartitionMetrics InFlightMessageCount,
    the delivery counts of ShareGroupMetrics)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    gtp = ["group", "topic", "partition"]
    inflight = GaugeMetricFamily(
        "semel_share_inflight_records", "Records of a share-partition between its start "
        "and end offsets: delivered or deliverable, not yet acknowledged past the start "
        "offset (Kafka's SharePartition InFlightMessageCount).", labels=gtp)
    acquired = GaugeMetricFamily(
        "semel_share_acquired_records", "Records of a share-partition acquired (locked) by "
        "a member, awaiting its acknowledgement or the lock's expiry.", labels=gtp)
    for group, topic, partition, n_inflight, n_acquired in s.share_partitions:
        inflight.add_metric([group, topic, str(partition)], n_inflight)
        acquired.add_metric([group, topic, str(partition)], n_acquired)
    inflight_sum = GaugeMetricFamily(
        "semel_share_inflight_records_sum",
        "In-flight records of a share group over all its live share-partitions.",
        labels=["group"])
    for group, n in sorted(s.share_inflight.items()):
        inflight_sum.add_metric([group], n)
    delivered = CounterMetricFamily(
        "semel_share_delivered_records", "Records acquired by (delivered to) members of a "
        "share group, redeliveries included.", labels=["group"])
    redelivered = CounterMetricFamily(
        "semel_share_redelivered_records", "Records delivered to members of a share group "
        "again (delivery count above 1: released, lock expired, or the member left).",
        labels=["group"])
    for group, n_acquired, n_redelivered in s.share_delivered:
        delivered.add_metric([group], n_acquired)
        redelivered.add_metric([group], n_redelivered)
    members = GaugeMetricFamily("semel_share_group_members", "Members of a share group.",
                                labels=["group"])
    for group, n in s.share_members:
        members.add_metric([group], n)
    return [inflight, acquired, inflight_sum, delivered, redelivered, members]


def _buckets(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, int]]:
    """Cumulative (le, count) pairs, +Inf last."""
    from prometheus_client.utils import floatToGoString

    cumulative, running = [], 0
    for bound, n in zip((*bounds, float("inf")), counts, strict=True):
        running += n
        cumulative.append((floatToGoString(bound), running))
    return cumulative
