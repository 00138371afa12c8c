"""What does security cost? Produce and fetch over TLS against PLAINTEXT, the authorizer with
1,000 ACLs against no authorizer, and the latency of a SCRAM authentication.

``python bench/bench_security.py [--pairs N] [--mb M] [--json FILE]``:

- one broker with three listeners (PLAINTEXT, SSL, SASL_SSL with SCRAM-SHA-512), a test CA
  and server certificate made for the run (tests/security/certs.py);
- paired rows, alternating which side runs first: librdkafka producing M MB of 1 KiB records
  (acks=all) over PLAINTEXT then over SSL (and SASL_SSL), and a consumer reading them back
  over each; the ratio TLS / PLAINTEXT of MB/s per pair, and the broker's CPU s per GB;
- the authorizer: a second and third broker, one with the authorizer off, one on with 1,000
  ACLs (ten principals with literal and prefixed topic, group and transactional-id grants,
  DENYs, wildcards; the producer's principal allowed by one of them), produce over PLAINTEXT,
  paired; the issue's budget is a ratio >= 0.95;
- SCRAM: N new connections each doing ApiVersions, SaslHandshake and the two SCRAM-SHA-512
  steps over SASL_PLAINTEXT (raw frames; the client's PBKDF2 of 4,096 iterations included),
  latency percentiles.

Every row is the median of the pair ratios; the machine has 2 cores shared by client and
broker, so compare ratios and CPU per GB, not absolute MB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_authorizer import make_acls
from bench.clients import run_group
from semel.broker.testing import BrokerProcess
from tests.kafka_wire import KafkaWire, message
from tests.security.certs import make_tls_files

SCRAM_USER, SCRAM_PASSWORD = "bench", "bench-secret"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def broker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def security_props(tls) -> dict[str, str]:
    return {
        "listeners": ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                      "SASL_PLAINTEXT://127.0.0.1:0"),
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(tls.server_p12),
        "ssl.keystore.password": tls.password,
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "log.flush.mode": "none", "auto.create.topics.enable": "true",
    }


def client_config(broker: BrokerProcess, listener: str, tls) -> dict:
    if listener == "PLAINTEXT":
        return {"bootstrap.servers": broker.bootstrap}
    config = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}",
              "security.protocol": listener, "ssl.ca.location": str(tls.ca_pem)}
    if listener == "SASL_SSL":
        config.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": SCRAM_USER,
                       "sasl.password": SCRAM_PASSWORD})
    return config


def one_run(broker: BrokerProcess, config: dict, mb: int, log_dir: Path) -> dict:
    """Produce mb MB of 1 KiB records to a new topic, then consume them: MB/s of each and
    the broker's CPU s/GB over both."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    records = mb * 1024
    bootstrap = config["bootstrap.servers"]
    extra = {k: v for k, v in config.items() if k != "bootstrap.servers"}
    cpu0 = broker_cpu_s(broker.proc.pid)
    produced = run_group([{"role": "produce", "bootstrap": bootstrap, "topic": topic,
                           "partition": 0, "records": records, "size": 1024,
                           "config": {"linger.ms": 5, **extra}}], log_dir=log_dir)[0]
    cpu1 = broker_cpu_s(broker.proc.pid)
    consumed = run_group([{"role": "consume", "bootstrap": bootstrap, "group": f"g-{topic}",
                           "topic": topic, "partitions": [0], "records": records,
                           "config": extra}], log_dir=log_dir)[0]
    cpu2 = broker_cpu_s(broker.proc.pid)
    gb = produced["bytes"] / 1e9
    return {"produce_mb_s": produced["bytes"] / 1e6 / (produced["end"] - produced["start"]),
            "fetch_mb_s": consumed["bytes"] / 1e6 / (consumed["end"] - consumed["start"]),
            "produce_cpu_s_per_gb": (cpu1 - cpu0) / gb, "fetch_cpu_s_per_gb": (cpu2 - cpu1) / gb}


def paired(run_a, run_b, pairs: int) -> list[tuple[dict, dict]]:
    out = []
    for i in range(pairs):
        if i % 2 == 0:
            a = run_a()
            b = run_b()
        else:
            b = run_b()
            a = run_a()
        out.append((a, b))
    return out


def ratios(pairs: list[tuple[dict, dict]], key: str) -> dict:
    values = sorted(b[key] / a[key] for a, b in pairs)
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2],
            "a": statistics.median(a[key] for a, _ in pairs),
            "b": statistics.median(b[key] for _, b in pairs)}


def scram_latency(broker: BrokerProcess, connections: int) -> dict:
    from kafka.net.sasl.scram import ScramClient

    port = broker.ports["SASL_PLAINTEXT"]
    times = []
    for _ in range(connections):
        t0 = time.perf_counter()
        with KafkaWire("127.0.0.1", port) as wire:
            wire.request(18, 3, message(18, "request", client_software_name="bench",
                                        client_software_version="1"))
            assert wire.request(17, 1, message(17, "request",
                                               mechanism="SCRAM-SHA-512")).error_code == 0
            client = ScramClient(SCRAM_USER, SCRAM_PASSWORD, "SCRAM-SHA-512")
            first = wire.request(36, 2, message(36, "request",
                                                auth_bytes=client.first_message()))
            client.process_server_first_message(first.auth_bytes)
            final = wire.request(36, 2, message(36, "request",
                                                auth_bytes=client.final_message()))
            assert final.error_code == 0, final.error_message
            client.process_server_final_message(final.auth_bytes)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {"connections": connections, "p50_ms": times[len(times) // 2],
            "p99_ms": times[int(len(times) * 0.99) - 1], "max_ms": times[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--mb", type=int, default=64, help="MB produced per run")
    parser.add_argument("--acls", type=int, default=1000)
    parser.add_argument("--scram-connections", type=int, default=200)
    parser.add_argument("--only", choices=("tls", "authorizer"),
                        help="run one part (tls: TLS rows and SCRAM latency)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-security-"))
    tls = make_tls_files(work / "tls")
    log_dir = work / "logs"
    result: dict = {"pairs": args.pairs, "mb": args.mb}
    if args.only != "authorizer":
        result.update(tls_rows(args, tls, work, log_dir))
    if args.only != "tls":
        result["authorizer"] = authorizer_row(args, work, log_dir)
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


def tls_rows(args, tls, work: Path, log_dir: Path) -> dict:
    result = {}
    data = work / "tls-broker"
    data.mkdir()
    import subprocess

    subprocess.run([sys.executable, "-m", "semel.broker", "scram", "--data-dir", str(data), "--add",
                    f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"],
                   check=True, cwd=ROOT, capture_output=True)
    with BrokerProcess(data, security_props(tls)) as broker:
        def run(listener: str):
            return lambda: one_run(broker, client_config(broker, listener, tls), args.mb,
                                   log_dir)
        for listener in ("SSL", "SASL_SSL"):
            runs = paired(run("PLAINTEXT"), run(listener), args.pairs)
            result[listener] = {key: ratios(runs, key) for key in (
                "produce_mb_s", "fetch_mb_s", "produce_cpu_s_per_gb", "fetch_cpu_s_per_gb")}
        result["scram"] = scram_latency(broker, args.scram_connections)
    return result


def authorizer_row(args, work: Path, log_dir: Path) -> dict:
    acl_dir = work / "acl-broker"
    plain_dir = work / "plain-broker"
    common = {"log.flush.mode": "none", "auto.create.topics.enable": "true"}
    install_acls(acl_dir, args.acls)
    with BrokerProcess(plain_dir, common) as off, BrokerProcess(acl_dir, {
            **common, "authorizer.class.name": STANDARD,
            "allow.everyone.if.no.acl.found": "false"}) as on:
        runs = paired(lambda: one_run(off, {"bootstrap.servers": off.bootstrap}, args.mb,
                                      log_dir),
                      lambda: one_run(on, {"bootstrap.servers": on.bootstrap}, args.mb,
                                      log_dir), args.pairs)
    return {"acls": args.acls, **{key: ratios(runs, key) for key in (
        "produce_mb_s", "produce_cpu_s_per_gb")}}


def install_acls(data_dir: Path, count: int) -> None:
    """``count`` ACLs stored in the data directory before the broker starts (no principal
    of the bench may create ACLs: a super user would skip every check). User:ANONYMOUS,
    the PLAINTEXT producer, is allowed by prefixed grants on the bench's topics and groups
    and a cluster grant (topic creation), among bench_authorizer's mix of the others."""
    from semel.broker.security import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType
    from semel.broker.security import ResourceType as RT
    from semel.broker.security.acl import AclBinding
    from semel.broker.security.acl_store import AclStore

    allow, anonymous = AclPermissionType.ALLOW, "User:ANONYMOUS"
    ours = [AclBinding(RT.TOPIC, "sec-", PatternType.PREFIXED, anonymous, "*",
                       AclOperation.ALL, allow),
            AclBinding(RT.GROUP, "g-sec-", PatternType.PREFIXED, anonymous, "*",
                       AclOperation.ALL, allow),
            AclBinding(RT.CLUSTER, CLUSTER_NAME, PatternType.LITERAL, anonymous, "*",
                       AclOperation.ALL, allow)]
    data_dir.mkdir(parents=True, exist_ok=True)
    AclStore(data_dir).save([*ours, *make_acls(count - len(ours))])


def render(result: dict) -> str:
    lines = [f"pairs {result['pairs']}, {result['mb']} MB of 1 KiB records per run"]
    for listener in ("SSL", "SASL_SSL"):
        if listener not in result:
            continue
        r = result[listener]
        lines.append(
            f"{listener} / PLAINTEXT: produce MB/s {r['produce_mb_s']['median']:.3f} "
            f"[{r['produce_mb_s']['q1']:.3f}, {r['produce_mb_s']['q3']:.3f}] "
            f"({r['produce_mb_s']['a']:.0f} -> {r['produce_mb_s']['b']:.0f}), fetch MB/s "
            f"{r['fetch_mb_s']['median']:.3f} [{r['fetch_mb_s']['q1']:.3f}, "
            f"{r['fetch_mb_s']['q3']:.3f}] ({r['fetch_mb_s']['a']:.0f} -> "
            f"{r['fetch_mb_s']['b']:.0f}); broker CPU s/GB produce "
            f"{r['produce_cpu_s_per_gb']['a']:.2f} -> {r['produce_cpu_s_per_gb']['b']:.2f}, "
            f"fetch {r['fetch_cpu_s_per_gb']['a']:.2f} -> {r['fetch_cpu_s_per_gb']['b']:.2f}")
    a = result.get("authorizer")
    if a is not None:
        lines.append(
            f"authorizer with {a['acls']} ACLs / off: produce MB/s "
            f"{a['produce_mb_s']['median']:.3f} [{a['produce_mb_s']['q1']:.3f}, "
            f"{a['produce_mb_s']['q3']:.3f}], broker CPU s/GB "
            f"{a['produce_cpu_s_per_gb']['a']:.2f} -> {a['produce_cpu_s_per_gb']['b']:.2f}")
    s = result.get("scram")
    if s is not None:
        lines.append(f"SCRAM-SHA-512 authentication of a new connection ({s['connections']}): "
                     f"p50 {s['p50_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms, "
                     f"max {s['max_ms']:.2f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
