"""The CI profile of the chaos suite (runner.py's ci_profile): each scenario runs real
clients against a broker subprocess behind the fault proxy while the seeded nemesis kills,
pauses, resets, fills the disk, fails fsyncs and cuts power; then the checker judges the
history and the final read of every topic (a compacted one by the compaction rules, and its
scenario must have had cleanings that removed committed and aborted records). The mutation tests run the same pipeline against a
broker with a bug injected on purpose and require the checker to catch it.

Not flaky by construction: fixed seeds (the order and parameters of the faults), generous
client timeouts, workloads that stop by themselves, and only safety is asserted (plus that
the run did something): no anomaly, no liveness failure. A failure prints the run's
one-screen summary; the history, final read and logs stay under the pytest temp dir.
"""

from __future__ import annotations

import pytest

from tests.chaos.runner import ci_profile, mutation_profile, run_scenario
from tests.javaclient import require_java

SEEDS = {
    "ci-idempotent-cli": 101,
    "ci-queue": 102,
    "ci-copier-confluent": 103,
    "ci-copier-java": 104,
    "ci-flush-none": 105,
    "ci-compacted": 106,
}


@pytest.mark.parametrize("scenario", ci_profile(), ids=lambda s: s.name)
def test_chaos_ci(scenario, tmp_path):
    if "copier-java" in scenario.workloads:
        require_java()
    result = run_scenario(scenario, SEEDS[scenario.name], tmp_path)
    assert result.ok, "\n" + result.summary
    ops, faults = result.report.operations, result.report.faults
    assert ops["send ok"] > 100, result.summary
    injected = sum(n for kind, n in faults.items() if kind not in ("start", "restart"))
    assert injected >= 3, result.summary
    if any(w.startswith("copier") for w in scenario.workloads):
        assert ops["txn committed"] > 0, result.summary
    if "compacted" in scenario.workloads:
        # the cleaner ran during the faults and removed records the checker then judged
        assert result.cleanings.get("compact", 0) >= 3, result.summary
        assert ops["compaction: committed records removed"] > 0, result.summary
        assert ops["compaction: aborted records removed"] > 0, result.summary


@pytest.mark.parametrize("scenario,expected", mutation_profile(),
                         ids=lambda x: getattr(x, "name", ""))
def test_chaos_catches_an_injected_broker_bug(scenario, expected, tmp_path):
    """End to end, the suite is able to fail: against a broker made wrong on purpose
    (faulty_broker.py's inject_bug) the checker reports the anomalies the bug causes."""
    result = run_scenario(scenario, 7, tmp_path)
    assert expected <= result.report.kinds(), "\n" + result.summary
