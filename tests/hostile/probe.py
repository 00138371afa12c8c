"""Real-client measurements during the soak.

`Probe`: a confluent-kafka producer (acks=all, idempotent, linger 0) sending one record every
~20 ms to its own single-partition topic, each send recorded in the run's history (the chaos
checker then requires every acknowledged probe record exactly once) and its delivery latency
kept with the phase it was sent in.

`Canary`: every second a fresh connection from 127.0.0.1 asks ApiVersions and Metadata
(the real clients must still be able to connect while the floods run).

`Phases`: the run's phases (warmup, hostile, cooldown, restart, drain) with their wall-clock
start times, recorded in the history as phase events.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import defaultdict

from tests.chaos.history import History
from tests.chaos.workloads.common import error_text, producer_config
from tests.kafka_wire import API_VERSIONS, METADATA, KafkaWire, message


class Phases:
    def __init__(self, history: History) -> None:
        self.history = history
        self.marks: list[tuple[str, float]] = []
        self.current = "start"
        self.listeners: list = []  # called with each new phase's name

    def set(self, name: str) -> None:
        self.current = name
        for listener in self.listeners:
            listener(name)
        t = time.time()
        self.marks.append((name, t))
        self.history.record("runner", "info", "phase", name=name)

    def of(self, t: float) -> str:
        name = "start"
        for phase, start in self.marks:
            if start <= t:
                name = phase
        return name

    def window(self, name: str) -> tuple[float, float] | None:
        for i, (phase, start) in enumerate(self.marks):
            if phase == name:
                end = self.marks[i + 1][1] if i + 1 < len(self.marks) else time.time()
                return start, end
        return None


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    v = sorted(values)

    def pct(q: float) -> float:
        return v[min(len(v) - 1, int(q * len(v)))]

    return {"n": len(v), "p50_ms": round(statistics.median(v) * 1000, 1),
            "p99_ms": round(pct(0.99) * 1000, 1), "max_ms": round(v[-1] * 1000, 1)}


class Probe:
    def __init__(self, bootstrap: str, history: History, phases: Phases, topic: str, *,
                 interval_s: float = 0.02, logger=None) -> None:
        self.bootstrap = bootstrap
        self.history = history
        self.phases = phases
        self.topic = topic
        self.interval_s = interval_s
        self.logger = logger
        self.latency: dict[str, list[float]] = defaultdict(list)  # phase -> seconds
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe", daemon=True)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self, timeout: float = 150.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - reported as a liveness failure
            self.errors.append(f"{type(e).__name__}: {e}")

    def _loop(self) -> None:
        from confluent_kafka import Producer

        p = "probe"
        producer = Producer(producer_config(self.bootstrap, self.logger, **{"linger.ms": 0}))
        next_t = time.monotonic()
        i = 0
        while not self._stop.is_set():
            i += 1
            value = str(i)
            op = self.history.next_id()
            sent_t = time.time()
            phase = self.phases.current
            self.history.record(p, "invoke", "send", id=op, topic=self.topic, value=value,
                                key=None, producer="probe.1", txn=None, partition=0, t=sent_t)

            def report(err, msg, op=op, sent_t=sent_t, phase=phase) -> None:
                now = time.time()
                if err is None:
                    self.acked += 1
                    self.latency[phase].append(now - sent_t)
                    self.history.record(p, "ok", "send", id=op, partition=msg.partition(),
                                        offset=msg.offset(), t=now)
                else:
                    self.failed += 1
                    self.history.record(p, "info", "send", id=op, error=error_text(err), t=now)

            while True:
                try:
                    producer.produce(self.topic, value=value.encode(), partition=0,
                                     on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            self.sent += 1
            next_t += self.interval_s
            while (wait := next_t - time.monotonic()) > 0:
                producer.poll(wait)
            producer.poll(0)
            if next_t < time.monotonic() - 1.0:  # fell behind (a long poll): do not burst
                next_t = time.monotonic()
        remaining = producer.flush(130)
        if remaining:
            self.errors.append(f"{remaining} probe records still undelivered at the end")

    def summary(self) -> dict:
        everything = [x for v in self.latency.values() for x in v]
        return {"sent": self.sent, "acked": self.acked, "failed": self.failed,
                "errors": self.errors, "latency": percentiles(everything),
                "latency_by_phase": {k: percentiles(v) for k, v in self.latency.items()}}


class Canary:
    """A new connection every `interval_s` from 127.0.0.1: ApiVersions + Metadata."""

    def __init__(self, address: str, phases: Phases, topic: str, *,
                 interval_s: float = 1.0, timeout_s: float = 15.0) -> None:
        self.address = address
        self.phases = phases
        self.topic = topic
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.ok: dict[str, int] = defaultdict(int)
        self.failed: dict[str, int] = defaultdict(int)
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.failures: list[str] = []
        self.paused = threading.Event()  # set while the broker is being killed/restarted
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary", daemon=True)

    def start(self) -> Canary:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.timeout_s + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.paused.is_set():
                continue
            phase = self.phases.current
            started = time.monotonic()
            try:
                with KafkaWire.connect(self.address, timeout=self.timeout_s,
                                       client_id="canary") as wire:
                    wire.request(API_VERSIONS, 3, message(API_VERSIONS, "request",
                                                          client_software_name="canary",
                                                          client_software_version="1"))
                    wire.request(METADATA, 12, message(METADATA, "request", topics=[
                        message(METADATA, "request", "MetadataRequestTopic", name=self.topic)]))
                self.ok[phase] += 1
                self.latency[phase].append(time.monotonic() - started)
            except Exception as e:  # noqa: BLE001
                if self.paused.is_set():
                    continue
                self.failed[phase] += 1
                if len(self.failures) < 10:
                    self.failures.append(f"{phase}: {type(e).__name__}: {e}")

    def summary(self) -> dict:
        return {"ok": dict(self.ok), "failed": dict(self.failed), "failures": self.failures,
                "latency_by_phase": {k: percentiles(v) for k, v in self.latency.items()}}
