"""The example's data: the customers reference table and the orders the demo produces.

An order is one JSON value on the ``orders`` topic, keyed by its customer id::

    {"order_id": "o000042", "customer_id": "c07", "seq": 3, "amount_cents": 1999,
     "event_time": "2026-01-05T09:00:25.125Z"}

``seq`` numbers a customer's orders 1, 2, 3... in the order they are produced; ``event_time``
is when the order was placed (ISO-8601, UTC, milliseconds), a little out of order as real
events are. Nothing here uses Spark: the demo produces these, the checker recomputes the
job's output from them.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime

# the job's event-time windows and how far its watermark trails the latest event time
WINDOW_MS = 60_000
WATERMARK_DELAY_MS = 120_000
UNKNOWN_REGION = "unknown"  # an order's region when its customer is not in the table

# a customer's discount follows its tier; region and tier are what the job adds to an order
TIER_DISCOUNT_PCT = {"bronze": 0, "silver": 5, "gold": 12}
REGIONS = ("emea", "amer", "apac")


@dataclass(frozen=True)
class Customer:
    customer_id: str
    name: str
    region: str
    tier: str
    discount_pct: int


def _customers(count: int) -> tuple[Customer, ...]:
    tiers = ("bronze", "silver", "gold", "bronze", "silver")  # fewer gold customers
    customers = []
    for i in range(count):
        tier = tiers[i % len(tiers)]
        customers.append(Customer(f"c{i:02d}", f"Customer {i:02d}", REGIONS[i % len(REGIONS)],
                                  tier, TIER_DISCOUNT_PCT[tier]))
    return tuple(customers)


CUSTOMERS = _customers(40)
# orders also come from customers the reference table does not know (a new sign-up): the job
# keeps them (a left join), with region "unknown" and no discount
UNKNOWN_CUSTOMERS = ("c90", "c91")


@dataclass(frozen=True)
class Order:
    order_id: str
    customer_id: str
    seq: int
    amount_cents: int
    event_time_ms: int

    @property
    def event_time(self) -> str:
        return iso_millis(self.event_time_ms)

    def key(self) -> bytes:
        return self.customer_id.encode()

    def value(self) -> bytes:
        return json.dumps({
            "order_id": self.order_id, "customer_id": self.customer_id, "seq": self.seq,
            "amount_cents": self.amount_cents, "event_time": self.event_time,
        }).encode()


@dataclass(frozen=True)
class Transaction:
    """Orders the demo's producer writes in one Kafka transaction, then commits or aborts."""

    orders: tuple[Order, ...]
    commit: bool


def iso_millis(epoch_ms: int) -> str:
    """``2026-01-05T09:00:25.125Z``: Spark's JSON timestamp format with timeZone UTC."""
    moment = datetime.fromtimestamp(epoch_ms // 1000, UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{epoch_ms % 1000:03d}Z"


START_MS = 1_767_603_600_000  # 2026-01-05T09:00:00Z: a fixed clock, so every run is the same
SPACING_MS = 600  # between consecutive orders; 4,000 orders span 40 minutes
JITTER_MS = 15_000  # an order's event time is up to this much later than its place in line


def generate(count: int, seed: int = 7, per_transaction: int = 25,
             abort_every: int = 6) -> list[Transaction]:
    """``count`` orders in transactions of ``per_transaction``; every ``abort_every``-th
    transaction, on average, is aborted (its orders keep their ids and sequence numbers,
    which the output must then never show)."""
    rng = random.Random(seed)
    customer_ids = [c.customer_id for c in CUSTOMERS] + list(UNKNOWN_CUSTOMERS)
    weights = [10] * len(CUSTOMERS) + [1] * len(UNKNOWN_CUSTOMERS)
    seqs = dict.fromkeys(customer_ids, 0)
    orders = []
    for i in range(count):
        customer_id = rng.choices(customer_ids, weights)[0]
        seqs[customer_id] += 1
        orders.append(Order(
            order_id=f"o{i:06d}",
            customer_id=customer_id,
            seq=seqs[customer_id],
            amount_cents=rng.randint(100, 50_000),
            event_time_ms=START_MS + i * SPACING_MS + rng.randint(0, JITTER_MS),
        ))
    return [Transaction(tuple(orders[i:i + per_transaction]), rng.randrange(abort_every) != 0)
            for i in range(0, count, per_transaction)]
