"""The short profile of the hostile-client soak (soak.py's short_profile): hostile actors
(fuzzed frames of every supported API version, garbage, lying batches and compression
bombs, slow and stalled connections, pipelining, connection floods) attack a broker
subprocess for 40 s while the confluent-kafka and Java exactly-once copiers and a latency
probe run; then SIGKILL, restart, and the checks.

Only safety and progress are asserted, never a time: zero anomalies from the chaos checker
(copier output == input exactly once, every acknowledged probe record exactly once), the
broker alive until the kill with no traceback in its log, no invalid batch stored, the
broker's RSS peak under the profile's bound, records copied and probe latencies recorded,
fresh connections from the real clients' address served throughout the floods. A
failure prints the one-screen summary; everything else stays in the pytest temp dir.
"""

from __future__ import annotations

import random

from semel.protocol.records import iter_batches, validate_batches
from tests.hostile.frames import CASES, FuzzFrames, _lies, garbage
from tests.hostile.soak import run_soak, short_profile
from tests.hostile.verify import check_batch
from tests.javaclient import require_java

SEED = 1201


def test_every_lie_passes_the_header_checks_and_fails_the_walk() -> None:
    """The lying batches reach the record walk (valid header and CRC) and the read-back
    check flags each of them as an invalid stored batch."""
    rng = random.Random(5)
    for name, make in _lies(rng).items():
        batch = make()
        validate_batches(batch)  # header, CRC, count == lastOffsetDelta + 1: all fine
        header = next(iter_batches(batch))
        assert check_batch(batch, header, 64 << 20) is not None, name


def test_fuzz_frames_cover_every_supported_version() -> None:
    rng = random.Random(6)
    gen = FuzzFrames(rng)
    seen = {(key, version) for key, version in
            (gen.next()[2:4] for _ in range(len(CASES)))}
    assert seen == set(CASES)
    kinds = {garbage(rng)[0] for _ in range(300)}
    assert {"size0", "short_header", "unknown_key", "unsupported_version"} <= kinds


def test_hostile_soak_short(tmp_path) -> None:
    require_java()
    result = run_soak(short_profile(SEED), tmp_path)
    s = result.summary
    assert not s["checker"]["counts"] or s["checker"]["ok"], "\n" + result.text
    assert s["broker_alive_at_kill"] and not s["crashes"], "\n" + result.text
    assert not s["broker_log"].get("tracebacks"), "\n" + result.text
    assert s["stored_batches"]["invalid_batches"] == 0, "\n" + result.text
    assert s["rss_mib"]["peak"] <= s["rss_mib"]["bound"], "\n" + result.text
    assert sum(r["committed_records"] for r in s["copiers"].values()) > 0, "\n" + result.text
    assert s["probe"]["latency"].get("p99_ms") is not None, "\n" + result.text
    assert s["canary"]["ok"].get("hostile") and not s["canary"]["failed"], "\n" + result.text
    assert result.ok, "\n" + result.text
