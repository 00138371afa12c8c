"""The nemesis: a seeded schedule of faults against the target, one at a time, with quiet
gaps between them so the workloads make progress.

Faults (names used by the profiles):
  kill               SIGKILL the broker at a random moment, restart on the same port
  kill_after_commit  SIGKILL the broker right after the next transaction commit completes
  kill_at_prepare    SIGKILL once a PREPARE_COMMIT/ABORT is durable, before any marker
                     (faulty broker: the coordinator's before_markers hook), sometimes after
                     a short delay that lets the EndTxn answer leave first
  pause              SIGSTOP for longer than the clients' request timeout, then SIGCONT
  proxy_delay        every connection's traffic delayed, for a while
  proxy_slow_one     one connection's requests delayed while the others proceed
  proxy_blackhole    traffic swallowed (requests time out), then the connections reset
  proxy_reset        every connection reset (RST)
  disk_full          writes fail with ENOSPC for a while (faulty broker)
  torn_write         writes put a few bytes on disk, then fail with EIO, for a while
  short_write        writes are cut to a few bytes each (the seam must loop; no error)
  fsync_fail         fsyncs fail with EIO for a while (faulty broker)
  txn_log_fault      fsyncs of __transaction_state only fail for a while (coordinator
                     transitions cannot be persisted)
  power_loss         files cut back to their fsynced length, broker restarted (faulty broker)
  copier_kill        SIGKILL one copier process (its supervisor starts a new one)

The order (every enabled fault once per round, shuffled by the seed) and the parameters of
the faults come from the seed; only their timing depends on the machine. After a disk fault
the broker is restarted if a partition went offline for writes (as an operator would after
a full disk), which is recorded.
"""

from __future__ import annotations

import errno
import random
import threading
import time
from collections import Counter

from tests.chaos.history import Event, History
from tests.chaos.target import BrokerGone, Target

PRODUCE = 0  # api key
FAULTY_ONLY = {"kill_at_prepare", "disk_full", "torn_write", "short_write", "fsync_fail",
               "txn_log_fault", "power_loss"}


class Nemesis:
    def __init__(self, target: Target, history: History, seed: int, faults: list[str], *,
                 gap_s: tuple[float, float] = (1.0, 3.0),
                 pause_s: tuple[float, float] = (6.0, 9.0),
                 fault_s: tuple[float, float] = (1.5, 4.0),
                 copiers: list = ()) -> None:
        self.target = target
        self.history = history
        self.rng = random.Random(seed)
        self.faults = [f for f in faults if target.faulty or f not in FAULTY_ONLY]
        self.gap_s = gap_s
        self.pause_s = pause_s
        self.fault_s = fault_s
        self.copiers = list(copiers)
        self.stop_event = threading.Event()
        self.done = Counter()
        self.errors: list[str] = []  # a fault that could not be done ends the nemesis
        self.thread: threading.Thread | None = None
        self._commit = threading.Event()
        self._deck: list[str] = []
        history.listeners.append(self._on_event)

    def _on_event(self, e: Event) -> None:
        if e["f"] == "commit" and e["type"] == "ok":
            self._commit.set()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(120)
        self.heal()

    def heal(self) -> None:
        self.target.proxy.heal()
        if self.target.faulty:
            self.target.disarm()
            self.target.clear_disk_faults(record=False)
        try:
            self.target.check_alive()
        except RuntimeError as e:  # the broker does not start any more
            self.errors.append(f"heal: {e}")

    def _run(self) -> None:
        while not self.stop_event.wait(self.rng.uniform(*self.gap_s)):
            self.target.check_alive()
            if not self.faults:
                continue
            fault = self._deal()
            try:
                getattr(self, f"_{fault}")()
                self.done[fault] += 1
            except BrokerGone:
                pass
            except Exception as e:  # noqa: BLE001 - e.g. the broker does not come back
                self.errors.append(f"{fault}: {type(e).__name__}: {e}")
                self.history.record("nemesis", "info", "fault", fault="nemesis error",
                                    error=str(e)[-2000:])
                return
            finally:
                self.target.proxy.heal()

    def _deal(self) -> str:
        """The next fault: the enabled faults in a seeded shuffled order, reshuffled after
        each round, so even a short run goes through every kind."""
        if not self._deck:
            self._deck = list(self.faults)
            self.rng.shuffle(self._deck)
        return self._deck.pop()

    def _hold(self) -> None:
        self.stop_event.wait(self.rng.uniform(*self.fault_s))

    # -- the faults ----------------------------------------------------------------------------

    def _kill(self) -> None:
        self.target.kill()

    def _kill_after_commit(self) -> None:
        self._commit.clear()
        if self._commit.wait(10) and not self.stop_event.is_set():
            self.target.kill("kill after commit")

    def _kill_at_prepare(self) -> None:
        delay_ms = self.rng.choice([0, 0, 20, 200])
        self.target.arm_kill_at_prepare(delay_ms)
        if not self.target.restart_after_exit("kill at prepare", wait_s=10):
            self.target.disarm()

    def _pause(self) -> None:
        self.target.pause(self.rng.uniform(*self.pause_s), self.stop_event)

    def _proxy_delay(self) -> None:
        seconds = self.rng.uniform(0.05, 0.6)
        self.history.record("nemesis", "info", "fault", fault="proxy delay", seconds=seconds)
        self.target.proxy.delay(seconds)
        self._hold()

    def _proxy_slow_one(self) -> None:
        # sometimes longer than the clients' request timeout: the client retries on a new
        # connection while the original request is still on its way
        seconds = self.rng.uniform(1.0, 8.0)
        cid = self.target.proxy.slow_one(seconds, self.rng, prefer_api=PRODUCE)
        self.history.record("nemesis", "info", "fault", fault="proxy slow one", seconds=seconds,
                            connection=cid)
        self._hold()

    def _proxy_blackhole(self) -> None:
        self.history.record("nemesis", "info", "fault", fault="proxy blackhole")
        self.target.proxy.blackhole()
        self._hold()

    def _proxy_reset(self) -> None:
        n = self.target.proxy.reset_all()
        self.history.record("nemesis", "info", "fault", fault="proxy reset", connections=n)

    def _disk(self, name: str, **faults) -> None:
        self.target.disk_fault(name, **faults)
        self._hold()
        self.target.clear_disk_faults()
        time.sleep(0.5)  # let the next flush round run against the healed disk
        try:
            offsets = self.target.control("offsets")["offsets"]
        except BrokerGone:
            return
        offline = sorted(tp for tp, v in offsets.items() if v[3])
        if offline:
            self.target.kill(f"restart: offline {','.join(offline[:4])}")

    def _disk_full(self) -> None:
        self._disk("disk full", write_error=errno.ENOSPC)

    def _torn_write(self) -> None:
        self._disk("torn write", write_error=errno.EIO,
                   write_error_after=self.rng.randint(1, 200))

    def _short_write(self) -> None:
        self._disk("short write", short_write=self.rng.randint(1, 64))

    def _fsync_fail(self) -> None:
        self._disk("fsync fail", fsync_error=errno.EIO)

    def _txn_log_fault(self) -> None:
        self._disk("txn log fsync fail", fsync_error=errno.EIO,
                   path_filter="__transaction_state")

    def _power_loss(self) -> None:
        self.target.power_loss()

    def _copier_kill(self) -> None:
        running = [c for c in self.copiers if not c.stop_event.is_set()]
        if running:
            self.rng.choice(running).kill_one()
