"""kill -9 of a broker during each phase of a live cleaning's swap, through the storage seam
(tests/chaos/faulty_broker.py's ``kill_at_rename``): with the cleaned ``.cleaned`` files
written, part way through their renaming to ``.swap``, while the old segments are renamed
``.deleted``, part way through the new segment taking its own names. After the restart the
log is consistent (no leftover files once recovered, offsets increasing) and a
read_committed consumer (confluent-kafka) from offset 0 finds every key's latest
acknowledged value and nothing of an aborted transaction; the cleaner then finishes its
work and the same holds."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from tests.chaos.history import History
from tests.chaos.target import Target
from tests.integration.test_compaction_clients import consume_all

TOPIC = "compacted"
KEYS = 40

# (src suffix, dst suffix, renames of that kind to let through first, kill after the rename)
PHASES = {
    "cleaned-written": (".log.cleaned", ".log.swap", 0, False),
    "renamed-to-swap": (".log.cleaned", ".log.swap", 0, True),
    "old-segments-going": (".log", ".log.deleted", 1, False),
    "new-segment-named": (".log.swap", ".log", 0, True),
}


def write_history(bootstrap: str) -> tuple[dict[bytes, bytes | None], set[bytes]]:
    """Keyed updates and tombstones from an idempotent producer (and a key written once in
    each round), transactions committed and aborted on the same partition; returns each key's latest acknowledged value (by offset)
    and the aborted values."""
    acked: list[tuple[int, bytes, bytes | None]] = []

    def on_delivery(err, msg):
        assert err is None, err
        acked.append((msg.offset(), msg.key(), msg.value()))

    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5})
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4()}",
                    "linger.ms": 5})
    txn.init_transactions(30)
    aborted: set[bytes] = set()
    committed: list[tuple[int, bytes, bytes | None]] = []
    for round_ in range(30):
        for i in range(20):
            k = (round_ * 7 + i) % KEYS
            value = None if (round_ + i) % 23 == 0 else b"plain-%d-%d" % (round_, i) + b"x" * 80
            plain.produce(TOPIC, key=b"k%d" % k, value=value, partition=0,
                          on_delivery=on_delivery)
        # a key written once: every segment holds latest values, so a lost one shows
        plain.produce(TOPIC, key=b"once-%d" % round_, value=b"only", partition=0,
                      on_delivery=on_delivery)
        plain.flush(30)
        txn.begin_transaction()
        in_txn: list[tuple[int, bytes, bytes | None]] = []
        for i in range(3):
            value = b"txn-%d-%d" % (round_, i)
            txn.produce(TOPIC, key=b"k%d" % ((round_ + i) % KEYS), value=value, partition=0,
                        on_delivery=lambda err, msg, into=in_txn: into.append(
                            (msg.offset(), msg.key(), msg.value())))
        txn.flush(30)
        if round_ % 3 == 0:
            txn.abort_transaction(30)
            aborted |= {v for _, _, v in in_txn}
        else:
            txn.commit_transaction(30)
            committed += in_txn
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in sorted(acked + committed):
        latest[key] = (offset, value)
    return {k: v for k, (_, v) in latest.items()}, aborted


def check_log(bootstrap: str, expected: dict[bytes, bytes | None], aborted: set[bytes]) -> int:
    """The consumer's view: increasing offsets, nothing aborted, each key's latest value;
    returns the records read."""
    records = consume_all(bootstrap, TOPIC, "read_committed")
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert not {v for _, _, v in records} & aborted
    got = {}
    for _, key, value in records:
        got[key] = value
    assert got == expected
    return len(records)


def leftovers(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))]


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_kill_during_a_live_cleaning(tmp_path, phase):
    history = History()
    target = Target(tmp_path / "data", history, out_dir=tmp_path, overrides={
        "log.cleaner.backoff.ms": "100", "log.flush.mode": "fsync"})
    target.start()
    try:
        admin = AdminClient({"bootstrap.servers": target.direct})
        # written with cleanup.policy=delete (nothing is cleaned), then made compacted
        admin.create_topics([NewTopic(TOPIC, 1, config={
            "segment.bytes": "6000", "min.cleanable.dirty.ratio": "0.01"})])[TOPIC].result(30)
        expected, aborted = write_history(target.direct)
        total = check_log(target.direct, expected, aborted)
        src, dst, skip, after = PHASES[phase]
        target.control("kill_at_rename", src=src, dst=dst, skip=skip, after=after)
        target.expect_exit = True
        altered = admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, TOPIC, incremental_configs=[ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])])
        for future in altered.values():
            future.result(30)  # answered before the cleaner's next look (backoff)
        deadline = time.monotonic() + 60
        while target.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not target.alive(), "the cleaner never reached the phase"
        assert target.proc.returncode == -9
        partition_dir = tmp_path / "data" / f"{TOPIC}-0"
        crashed_with = sorted(n for n in os.listdir(partition_dir)
                              if n.endswith((".cleaned", ".swap", ".deleted")))
        assert crashed_with, "no cleaner file at the kill"

        # recovery completes or undoes the swap; the cleaner stays off for this start, or a
        # new cleaning (the topic is still dirty) may have written its own .cleaned files
        # by the time the directory is listed
        target.control_port = None
        target.overrides["log.cleaner.enable"] = "false"
        target.start()
        assert not leftovers(partition_dir)
        check_log(target.direct, expected, aborted)
        # the cleaner runs again (a restart with it on) and finishes
        del target.overrides["log.cleaner.enable"]
        target.kill("restart with the cleaner on")
        deadline = time.monotonic() + 60
        while (after_clean := len(consume_all(target.direct, TOPIC, "read_committed"))) >= total:
            assert time.monotonic() < deadline, "the cleaner did not clean after the restart"
            time.sleep(0.2)
        check_log(target.direct, expected, aborted)
        assert after_clean < total
    finally:
        target.stop()
