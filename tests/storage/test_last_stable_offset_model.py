"""Hypothesis: transactional producers interleaved with plain and idempotent ones on one
partition, markers in any order, segment rolls and restarts (clean or crash). After every
step the last stable offset is the first offset of the oldest open transaction (else the
high watermark), the aborted transactions collected from the `.txnindex` files are exactly
the aborted ones in marker order, and a read_committed consumer applying Kafka's client
rule to what fetches return (data below the LSO plus the aborted list for the range) sees
exactly the plain records and the committed transactions' records below the LSO, from any
fetch offset."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import make_batch, open_log

from semel.protocol.records import (
    ControlType,
    build_control_batch,
    iter_batches,
    iter_records,
    parse_control_record,
)
from semel.storage.config import LogConfig

CONFIG = LogConfig(segment_bytes=500)
TXN_PRODUCERS = (1, 2, 3)
IDEMPOTENT = 50


class Model:
    def __init__(self) -> None:
        self.end = 0  # log end offset
        self.visible: dict[int, bytes] = {}  # offset -> value, once committed (or plain)
        self.pending: dict[int, list[tuple[int, bytes]]] = {}  # pid -> open txn records
        self.first: dict[int, int] = {}  # pid -> first offset of its open transaction
        self.aborted: list[tuple[int, int]] = []  # (pid, first offset), marker order
        self.sequence: dict[int, int] = {}

    def last_stable_offset(self) -> int:
        return min(self.first.values(), default=self.end)


def consume(plog, fetch_offset: int, lso: int) -> dict[int, bytes]:
    """What a read_committed consumer starting at `fetch_offset` receives, fetch by fetch
    (each fetch returns at most one segment), with Kafka's client-side filtering."""
    seen: dict[int, bytes] = {}
    offset = fetch_offset
    while offset < lso:
        data = bytes(plog.read(offset, 1 << 20, upper_bound=lso).records)
        assert data, f"no data at {offset} below the LSO {lso}"
        pending_aborts = sorted(plog.aborted_transactions_in(offset, data), key=lambda a: a[1])
        aborted_producers: set[int] = set()
        for header in iter_batches(data):
            if header.producer_id >= 0:
                while pending_aborts and pending_aborts[0][1] <= header.last_offset:
                    aborted_producers.add(pending_aborts.pop(0)[0])
                if header.is_control:
                    [record] = list(iter_records(data, header))
                    if parse_control_record(record)[0] == ControlType.ABORT:
                        aborted_producers.discard(header.producer_id)
                elif header.is_transactional and header.producer_id in aborted_producers:
                    offset = header.next_offset
                    continue
            if not header.is_control:
                for record in iter_records(data, header):
                    if record.offset >= fetch_offset:
                        seen[record.offset] = record.value
            offset = header.next_offset
    return seen


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_last_stable_offset_and_aborted_transactions(data):
    directory = Path(tempfile.mkdtemp(prefix="semel-lso-"))
    plog = open_log(directory, CONFIG)
    model = Model()
    for step in range(data.draw(st.integers(1, 40), label="steps")):
        action = data.draw(
            st.sampled_from(
                ["plain", "idempotent", "txn", "txn", "txn", "end", "end", "roll", "restart"]
            ),
            label="action",
        )
        count = data.draw(st.integers(1, 3), label="count")
        values = [b"%d-%d" % (step, i) for i in range(count)]
        records = [(None, v, None, 1_700_000_000_000) for v in values]
        if action == "plain":
            plog.append(make_batch(count, fill=step))
            for i in range(count):
                model.visible[model.end + i] = bytes([step % 256]) * 10
            model.end += count
        elif action in ("idempotent", "txn"):
            pid = (
                IDEMPOTENT
                if action == "idempotent"
                else data.draw(st.sampled_from(TXN_PRODUCERS), label="pid")
            )
            seq = model.sequence.get(pid, 0)
            from semel.protocol.records import build_batch

            result = plog.append(
                build_batch(
                    records,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=seq,
                    is_transactional=action == "txn",
                )
            )
            assert result.base_offset == model.end
            model.sequence[pid] = seq + count
            placed = [(model.end + i, v) for i, v in enumerate(values)]
            if action == "txn":
                model.first.setdefault(pid, model.end)
                model.pending.setdefault(pid, []).extend(placed)
            else:
                model.visible.update(placed)
            model.end += count
        elif action == "end":
            pid = data.draw(st.sampled_from(TXN_PRODUCERS), label="pid")
            commit = data.draw(st.booleans(), label="commit")
            plog.append(
                build_control_batch(
                    commit=commit,
                    producer_id=pid,
                    producer_epoch=0,
                    coordinator_epoch=0,
                    timestamp_ms=1_700_000_000_000,
                ),
                origin="coordinator",
            )
            if pid in model.first:
                first = model.first.pop(pid)
                txn_records = model.pending.pop(pid)
                if commit:
                    model.visible.update(txn_records)
                else:
                    model.aborted.append((pid, first))
            model.end += 1
        elif action == "roll":
            plog.roll()
        else:
            clean = data.draw(st.booleans(), label="clean")
            plog.close(flush=clean)
            plog = open_log(directory, CONFIG, clean=clean)

        lso = model.last_stable_offset()
        assert plog.log_end_offset == plog.high_watermark == model.end
        assert plog.last_stable_offset == lso
        assert plog.collect_aborted_transactions(0, model.end) == model.aborted
        start = data.draw(st.integers(0, lso), label="fetch offset")
        expected = {o: v for o, v in model.visible.items() if start <= o < lso}
        assert consume(plog, start, lso) == expected
    plog.close()


def test_replay_keeps_open_transactions_in_first_offset_order(tmp_path):
    """A restart replays the log segment by segment: a producer first met through a marker
    that closes nothing, then another producer's transaction, then the first producer's -
    the oldest open transaction must still bound the LSO."""
    from semel.protocol.records import build_batch

    def txn(pid: int, seq: int) -> bytes:
        return build_batch(
            [(None, b"v", None, 1_700_000_000_000)],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
            is_transactional=True,
        )

    plog = open_log(tmp_path)
    plog.append(make_batch(1))
    plog.take_producer_snapshot()  # the replay starts here
    plog.append(
        build_control_batch(
            commit=True,
            producer_id=1,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=1_700_000_000_000,
        ),
        origin="coordinator",
    )  # 1: closes nothing
    plog.append(txn(2, 0))  # 2
    plog.append(txn(1, 0))  # 3
    assert plog.last_stable_offset == 2
    plog.close(flush=False)
    again = open_log(tmp_path, clean=False)
    assert again.last_stable_offset == 2


def test_durable_last_stable_offset_stays_below_the_fsynced_end_and_wakes_listeners(tmp_path):
    import asyncio

    from log_helpers import FakeClock

    from semel.protocol.records import build_batch
    from semel.storage.log_manager import LogManager

    async def run():
        manager = LogManager(tmp_path, default_config=LogConfig(), clock=FakeClock())
        moved: list[tuple[int, int]] = []
        manager.on_high_watermark = lambda p: moved.append((p.high_watermark, p.last_stable_offset))
        await manager.start()
        manager.create_topic("t", 1)
        plog = manager.get_partition("t", 0)
        plog.append(make_batch(2))
        result = plog.append(
            build_batch(
                [(None, b"x", None, 1_700_000_000_000)],
                producer_id=7,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
            )
        )
        assert plog.high_watermark == 0 and plog.last_stable_offset == 0  # nothing fsynced
        await plog.wait_durable(result.next_offset)
        assert (plog.high_watermark, plog.last_stable_offset) == (3, 2)
        plain = plog.append(make_batch(1))
        marker = plog.append(
            build_control_batch(
                commit=False,
                producer_id=7,
                producer_epoch=0,
                coordinator_epoch=0,
                timestamp_ms=1_700_000_000_000,
            ),
            origin="coordinator",
        )
        assert plog.last_stable_offset == 2 <= plog.high_watermark
        moved.clear()
        await plog.wait_durable(marker.next_offset)
        assert plain.next_offset < marker.next_offset == plog.high_watermark
        assert plog.last_stable_offset == plog.high_watermark == 5
        assert moved and moved[-1] == (5, 5)  # fetches parked on the partition wake up
        assert plog.collect_aborted_transactions(0, 5) == [(7, 2)]
        await manager.close()

    asyncio.run(run())
