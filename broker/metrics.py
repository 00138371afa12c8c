"""Prometheus metrics: request rates and latency per API, plus the exactly-once gauges.

Each broker owns its own ``CollectorRegistry`` (several in-process brokers in one test run
must not collide). Served over HTTP at ``metrics.listener`` (``host:port``) when set.

The design's three gauges come from ``ExactlyOnceCollector``, which reads the current values
when scraped - nothing is counted per request:
  semel_live_producer_ids                        producer ids with state, summed over
                                                 partitions (Kafka's ProducerIdCount)
  semel_last_stable_offset{topic,partition}      per partition
  semel_active_transactional_ids                 transactional ids the coordinator holds
                                                 (not expired)
  semel_transactional_ids{state}                 the same by transaction state
  semel_two_phase_commit_transactions            KIP-939 transactions open (never timed out)
  semel_two_phase_commit_transactions_overdue    ... open longer than
                                                 transaction.two.phase.commit.warn.age.ms
  semel_two_phase_commit_oldest_age_seconds      how long the oldest has been open (0: none)
The HTTP server scrapes from its own thread; the collector reads on the broker's event loop
(which owns that state) and waits for the answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from semel.protocol.api import BY_KEY

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
                   5, 10, 30)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("semel_requests", "Requests handled, by API.", ["api"],
                                registry=self.registry)
        self.latency = Histogram("semel_request_latency_seconds",
                                 "Time from decoded request to encoded response, by API.",
                                 ["api"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.bad_inputs = Counter(
            "semel_bad_input", "Connections closed or refused for bad input, by reason.",
            ["reason"], registry=self.registry)
        self._by_key: dict[int, tuple] = {}
        self._server = None
        self._exactly_once: ExactlyOnceCollector | None = None

    def observe_request(self, api_key: int, seconds: float) -> None:
        children = self._by_key.get(api_key)
        if children is None:
            name = BY_KEY[api_key].name
            children = (self.requests.labels(name), self.latency.labels(name))
            self._by_key[api_key] = children
        children[0].inc()
        children[1].observe(seconds)

    def bad_input(self, reason: str) -> None:
        self.bad_inputs.labels(reason).inc()

    def register_connections(self, connections, request_memory) -> None:
        """Gauges read when scraped: open connections and request bytes held."""
        Gauge("semel_connections", "Client connections open.", registry=self.registry
              ).set_function(lambda: len(connections))
        Gauge("semel_queued_request_bytes",
              "Request bytes held over all connections (bounded by queued.max.request.bytes).",
              registry=self.registry).set_function(lambda: request_memory.used)

    def register_cleaner(self, log_manager, clock) -> None:
        """The log cleaner's gauges (Kafka's kafka.log:type=LogCleaner and
        LogCleanerManager metrics), read when scraped."""
        stats = log_manager.cleaner_stats
        for name, doc, read in (
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
        ):
            Gauge(name, doc, registry=self.registry).set_function(read)
        self.registry.register(CleanedPartitionsCollector(stats, clock))

    def register_exactly_once(self, log_manager, txn_coordinator,
                              loop: asyncio.AbstractEventLoop) -> None:
        if self._exactly_once is not None:  # a restarted broker: read on the new loop
            self.registry.unregister(self._exactly_once)
        self._exactly_once = ExactlyOnceCollector(log_manager, txn_coordinator, loop)
        self.registry.register(self._exactly_once)

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics HTTP endpoint; returns the bound port."""
        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class CleanedPartitionsCollector:
    """Seconds since each compacted partition's last cleaning, by topic and partition
    (partitions not cleaned since the broker started are absent)."""

    NAME = "semel_log_cleaner_partition_seconds_since_last_clean"

    def __init__(self, stats, clock) -> None:
        self.stats = stats
        self.clock = clock

    def describe(self):
        return [GaugeMetricFamily(self.NAME, "", labels=["topic", "partition"])]

    def collect(self):
        family = GaugeMetricFamily(
            self.NAME, "Seconds since the partition's last cleaning ended.",
            labels=["topic", "partition"])
        now = self.clock()
        for tp, ended in list(self.stats.last_cleaned_ms.items()):
            family.add_metric([tp.topic, str(tp.partition)], (now - ended) / 1000)
        yield family


class ExactlyOnceCollector:
    """Producer ids, last stable offsets and transactional ids, read at scrape time.
    Construct it on the broker's event loop thread."""

    SCRAPE_TIMEOUT_S = 5.0

    def __init__(self, log_manager, txn_coordinator, loop: asyncio.AbstractEventLoop) -> None:
        self.log_manager = log_manager
        self.txn_coordinator = txn_coordinator
        self.loop = loop
        self._loop_thread = threading.get_ident()  # built on the loop (Broker.start)

    def describe(self):
        # names only (the registry checks collisions)
        return self._families(None, [], {}, (0, 0, 0))

    def collect(self):
        if threading.get_ident() == self._loop_thread or self.loop.is_closed():
            return self._families(*self._read())
        answer: concurrent.futures.Future = concurrent.futures.Future()

        def read() -> None:
            try:
                answer.set_result(self._read())
            except Exception as e:  # noqa: BLE001 - handed to the scraping thread
                answer.set_exception(e)

        self.loop.call_soon_threadsafe(read)
        return self._families(*answer.result(self.SCRAPE_TIMEOUT_S))

    def _read(self):
        """On the event loop: a consistent copy of what the gauges show."""
        lsos = {tp: plog.last_stable_offset for tp, plog in self.log_manager.logs.items()}
        states: dict[str, int] = {}
        for md in list(self.txn_coordinator.txns.values()):
            name = md.state.state_name
            states[name] = states.get(name, 0) + 1
        coordinator = self.txn_coordinator
        open_2pc = coordinator.open_two_phase_commits()
        now = coordinator.clock()
        warn_age = coordinator.config.two_phase_commit_warn_age_ms
        ages = [now - md.txn_start_timestamp for _, md in open_2pc]
        two_phase = (len(ages), sum(age > warn_age for age in ages), max(ages, default=0))
        return self.log_manager.live_producer_ids, sorted(lsos.items()), states, two_phase

    @staticmethod
    def _families(live_producer_ids: int | None, lsos: list, states: dict,
                  two_phase: tuple[int, int, int]):
        producers = GaugeMetricFamily(
            "semel_live_producer_ids",
            "Producer ids with state on some partition, summed over partitions.",
            value=live_producer_ids)
        lso = GaugeMetricFamily("semel_last_stable_offset",
                                "Last stable offset of each partition.",
                                labels=["topic", "partition"])
        for tp, offset in lsos:
            lso.add_metric([tp.topic, str(tp.partition)], offset)
        active = {name: n for name, n in states.items() if name != "Dead"}
        total = GaugeMetricFamily(
            "semel_active_transactional_ids",
            "Transactional ids the transaction coordinator holds (not expired).",
            value=None if live_producer_ids is None else sum(active.values()))
        by_state = GaugeMetricFamily("semel_transactional_ids",
                                     "Transactional ids by transaction state.",
                                     labels=["state"])
        for name, n in sorted(active.items()):
            by_state.add_metric([name], n)
        open_2pc, overdue, oldest_ms = two_phase
        return [producers, lso, total, by_state,
                GaugeMetricFamily("semel_two_phase_commit_transactions",
                                  "KIP-939 two-phase commit transactions open (the "
                                  "coordinator never times them out).", value=open_2pc),
                GaugeMetricFamily("semel_two_phase_commit_transactions_overdue",
                                  "Two-phase commit transactions open longer than "
                                  "transaction.two.phase.commit.warn.age.ms.", value=overdue),
                GaugeMetricFamily("semel_two_phase_commit_oldest_age_seconds",
                                  "How long the oldest open two-phase commit transaction has "
                                  "been open (0: none).", value=oldest_ms / 1000)]
