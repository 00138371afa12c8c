"""The example pipeline (pipelines.example) end to end, as ``make pipeline`` runs it but smaller,
and its check fed doctored output, so that a passing check means something."""

from __future__ import annotations

import dataclasses
import json

import pytest

from semel.broker.testing import BrokerThread
from semel.pipelines.example import check
from semel.pipelines.example.demo import run_demo
from semel.pipelines.example.orders import CUSTOMERS

ORDERS = 1000


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory):
    with BrokerThread(tmp_path_factory.mktemp("semel")) as broker:
        yield run_demo(spark, broker.bootstrap, tmp_path_factory.mktemp("pipeline"),
                       orders=ORDERS, max_offsets_per_trigger=None)


def recheck(demo, enriched=None, totals=None) -> check.Report:
    return check.check(demo.produced, demo.enriched if enriched is None else enriched,
                       demo.totals if totals is None else totals)


def test_every_committed_order_once_and_no_aborted_one(demo):
    report = demo.report
    assert report.ok, demo.summary()
    assert report.records_in == ORDERS
    assert 0 < report.committed < ORDERS  # some transactions were aborted
    assert report.enriched.out == report.committed
    assert report.totals.expected > 0 and report.totals.out == report.totals.expected
    assert demo.summary().endswith(": ok")


def test_second_run_resumed_from_the_checkpoint_and_replayed_its_last_batch(demo):
    first, second = demo.batches
    assert set(first) == set(second) == {"enriched", "by-region"}
    for query in first:
        assert second[query][0] == first[query][-1]  # replayed: its commit was removed
        assert second[query][-1] > first[query][-1]  # then went on with the new input
    assert demo.replayed == 2


def test_output_is_not_vacuous(demo):
    keys = {r.key for r in demo.enriched}
    assert len(keys) > len(CUSTOMERS) // 2
    assert len({r.partition for r in demo.enriched}) > 1
    report = recheck(demo, enriched=[], totals=[])
    assert not report.ok
    assert report.enriched.missing == report.committed
    assert report.totals.missing == report.totals.expected


def test_check_counts_a_duplicate(demo):
    copy = dataclasses.replace(demo.enriched[10], offset=10**9)
    report = recheck(demo, enriched=[*demo.enriched, copy])
    assert (report.enriched.duplicates, report.enriched.missing) == (1, 0)
    assert not report.ok and report.summary().endswith(": FAILED")


def test_check_counts_a_missing_record(demo):
    report = recheck(demo, enriched=demo.enriched[:10] + demo.enriched[11:])
    assert (report.enriched.missing, report.enriched.duplicates,
            report.enriched.unexpected) == (1, 0, 0)
    assert not report.ok


def test_check_counts_an_aborted_order(demo):
    aborted = next(order for order, committed in demo.produced if not committed)
    table = {c.customer_id: c for c in CUSTOMERS}
    leaked = check.OutputRecord(0, 10**9, aborted.key(),
                                json.dumps(check.expected_enriched(aborted, table)).encode())
    report = recheck(demo, enriched=[*demo.enriched, leaked])
    assert (report.enriched.unexpected, report.enriched.missing) == (1, 0)
    assert not report.ok


def test_check_counts_a_wrong_value(demo):
    record = demo.enriched[3]
    value = json.loads(record.value)
    value["net_cents"] += 1
    wrong = dataclasses.replace(record, value=json.dumps(value).encode())
    report = recheck(demo, enriched=[*demo.enriched[:3], wrong, *demo.enriched[4:]])
    assert (report.enriched.unexpected, report.enriched.missing) == (1, 1)
    assert not report.ok


def test_check_counts_an_order_violation(demo):
    by_key = {}
    for i, record in enumerate(demo.enriched):
        by_key.setdefault((record.partition, record.key), []).append(i)
    i, j = next(ids[:2] for ids in by_key.values() if len(ids) >= 2)
    swapped = list(demo.enriched)
    swapped[i] = dataclasses.replace(demo.enriched[i], offset=demo.enriched[j].offset)
    swapped[j] = dataclasses.replace(demo.enriched[j], offset=demo.enriched[i].offset)
    report = recheck(demo, enriched=swapped)
    assert report.enriched.order_violations >= 1
    assert (report.enriched.duplicates, report.enriched.missing,
            report.enriched.unexpected) == (0, 0, 0)
    assert not report.ok


def test_check_counts_window_mistakes(demo):
    totals = demo.totals
    duplicated = recheck(demo, totals=[*totals, dataclasses.replace(totals[0], offset=10**9)])
    assert (duplicated.totals.duplicates, duplicated.totals.missing) == (1, 0)
    dropped = recheck(demo, totals=totals[1:])
    assert (dropped.totals.missing, dropped.totals.unexpected) == (1, 0)
    # a window the final watermark has not closed must not have been written yet
    last = max(totals, key=lambda r: json.loads(r.value)["window_start"])
    value = json.loads(last.value)
    value["window_start"], value["window_end"] = value["window_end"], "9999-12-31T00:00:00.000Z"
    early = recheck(demo, totals=[*totals, dataclasses.replace(
        last, offset=10**9, value=json.dumps(value).encode())])
    assert (early.totals.unexpected, early.totals.missing) == (1, 0)
    assert not (duplicated.ok or dropped.ok or early.ok)
