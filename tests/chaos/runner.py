"""Run chaos scenarios: broker + proxy + workloads + nemesis, then the final read and checker.

    python -m tests.chaos.runner --profile ci            # the CI scenarios (also pytest)
    python -m tests.chaos.runner --profile long --duration 1800   # `make chaos`
    options: --seed N, --out DIR (default tests/chaos/out), --only NAME (repeatable),
             --request-log (every frame through the proxy into requests.log),
             --recheck RUN_DIR (the checker again over a finished run)

Each scenario gets `<out>/<name>-s<seed>-<time>/` with history.jsonl (every event, time
ordered), final.json (the final read), scenario.json, summary.txt (the one-screen summary),
broker.log, clients.log and copier stderr. Exit status 1 if any scenario found an anomaly or did not
finish (a liveness failure: copiers that never caught up, a broker that exited by itself,
partitions with transactions still open after the timeout).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from semel.protocol.errors import Error
from tests.chaos.checker import FinalRead, Report, check, summarize
from tests.chaos.final_read import final_read, wait_stable
from tests.chaos.history import History, merge, read_events, write_events
from tests.chaos.nemesis import Nemesis
from tests.chaos.target import Target
from tests.chaos.workloads.common import TRANSACTION_TIMEOUT_MS, client_logger
from tests.chaos.workloads.compacted import CompactedWorkload
from tests.chaos.workloads.copier import CopierWorkload
from tests.chaos.workloads.idempotent import IdempotentWorkload
from tests.chaos.workloads.queue import QueueWorkload
from tests.kafka_wire import KafkaWire, create_topic

OUT = Path(__file__).resolve().parent / "out"
ALL_FAULTS = ["kill", "kill_after_commit", "kill_at_prepare", "pause", "proxy_delay",
              "proxy_slow_one", "proxy_blackhole", "proxy_reset", "disk_full", "torn_write",
              "short_write", "fsync_fail", "txn_log_fault", "power_loss", "copier_kill"]
DISK_FAULTS = ["disk_full", "torn_write", "short_write", "fsync_fail", "txn_log_fault"]
PROXY_FAULTS = ["proxy_delay", "proxy_slow_one", "proxy_blackhole", "proxy_reset"]
# the broker's line for each cleaning (storage/cleaner/cleaner.py)
CLEANED = re.compile(r"(\S+)-\d+: cleaned offsets \[")


@dataclass
class Scenario:
    name: str
    duration_s: float
    workloads: list[str]  # idempotent, queue, compacted, copier-confluent, copier-java
    faults: list[str]
    faulty: bool = True  # the faulty-fs entry point; False: the real CLI
    flush_mode: str = "fsync"
    copier_count: int = 4000
    copier_seed_rate: float = 300.0
    idempotent_rate: float = 100.0
    gap_s: tuple[float, float] = (1.0, 2.5)
    pause_s: tuple[float, float] = (6.0, 8.0)
    copier_deadline_s: float = 150.0
    bugs: tuple[str, ...] = ()  # broker bugs injected on purpose (mutation tests)
    overrides: dict[str, str] = field(default_factory=dict)  # broker configs (target.py's too)


def ci_profile() -> list[Scenario]:
    return [
        Scenario("ci-idempotent-cli", 20, ["idempotent"],
                 ["kill", "pause", *PROXY_FAULTS], faulty=False, idempotent_rate=150),
        Scenario("ci-queue", 25, ["queue", "idempotent"],
                 ["kill", "kill_after_commit", "kill_at_prepare", "pause", "proxy_slow_one",
                  "proxy_reset", "proxy_blackhole", "disk_full", "fsync_fail", "power_loss"],
                 idempotent_rate=40),
        Scenario("ci-copier-confluent", 25, ["copier-confluent"],
                 ["kill", "kill_after_commit", "kill_at_prepare", "copier_kill", "pause",
                  "proxy_reset", "power_loss"], copier_count=4000),
        Scenario("ci-copier-java", 25, ["copier-java"],
                 ["kill", "kill_after_commit", "kill_at_prepare", "copier_kill",
                  "proxy_reset", "proxy_slow_one", "power_loss"], copier_count=3000),
        Scenario("ci-flush-none", 15, ["idempotent", "queue"],
                 ["power_loss", "kill", "proxy_reset"], flush_mode="none", idempotent_rate=60),
        # the cleaner's key map holds 6 keys: every cleaning of the compacted topic's
        # 8 keys a partition takes rounds
        Scenario("ci-compacted", 15, ["compacted"],
                 ["kill", "kill_after_commit", "kill_at_prepare", "proxy_reset", "power_loss",
                  "disk_full"], gap_s=(1.0, 2.0),
                 overrides={"log.cleaner.dedupe.buffer.size": "1024"}),
    ]


def mutation_profile() -> list[tuple[Scenario, set[str]]]:
    """The suite against brokers made wrong on purpose, with the anomalies it must report:
    read_committed up to the high watermark; segment fsyncs that make nothing durable."""
    return [
        (Scenario("mutant-lso-is-hw", 10, ["queue"], ["proxy_reset"], bugs=("lso_is_hw",),
                  gap_s=(3.0, 4.0)), {"aborted_read", "undecided_read"}),
        (Scenario("mutant-fsync-lies", 10, ["idempotent"], ["power_loss"],
                  bugs=("fsync_lies",), idempotent_rate=60, gap_s=(4.0, 5.0)), {"lost_write"}),
    ]


def disk_profile(duration_s: float) -> list[Scenario]:
    """Disk faults only, back to back, with power losses and kills in between."""
    return [Scenario("disk", duration_s, ["idempotent", "queue", "compacted", "copier-confluent"],
                     [*DISK_FAULTS, *DISK_FAULTS, "power_loss", "kill_at_prepare"],
                     copier_count=int(duration_s * 60), copier_seed_rate=60.0,
                     idempotent_rate=60, gap_s=(0.5, 1.5))]


def long_profile(duration_s: float) -> list[Scenario]:
    mixed = duration_s * 0.8
    return [
        Scenario("long-mixed", mixed, ["idempotent", "queue", "compacted", "copier-confluent",
                                       "copier-java"],
                 ALL_FAULTS, copier_count=int(mixed * 60), copier_seed_rate=60.0,
                 idempotent_rate=60, gap_s=(2.0, 6.0), pause_s=(6.0, 12.0),
                 copier_deadline_s=600.0),
        Scenario("long-flush-none", duration_s - mixed, ["idempotent", "queue"],
                 ["power_loss", "kill", "pause", *PROXY_FAULTS], flush_mode="none",
                 idempotent_rate=60, gap_s=(2.0, 5.0)),
    ]


@dataclass
class Result:
    scenario: Scenario
    report: Report
    summary: str
    out_dir: Path
    liveness: list[str] = field(default_factory=list)
    cleanings: dict[str, int] = field(default_factory=dict)  # topic -> cleanings in broker.log

    @property
    def ok(self) -> bool:
        return self.report.ok and not self.liveness


def run_scenario(sc: Scenario, seed: int, out_root: Path = OUT, echo=print, *,
                 request_log: bool = False) -> Result:
    out = out_root / f"{sc.name}-s{seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    history = History(out / "events.jsonl")
    logger = client_logger(out, f"chaos.clients.{out.name}")
    target = Target(out / "data", history, out_dir=out, faulty=sc.faulty,
                    flush_mode=sc.flush_mode, overrides=sc.overrides, request_log=request_log,
                    bugs=sc.bugs)
    liveness: list[str] = []
    started = time.monotonic()
    target.start()
    try:
        workloads = _workloads(sc, seed, target, history, out, logger)
        topics = {t: n for w in workloads for t, n in w.topics().items()}
        configs = {t: c for w in workloads if hasattr(w, "topic_configs")
                   for t, c in w.topic_configs().items()}
        with KafkaWire.connect(target.direct) as wire:
            for topic, n in topics.items():
                assert create_topic(wire, topic, n, configs.get(topic)) in (
                    Error.NONE, Error.TOPIC_ALREADY_EXISTS)
        history.record("runner", "info", "phase", name="start", scenario=sc.name, seed=seed)
        for w in workloads:
            w.start()
        copiers = [w for w in workloads if isinstance(w, CopierWorkload)]
        nemesis = Nemesis(target, history, seed, sc.faults, gap_s=sc.gap_s,
                          pause_s=sc.pause_s, copiers=copiers)
        nemesis.start()
        nemesis.stop_event.wait(sc.duration_s)
        nemesis.stop()
        liveness += [f"nemesis: {e}" for e in nemesis.errors]
        history.record("runner", "info", "phase", name="heal")
        for w in workloads:
            if not isinstance(w, CopierWorkload):
                w.stop()
        deadline = time.monotonic() + sc.copier_deadline_s
        for c in copiers:
            while not c.done(target.direct) and time.monotonic() < deadline:
                target.check_alive()
                time.sleep(0.5)
            if not c.done(target.direct):
                liveness.append(f"{c.name}: copiers did not reach the end of the input within "
                                f"{sc.copier_deadline_s:.0f}s after the faults stopped")
            c.stop()
        for w in workloads:
            if not w.join(180):
                liveness.append(f"{type(w).__name__} did not stop")
            liveness += [f"{type(w).__name__} thread failed: {e}" for e in w.errors]
        for c in copiers:
            odd = [e for e in c.exits if "killed" not in e]
            if odd:
                history.record("runner", "info", "phase", name="copier exits", exits=odd)
        target.check_alive()
        history.record("runner", "info", "phase", name="final")
        unstable = wait_stable(target.direct, topics, TRANSACTION_TIMEOUT_MS / 1000 + 15)
        try:
            final = final_read(target.bootstrap, target.direct, topics)
        except Exception as e:  # noqa: BLE001 - no final read: nothing can be checked
            liveness.append(f"final read failed: {type(e).__name__}: {e}")
            final = FinalRead()
        # the checker's bound on when the final read saw the log (tombstone retention)
        history.record("runner", "info", "phase", name="final read done")
        (out / "final.json").write_text(json.dumps(final.to_json()))
        liveness += [f"broker exited by itself: {c.splitlines()[0]}" for c in target.crashes]
        if unstable:
            liveness.append(f"open transactions at the final read: {unstable[:3]}")
    finally:
        target.stop()
        history.close()
    events = merge([history.events])
    write_events(out / "history.jsonl", events)
    (out / "events.jsonl").unlink(missing_ok=True)
    pairs = [p for c in copiers for p in c.pairs()]
    (out / "scenario.json").write_text(json.dumps(
        {"scenario": sc.name, "seed": seed, "flush_mode": sc.flush_mode, "faulty": sc.faulty,
         "copier_pairs": pairs, "liveness": liveness}))
    report = check(events, final, copier_pairs=pairs)
    cleanings = count_cleanings(out / "broker.log", report)
    mode = ("faulty-fs entry point" if sc.faulty else "semel CLI") + f", flush {sc.flush_mode}"
    if sc.bugs:
        mode += f", INJECTED BUGS {', '.join(sc.bugs)}"
    summary = summarize(report, title=f"{sc.name} seed={seed} ({mode})",
                        history_path=str(out / "history.jsonl"),
                        duration_s=time.monotonic() - started)
    for line in liveness:
        summary += f"\nLIVENESS: {line}"
    if target.crashes:
        summary += f"\nbroker crash tail:\n{target.crashes[0][-1500:]}"
    (out / "summary.txt").write_text(summary + "\n")
    echo(summary)
    return Result(sc, report, summary, out, liveness, cleanings)


def count_cleanings(broker_log: Path, report: Report) -> dict[str, int]:
    """The cleanings of each topic the broker logged (every broker process of the run),
    also into the report's operations."""
    counts: dict[str, int] = {}
    if broker_log.exists():
        with open(broker_log, errors="replace") as f:
            for line in f:
                if m := CLEANED.search(line):
                    counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    for topic, n in counts.items():
        report.operations[f"cleanings of {topic}"] = n
    return counts


def _workloads(sc: Scenario, seed: int, target: Target, history: History, out: Path, logger):
    workloads = []
    for name in sc.workloads:
        if name == "idempotent":
            workloads.append(IdempotentWorkload(target.bootstrap, history, seed,
                                                rate=sc.idempotent_rate, logger=logger))
        elif name == "queue":
            workloads.append(QueueWorkload(target.bootstrap, lambda: target.direct, history,
                                           seed, logger=logger))
        elif name == "compacted":
            workloads.append(CompactedWorkload(target.bootstrap, history, seed, logger=logger))
        elif name.startswith("copier-"):
            kind = name.split("-", 1)[1]
            workloads.append(CopierWorkload(
                target.bootstrap, lambda: target.direct, history, seed, out_dir=out, kind=kind,
                name=f"copy{kind[0]}",
                count=sc.copier_count, seed_rate=sc.copier_seed_rate, logger=logger))
        else:
            raise ValueError(f"unknown workload {name!r}")
    return workloads


def recheck(out: Path) -> Result:
    """Run the checker again over a finished run's history.jsonl and final.json."""
    meta = json.loads((out / "scenario.json").read_text())
    events = list(read_events(out / "history.jsonl"))
    final = FinalRead.from_json(json.loads((out / "final.json").read_text()))
    report = check(events, final, copier_pairs=[tuple(p) for p in meta["copier_pairs"]])
    cleanings = count_cleanings(out / "broker.log", report)
    summary = summarize(report, title=f"{meta['scenario']} seed={meta['seed']} (recheck)",
                        history_path=str(out / "history.jsonl"))
    for line in meta["liveness"]:
        summary += f"\nLIVENESS: {line}"
    print(summary)
    sc = Scenario(meta["scenario"], 0, [], [])
    return Result(sc, report, summary, out, meta["liveness"], cleanings)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.chaos.runner")
    ap.add_argument("--profile", choices=["ci", "long", "disk"], default="ci")
    ap.add_argument("--duration", type=float, default=1800.0,
                    help="seconds of faults in the long and disk profiles (default 1800)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--recheck", type=Path, metavar="RUN_DIR",
                    help="only run the checker again over a finished run's directory")
    ap.add_argument("--request-log", action="store_true",
                    help="log every request/response frame passing the proxy (requests.log)")
    args = ap.parse_args(argv)
    if args.recheck is not None:
        return 0 if recheck(args.recheck).ok else 1
    scenarios = {"ci": ci_profile, "long": lambda: long_profile(args.duration),
                 "disk": lambda: disk_profile(args.duration)}[args.profile]()
    if args.only:
        scenarios = [s for s in scenarios if s.name in args.only]
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    results = []
    for i, sc in enumerate(scenarios):
        results.append(run_scenario(replace(sc), seed + i, args.out,
                                    request_log=args.request_log))
        print(flush=True)
    failed = [r.scenario.name for r in results if not r.ok]
    print(f"chaos {args.profile}: {len(results) - len(failed)}/{len(results)} scenarios clean"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
