"""Hypothesis: whatever the interleaving of first sends, requests or responses lost,
retries, stale replays and broker restarts (clean or crash), every batch of every idempotent
producer is in the log exactly once, in sequence order, every retry of a written batch is
answered with its original offsets, and those offsets hold that batch."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import open_log, read_all
from log_helpers import values as log_values

from semel.protocol.errors import Error, KafkaError
from semel.protocol.records import build_batch
from semel.storage.config import LogConfig

MAX_IN_FLIGHT = 5
PRODUCERS = (11, 12)
CONFIG = LogConfig(segment_bytes=600)


def encode(pid: int, number: int, sizes: list[int], first_seq: int) -> bytes:
    return build_batch(
        [
            (None, b"%d-%d-%d" % (pid, number, r), None, 1_700_000_000_000)
            for r in range(sizes[number])
        ],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=first_seq,
    )


class Client:
    """One idempotent producer: batches numbered from 0, sequences from 0."""

    def __init__(self, pid: int, sizes: list[int]):
        self.pid = pid
        self.sizes = sizes
        self.first_seq = [sum(sizes[:i]) for i in range(len(sizes))]
        self.sent = 0  # batches sent at least once
        self.broken_from: int | None = None  # first batch sent on a dropped connection
        self.acked: dict[int, tuple[int, int]] = {}

    def first_unacked(self) -> int:
        n = 0
        while n in self.acked:
            n += 1
        return n

    def can_send_new(self) -> bool:
        return self.sent < len(self.sizes) and self.sent - self.first_unacked() < MAX_IN_FLIGHT

    def deliver(self, plog, number: int, *, must_succeed: bool = False, lost: bool = False) -> None:
        data = encode(self.pid, number, self.sizes, self.first_seq[number])
        try:
            result = plog.append(data)
        except KafkaError as e:
            assert e.code == Error.OUT_OF_ORDER_SEQUENCE_NUMBER, e
            assert not must_succeed, e
            return
        offsets = (result.base_offset, result.last_offset)
        assert offsets[1] - offsets[0] + 1 == self.sizes[number]
        if lost:  # written (or not), but the client never hears of it
            return
        if number in self.acked:
            assert self.acked[number] == offsets  # a retry gets the original answer
        self.acked[number] = offsets


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_retries_and_duplicates_leave_each_batch_once_in_order(data):
    sizes = {
        pid: data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=14), label="sizes")
        for pid in PRODUCERS
    }
    clients = {pid: Client(pid, sizes[pid]) for pid in PRODUCERS}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        plog = open_log(directory, CONFIG)
        steps = data.draw(st.integers(0, 60), label="steps")
        for _ in range(steps):
            client = clients[data.draw(st.sampled_from(PRODUCERS), label="producer")]
            action = data.draw(
                st.sampled_from(["new", "new", "retry", "reconnect", "restart"]), label="do"
            )
            lost = data.draw(st.booleans(), label="response lost")
            if action == "new" and client.can_send_new():
                if client.broken_from is None and data.draw(st.booleans(), label="drop"):
                    client.broken_from = client.sent  # the connection drops with this request
                if client.broken_from is None:
                    client.deliver(plog, client.sent, lost=lost)
                client.sent += 1
            elif action == "reconnect" and client.broken_from is not None:
                # requests after a dropped one went nowhere; they are resent in order
                for number in range(client.broken_from, client.sent):
                    client.deliver(plog, number, lost=lost)
                client.broken_from = None
            elif action == "retry" and client.sent:
                # a batch sent on a live connection: an in-flight retry, or a stale replay
                upto = client.sent if client.broken_from is None else client.broken_from
                if upto:
                    number = data.draw(st.integers(0, upto - 1), label="batch")
                    client.deliver(plog, number, lost=lost)
            elif action == "restart":
                clean = data.draw(st.booleans(), label="clean")
                plog.close(flush=clean)
                plog = open_log(directory, CONFIG, clean=clean)
        # the producers finish: every unacknowledged batch is retried in sequence order
        for client in clients.values():
            for number in range(len(client.sizes)):
                if number not in client.acked:
                    client.deliver(plog, number, must_succeed=True)
        stored = log_values(read_all(plog))
        plog.close()
    for client in clients.values():
        for number, (base, last) in client.acked.items():
            assert [v.decode() for v in stored[base : last + 1]] == [
                f"{client.pid}-{number}-{r}" for r in range(client.sizes[number])
            ]
    for pid, client in clients.items():
        mine = [v.decode() for v in stored if v.startswith(b"%d-" % pid)]
        expected = [f"{pid}-{n}-{r}" for n, size in enumerate(client.sizes) for r in range(size)]
        assert mine == expected
    assert len(stored) == sum(sum(s) for s in sizes.values())
