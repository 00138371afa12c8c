"""The example's check: what the job must have written, recomputed in plain Python from the
orders produced, compared with what a read_committed consumer finds in the output topics.

``orders-enriched`` must hold every committed order exactly once and no aborted one, each
value equal to its recomputation (``expected_enriched``), keyed by customer id, a customer's
records in one partition in ``seq`` order. ``orders-by-region`` must hold every window the
final watermark has closed exactly once, with its count and sum (``expected_totals``), and
no other. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable

from semel.pipelines.example.orders import (
    CUSTOMERS,
    UNKNOWN_REGION,
    WATERMARK_DELAY_MS,
    WINDOW_MS,
    Customer,
    Order,
    iso_millis,
)


@dataclasses.dataclass(frozen=True)
class OutputRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def expected_enriched(order: Order, customers: dict[str, Customer]) -> dict:
    """The value the job writes for ``order`` (job.enrich, job.enriched_records)."""
    customer = customers.get(order.customer_id)
    discount = customer.discount_pct if customer else 0
    return {
        "order_id": order.order_id, "customer_id": order.customer_id, "seq": order.seq,
        "event_time": order.event_time, "amount_cents": order.amount_cents,
        "discount_pct": discount, "net_cents": order.amount_cents * (100 - discount) // 100,
        "customer_name": customer.name if customer else None,
        "region": customer.region if customer else UNKNOWN_REGION,
        "tier": customer.tier if customer else None,
    }


def expected_totals(orders: Iterable[Order], customers: dict[str, Customer]) -> dict:
    """(region, window start) -> the value the job writes for that window, for the windows
    the watermark has closed once all of ``orders`` are read: the watermark is the latest
    event time less the delay, and a window is written when its end is at or below it (as
    Spark does). Spark drops rows older than the watermark of their micro-batch; the demo's
    orders are never that late (``orders.JITTER_MS`` is well below the delay)."""
    orders = list(orders)
    if not orders:
        return {}
    watermark = max(o.event_time_ms for o in orders) - WATERMARK_DELAY_MS
    sums: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for order in orders:
        value = expected_enriched(order, customers)
        start = order.event_time_ms - order.event_time_ms % WINDOW_MS
        total = sums[(value["region"], start)]
        total[0] += 1
        total[1] += value["net_cents"]
    return {
        (region, iso_millis(start)): {
            "region": region, "window_start": iso_millis(start),
            "window_end": iso_millis(start + WINDOW_MS), "orders": count, "net_cents": net}
        for (region, start), (count, net) in sums.items() if start + WINDOW_MS <= watermark
    }


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Output records against expected ones: ``duplicates`` are records of an id already
    seen, ``unexpected`` records of an id not expected (an aborted order, a window still
    open), with a wrong value or key, or unreadable; ``missing`` expected ids never seen."""

    expected: int
    out: int
    duplicates: int
    missing: int
    unexpected: int
    order_violations: int = 0

    @property
    def ok(self) -> bool:
        return self.duplicates == self.missing == self.unexpected == self.order_violations == 0


def _sorted(output: Iterable[OutputRecord]) -> list[OutputRecord]:
    return sorted(output, key=lambda r: (r.partition, r.offset))


def _json(value: bytes | None):
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return None


def _compare(expected: dict, output: list[OutputRecord], identify, key_of) -> Comparison:
    """``identify(value)`` names an output value's record (None: unreadable);
    ``key_of(value)`` is the key it must have."""
    seen: set = set()
    duplicates = unexpected = 0
    for record in output:
        value = _json(record.value)
        ident = identify(value) if isinstance(value, dict) else None
        try:
            hash(ident)
        except TypeError:  # JSON that is no record of ours
            ident = None
        if ident in seen:
            duplicates += 1
        elif ident not in expected or value != expected[ident] or record.key != key_of(value):
            unexpected += 1
        else:
            seen.add(ident)
    return Comparison(expected=len(expected), out=len(output), duplicates=duplicates,
                      missing=len(expected) - len(seen), unexpected=unexpected)


def order_violations(output: Iterable[OutputRecord]) -> int:
    """Breaks of per-key order: a record whose ``seq`` is not above the previous one of its
    key in the same partition, and each partition past the first a key appears in."""
    last: dict[bytes | None, tuple[int, int]] = {}  # key -> (partition, seq)
    partitions: dict[bytes | None, set[int]] = defaultdict(set)
    violations = 0
    for record in _sorted(output):
        value = _json(record.value)
        seq = value.get("seq") if isinstance(value, dict) else None
        if not isinstance(seq, int):
            continue  # unreadable: counted as unexpected
        partitions[record.key].add(record.partition)
        previous = last.get(record.key)
        if previous is not None and previous[0] == record.partition and seq <= previous[1]:
            violations += 1
        last[record.key] = (record.partition, seq)
    return violations + sum(len(p) - 1 for p in partitions.values())


def check_enriched(committed: Iterable[Order], output: Iterable[OutputRecord],
                   customers: Iterable[Customer] = CUSTOMERS) -> Comparison:
    table = {c.customer_id: c for c in customers}
    expected = {o.order_id: expected_enriched(o, table) for o in committed}
    output = _sorted(output)
    result = _compare(expected, output, lambda v: v.get("order_id"),
                      lambda v: str(v.get("customer_id")).encode())
    return dataclasses.replace(result, order_violations=order_violations(output))


def check_totals(committed: Iterable[Order], output: Iterable[OutputRecord],
                 customers: Iterable[Customer] = CUSTOMERS) -> Comparison:
    expected = expected_totals(committed, {c.customer_id: c for c in customers})
    return _compare(expected, _sorted(output),
                    lambda v: (v.get("region"), v.get("window_start")),
                    lambda v: str(v.get("region")).encode())


@dataclasses.dataclass(frozen=True)
class Report:
    records_in: int
    committed: int
    enriched: Comparison
    totals: Comparison | None  # None when the job ran without the per-region totals

    @property
    def ok(self) -> bool:
        return self.enriched.ok and (self.totals is None or self.totals.ok)

    def summary(self, note: str = "") -> str:
        """One line; ``note`` goes before the verdict."""
        e = self.enriched
        line = (f"pipeline: records in {self.records_in} (committed {self.committed}, "
                f"aborted {self.records_in - self.committed}), out {e.out}, duplicates "
                f"{e.duplicates}, missing {e.missing}, unexpected {e.unexpected}, order "
                f"violations {e.order_violations}")
        if self.totals is not None:
            t = self.totals
            line += (f"; region windows expected {t.expected}, out {t.out}, duplicates "
                     f"{t.duplicates}, missing {t.missing}, unexpected {t.unexpected}")
        if note:
            line += f"; {note}"
        return f"{line}: {'ok' if self.ok else 'FAILED'}"


def check(produced: Iterable[tuple[Order, bool]], enriched: Iterable[OutputRecord],
          totals: Iterable[OutputRecord] | None,
          customers: Iterable[Customer] = CUSTOMERS) -> Report:
    """``produced``: every order written to the input, with whether its transaction
    committed; ``totals`` None when the job ran without the per-region totals."""
    produced = list(produced)
    committed = [o for o, was_committed in produced if was_committed]
    customers = list(customers)
    return Report(
        records_in=len(produced), committed=len(committed),
        enriched=check_enriched(committed, enriched, customers),
        totals=None if totals is None else check_totals(committed, totals, customers))
