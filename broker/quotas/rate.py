"""A rate sampled over windows, and the throttle time of a rate over its quota, as Kafka.

Kafka's ``Rate`` over a ``WindowedSum`` (org.apache.kafka.common.metrics.stats): values are
added to the current sample; a sample is complete ``window_ms`` after it started and the
next record starts a new one, reusing the oldest of ``samples + 1`` slots; a sample whose
last event is ``samples * window_ms`` old is reset. The rate is the sum of the samples over
the time since the oldest sample started, that time counted as at least ``samples - 1``
whole windows (so a client's first burst is measured over ten seconds, not its own few
milliseconds), in units per second.

Throttle time (Kafka's QuotaUtils.throttleTime): a rate O over its bound T measured over a
window W returns to T after a further X ms of silence, O * W / (W + X) = T, so
X = (O - T) / T * W, rounded half up.

Pure: every call takes ``now_ms``; nothing here reads a clock.
"""

from __future__ import annotations

import math


class _Sample:
    __slots__ = ("event_count", "last_event_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.value = 0.0
        self.event_count = 0
        self.start_ms = now_ms
        self.last_event_ms = now_ms


class SampledRate:
    """A sum per window over ``samples`` windows of ``window_ms``, read as a rate per
    second."""

    __slots__ = ("_current", "_samples", "samples", "window_ms")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:  # complete: the next slot
            self._current = (self._current + 1) % (self.samples + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.event_count += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second now."""
        self._purge(now_ms)
        total = 0.0
        for sample in self._samples:
            total += sample.value
        return total / (self.window_size(now_ms) / 1000)

    def window_size(self, now_ms: int) -> int:
        """The time (ms) the rate is measured over: since the oldest sample began, at least
        ``samples - 1`` whole windows, at least 1 ms."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return min(self._samples, key=lambda s: s.start_ms)

    def _purge(self, now_ms: int) -> None:
        """Samples without an event in the last ``samples`` windows start over."""
        expire_age = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)


def throttle_time_ms(rate: SampledRate, bound: float, now_ms: int) -> int:
    """How long (ms) the client must stay silent for ``rate`` to fall back to ``bound``;
    0 while it is within it (Kafka's Quota upper bound: value <= bound is acceptable)."""
    value = rate.measure(now_ms)
    if value <= bound:
        return 0
    return math.floor((value - bound) / bound * rate.window_size(now_ms) + 0.5)
