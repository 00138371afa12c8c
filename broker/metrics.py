"""Prometheus metrics: request rates and latency per API, plus broker gauges.

Each broker owns its own ``CollectorRegistry`` (several in-process brokers in one test run
must not collide). Served over HTTP at ``metrics.listener`` (``host:port``) when set.
Gauges that the exactly-once layers fill (live producer ids, last stable offset per
partition, active transactional ids) are registered by those layers through ``registry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from protocol.api import BY_KEY

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
        self._by_key: dict[int, tuple] = {}
        self._server = None

    def observe_request(self, api_key: int, seconds: float) -> None:
        children = self._by_key.get(api_key)
        if children is None:
            name = BY_KEY[api_key].name
            children = (self.requests.labels(name), self.latency.labels(name))
            self._by_key[api_key] = children
        children[0].inc()
        children[1].observe(seconds)

    def serve(self, host: str, port: int) -> int:
        """Start the /metrics HTTP endpoint; returns the bound port."""
        self._server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return self._server.server_address[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
