"""Client quotas: the configuration (AlterClientQuotas / DescribeClientQuotas) and the
per-client enforcement of Kafka's three client quota types.

- ``store.py``: entities and values, Kafka's validation, the file in the data directory.
- ``manager.py``: one ClientQuotaManager per type (quota resolution, rates, throttle time).
- ``rate.py``: Kafka's sampled rate and throttle-time formula.

``ClientQuotas`` holds them for a broker: ``produce`` (producer_byte_rate, the request
frame's bytes), ``fetch`` (consumer_byte_rate, the response's bytes), ``request``
(request_percentage, the event loop time a request took, as a percentage of a second).
``enabled`` is False while no user / client-id quota of these keys exists: the request path
then pays one attribute read (the produce fast path is taken only then). A change applies at
once: the managers' quotas are replaced after the file is written.

``controller_mutation_rate`` (user / client-id) and ``connection_creation_rate`` (ip) are
validated, stored and described as Kafka does but not enforced: semel throttles neither
topic mutations nor connection creation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from semel.broker.quotas.manager import DEFAULT, ClientQuotaManager
from semel.broker.quotas.store import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
    QuotaError,
    QuotaStore,
    describe_filter,
    entity_text,
    is_ip_literal,
    matches,
    validate_alteration,
)
from semel.protocol.errors import Error

__all__ = ["ClientQuotas", "QuotaError"]

# quota type -> the key it enforces
TYPES = {"produce": PRODUCER_BYTE_RATE, "fetch": CONSUMER_BYTE_RATE,
         "request": REQUEST_PERCENTAGE}
NANOS_TO_PERCENTAGE = 100 / 1e9


class ClientQuotas:
    def __init__(self, data_dir: str | Path, fs=None, *, samples: int = 11,
                 window_seconds: int = 1) -> None:
        window_ms = window_seconds * 1000
        self.store = QuotaStore(data_dir, fs)
        self.produce = ClientQuotaManager("produce", samples, window_ms)
        self.fetch = ClientQuotaManager("fetch", samples, window_ms)
        # Kafka caps a request-time throttle at one window
        self.request = ClientQuotaManager("request", samples, window_ms,
                                          max_throttle_ms=window_ms)
        self.enabled = False

    @classmethod
    def from_config(cls, config, fs=None) -> ClientQuotas:
        return cls(config.log_dirs, fs, samples=config.quota_window_num,
                   window_seconds=config.quota_window_size_seconds)

    def load(self) -> None:
        self.store.load()
        self._publish()

    def managers(self) -> dict[str, ClientQuotaManager]:
        return {"produce": self.produce, "fetch": self.fetch, "request": self.request}

    # -- AlterClientQuotas / DescribeClientQuotas ------------------------------------------

    def alter(self, entries: list[tuple[Entity, list[tuple[str, float | None]]]],
              validate_only: bool,
              valid_ip: Callable[[str], bool] = is_ip_literal) -> list[tuple[Entity, Error, str | None]]:
        """Validate and (unless ``validate_only``) apply alterations, each an entity and its
        ops (key, value; None removes). One result per distinct entity, in first-seen
        order, as Kafka's ClientQuotaControlManager: a repeated key fails its entity, a
        repeated entity answers "Ignoring duplicate entity" (the first one's changes stay)."""
        results: dict[Entity, tuple[Error, str | None]] = {}
        changes: dict[Entity, dict[str, float | None]] = {}
        for entity, ops in entries:
            alterations: dict[str, float | None] = {}
            for key, value in ops:
                if key in alterations:
                    results[entity] = (Error.INVALID_REQUEST, None)  # replaced just below
                else:
                    alterations[key] = value
            if entity in results:
                results[entity] = (Error.INVALID_REQUEST,
                                   f"Ignoring duplicate entity {entity_text(entity)}")
                continue
            try:
                validate_alteration(entity, alterations, valid_ip)
            except QuotaError as e:
                results[entity] = (e.code, e.message)
                continue
            current = self.store.entities.get(entity, {})
            effective = {k: v for k, v in alterations.items()
                         if (v is None and k in current) or (v is not None and current.get(k) != v)}
            if effective:
                changes[entity] = effective
            results[entity] = (Error.NONE, None)
        if changes and not validate_only:
            self.store.apply(changes)
            self._publish()
        return [(entity, code, message) for entity, (code, message) in results.items()]

    def describe(self, components: list[tuple[str, int, str | None]], strict: bool
                 ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities a filter selects with their values; raises QuotaError."""
        exact, present = describe_filter(components)
        return [(entity, dict(values)) for entity, values in self.store.entities.items()
                if matches(entity, exact, present, strict)]

    # -- enforcement -----------------------------------------------------------------------

    def _publish(self) -> None:
        """Hand each manager the quotas of its key (user / client-id entities only)."""
        by_type: dict[str, dict] = {name: {} for name in TYPES}
        for entity, values in self.store.entities.items():
            parts = dict(entity)
            if USER not in parts and CLIENT_ID not in parts:
                continue  # ip entities: connection_creation_rate only
            user = _part(parts, USER)
            client = _part(parts, CLIENT_ID)
            for name, key in TYPES.items():
                if key in values:
                    by_type[name][(user, client)] = values[key]
        for name, manager in self.managers().items():
            manager.set_quotas(by_type[name])
        self.enabled = any(manager.enabled for manager in self.managers().values())


def _part(parts: dict, kind: str):
    if kind not in parts:
        return None
    name = parts[kind]
    return DEFAULT if name is None else name
