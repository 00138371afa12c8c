"""The hostile-client soak: hostile actors attack a broker subprocess while real clients run
the chaos suite's exactly-once copiers (confluent-kafka and Java) and a latency probe; then
SIGKILL, restart on the same data directory, and check.

    python -m tests.hostile.soak --profile short            # the pytest profile (~90 s)
    python -m tests.hostile.soak --profile long --duration 1800   # `make hostile`
    options: --seed N, --out DIR (default tests/hostile/out), --no-java, --actors a,b,...

Phases: warmup (real clients only: the baseline latency), hostile (the actors' process runs
for the profile's duration), cooldown, restart (SIGKILL, start again on the same port and
data), drain (the copiers finish the input; the probe keeps sending), then the checks:

  1. the chaos checker over the history and the final read of the copier and probe topics:
     copier output == input exactly once, every acknowledged probe record present exactly
     once (lost_write / duplicate), and its other anomaly kinds;
  2. the broker was alive at kill time (no exit of its own) and its log has no traceback;
  3. no invalid batch stored: every batch of every topic, read back raw, walks cleanly
     (verify.py), including the lying batches and bombs the actors produced;
  4. the broker's peak RSS (VmRSS sampled, VmHWM) is under the profile's bound;
  5. the real clients made progress: records copied, probe records acknowledged.

Each run writes `<out>/<profile>-s<seed>-<time>/`: summary.json, summary.txt (the one-screen
summary), actors.json (every hostile counter), history.jsonl, final.json, broker.log,
clients.log and the copiers' stderr. Exit status 1 when a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from semel.protocol.errors import Error
from tests.chaos.checker import check, summarize
from tests.chaos.final_read import final_read, wait_stable
from tests.chaos.history import History, merge, write_events
from tests.chaos.target import BASE_OVERRIDES
from tests.chaos.workloads.common import TRANSACTION_TIMEOUT_MS, client_logger
from tests.chaos.workloads.copier import CopierWorkload
from tests.hostile.actors import ActorConfig
from tests.hostile.broker import ROOT, BrokerProc, RssSampler, scan_log
from tests.hostile.probe import Canary, Phases, Probe, percentiles
from tests.hostile.verify import walk_all
from tests.kafka_wire import KafkaWire, create_topic

OUT = Path(__file__).resolve().parent / "out"
PROBE_TOPIC = "hostile-probe"
LIES_TOPIC = "hostile-lies"
MAX_UNCOMPRESSED = 64 * 1024 * 1024  # message.max.uncompressed.bytes (the broker's default)


@dataclass
class Profile:
    name: str
    hostile_s: float
    seed: int
    warmup_s: float = 4.0
    cooldown_s: float = 2.0
    after_restart_s: float = 5.0  # the probe runs at least this long after the restart
    copiers: tuple[str, ...] = ("confluent", "java")
    copier_seed_rate: float = 100.0  # input records per second per copier workload
    copier_deadline_s: float = 150.0  # to finish the input after the restart
    probe_interval_s: float = 0.02
    read_timeout_ms: int = 3000  # socket.request.read.timeout.ms
    rss_bound_mib: int = 600
    rss_abort_mib: int = 4096  # stop the actors early above this (protects the machine)
    actors: dict = field(default_factory=dict)  # ActorConfig overrides
    broker: dict = field(default_factory=dict)  # extra broker properties

    @property
    def copier_count(self) -> int:
        return int(self.copier_seed_rate * (self.warmup_s + self.hostile_s))


def short_profile(seed: int = 1201) -> Profile:
    return Profile("short", hostile_s=40.0, seed=seed, copier_seed_rate=100.0,
                   actors={"fuzz_rate": 100.0, "fuzz_connections": 6, "fill_pause_s": 8.0,
                           "stall_connections": 3, "stall_max_s": 30.0,
                           "flood_burst": 150, "flood_hold": 550, "flood_hold_s": 6.0})


def long_profile(duration_s: float, seed: int) -> Profile:
    return Profile("long", hostile_s=duration_s, seed=seed, warmup_s=10.0, cooldown_s=5.0,
                   after_restart_s=15.0, copier_seed_rate=60.0, copier_deadline_s=600.0,
                   read_timeout_ms=10_000,
                   actors={"fuzz_rate": 150.0, "stall_connections": 4, "stall_max_s": 120.0,
                           "fuzz_connections": 6, "fill_pause_s": 30.0,
                           "slow_connections": 8, "pipeline_connections": 3,
                           "flood_burst": 120, "flood_hold": 550, "flood_hold_s": 20.0})


@dataclass
class Result:
    profile: Profile
    out_dir: Path
    summary: dict
    text: str
    failures: list[str]

    @property
    def ok(self) -> bool:
        return not self.failures


def java_available() -> bool:
    from tests.javaclient import java_available as available

    return available()


def run_soak(profile: Profile, out_root: Path = OUT, echo=print) -> Result:
    started = time.monotonic()
    out = out_root / f"{profile.name}-s{profile.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    history = History(out / "events.jsonl")
    logger = client_logger(out, f"hostile.clients.{out.name}")
    phases = Phases(history)
    overrides = {**BASE_OVERRIDES, "log.flush.mode": "fsync",
                 "socket.request.read.timeout.ms": str(profile.read_timeout_ms),
                 **profile.broker}
    broker = BrokerProc(out / "data", out / "broker.log", overrides)
    notes: list[str] = []
    liveness: list[str] = []
    crashes: list[str] = []
    actors_proc: subprocess.Popen | None = None
    runaway = threading.Event()

    def on_rss(mib: float) -> None:
        if mib > profile.rss_abort_mib and not runaway.is_set():
            runaway.set()
            if actors_proc is not None and actors_proc.poll() is None:
                actors_proc.send_signal(signal.SIGTERM)

    broker.start()
    rss = RssSampler(broker, on_sample=on_rss).start()
    phases.listeners.append(lambda name: setattr(rss, "phase", name))
    kinds = [k for k in profile.copiers if k != "java" or java_available()]
    if len(kinds) < len(profile.copiers):
        notes.append("java/javac not found: the Java copier did not run")
    copiers = [CopierWorkload(broker.address, lambda: broker.address, history, profile.seed,
                              out_dir=out, kind=k, name=f"copy{k[0]}",
                              count=profile.copier_count, seed_rate=profile.copier_seed_rate,
                              logger=logger) for k in kinds]
    topics = {t: n for c in copiers for t, n in c.topics().items()}
    topics[PROBE_TOPIC] = 1
    probe = Probe(broker.address, history, phases, PROBE_TOPIC,
                  interval_s=profile.probe_interval_s, logger=logger)
    canary = Canary(broker.address, phases, PROBE_TOPIC)
    actors_json = out / "actors.json"
    try:
        with KafkaWire.connect(broker.address) as wire:
            for topic, n in topics.items():
                assert create_topic(wire, topic, n) in (Error.NONE, Error.TOPIC_ALREADY_EXISTS)
            # segments large enough for the lz4 bomb (~400 KB): it must meet the validation,
            # not RECORD_LIST_TOO_LARGE
            assert create_topic(wire, LIES_TOPIC, 1, {"segment.bytes": str(16 << 20)}) in (
                Error.NONE, Error.TOPIC_ALREADY_EXISTS)
        phases.set("warmup")
        history.record("nemesis", "info", "fault", fault="start")
        for c in copiers:
            c.start()
        probe.start()
        canary.start()
        time.sleep(profile.warmup_s)

        # -- the attack ------------------------------------------------------------------
        phases.set("hostile")
        config = {**asdict(ActorConfig()), "lies_topic": LIES_TOPIC,
                  "read_timeout_ms": profile.read_timeout_ms, **profile.actors}
        actors_err = open(out / "actors.stderr", "w")  # noqa: SIM115
        actors_proc = subprocess.Popen(
            [sys.executable, "-m", "tests.hostile.actors", "--target", broker.address,
             "--seed", str(profile.seed), "--duration", str(profile.hostile_s),
             "--config", json.dumps(config), "--out", str(actors_json)],
            stdout=subprocess.DEVNULL, stderr=actors_err, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        actors_err.close()
        deadline = time.monotonic() + profile.hostile_s + 60
        while actors_proc.poll() is None and time.monotonic() < deadline:
            if not broker.alive():
                crashes.append(_crash_text(broker))
                history.record("nemesis", "info", "fault", fault="crash")
                actors_proc.send_signal(signal.SIGTERM)
                actors_proc.wait(30)
                broker.start()
                break
            time.sleep(0.25)
        if actors_proc.poll() is None:
            liveness.append("the hostile actors' process did not stop by itself")
            actors_proc.send_signal(signal.SIGTERM)
            try:
                actors_proc.wait(30)
            except subprocess.TimeoutExpired:
                actors_proc.kill()
                actors_proc.wait(30)
        if actors_proc.returncode not in (0, None):
            liveness.append(f"the hostile actors' process exited {actors_proc.returncode} "
                            f"(see actors.stderr)")
        if runaway.is_set():
            notes.append(f"broker RSS passed {profile.rss_abort_mib} MiB: the actors were "
                         f"stopped early")

        # -- kill -9 and restart ---------------------------------------------------------
        phases.set("cooldown")
        time.sleep(profile.cooldown_s)
        if not broker.alive():
            crashes.append(_crash_text(broker))
        alive_at_kill = broker.alive() and not crashes
        rss.sample_now()
        phases.set("restart")
        canary.paused.set()
        history.record("nemesis", "info", "fault", fault="kill")
        broker.kill()
        broker.start()
        history.record("nemesis", "info", "fault", fault="restart")
        canary.paused.clear()
        restarted_t = time.monotonic()

        # -- drain -------------------------------------------------------------------------
        phases.set("drain")
        deadline = time.monotonic() + profile.copier_deadline_s
        for c in copiers:
            while not c.done(broker.address) and time.monotonic() < deadline:
                if not broker.alive():
                    crashes.append(_crash_text(broker))
                    broker.start()
                time.sleep(0.5)
            if not c.done(broker.address):
                liveness.append(f"{c.name}: the copiers did not reach the end of the input "
                                f"within {profile.copier_deadline_s:.0f}s after the restart")
        time.sleep(max(0.0, profile.after_restart_s - (time.monotonic() - restarted_t)))
        probe.stop()
        canary.stop()
        for c in copiers:
            c.stop()
        for c in copiers:
            if not c.join(180):
                liveness.append(f"{c.name} did not stop")
            liveness += [f"{c.name} thread failed: {e}" for e in c.errors]
        liveness += [f"probe: {e}" for e in probe.errors]

        # -- final read, checker, raw walk -------------------------------------------------
        phases.set("final")
        unstable = wait_stable(broker.address, topics, TRANSACTION_TIMEOUT_MS / 1000 + 15)
        if unstable:
            liveness.append(f"open transactions at the final read: {unstable[:3]}")
        final = final_read(broker.address, broker.address, topics)
        (out / "final.json").write_text(json.dumps(final.to_json()))
        walk = walk_all(broker.address, MAX_UNCOMPRESSED)
        if not broker.alive():
            crashes.append(_crash_text(broker))
    finally:
        if actors_proc is not None and actors_proc.poll() is None:
            actors_proc.kill()
            actors_proc.wait(30)
        for c in copiers:
            c.stop()
        probe.stop(5)
        canary.stop()
        rss.stop()
        broker.stop()
        history.close()

    events = merge([history.events])
    write_events(out / "history.jsonl", events)
    (out / "events.jsonl").unlink(missing_ok=True)
    pairs = [p for c in copiers for p in c.pairs()]
    report = check(events, final, copier_pairs=pairs)
    actors = json.loads(actors_json.read_text()) if actors_json.exists() else {}
    log = scan_log(out / "broker.log")
    summary = _summary(profile, out, report, events, phases, probe, canary, rss, walk, log,
                       actors, copiers, alive_at_kill, crashes, liveness, notes,
                       time.monotonic() - started)
    checker_text = summarize(report, title=f"checker: {profile.name} seed={profile.seed}",
                             history_path=str(out / "history.jsonl"))
    text = _one_screen(summary, checker_text)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "summary.txt").write_text(text + "\n")
    echo(text)
    return Result(profile, out, summary, text, summary["failures"])


def _crash_text(broker: BrokerProc) -> str:
    code = broker.proc.returncode if broker.proc is not None else None
    try:
        tail = broker.log_path.read_text(errors="replace")[-2000:]
    except OSError:
        tail = ""
    return f"exit {code}:\n{tail}"


# ---------------------------------------------------------------------------- the report


def _client_of(p: str) -> str | None:
    if p == "probe":
        return "probe"
    if p.endswith("-seed"):
        return "seeder"
    if "-confluent-" in p:
        return "copier-confluent"
    if "-java-" in p:
        return "copier-java"
    return None


def _client_latency(events: list[dict], phases: Phases) -> dict:
    """p50/p99 of produce latency (send invoke to acknowledgement) per real client, for the
    hostile phase and overall."""
    invoked: dict[tuple[str, int], float] = {}
    lat: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for e in events:
        if e["f"] != "send":
            continue
        key = (e["p"], e.get("id"))
        if e["type"] == "invoke":
            invoked[key] = e["t"]
        elif e["type"] == "ok" and key in invoked:
            t0 = invoked.pop(key)
            client = _client_of(e["p"])
            if client is None:
                continue
            lat[client]["all"].append(e["t"] - t0)
            lat[client][phases.of(t0)].append(e["t"] - t0)
    return {client: {phase: percentiles(v) for phase, v in sorted(by.items())
                     if phase in ("all", "warmup", "hostile", "drain")}
            for client, by in sorted(lat.items())}


def _copier_throughput(events: list[dict], phases: Phases, copiers) -> dict:
    """Records committed by each copier kind: overall, per second of the hostile phase, and
    the lag (input acknowledged minus output committed) when the hostile phase ended."""
    commit_writes: dict[str, int] = {}
    out: dict[str, dict] = {}
    hostile = phases.window("hostile")
    for c in copiers:
        committed: list[tuple[float, int]] = []
        seeded: list[float] = []
        prefix = f"{c.name}-{c.kind}-"
        for e in events:
            if e["f"] == "commit" and e["p"].startswith(prefix):
                if e["type"] == "invoke":
                    commit_writes[e["txn"]] = len(e.get("writes", []))
                elif e["type"] == "ok":
                    committed.append((e["t"], commit_writes.get(e["txn"], 0)))
            elif e["f"] == "send" and e["type"] == "ok" and e["p"] == f"{c.name}-seed":
                seeded.append(e["t"])
        total = sum(n for _, n in committed)
        row: dict = {"committed_records": total, "committed_txns": len(committed)}
        if committed:
            first_poll = min((e["t"] for e in events if e["f"] == "poll"
                              and e["p"].startswith(prefix)), default=committed[0][0])
            span = max(1e-3, committed[-1][0] - first_poll)
            row["records_per_s"] = round(total / span, 1)
        if hostile is not None:
            a, b = hostile
            n = sum(k for t, k in committed if a <= t < b)
            row["hostile_records_per_s"] = round(n / max(1e-3, b - a), 1)
            row["lag_at_hostile_end"] = (sum(1 for t in seeded if t < b)
                                         - sum(k for t, k in committed if t < b))
        out[f"copier-{c.kind}"] = row
    return out


def _actor_table(actors: dict) -> dict:
    table = {}
    for name, counters in actors.get("actors", {}).items():
        table[name] = {k: counters.get(k, 0) for k in ("frames", "connections", "responses",
                                                        "closes", "refused", "connect_errors",
                                                        "errors")}
    return table


def _warnings(actors: dict, canary: Canary, log: dict, profile: Profile) -> list[str]:
    """What the actors saw that is wrong but judged elsewhere (or not asserted)."""
    out = []
    counters = actors.get("actors", {})
    lies = counters.get("lies", {})
    accepted = {k.split(":")[1]: v for k, v in lies.items()
                if k.startswith("outcome:") and k.endswith(":NONE")}
    if accepted:
        out.append(f"lying/bomb batches acknowledged (NONE): {sum(accepted.values())} - "
                   + ", ".join(f"{k} {v}" for k, v in sorted(accepted.items())))
    other = {k.split(":", 1)[1]: v for k, v in lies.items() if k.startswith("outcome:")
             and not k.endswith((":NONE", ":INVALID_RECORD", ":CORRUPT_MESSAGE"))}
    if other:
        out.append("lying/bomb batches answered otherwise: "
                   + ", ".join(f"{k} {v}" for k, v in sorted(other.items())[:8]))
    slow = counters.get("slow", {})
    if slow.get("outcome:answered_past_timeout"):
        out.append(f"slow: {slow['outcome:answered_past_timeout']} requests trickled over "
                   f"longer than socket.request.read.timeout.ms were still answered "
                   f"(timeout not enforced)")
    if slow.get("outcome:cut_before_timeout"):
        out.append(f"slow: {slow['outcome:cut_before_timeout']} trickled requests were cut "
                   f"before the read timeout")
    if slow.get("outcome:no_reaction"):
        out.append(f"slow: {slow['outcome:no_reaction']} trickled requests neither answered "
                   f"nor cut within 5 s of their last byte")
    fill = counters.get("fill", {})
    if fill.get("outcome:still_open_at_our_limit"):
        out.append(f"fill: {fill['outcome:still_open_at_our_limit']} nearly complete 100 MiB "
                   f"requests still open when we gave up")
    stall = counters.get("stall", {})
    still = {k: v for k, v in stall.items() if "still_open" in k}
    if still:
        out.append("stall: connections still open when we gave up: "
                   + ", ".join(f"{k.split(':')[1]} {v}" for k, v in sorted(still.items())))
    pipeline = counters.get("pipeline", {})
    if pipeline.get("outcome:read:missing_answers") or pipeline.get("outcome:read:closed"):
        out.append(f"pipeline: reads with missing answers "
                   f"{pipeline.get('outcome:read:missing_answers', 0)}, closed "
                   f"{pipeline.get('outcome:read:closed', 0)}")
    flood = counters.get("flood", {})
    held = actors.get("samples", {}).get("flood held and answered", {})
    if held.get("n") and held["max"] > 500:  # max.connections.per.ip's default
        out.append(f"flood: up to {held['max']:.0f} connections from one address were "
                   f"served (max.connections.per.ip=500 not enforced)")
    if flood.get("outcome:hold:neither"):
        out.append(f"flood: {flood['outcome:hold:neither']} held connections were neither "
                   f"answered nor closed within 10 s")
    garbage = counters.get("garbage", {})
    quiet = {k.split(":")[1]: v for k, v in garbage.items()
             if k.endswith(":still_open_after_read_timeout")}
    if quiet:
        out.append("garbage still not answered nor closed after the read timeout: "
                   + ", ".join(f"{k} {v}" for k, v in sorted(quiet.items())))
    examples = actors.get("examples", {}).get("fuzz", [])
    unmutated = [e for e in examples if isinstance(e, dict)]
    if unmutated:
        out.append(f"fuzz: the broker closed the connection after an unmutated request, e.g. "
                   f"{unmutated[0]['closed_after_unmutated']}")
    if log.get("error_lines") and not log.get("tracebacks"):
        out.append(f"broker log: {log['error_lines']} ERROR lines (no traceback)")
    if counters.get("runner", {}).get("worker_crashed"):
        out.append(f"actors: {counters['runner']['worker_crashed']} worker(s) crashed: "
                   f"{actors.get('examples', {}).get('runner')}")
    return out


def _summary(profile, out, report, events, phases, probe, canary, rss, walk, log, actors,
             copiers, alive_at_kill, crashes, liveness, notes, duration_s) -> dict:
    throughput = _copier_throughput(events, phases, copiers)
    copied = sum(r["committed_records"] for r in throughput.values())
    probe_summary = probe.summary()
    failures: list[str] = []
    if not report.ok:
        failures.append("checker anomalies: " + ", ".join(
            f"{k} {n}" for k, n in sorted(report.counts.items()) if n))
    if crashes:
        failures.append(f"broker exited by itself {len(crashes)}x before the kill: "
                        f"{crashes[0].splitlines()[0]}")
    elif not alive_at_kill:
        failures.append("broker not alive at kill time")
    if log.get("tracebacks"):
        example = (log.get("traceback_examples") or ["?"])[0].splitlines()
        failures.append(f"broker log: {log['tracebacks']} traceback(s), e.g. "
                        + " | ".join(x.strip() for x in example[:1] + example[-2:])[:400])
    if walk.invalid_count:
        failures.append(f"invalid batch stored: {walk.invalid_count} stored batches do not "
                        f"walk cleanly, e.g. {walk.invalid[0]}")
    if walk.errors:
        failures.append(f"raw read-back failed on {len(walk.errors)} partitions, e.g. "
                        f"{walk.errors[0]}")
    if rss.peak_mib > profile.rss_bound_mib:
        failures.append(f"broker RSS peak {rss.peak_mib:.0f} MiB over the bound "
                        f"{profile.rss_bound_mib} MiB")
    failed = sum(canary.failed.values())
    if failed:
        failures.append(f"real clients could not connect: {failed} fresh connections from "
                        f"127.0.0.1 failed, e.g. {canary.failures[0] if canary.failures else '?'}")
    if not canary.ok.get("hostile"):
        failures.append("no fresh connection from 127.0.0.1 succeeded while hostile")
    if copied <= 0:
        failures.append("no record copied")
    if not probe_summary["acked"]:
        failures.append("no probe record acknowledged")
    failures += [f"liveness: {x}" for x in liveness]
    return {
        "profile": asdict(profile), "out_dir": str(out), "duration_s": round(duration_s, 1),
        "failures": failures,
        "warnings": _warnings(actors, canary, log, profile),
        "notes": notes,
        "phases": [[name, round(t, 3)] for name, t in phases.marks],
        "actors": _actor_table(actors),
        "actors_detail": actors.get("actors", {}),
        "actor_samples": actors.get("samples", {}),
        "rss_mib": {"peak": round(rss.peak_mib, 1), "vmhwm": round(rss.hwm_kib / 1024, 1),
                    "peak_by_phase": {k: round(v / 1024, 1) for k, v in rss.peak_kib.items()},
                    "bound": profile.rss_bound_mib, "timeline": rss.timeline},
        "probe": probe_summary,
        "client_latency": _client_latency(events, phases),
        "copiers": throughput,
        "canary": canary.summary(),
        "checker": {"ok": report.ok, "counts": dict(report.counts),
                    "operations": dict(report.operations),
                    "examples": {k: [a.message + " " + json.dumps(a.example, default=str)[:300]
                                     for a in v] for k, v in report.anomalies.items()}},
        "stored_batches": walk.to_json(),
        "broker_log": log,
        "broker_alive_at_kill": alive_at_kill,
        "crashes": [c[-1500:] for c in crashes],
    }


def _one_screen(s: dict, checker_text: str) -> str:
    p = s["profile"]
    lines = [(f"== hostile soak {p['name']} seed={p['seed']}: {s['duration_s']}s "
             f"({p['hostile_s']:.0f}s hostile)  -> {s['out_dir']}")]
    lines.append(f"{'actor':9} {'frames':>8} {'conns':>7} {'answers':>8} {'closes':>7} "
                 f"{'refused':>7} {'conn-err':>8} {'errors':>6}")
    for name, row in s["actors"].items():
        if name == "runner":
            continue
        lines.append(f"{name:9} {row['frames']:>8} {row['connections']:>7} "
                     f"{row['responses']:>8} {row['closes']:>7} {row.get('refused', 0):>7} "
                     f"{row['connect_errors']:>8} {row['errors']:>6}")
    r = s["rss_mib"]
    lines.append(f"broker RSS peak {r['peak']} MiB (bound {r['bound']}; by phase "
                 + ", ".join(f"{k} {v}" for k, v in r["peak_by_phase"].items()) + ")")
    for client, by in s["client_latency"].items():
        parts = [f"{ph} p50 {v['p50_ms']} p99 {v['p99_ms']} ms (n={v['n']})"
                 for ph, v in by.items() if v.get("n")]
        lines.append(f"latency {client}: " + "; ".join(parts))
    for kind, row in s["copiers"].items():
        lines.append(f"{kind}: {row['committed_records']} records in {row['committed_txns']} "
                     f"txns, {row.get('records_per_s', 0)}/s overall, "
                     f"{row.get('hostile_records_per_s', 0)}/s while hostile, lag at hostile "
                     f"end {row.get('lag_at_hostile_end', '?')}")
    c = s["canary"]
    lines.append(f"canary (fresh connections from 127.0.0.1): ok {sum(c['ok'].values())}, "
                 f"failed {sum(c['failed'].values())}")
    w = s["stored_batches"]
    lines.append(f"stored batches walked: {w['batches']} in {w['partitions']} partitions of "
                 f"{w['topics']} topics; invalid {w['invalid_batches']}")
    bl = s["broker_log"]
    lines.append(f"broker log: {bl.get('levels', {})}, tracebacks {bl.get('tracebacks', 0)}")
    lines.append(checker_text.splitlines()[-1] if checker_text else "")
    for n in s["notes"]:
        lines.append(f"note: {n}")
    for w in s["warnings"]:
        lines.append(f"WARN: {w}")
    for f in s["failures"]:
        lines.append(f"FAIL: {f}")
    lines.append("result: " + ("OK" if not s["failures"] else f"{len(s['failures'])} FAILED"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.hostile.soak")
    ap.add_argument("--profile", choices=["short", "long"], default="short")
    ap.add_argument("--duration", type=float, default=1800.0,
                    help="seconds of hostile load in the long profile (default 1800)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-java", action="store_true", help="only the confluent-kafka copier")
    ap.add_argument("--actors", help="comma-separated subset of the hostile actors")
    ap.add_argument("--actor-config", default="{}",
                    help='ActorConfig overrides as JSON, e.g. \'{"fill_connections": 2}\'')
    ap.add_argument("--hostile-s", type=float, help="seconds of hostile load (short profile)")
    args = ap.parse_args(argv)
    if args.profile == "short":
        profile = short_profile() if args.seed is None else short_profile(args.seed)
    else:
        seed = args.seed if args.seed is not None else int(time.time()) % 100_000
        profile = long_profile(args.duration, seed)
    if args.no_java:
        profile = replace(profile, copiers=("confluent",))
    if args.actors:
        profile = replace(profile, actors={**profile.actors,
                                           "actors": args.actors.split(",")})
    profile = replace(profile, actors={**profile.actors, **json.loads(args.actor_config)})
    if args.hostile_s is not None and args.profile == "short":
        profile = replace(profile, hostile_s=args.hostile_s)
    result = run_soak(profile, args.out)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
