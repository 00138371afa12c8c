"""What did this change cost? The current tree against a git ref, in paired runs.

``python bench/run.py --baseline REF [--quick|--smoke]`` (or ``python bench/bench_ab.py
--baseline REF``; ``make bench BENCH_BASELINE=REF``) checks REF out into a temporary
``git worktree`` under .cache/ab-worktrees/ (removed afterwards; byte-compiled like the
Makefile does, and any C extension REF declares in pyproject.toml built in place), then
runs the produce rows on a broker started from that tree (the baseline, "A") and on one
started from this working tree, uncommitted changes included (the current tree, "B").

Pairing: for each pair and each row, a fresh baseline broker and a fresh current broker run
the row one right after the other, A then B in even pairs and B then A in odd ones, so
neither side always goes first and a pair's two runs are seconds apart: the slow drift of a
shared VM (CPU steal comes and goes over minutes) cancels in the pair's ratio
current / baseline. The report gives, per row, the median of the pair ratios with the
quartiles, for throughput (MB/s, higher is better) and for the broker's CPU seconds per GB
produced (its process CPU clock: /proc/<pid>/stat's user+system time, in ns; lower is
better, and the robust figure on a 2-core machine whose clients compete with the broker),
plus each side's medians and the clients' cores.
The load generators (bench/clients.py, bench/java/) are this tree's for both sides.

Rows (names of bench/run.py's workloads; default: the 12 of issue 12): librdkafka 1 producer
with no compression (random bytes) and lz4 / zstd (bench/values.py's words), Java
kafka-clients with none / lz4 / zstd, each with 1 KiB and 100 B records. ``--workloads``
picks others (any produce workload of bench/run.py, e.g. produce-1k-4p, idempotent).

Output: bench/results/<time>-ab/ (gitignored): results.json (every run), AB.md (the table,
also printed) and the broker/client logs. ``--render DIR`` rebuilds AB.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import clients, report
from bench.brokers import SemelTarget, import_root
from bench.clients import ClientFailed
from bench.workloads import Sizes

WORKTREES = ROOT / ".cache" / "ab-worktrees"
PACKAGES = ("broker", "protocol", "storage", "coordinator")
DEFAULT_ROWS = ("produce-1k-1p", "produce-1k-lz4", "produce-1k-zstd",
                "produce-100b-1p", "produce-100b-lz4", "produce-100b-zstd",
                "java-1k-none", "java-1k-lz4", "java-1k-zstd",
                "java-100b-none", "java-100b-lz4", "java-100b-zstd")
# pairs, sizes: full ~20 min, quick ~6 min, smoke seconds (2 rows by default). The runs can
# be shorter than bench/run.py's: the pairs, not the run length, beat the noise, and the
# broker's CPU clock has ns resolution
PROFILES = {
    "full": (7, Sizes(produce_mb_1k=256, produce_mb_100b=64, java_mb_1k=128, java_mb_100b=32)),
    "quick": (3, Sizes(produce_mb_1k=128, produce_mb_100b=32, java_mb_1k=64, java_mb_100b=16)),
    "smoke": (1, Sizes(produce_mb_1k=4, produce_mb_100b=1, java_mb_1k=2, java_mb_100b=1)),
}
SMOKE_ROWS = ("produce-1k-zstd", "java-100b-lz4")
THROUGHPUT_FLOOR = 0.90  # issue 12: no more than 10% lower than before


# -- the two trees ------------------------------------------------------------------------------


def git(*args: str, cwd: Path = ROOT, check: bool = True) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_worktree(path: Path) -> None:
    git("worktree", "remove", "--force", str(path), check=False)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    git("worktree", "prune", check=False)


def clean_stale_worktrees() -> None:
    """Worktrees left by an A/B run that was killed (named <sha>-<pid>, pid gone)."""
    if not WORKTREES.is_dir():
        return
    for path in WORKTREES.iterdir():
        pid = path.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            print(f"removing the stale worktree {path}", flush=True)
            remove_worktree(path)
    git("worktree", "prune", check=False)


def compile_tree(root: Path) -> list[str]:
    """Byte-compile (the Makefile's COMPILE) and build the C extensions that ``root``'s
    pyproject.toml declares ([tool.setuptools] ext-modules) in place; notes on what
    happened, for the report."""
    notes = []
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=root,
                   check=True, stdout=subprocess.DEVNULL)
    try:
        import tomllib

        with open(root / "pyproject.toml", "rb") as f:
            exts = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("ext-modules", [])
    except (OSError, ValueError):
        exts = []
    build_lib = import_root(root)[0]  # semel.protocol._recordwalk lands in root/protocol
    for ext in exts:
        name, sources = ext["name"], [str(root / s) for s in ext["sources"]]
        # run outside the tree: setuptools would read its pyproject.toml otherwise
        with tempfile.TemporaryDirectory(prefix="ab-build-") as tmp:
            code = ("import sys; from setuptools import setup, Extension; "
                    f"setup(name='ab', ext_modules=[Extension({name!r}, {sources!r})], "
                    f"script_args=['-q', 'build_ext', '--build-lib', {str(build_lib)!r}, "
                    f"'--build-temp', {tmp!r}])")
            done = subprocess.run([sys.executable, "-c", code], cwd=tmp, check=False,
                                  capture_output=True, text=True)
        notes.append(f"built {name}" if done.returncode == 0 else
                     f"could not build {name} (the tree falls back to what it does without "
                     f"it): {done.stderr.strip()[-300:]}")
    return notes


def extensions(root: Path) -> list[str]:
    """Compiled extension modules in the tree's packages, flagged when older than a
    same-named .c source (a stale build)."""
    out = []
    for pkg in PACKAGES:
        for so in sorted((root / pkg).rglob("*.so")):
            rel = so.relative_to(root)
            c = so.parent / (so.name.split(".")[0] + ".c")
            stale = c.is_file() and c.stat().st_mtime > so.stat().st_mtime
            out.append(f"{rel}" + (" (OLDER than its .c source: stale?)" if stale else ""))
    return out


def check_imports(root: Path) -> None:
    """The packages a broker started from ``root`` imports are ``root``'s."""
    env = SemelTarget("none", root=root).env()
    prefix = import_root(root)[1]
    code = ("import json, importlib; print(json.dumps({m: importlib.import_module(m).__file__ "
            f"for m in {[prefix + p for p in PACKAGES]!r}}}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True,
                          capture_output=True, text=True)
    for module, path in json.loads(done.stdout).items():
        if not Path(path).resolve().is_relative_to(root.resolve()):
            raise RuntimeError(f"a broker started from {root} imports {module} from {path}")


class Baseline:
    """The baseline tree: a git worktree of ``ref`` (removed on exit) or a directory."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.created: Path | None = None
        if Path(ref).is_dir() and (Path(ref) / "broker").is_dir():
            self.root = Path(ref).resolve()
            self.sha = git("rev-parse", "--short=12", "HEAD", cwd=self.root, check=False)
            self.subject = "a directory"
            return
        self.sha = git("rev-parse", "--verify", "--short=12", f"{ref}^{{commit}}")
        subject = git("log", "-1", "--format=%s", self.sha)
        self.subject = subject if len(subject) <= 90 else subject[:88].rstrip() + "…"
        self.root = WORKTREES / f"{self.sha}-{os.getpid()}"

    def __enter__(self) -> Self:
        if self.root.is_dir():
            return self
        clean_stale_worktrees()
        WORKTREES.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", "--quiet", str(self.root), self.sha)
        self.created = self.root
        return self

    def __exit__(self, *exc) -> None:
        if self.created is not None:
            remove_worktree(self.created)


# -- measuring ----------------------------------------------------------------------------------


def run_pairs(rows: dict, baseline: SemelTarget, current: SemelTarget, pairs: int,
              out_dir: Path, runs: list[dict], save) -> None:
    """Appends each run's entry to ``runs`` (and saves) as it completes."""
    log_dir = out_dir / "logs"
    failed: dict[tuple[str, str], int] = {}
    for k in range(pairs):
        order = (baseline, current) if k % 2 == 0 else (current, baseline)
        for row, fn in rows.items():
            if any(failed.get((row, t.name), 0) >= 2 for t in order):
                continue  # this row fails on one side: no more pairs of it
            for target in order:
                entry = {"pair": k + 1, "row": row, "side": target.name}
                os.sync()  # the previous run's dirty pages are written back now
                t0 = time.monotonic()
                broker = None
                try:
                    broker = target.start(log_dir)
                    entry["metrics"] = fn(broker, log_dir)
                except (ClientFailed, RuntimeError, OSError) as e:
                    entry["error"] = f"{type(e).__name__}: {e}"[:600]
                    # a second failure, or a first that ran into the run timeout (a stall
                    # would cost that much every pair), drops the row
                    strikes = 2 if "timed out" in str(e) else 1
                    failed[(row, target.name)] = failed.get((row, target.name), 0) + strikes
                finally:
                    if broker is not None:
                        broker.stop()
                entry["wall_s"] = time.monotonic() - t0
                runs.append(entry)
                save(runs)
                m = entry.get("metrics")
                what = (f"{m['MBps']:8.1f} MB/s  broker {m.get('broker_cpu_s_per_GB', 0):6.2f}"
                        f" CPU s/GB  client {m['client_cores']:.2f} cores" if m else
                        "FAILED " + entry["error"][:200])
                print(f"[pair {k + 1}/{pairs}] {row:18s} {target.name:8s} {what}", flush=True)


# -- the report ---------------------------------------------------------------------------------


def _quartiles(values: list[float]) -> tuple[float, float, float] | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarize(runs: list[dict], rows: list[str]) -> dict:
    """Per row: each side's medians, and the pair ratios current / baseline."""
    out = {}
    for row in rows:
        by_pair: dict[int, dict] = {}
        for r in runs:
            if r["row"] == row and r.get("metrics"):
                by_pair.setdefault(r["pair"], {})[r["side"]] = r["metrics"]
        complete = [p for p in by_pair.values() if {"baseline", "current"} <= set(p)]
        s: dict = {"pairs": len(complete)}
        for side in ("baseline", "current"):
            ms = [p[side] for p in by_pair.values() if side in p]
            for key in ("MBps", "broker_cpu_s_per_GB", "client_cores", "broker_cores"):
                vals = [m[key] for m in ms if isinstance(m.get(key), (int, float))]
                s[f"{side}_{key}"] = statistics.median(vals) if vals else None
        for key in ("MBps", "broker_cpu_s_per_GB"):
            ratios = [p["current"][key] / p["baseline"][key] for p in complete
                      if p["baseline"].get(key) and p["current"].get(key) is not None]
            s[f"ratio_{key}"] = ratios
            s[f"q_{key}"] = _quartiles(ratios)
        out[row] = s
    return out


def _f(v, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def _q(q) -> str:
    if q is None:
        return "—"
    q1, q2, q3 = q
    return f"**{q2:.3f}** [{q1:.3f}, {q3:.3f}]"


def _verdict(s: dict) -> str:
    parts = []
    qm, qc = s["q_MBps"], s["q_broker_cpu_s_per_GB"]
    if qm is not None:
        parts.append("MB/s ok" if qm[1] >= THROUGHPUT_FLOOR else
                     f"MB/s {100 * (qm[1] - 1):+.0f}%, below 0.90")
    if qc is not None:
        change = f"CPU/GB {100 * (qc[1] - 1):+.0f}%"
        if s["pairs"] < 2:
            parts.append(change)
        elif qc[0] > 1.0 or qc[2] < 1.0:
            parts.append(change + " (clear: quartiles on one side of 1)")
        else:
            parts.append(change + " (within the noise)")
    return "; ".join(parts) or "no complete pair"


def markdown(saved: dict) -> str:
    meta, runs = saved["meta"], saved["runs"]
    rows = saved["rows"]
    summary = summarize(runs, rows)
    base, cur = meta["baseline"], meta["current"]
    info = meta["info"]
    steal = info.get("steal_pct")
    out = [
        f"# A/B: the current tree against `{base['ref']}`",
        "",
        (f"Generated by `{meta['command']}` on {meta['started']} (bench/bench_ab.py, profile "
         f"`{meta['profile']}`, {saved['pairs']} pair{'s' if saved['pairs'] != 1 else ''}, semel log.flush.mode="
         f"{meta['flush_mode']}, {meta['minutes']:.0f} minutes)."),
        "",
        (f"- **baseline (A)**: `{base['ref']}` = {base['sha']} ({base['subject']}), run from "
         f"a temporary git worktree" + (f"; {'; '.join(base['notes'])}" if base["notes"] else "")
         + f"; compiled extensions: {', '.join(base['extensions']) or 'none'}"),
        (f"- **current (B)**: the working tree {cur['root']} at {cur['sha']}"
         + (f", with uncommitted changes in {cur['dirty']}" if cur["dirty"] else
            ", no uncommitted changes")
         + f"; compiled extensions: {', '.join(cur['extensions']) or 'none'}"),
        f"- files that differ between them: {base['diff'] or 'none'}",
    ]
    if meta.get("sets"):
        out.append(f"- extra broker settings: {meta['sets']}")
    out += [
        (f"- machine: {info['cpu_model']}, {info['cores']} cores; load average "
         f"{info.get('loadavg_start')} at start, {info.get('loadavg_end')} at end"
         + (f"; CPU stolen by the hypervisor: {steal:.0f}%" if steal is not None else "")),
        (f"- sizes per run: librdkafka {saved['sizes']['produce_mb_1k']} MB of 1 KiB / "
         f"{saved['sizes']['produce_mb_100b']} MB of 100 B records, Java "
         f"{saved['sizes']['java_mb_1k']} MB / {saved['sizes']['java_mb_100b']} MB; 1 "
         "producer, acks=all"),
    ]
    if meta.get("note"):
        out += ["", f"**Note:** {meta['note']}"]
    out += [
        "",
        ("Each pair runs a row on a fresh baseline broker and a fresh current broker back to "
         "back (A B, the next pair B A); a ratio is current / baseline within one pair, and "
         "the table shows the **median** of the pair ratios with the quartiles [Q1, Q3]. "
         "MB/s: above 1 the current tree is faster. Broker CPU s per GB (uncompressed bytes "
         "produced; the broker process's user+system CPU time, all threads): above 1 it "
         "costs more; it is the robust figure here, "
         "as throughput moves with CPU steal and with the clients, which share the cores. "
         f"Verdict: the issue 12 target is MB/s ratio >= {THROUGHPUT_FLOOR:.2f}; a CPU change "
         "is called clear when all of the middle half of the pairs lies on one side of 1."),
        "",
        ("| row | pairs | MB/s A | MB/s B | MB/s B/A | CPU s/GB A | CPU s/GB B | CPU/GB B/A "
         "| client cores A / B | verdict |"),
        "|---|---:|---:|---:|---|---:|---:|---|---:|---|",
    ]
    for row in rows:
        s = summary[row]
        out.append(
            f"| {row} | {s['pairs']} | {_f(s['baseline_MBps'])} | {_f(s['current_MBps'])} "
            f"| {_q(s['q_MBps'])} | {_f(s['baseline_broker_cpu_s_per_GB'], 2)} "
            f"| {_f(s['current_broker_cpu_s_per_GB'], 2)} | {_q(s['q_broker_cpu_s_per_GB'])} "
            f"| {_f(s['baseline_client_cores'], 2)} / {_f(s['current_client_cores'], 2)} "
            f"| {_verdict(s)} |")
    out += [
        "",
        ("Rows: `produce-<size>-1p` librdkafka, no compression, one random value repeated; "
         "`produce-<size>-<codec>` librdkafka with compression.type lz4/zstd; "
         "`java-<size>-<codec>` Java kafka-clients with its defaults (idempotent, 16 KiB "
         "batches, linger.ms 5); the compressed and Java rows send bench/values.py's random "
         "words (about 2x with lz4, 3x with zstd). Medians A and B are over all runs of a "
         "side; a failed run leaves its pair out."),
    ]
    failures = [f"pair {r['pair']} {r['row']} on {r['side']}: {r['error']}"
                for r in runs if r.get("error")]
    if failures:
        out += ["", "## Runs that did not complete", "", *[f"- {f}" for f in failures]]
    out += ["", ("Rerun: `make bench BENCH_BASELINE=<ref>` (full), add `BENCH_ARGS=--quick` for a "
                 "few minutes; `python bench/run.py --render <this dir>` rebuilds this page.")]
    return "\n".join(out) + "\n"


def render(out_dir: Path) -> str:
    saved = json.loads((out_dir / "results.json").read_text())
    text = markdown(saved)
    (out_dir / "AB.md").write_text(text)
    summary = summarize(saved["runs"], saved["rows"])
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    print(text, flush=True)
    return text


# -- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", metavar="REF", help="git ref (or a directory holding a tree) "
                   "to compare the working tree against")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="3 pairs of smaller runs (~6 minutes)")
    g.add_argument("--smoke", action="store_true", help="1 pair, tiny runs, 2 rows (seconds)")
    p.add_argument("--pairs", type=int, help="pairs per row (overrides the profile)")
    p.add_argument("--rounds", type=int, help=argparse.SUPPRESS)  # bench/run.py's name for it
    p.add_argument("--workloads", help="comma list of rows (default: " + ",".join(DEFAULT_ROWS)
                   + ")")
    p.add_argument("--produce-mb", type=int, help="MB per librdkafka run of 1 KiB records")
    p.add_argument("--flush-mode", choices=("none", "fsync"), default="none",
                   help="semel log.flush.mode on both sides (default none: the CPU cost "
                   "without the disk's noise)")
    p.add_argument("--semel-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for both brokers (repeatable)")
    p.add_argument("--baseline-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for the baseline broker only")
    p.add_argument("--current-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for the current broker only")
    p.add_argument("--run-timeout", type=float, default=120.0, metavar="S",
                   help="seconds one run may take before its clients are killed, the run "
                   "counts as failed and its row is not run again (default 120)")
    p.add_argument("--note", default="", help="a sentence for the report")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--render", type=Path, metavar="RESULTS_DIR",
                   help="only rebuild AB.md of an earlier A/B run")
    # bench/run.py flags that mean nothing here, accepted so BENCH_ARGS can stay as it is
    for flag in ("--no-profile", "--no-docs", "--no-peer", "--no-semel-fsync"):
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _interrupted(signum, _frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render:
        render(args.render)
        return 0
    if not args.baseline:
        raise SystemExit("--baseline REF is required")
    # stopped by SIGTERM or SIGINT (even when started in the background, where SIGINT is
    # ignored): brokers, clients and the worktree are cleaned up on the way out
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)
    clients.GROUP_TIMEOUT_S = args.run_timeout
    from bench.run import round_workloads

    profile = "smoke" if args.smoke else "quick" if args.quick else "full"
    pairs, sizes = PROFILES[profile]
    pairs = args.pairs or args.rounds or pairs
    if args.produce_mb:
        sizes = replace(sizes, produce_mb_1k=args.produce_mb)
    table = round_workloads(sizes)
    names = (args.workloads.split(",") if args.workloads else
             list(SMOKE_ROWS if args.smoke else DEFAULT_ROWS))
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"unknown rows: {','.join(unknown)}; choose from {','.join(table)}")
    if any(n.startswith("java-") for n in names):
        from bench import javabench

        if not javabench.available():
            print("java/javac not on PATH: the Java rows are left out", flush=True)
            names = [n for n in names if not n.startswith("java-")]
        else:
            javabench.compile_producer()  # once, before anything is measured
    rows = {n: table[n] for n in names}

    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out_dir = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-ab"
    out_dir.mkdir(parents=True, exist_ok=True)
    info = report.machine_info()
    info["loadavg_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ticks0, t0 = report.cpu_ticks(), time.monotonic()

    with Baseline(args.baseline) as base:
        print(f"A/B {profile}: baseline {args.baseline} = {base.sha} in {base.root}; "
              f"{pairs} pairs of {len(rows)} rows; results in {out_dir}", flush=True)
        base_notes = compile_tree(base.root)
        # this tree: byte-compiled as `make bench` does; its C extensions are used as built
        subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
        check_imports(base.root)
        check_imports(ROOT)
        baseline = SemelTarget(args.flush_mode, [*args.semel_set, *args.baseline_set],
                               root=base.root, name="baseline", label=f"baseline {base.sha}")
        current = SemelTarget(args.flush_mode, [*args.semel_set, *args.current_set],
                              name="current", label="current tree")
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("diff", "--name-only", "HEAD")
        diff = git("diff", "--name-only", base.sha, check=False) if base.sha else ""
        untracked = git("ls-files", "--others", "--exclude-standard", *PACKAGES)
        meta = {
            "kind": "ab", "profile": profile, "started": started, "note": args.note,
            "command": "python bench/run.py " + " ".join(shlex.quote(a) for a in argv),
            "flush_mode": args.flush_mode,
            "sets": "; ".join(filter(None, [
                args.semel_set and f"both: {' '.join(args.semel_set)}",
                args.baseline_set and f"baseline: {' '.join(args.baseline_set)}",
                args.current_set and f"current: {' '.join(args.current_set)}"])),
            "baseline": {"ref": args.baseline, "sha": base.sha, "subject": base.subject,
                         "notes": base_notes, "extensions": extensions(base.root)},
            "current": {"root": str(ROOT), "sha": head,
                        "dirty": ", ".join(dirty.splitlines()),
                        "extensions": extensions(ROOT)},
            "info": info, "minutes": 0.0,
        }
        files = [*diff.splitlines(), *(f"{u} (untracked)" for u in untracked.splitlines())]
        meta["baseline"]["diff"] = ", ".join(files)

        def save(runs: list[dict]) -> None:
            meta["minutes"] = (time.monotonic() - t0) / 60
            (out_dir / "results.json").write_text(json.dumps(
                {"meta": meta, "rows": names, "pairs": pairs, "sizes": asdict(sizes),
                 "runs": runs}, indent=1))

        runs: list[dict] = []
        try:
            run_pairs(rows, baseline, current, pairs, out_dir, runs, save)
        except KeyboardInterrupt:
            meta["note"] = (meta["note"] + " " if meta["note"] else "") + \
                "Interrupted: the table covers the runs completed before."
            print("interrupted: the report covers the runs completed so far", flush=True)
    info["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["steal_pct"] = report.steal_pct(ticks0, report.cpu_ticks())
    save(runs)
    render(out_dir)
    print(f"results in {out_dir}", flush=True)
    complete = all(summarize(runs, names)[n]["pairs"] for n in names)
    return 0 if complete else 1


if __name__ == "__main__":
    raise SystemExit(main())
