"""Client settings shared by the workloads, and small helpers.

Timeouts: a request times out after `REQUEST_TIMEOUT_MS` (shorter than the nemesis's
pauses, so pauses really do outlast client timeouts), while deliveries and transactions get
`DELIVERY_TIMEOUT_MS` (generous, so the clients ride out every fault and the run ends with
the fewest unknown outcomes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import zlib
from pathlib import Path

REQUEST_TIMEOUT_MS = 5_000
DELIVERY_TIMEOUT_MS = 120_000
TRANSACTION_TIMEOUT_MS = 20_000
SESSION_TIMEOUT_MS = 10_000
API_TIMEOUT_S = 30.0
# a tombstone (null value) carries its identity in this header (workloads/compacted.py)
TOMBSTONE_HEADER = "tombstone"


def client_logger(out_dir: Path | None, name: str = "chaos.clients") -> logging.Logger:
    """librdkafka's log lines go to <out>/clients.log instead of stderr."""
    logger = logging.getLogger(name)
    if out_dir is not None and not logger.handlers:
        handler = logging.FileHandler(Path(out_dir) / "clients.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.DEBUG if os.environ.get("CHAOS_LIBRDKAFKA_DEBUG")
                        else logging.INFO)
    return logger


def common_config(bootstrap: str, logger: logging.Logger | None = None) -> dict:
    config = {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": REQUEST_TIMEOUT_MS * 2,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 5_000,
        "log_level": 4,
    }
    if logger is not None:
        config["logger"] = logger
    return config


def producer_config(bootstrap: str, logger=None, **extra) -> dict:
    debug = os.environ.get("CHAOS_LIBRDKAFKA_DEBUG")  # e.g. "eos,msg" into clients.log
    return {
        **common_config(bootstrap, logger),
        **({"debug": debug, "log_level": 7} if debug else {}),
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 5,
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        "message.timeout.ms": DELIVERY_TIMEOUT_MS,
        **extra,
    }


def transactional_config(bootstrap: str, transactional_id: str, logger=None, **extra) -> dict:
    return producer_config(bootstrap, logger, **{
        "transactional.id": transactional_id,
        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
        "message.timeout.ms": TRANSACTION_TIMEOUT_MS,
        **extra,
    })


def consumer_config(bootstrap: str, group: str, logger=None, **extra) -> dict:
    return {
        **common_config(bootstrap, logger),
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 1_000,
        "max.poll.interval.ms": 120_000,
        "fetch.wait.max.ms": 200,
        **extra,
    }


class ThreadedWorkload:
    """What every workload's threads share: started guarded (an exception lands in
    `errors`), stopped by one event, joined under one deadline."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []

    def _start_thread(self, fn, name: str, *args) -> None:
        t = threading.Thread(target=guarded(self.errors, fn), args=args, name=name,
                             daemon=True)
        t.start()
        self.threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()

    def join(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)


def guarded(errors: list[str], fn):
    """Run a workload thread's body; an exception ends up in `errors` (the runner reports
    it as a liveness failure) instead of vanishing with the thread."""

    def run(*args) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            import traceback

            errors.append(f"{fn.__name__}{args}: {type(e).__name__}: {e}\n"
                          + traceback.format_exc(limit=4))

    return run


def discard(producer, timeout: float = 1.0, *, dead: bool = True) -> None:
    """Let a producer deliver what it can (a dead one: nothing, its records are purged);
    a fatal one raises from flush."""
    if dead:
        purge(producer)
    with contextlib.suppress(Exception):
        producer.flush(timeout)


def finish_session(producer, fatal: threading.Event) -> int:
    """End an idempotent producer's session: a fatal one delivers nothing more (what it
    reports comes at once; its records stay of unknown outcome), a live one gets its
    delivery reports. Returns the records left without one (0 once it turned fatal)."""
    if not fatal.is_set():
        try:
            return producer.flush(DELIVERY_TIMEOUT_MS / 1000 + 5)
        except Exception:  # noqa: BLE001 - fatal; confluent-kafka may raise SystemError
            fatal.set()
    purge(producer)
    with contextlib.suppress(Exception):  # may raise the fatal error again
        producer.flush(1)
    return 0


def purge(producer) -> None:
    """Drop a dead producer's queued and in-flight records; each gets an error report
    (outcome unknown) at the next poll or flush instead of waiting for its timeout."""
    with contextlib.suppress(Exception):
        producer.purge(in_queue=True, in_flight=True, blocking=False)


def partition_for(key: str, partitions: int) -> int:
    """The workloads pick partitions themselves, so a send's partition is known at invoke."""
    return zlib.crc32(key.encode()) % partitions


def header(msg, name: str) -> str | None:
    for k, v in msg.headers() or ():
        if k == name:
            return v.decode() if v is not None else None
    return None


def txn_header(msg) -> str | None:
    return header(msg, "txn")


def error_text(err) -> str:
    try:
        return f"{err.name()}: {err.str()}"
    except AttributeError:
        return str(err)


def record_of(msg) -> list:
    """[topic, partition, offset, value, txn] as the history records it; a tombstone's value
    is its TOMBSTONE_HEADER (its identity: null values are all alike)."""
    value = msg.value()
    return [msg.topic(), msg.partition(), msg.offset(),
            value.decode() if value is not None else header(msg, TOMBSTONE_HEADER),
            txn_header(msg)]


def end_transaction(producer, history, p: str, txn: str, producer_id: str, *, commit: bool,
                    writes: list[list[str]] | None = None, attempts: int = 20) -> str:
    """Commit or abort the open transaction, recording the outcome; retriable errors are
    retried, an abortable one during commit aborts. Returns "committed", "aborted" or
    "fatal" (the producer is unusable: outcome unknown, make a new one)."""
    from confluent_kafka import KafkaException

    f = "commit" if commit else "abort"
    if commit:
        history.record(p, "invoke", f, txn=txn, producer=producer_id, writes=writes or [])
    else:
        history.record(p, "invoke", f, txn=txn, producer=producer_id)
    for _ in range(attempts):
        try:
            if commit:
                producer.commit_transaction(API_TIMEOUT_S)
            else:
                producer.abort_transaction(API_TIMEOUT_S)
            history.record(p, "ok", f, txn=txn, producer=producer_id)
            return "committed" if commit else "aborted"
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                break
            if commit and err.txn_requires_abort():
                if abort_open_transaction(producer, history, p, txn, producer_id):
                    history.record(p, "fail", f, txn=txn, producer=producer_id,
                                   error=error_text(err))
                    return "aborted"
                break
            if not err.retriable():
                break
    history.record(p, "info", f, txn=txn, producer=producer_id, error="gave up")
    return "fatal"


def abort_open_transaction(producer, history, p: str, txn: str, producer_id: str,
                           attempts: int = 20) -> bool:
    """Abort after an abortable error; True once the abort is done."""
    from confluent_kafka import KafkaException

    history.record(p, "invoke", "abort", txn=txn, producer=producer_id)
    for _ in range(attempts):
        try:
            producer.abort_transaction(API_TIMEOUT_S)
            history.record(p, "ok", "abort", txn=txn, producer=producer_id)
            return True
        except KafkaException as e:
            err = e.args[0]
            if err.fatal() or not err.retriable():
                break
    history.record(p, "info", "abort", txn=txn, producer=producer_id, error="gave up")
    return False
