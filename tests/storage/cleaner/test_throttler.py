"""The cleaner's throttle (storage/cleaner/worker.py Throttler) on injected clocks: Kafka's
bytes-a-second limit (log.cleaner.io.max.bytes.per.second) and semel's CPU budget
(log.cleaner.max.cpu.share), each checked once a 300 ms window."""

from __future__ import annotations

from semel.storage.cleaner.worker import Throttler


class Clocks:
    """Wall and CPU time that move only when the test (or a sleep) says so."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.cpu = 5.0
        self.sleeps: list[float] = []

    def work(self, seconds: float) -> None:  # busy: both clocks move
        self.wall += seconds
        self.cpu += seconds

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.wall += seconds


def throttler(c: Clocks, **kw) -> Throttler:
    return Throttler(**kw, clock=lambda: c.wall, cpu_clock=lambda: c.cpu, sleep=c.sleep)


def test_unlimited_never_sleeps():
    c = Clocks()
    t = throttler(c)
    for _ in range(20):
        c.work(0.1)
        t(10 << 20)
    assert c.sleeps == []


def test_bytes_a_second():
    c = Clocks()
    t = throttler(c, rate=1_000_000)
    c.work(0.1)
    t(400_000)  # inside the window: nothing checked yet
    assert c.sleeps == []
    c.work(0.3)
    t(400_000)  # 800 kB in 0.4 s: 0.8 s wanted
    assert len(c.sleeps) == 1 and abs(c.sleeps[0] - 0.4) < 1e-9
    c.work(0.4)
    t(100_000)  # a new window, under the rate
    assert len(c.sleeps) == 1


def test_cpu_share():
    c = Clocks()
    checks = []
    t = throttler(c, cpu_share=0.25, check=lambda: checks.append(c.wall))
    c.work(0.4)
    t(1)  # 0.4 s of CPU at 0.25 of a core wants 1.6 s of wall time
    assert abs(c.sleeps[0] - 1.2) < 1e-9 and len(checks) == 1
    c.wall += 0.5  # waiting on the disk: wall time passes, no CPU
    c.work(0.1)
    t(1)  # 0.1 s of CPU in 0.6 s: within the share
    assert len(c.sleeps) == 1 and len(checks) == 2
    assert abs(t.slept - 1.2) < 1e-9
