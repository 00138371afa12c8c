"""Per-client quota enforcement for one quota type, as Kafka's ClientQuotaManager.

A quota is set for an entity of user and client-id parts, each a name or the default
(``DEFAULT``). A client (user principal name, client id) gets the most specific quota, in
Kafka's order:

    /config/users/<user>/clients/<client-id>   /config/users/<user>/clients/<default>
    /config/users/<user>                       /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>  /config/users/<default>
    /config/clients/<client-id>                /config/clients/<default>

Usage is measured by a SampledRate per *metric tags* (user, client-id) rather than per
client: Kafka's tags name the entity whose quota applies, so clients sharing a user quota
share one rate, while each client id under a ``<default>`` client quota has its own. When
only one level of entity is in use the tags follow from it alone (the ``enabled`` bit set,
as Kafka's quotaTypesEnabled); with several the lookup above picks them.

``record(user, client_id, value, now_ms)`` adds the value and returns the throttle time (0
within the quota); ``unrecord`` takes a value back (a throttled fetch returns no data);
``max_value_in_window`` is what can be recorded at once without a certain throttle (the
fetch size cap). The request quota's throttle is capped at one window (Kafka's
ClientRequestQuotaManager). Pure: callers pass the time.
"""

from __future__ import annotations

from semel.broker.quotas.rate import SampledRate, throttle_time_ms

CLIENT_ID_QUOTA_ENABLED = 1
USER_QUOTA_ENABLED = 2
USER_CLIENT_ID_QUOTA_ENABLED = 4
# a rate unused this long is dropped (Kafka expires quota sensors after an hour)
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000
SWEEP_INTERVAL_MS = 60_000


class _Default:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<default>"


DEFAULT = _Default()  # the default user or client id of an entity (Kafka's <default>)
Part = str | _Default | None  # a name, the default, or absent


class _Sensor:
    __slots__ = ("bound", "last_ms", "rate")

    def __init__(self, rate: SampledRate, bound: float | None, now_ms: int) -> None:
        self.rate = rate
        self.bound = bound
        self.last_ms = now_ms


class ClientQuotaManager:
    """Quotas of one type (produce bytes, fetch bytes or request time) and the rates of
    the clients they apply to."""

    def __init__(self, quota_type: str, samples: int, window_ms: int,
                 max_throttle_ms: int | None = None) -> None:
        self.quota_type = quota_type
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        self.overridden: dict[tuple[Part, Part], float] = {}
        self.enabled = 0  # the entity levels in use (bit set)
        self._sensors: dict[tuple[str, str], _Sensor] = {}
        self._last_sweep_ms = 0
        # throttles applied with this type as the cause: count and total ms (metrics)
        self.throttled = 0
        self.throttle_ms_total = 0

    # -- configuration ---------------------------------------------------------------------

    def set_quotas(self, quotas: dict[tuple[Part, Part], float]) -> None:
        """Replace every quota of this type; the measured rates are kept, their bounds (and
        which rate a client uses, when the levels in use change) follow."""
        self.overridden = dict(quotas)
        enabled = 0
        for user, client in quotas:
            if user is not None and client is not None:
                enabled |= USER_CLIENT_ID_QUOTA_ENABLED
            elif user is not None:
                enabled |= USER_QUOTA_ENABLED
            elif client is not None:
                enabled |= CLIENT_ID_QUOTA_ENABLED
        self.enabled = enabled
        for tags, sensor in self._sensors.items():
            sensor.bound = self.quota_limit(tags)

    # -- resolution ------------------------------------------------------------------------

    def metric_tags(self, user: str, client_id: str) -> tuple[str, str]:
        """(user, client id) naming the rate this client's usage is recorded in; "" for a
        part the applicable quota does not depend on (Kafka's quotaMetricTags)."""
        enabled = self.enabled
        if enabled in (0, CLIENT_ID_QUOTA_ENABLED):
            return "", client_id
        if enabled == USER_QUOTA_ENABLED:
            return user, ""
        if enabled == USER_CLIENT_ID_QUOTA_ENABLED:
            return user, client_id
        q = self.overridden
        if (user, client_id) in q or (user, DEFAULT) in q:
            return user, client_id
        if (user, None) in q:
            return user, ""
        if (DEFAULT, client_id) in q or (DEFAULT, DEFAULT) in q:
            return user, client_id
        if (DEFAULT, None) in q:
            return user, ""
        return "", client_id

    def quota_limit(self, tags: tuple[str, str]) -> float | None:
        """The bound of the rate named by ``tags``; None: no quota applies."""
        user, client_id = tags
        q = self.overridden
        if user and client_id:
            for key in ((user, client_id), (user, DEFAULT), (DEFAULT, client_id),
                        (DEFAULT, DEFAULT)):
                if key in q:
                    return q[key]
            return None
        if user:
            return q.get((user, None), q.get((DEFAULT, None)))
        if client_id:
            return q.get((None, client_id), q.get((None, DEFAULT)))
        return None

    # -- recording -------------------------------------------------------------------------

    def _sensor(self, user: str, client_id: str, now_ms: int) -> _Sensor:
        tags = self.metric_tags(user, client_id)
        sensor = self._sensors.get(tags)
        if sensor is None:
            if now_ms - self._last_sweep_ms >= SWEEP_INTERVAL_MS:
                self._sweep(now_ms)
            sensor = self._sensors[tags] = _Sensor(
                SampledRate(self.samples, self.window_ms), self.quota_limit(tags), now_ms)
        sensor.last_ms = now_ms
        return sensor

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Add ``value`` to the client's rate; the throttle time in ms (0 within quota)."""
        sensor = self._sensor(user, client_id, now_ms)
        sensor.rate.record(value, now_ms)
        if sensor.bound is None:
            return 0
        ms = throttle_time_ms(sensor.rate, sensor.bound, now_ms)
        if self.max_throttle_ms is not None and ms > self.max_throttle_ms:
            return self.max_throttle_ms
        return ms

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a value recorded (a throttled fetch sends no data)."""
        self._sensor(user, client_id, now_ms).rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most that can be recorded at once without being throttled for certain:
        the quota over ``samples - 1`` windows; None without a quota."""
        bound = self.quota_limit(self.metric_tags(user, client_id))
        if bound is None:
            return None
        return bound * (self.samples - 1) * self.window_ms / 1000

    def throttled_for(self, throttle_ms: int) -> None:
        """A response of a client was throttled with this type as the cause."""
        self.throttled += 1
        self.throttle_ms_total += throttle_ms

    def _sweep(self, now_ms: int) -> None:
        self._last_sweep_ms = now_ms
        for tags in [t for t, s in self._sensors.items()
                     if now_ms - s.last_ms >= INACTIVE_SENSOR_EXPIRATION_MS]:
            del self._sensors[tags]
