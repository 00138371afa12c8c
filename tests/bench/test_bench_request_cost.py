"""The request-cost workload on a broker that cannot be measured, and how the report shows
the produce-1k-16k and request-cost rows.

A broker that does not offer Produce v11 (a fake one here: it answers ApiVersions only) or
whose process is not known gives ``NotMeasured`` with the reason, and the report prints the
reason in that broker's cell instead of a figure; bench/run.py records it without counting
it as a failure. The runs against real brokers are in test_bench_smoke.py.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import report, workloads
from bench.brokers import RunningBroker
from bench.clients import NotMeasured
from bench.workloads import Sizes
from semel.protocol import api
from semel.protocol.frame import encode_response_header
from tests.kafka_wire import API_VERSIONS, message

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


def _recv_exactly(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _api_versions_only(listener: socket.socket, produce_max: int) -> None:
    """Answers every ApiVersions v0 request, offering Produce up to ``produce_max``; closes
    the connection on anything else."""
    offered = {0: produce_max, 22: 4, 19: 7}
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            while (head := _recv_exactly(conn, 4)) is not None:
                frame = _recv_exactly(conn, _SIZE.unpack(head)[0])
                key, version, correlation_id = _HEADER.unpack_from(frame)
                if key != API_VERSIONS or version != 0:
                    break
                body = message(API_VERSIONS, "response", api_keys=[
                    message(API_VERSIONS, "response", "ApiVersion", api_key=k, min_version=0,
                            max_version=v) for k, v in offered.items()])
                out = bytearray(encode_response_header(correlation_id, 0))
                api.codec(API_VERSIONS, "response").encode(0, body, out)
                conn.sendall(_SIZE.pack(len(out)) + bytes(out))


@pytest.fixture
def old_broker():
    """The address of a fake broker whose Produce stops at v8."""
    listener = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=_api_versions_only, args=(listener, 8), daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
    listener.close()
    thread.join(5)
    assert not thread.is_alive()


def test_request_cost_names_the_version_a_broker_does_not_offer(old_broker, tmp_path):
    # this process stands in for the broker's: the check fails before any CPU is read
    broker = RunningBroker("old", old_broker, proc=SimpleNamespace(pid=os.getpid()))
    with pytest.raises(NotMeasured, match=r"^Produce v11 not offered \(v0-8\)$"):
        workloads.request_cost(broker, tmp_path, requests=10, requests_16k=10, runs=1,
                               warm_up=10)


def test_request_cost_needs_the_broker_process(tmp_path):
    with pytest.raises(NotMeasured, match="no broker process"):
        workloads.request_cost(RunningBroker("peer", "127.0.0.1:9"), tmp_path, requests=10,
                               requests_16k=10, runs=1, warm_up=10)


def _page(agg: dict, not_measured: dict) -> str:
    info = {"cpu_model": "test CPU", "cores": 2, "ram_gib": 4, "kernel": "k", "python": "3",
            "client": "c", "semel_commit": "abc", "loadavg_start": "0", "loadavg_end": "0"}
    return report.markdown(agg=agg, info=info, sizes=Sizes(), profile="smoke", rounds=1,
                           peer="tansu", peer_label="Tansu", command="bench", started="now",
                           note="", plot_name=None, profile_tops={}, failures=[],
                           not_measured=not_measured)


def test_report_shows_the_new_rows_and_why_a_broker_was_not_measured():
    agg = {("produce-1k-16k", "semel-none"): {"n": 1, "MBps": 50.0, "broker_cpu_s_per_GB": 4.0,
                                               "broker_cores": 0.5, "client_cores": 0.6},
           ("produce-1k-16k", "tansu"): {"n": 1, "MBps": 25.0, "broker_cpu_s_per_GB": 8.0,
                                          "broker_cores": 0.7, "client_cores": 0.3},
           ("request-cost", "semel-fsync"): {"n": 1, "fixed_us_per_request": 80.0,
                                             "us_per_request_16k": 120.0, "per_kib_us": 2.5,
                                             "broker_cores": 0.9, "client_cores": 0.1},
           ("request-cost", "semel-none"): {"n": 1, "fixed_us_per_request": 70.0,
                                            "us_per_request_16k": 110.0, "per_kib_us": 2.5,
                                            "broker_cores": 1.0, "client_cores": 0.1},
           ("produce-100b-1p", "semel-none"): {"n": 1, "MBps": 30.0}}
    page = _page(agg, {("request-cost", "tansu"): "Produce v11 not offered (v0-8)"})
    lines = page.splitlines()
    assert ("| Produce 1 KiB records, 1 producer, acks=all, Java's batching: batch.size 16 KiB, "
            "linger.ms 5 (MB/s) ↑ | — | 50.0 | 25.0 | 2.00 | — |") in lines
    assert ("| Broker CPU s per GB produced (1 KiB, 1 producer, 16 KiB batches) ↓ | — | 4.00 "
            "| 8.00 | 0.50 | — |") in lines
    not_offered = "not measured: Produce v11 not offered (v0-8)"
    assert ("| Produce request, fixed cost (broker CPU us per request, 1 record of 10 B) ↓ "
            f"| 80.0 | 70.0 | {not_offered} | — | — |") in lines
    assert (f"| ... 16 KiB batch (us per request) ↓ | 120.0 | 110.0 | {not_offered} | — "
            "| — |") in lines
    assert f"| ... per KiB (us) ↓ | 2.50 | 2.50 | {not_offered} | — | — |" in lines
    assert "| produce-1k-16k | 1 | — | 0.50 / 0.60 | 0.70 / 0.30 |" in lines
    assert "| request-cost (1 record of 10 B) | 1 | 0.90 / 0.10 | 1.00 / 0.10 | — |" in lines
    assert ("| produce-1k-16k: semel (flush none) / peer MB/s >= 1.0 (issue 12) | 2.00 "
            "| met |") in lines


def test_report_quotes_kafka_figures_with_source_and_this_runs_nearest_row():
    page = _page({("produce-100b-1p", "semel-none"): {"n": 1, "MBps": 30.0}}, {})
    section = page.split("## Apache Kafka's published figures (reference only)")[1]
    section = section.split("\n## ")[0]
    assert "**821,557 records/s, 78.3 MB/s**" in section
    assert ("This run (produce 100 B records, 1 producer, MB/s): semel-fsync —, "
            "semel-none 30.0, tansu —.") in section
    sources = [line for line in section.splitlines() if line.startswith("Source: ")]
    assert len(sources) == len(report.KAFKA_REFERENCE)
    assert all("https://" in line and "Setup: " in line for line in sources)
    figures = sum(len(ref["figures"]) for ref in report.KAFKA_REFERENCE)
    assert section.count("  Comparable? ") == figures
