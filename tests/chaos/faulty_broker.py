"""Test-only broker entry point: the real broker over the fault-injecting file system, with a
loopback control socket. Never used outside tests; production code has no hook for it.

    python -m tests.chaos.faulty_broker serve [the options of `semel serve`]

It builds `broker.server.Broker(config, fs=ChaosFileSystem())` (the storage seam's
FaultyFileSystem plus a freeze for power loss) and, before the usual "semel ready on
host:port" line, prints

    chaos control on 127.0.0.1:<port>
    chaos recovered {"<topic>/<p>": <log end offset>, ...}

(the log end offsets right after recovery, before any request was served). The control
socket takes one JSON object per line and answers one JSON object per line:

  {"cmd": "ping"}                                  -> {"ok": true}
  {"cmd": "fault", "write_error": 28, "fsync_error": 5, "short_write": n,
   "path_filter": "queue-"}                         set FaultyFileSystem fault attributes
  {"cmd": "clear"}                                 clear every fault
  {"cmd": "offsets"}                     -> {"offsets": {"t/p": [leo, hw, lso, offline]}}
  {"cmd": "kill_at_prepare", "delay_ms": 0, "commit_only": true}
        arm a one-shot SIGKILL of this process once a transaction's PREPARE_* record is
        durable and before any marker is written (the coordinator's before_markers hook);
        delay_ms > 0 lets the EndTxn answer leave first
  {"cmd": "kill_at_rename", "src": ".log.cleaned", "dst": ".log.swap", "skip": 0,
   "after": false}
        arm a one-shot SIGKILL of this process at the first file rename from a path ending
        in src to one ending in dst (after `skip` such renames), before or after it is done:
        the log cleaner's swap phases
  {"cmd": "disarm"}
  {"cmd": "inject_bug", "bug": NAME}   mutation testing of the suite itself: make this
        broker process wrong on purpose, so a test can check the checker notices.
        "lso_is_hw": read_committed reads up to the high watermark (open and aborted
        transactions visible); "fsync_lies": fsync of a segment (.log) reports success but
        makes nothing durable (a power loss then takes acknowledged data)
  {"cmd": "power_loss"}  freeze every write, answer {"before": {"t/p": [leo, hw]}}, cut every
        file back to its fsynced length (new files whose directory was never fsynced go)
        and exit at once with status 137, as if the machine lost power

The control socket is served by a plain thread, so it answers while the event loop is busy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from semel.broker.cli import _check_data_dir, _parser
from semel.broker.config import ConfigError, load_config
from semel.storage.fs import FaultyFileSystem

log = logging.getLogger("chaos.faulty_broker")
FAULT_ATTRIBUTES = ("write_error", "write_error_after", "short_write", "fsync_error",
                    "truncate_error", "path_filter")


class ChaosFileSystem(FaultyFileSystem):
    """FaultyFileSystem whose mutations can be frozen for a power loss: every call that
    changes files takes `_io_lock`; `power_loss()` takes it for good, cuts the files back
    and never gives it back (the process exits)."""

    def __init__(self) -> None:
        super().__init__()
        self._io_lock = threading.Lock()

    def _write_at(self, handle, view, position):
        with self._io_lock:
            return super()._write_at(handle, view, position)

    def _truncate(self, handle, size):
        with self._io_lock:
            super()._truncate(handle, size)

    def open(self, path, *, create=True):
        with self._io_lock:
            return super().open(path, create=create)

    kill_at_rename: dict | None = None  # {"src", "dst", "skip", "after"} (kill_at_rename)

    def rename(self, src, dst):
        with self._io_lock:
            hit = self._rename_hits(os.fspath(src), os.fspath(dst))
            if hit and not self.kill_at_rename["after"]:
                _kill_self(f"chaos kill_at_rename before {src} -> {dst}")
            super().rename(src, dst)
            if hit:
                _kill_self(f"chaos kill_at_rename after {src} -> {dst}")

    def _rename_hits(self, src: str, dst: str) -> bool:
        armed = self.kill_at_rename
        if armed is None or not (src.endswith(armed["src"]) and dst.endswith(armed["dst"])):
            return False
        if armed["skip"] > 0:
            armed["skip"] -= 1
            return False
        return True

    def remove(self, path):
        with self._io_lock:
            super().remove(path)

    def rmtree(self, path):
        with self._io_lock:
            super().rmtree(path)

    fsync_lies = False  # inject_bug "fsync_lies": an fsync of a segment makes nothing durable

    def _fsync(self, handle) -> None:
        if self.fsync_lies and handle.path.endswith(".log"):
            with self._lock:
                self.fsync_calls[handle.path] += 1
            return
        super()._fsync(handle)
        # An fsync still running when a power loss freezes the disk never returns: the
        # machine is off. Without this, one that finished during the cut returned success
        # and the broker acknowledged records the cut had just removed (seen once in a long
        # run: the acknowledgement came after the power loss's snapshot of the high
        # watermark, which did not cover it). Writes hold the lock only for a moment.
        with self._io_lock:
            pass

    def freeze(self) -> None:
        self._io_lock.acquire()

    def cut_to_fsynced(self) -> None:
        """Call with the freeze held."""
        self.simulate_power_loss()


def _kill_self(line: str) -> None:
    print(line, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


class Control:
    def __init__(self, broker, fs: ChaosFileSystem, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.fs = fs
        self.loop = loop
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]

    def start(self) -> None:
        threading.Thread(target=self._serve, name="chaos-control", daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:
            for line in f:
                try:
                    reply = self.handle(json.loads(line))
                except Exception as e:  # noqa: BLE001 - reported to the caller
                    reply = {"error": f"{type(e).__name__}: {e}"}
                f.write(json.dumps(reply).encode() + b"\n")
                f.flush()
                if reply.get("exit"):
                    os._exit(137)

    def _offsets(self) -> dict[str, list[int]]:
        out = {}
        for tp, plog in list(self.broker.log_manager.logs.items()):
            out[f"{tp.topic}/{tp.partition}"] = [plog.log_end_offset, plog.high_watermark,
                                                 plog.last_stable_offset, plog.offline]
        return out

    def handle(self, req: dict) -> dict:
        cmd = req.get("cmd")
        if cmd == "ping":
            return {"ok": True}
        if cmd == "fault":
            for name in FAULT_ATTRIBUTES:
                if name in req:
                    setattr(self.fs, name, req[name])
            return {"ok": True}
        if cmd == "clear":
            self.fs.clear_faults()
            return {"ok": True}
        if cmd == "offsets":
            return {"offsets": self._offsets()}
        if cmd == "kill_at_prepare":
            self.loop.call_soon_threadsafe(self._arm, int(req.get("delay_ms", 0)),
                                           bool(req.get("commit_only", False)))
            return {"ok": True}
        if cmd == "kill_at_rename":
            self.fs.kill_at_rename = {"src": req["src"], "dst": req["dst"],
                                      "skip": int(req.get("skip", 0)),
                                      "after": bool(req.get("after", False))}
            return {"ok": True}
        if cmd == "disarm":
            self.fs.kill_at_rename = None
            self.loop.call_soon_threadsafe(self._disarm)
            return {"ok": True}
        if cmd == "inject_bug":
            return inject_bug(req["bug"], self.fs)
        if cmd == "power_loss":
            self.fs.freeze()
            before = {k: v[:2] for k, v in self._offsets().items()}
            self.fs.cut_to_fsynced()
            return {"before": before, "exit": True}
        return {"error": f"unknown command {cmd!r}"}

    def _arm(self, delay_ms: int, commit_only: bool) -> None:
        coordinator = self.broker.txn_coordinator

        async def hook(transactional_id, md) -> None:
            if commit_only and "COMMIT" not in md.state.name:
                return
            coordinator.before_markers = None
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            print(f"chaos kill_at_prepare {transactional_id} {md.state.name}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        coordinator.before_markers = hook

    def _disarm(self) -> None:
        self.broker.txn_coordinator.before_markers = None


def inject_bug(bug: str, fs: ChaosFileSystem) -> dict:
    if bug == "lso_is_hw":
        from semel.storage.partition_log import PartitionLog

        PartitionLog.last_stable_offset = property(lambda plog: plog.high_watermark)
    elif bug == "fsync_lies":
        fs.fsync_lies = True
    else:
        return {"error": f"unknown bug {bug!r}"}
    print(f"chaos inject_bug {bug}", flush=True)
    return {"ok": True}


async def _serve(config) -> int:
    from semel.broker.server import Broker

    fs = ChaosFileSystem()
    broker = Broker(config, fs=fs)
    await broker.start()
    # nothing has been served yet: these are the offsets recovery left
    recovered = {f"{tp.topic}/{tp.partition}": plog.log_end_offset
                 for tp, plog in broker.log_manager.logs.items()}
    control = Control(broker, fs, asyncio.get_running_loop())
    control.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"chaos control on 127.0.0.1:{control.port}", flush=True)
    print(f"chaos recovered {json.dumps(recovered)}", flush=True)
    print(f"semel ready on {broker.address} (chaos faulty fs, data {config.log_dirs}, "
          f"flush {config.log_flush_mode})", flush=True)
    await stop.wait()
    await broker.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, args.overrides, host=args.host, port=args.port,
                             data_dir=args.data_dir)
        _check_data_dir(config.log_dirs)
    except ConfigError as e:
        print(f"semel: {e}", file=sys.stderr)
        return 2
    import uvloop

    return uvloop.run(_serve(config))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
