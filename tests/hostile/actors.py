"""The hostile actors: asyncio workers that attack the broker, each with its own counters.

Run as their own process (so their CPU and GIL do not slow the real clients' callbacks):

    python -m tests.hostile.actors --target 127.0.0.1:PORT --seed 7 --duration 40 \
        --config '{"fuzz_rate": 120, ...}' --out counters.json

Actors (settings in `ActorConfig`; every connection leaves from a loopback address of its
own, 127.0.0.2-5, so `max.connections.per.ip` is exercised without touching the real
clients on 127.0.0.1):

  fuzz      requests of every supported (API key, version), default- or random-valued,
            mostly mutated (frames.py: bit flips, truncation, extension, lengths and counts
            set to 2^31-1 / -2, huge varints, swapped versions and keys, header only, size
            prefixes that lie); several per connection until the broker closes it
  garbage   one hostile frame per connection: size 0, shorter than a header, negative
            size, random bytes, unknown API keys, unsupported versions (ApiVersions must
            answer UNSUPPORTED_VERSION), client-id and tagged-field lies, oversize prefix
  lies      Produce (acks=all) of lying batches and compression bombs to their own topic;
            tallies the broker's answer per kind (NONE means accepted)
  slow      a request trickled one byte at a time, finishing before or after
            socket.request.read.timeout.ms; tallies answered / cut and when
  stall     a 100 MiB size prefix (the largest allowed) and a few bytes, then nothing (or
            one byte now and then); a prefix past the maximum must be refused at once
  fill      a 100 MiB request sent almost whole as fast as the broker reads, then nothing
            (several at once: the broker's memory must stay bounded by configuration)
  pipeline  hundreds of Metadata/ApiVersions requests without reading a response, then
            read them all, or leave
  flood     bursts of connections opened and closed (half ask ApiVersions first), and a
            held set larger than max.connections.per.ip from one address

Counters common to all: frames (sent), connections (opened), connect_errors, closes (the
broker closed the connection), responses (frames received), errors (other exceptions);
plus the actor's own, e.g. "outcome:<kind>:<result>". The JSON is rewritten every few
seconds and at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import statistics
import struct
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from semel.protocol import api
from semel.protocol.errors import Error
from semel.protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    decode_response_header,
    encode_request_header,
)
from tests.hostile.frames import (
    SIZE,
    FuzzFrames,
    LyingBatches,
    framed,
    garbage,
    request_payload,
)
from tests.kafka_wire import PRODUCE, message, produce_request

MAX_RESPONSE = 64 << 20
CONNECT_TIMEOUT_S = 5.0


@dataclass
class ActorConfig:
    lies_topic: str = "hostile-lies"
    read_timeout_ms: int = 30_000  # the broker's socket.request.read.timeout.ms
    fuzz_connections: int = 4
    fuzz_rate: float = 120.0  # frames per second over all fuzz connections
    garbage_connections: int = 2
    garbage_rate: float = 20.0  # connections per second over all garbage workers
    lies_connections: int = 1
    lies_rate: float = 4.0  # produce requests per second per connection
    bombs: bool = True
    bomb_every: int = 6  # every n-th lie is a bomb
    slow_connections: int = 6
    stall_connections: int = 4
    stall_max_s: float = 60.0  # we give up on a stalled connection the broker keeps open
    fill_connections: int = 3  # 100 MiB requests sent (almost) whole, then stalled
    fill_pause_s: float = 0.0  # up to this long (uniform) between one fill and the next
    pipeline_connections: int = 2
    pipeline_depth: int = 500
    flood_burst: int = 200
    flood_hold: int = 550
    flood_hold_s: float = 8.0
    actors: tuple[str, ...] = ("fuzz", "garbage", "lies", "slow", "stall", "fill",
                               "pipeline", "flood")


@dataclass
class Stats:
    counters: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    examples: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def inc(self, actor: str, name: str, n: int = 1) -> None:
        self.counters[actor][name] += n

    def example(self, actor: str, item, limit: int = 10) -> None:
        if len(self.examples[actor]) < limit:
            self.examples[actor].append(item)

    def sample(self, name: str, value: float) -> None:
        s = self.samples[name]
        if len(s) < 20_000:
            s.append(value)

    def to_json(self) -> dict:
        def summary(values: list[float]) -> dict:
            if not values:
                return {"n": 0}
            v = sorted(values)
            return {"n": len(v), "min": round(v[0], 3), "p50": round(statistics.median(v), 3),
                    "max": round(v[-1], 3)}

        return {"actors": {a: dict(sorted(c.items())) for a, c in sorted(self.counters.items())},
                "examples": dict(self.examples),
                "samples": {k: summary(v) for k, v in sorted(self.samples.items())}}


class Conn:
    """One connection and a task that reads (and counts) every frame the broker sends."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 stats: Stats, actor: str, *, keep: bool = False) -> None:
        self.reader, self.writer = reader, writer
        self.stats, self.actor = stats, actor
        self.eof = asyncio.Event()
        self.frames: asyncio.Queue[bytes] | None = asyncio.Queue() if keep else None
        self.received = 0
        self.task = asyncio.get_running_loop().create_task(self._drain())

    @classmethod
    async def open(cls, stats: Stats, actor: str, host: str, port: int, src: str, *,
                   settle_s: float = 0.0, **kw) -> Conn | None:
        """A connection, or None when it cannot be made; with `settle_s`, also None when the
        broker closes it within that time without a byte sent (refused: max.connections,
        max.connections.per.ip), counted as "refused"."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=(src, 0)), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            stats.inc(actor, "connect_errors")
            stats.inc(actor, f"connect_error:{type(e).__name__}")
            return None
        stats.inc(actor, "connections")
        conn = cls(reader, writer, stats, actor, **kw)
        if settle_s and await conn.closed_within(settle_s):
            stats.inc(actor, "refused")
            conn.close()
            return None
        return conn

    async def _drain(self) -> None:
        try:
            while True:
                head = await self.reader.readexactly(4)
                (size,) = SIZE.unpack(head)
                if size < 0 or size > MAX_RESPONSE:
                    self.stats.inc(self.actor, "bad_response_size")
                    break
                frame = await self.reader.readexactly(size)
                self.received += 1
                self.stats.inc(self.actor, "responses")
                if self.frames is not None:
                    self.frames.put_nowait(frame)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.eof.set()

    async def send(self, data: bytes, timeout: float = 10.0, *, count: int = 1) -> bool:
        """False if the connection is gone (or the broker stopped reading for `timeout`);
        `count`: how many frames `data` completes (0 for a piece of one)."""
        if self.eof.is_set():
            return False
        try:
            self.writer.write(data)
            await asyncio.wait_for(self.writer.drain(), timeout)
        except (ConnectionError, OSError, RuntimeError):  # uvloop: "the handler is closed"
            return False
        except TimeoutError:
            self.stats.inc(self.actor, "write_stalled")
            return False
        if count:
            self.stats.inc(self.actor, "frames", count)
        return True

    async def closed_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.eof.wait(), seconds)
        return self.eof.is_set()

    async def next_frame(self, timeout: float) -> bytes | None:
        """The next response (keep=True), or None at EOF or timeout."""
        get = asyncio.ensure_future(self.frames.get())
        eof = asyncio.ensure_future(self.eof.wait())
        done, _ = await asyncio.wait({get, eof}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        eof.cancel()
        if get in done:
            return get.result()
        get.cancel()
        return None

    def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(Exception):
            self.writer.transport.abort()


class Actors:
    def __init__(self, host: str, port: int, seed: int, config: ActorConfig) -> None:
        self.host, self.port, self.seed, self.cfg = host, port, seed, config
        self.stats = Stats()
        self.stop = asyncio.Event()
        self.advertised: dict[int, tuple[int, int]] = dict(api.SUPPORTED)

    async def ask_versions(self) -> None:
        """The (key, version) ranges the broker advertises: the fuzz actor mutates those; the
        rest of protocol.api's table goes to the garbage actor as unadvertised keys."""
        conn = await self.open("runner", "127.0.0.2", keep=True)
        if conn is None:
            return
        try:
            payload = bytearray(encode_request_header(18, 3, 1, "hostile", 2))
            api.codec(18, "request").encode(3, message(18, "request",
                                                       client_software_name="hostile",
                                                       client_software_version="1"), payload)
            await conn.send(framed(bytes(payload)))
            frame = await conn.next_frame(10.0)
            if frame is not None:
                resp, _ = api.codec(18, "response").decode(3, memoryview(frame), 4)
                self.advertised = {k.api_key: (k.min_version, k.max_version)
                                   for k in resp.api_keys if k.api_key in api.SUPPORTED}
        finally:
            conn.close()

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}-{name}")

    async def open(self, actor: str, src: str, **kw) -> Conn | None:
        return await Conn.open(self.stats, actor, self.host, self.port, src, **kw)

    async def sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), max(0.0, seconds))

    def workers(self) -> list:
        c = self.cfg
        out = []
        if "fuzz" in c.actors:
            out += [self.fuzz(i) for i in range(c.fuzz_connections)]
        if "garbage" in c.actors:
            out += [self.garbage(i) for i in range(c.garbage_connections)]
        if "lies" in c.actors:
            out += [self.lies(i) for i in range(c.lies_connections)]
        if "slow" in c.actors:
            out += [self.slow(i) for i in range(c.slow_connections)]
        if "stall" in c.actors:
            out += [self.stall(i) for i in range(c.stall_connections)]
        if "fill" in c.actors:
            out += [self.fill(i) for i in range(c.fill_connections)]
        if "pipeline" in c.actors:
            out += [self.pipeline(i) for i in range(c.pipeline_connections)]
        if "flood" in c.actors:
            out += [self.flood_churn(), self.flood_hold()]
        return out

    # -- fuzz ------------------------------------------------------------------------------

    async def fuzz(self, i: int) -> None:
        rng = self.rng(f"fuzz-{i}")
        gen = FuzzFrames(rng, self.advertised)
        interval = self.cfg.fuzz_connections / self.cfg.fuzz_rate
        while not self.stop.is_set():
            conn = await self.open("fuzz", "127.0.0.2", settle_s=0.05)
            if conn is None:
                await self.sleep(0.2)
                continue
            try:
                for _ in range(rng.randint(1, 60)):
                    if self.stop.is_set():
                        break
                    frame, kind, key, version, desync = gen.next()
                    before = conn.received
                    if not await conn.send(frame):
                        break
                    self.stats.inc("fuzz", f"mutation:{kind}")
                    # the broker's reaction to this frame: an answer, a close, or neither
                    # (a parked fetch, acks=0, a frame still missing bytes, a broker that
                    # stopped reading): then no further frame on this connection, so every
                    # close is attributed to the frame that caused it
                    deadline = time.monotonic() + 5.0
                    while (conn.received == before and not conn.eof.is_set()
                           and time.monotonic() < deadline):
                        await asyncio.sleep(0.005)
                    outcome = ("answered" if conn.received > before else
                               "closed" if conn.eof.is_set() else "no_answer")
                    self.stats.inc("fuzz", f"outcome:{kind}:{outcome}")
                    if outcome == "no_answer":
                        break
                    if outcome == "closed":
                        self.stats.inc("fuzz", "closes")
                        if kind == "none" and not _acks0_produce(key, version, frame):
                            # the broker closed on a well-formed request
                            self.stats.inc("fuzz", "closed_on_unmutated")
                            self.stats.example("fuzz", {
                                "closed_after_unmutated": f"{api.BY_KEY[key].name} v{version}",
                                "frame_hex": frame[:400].hex()})
                        break
                    if desync:
                        break
                    await self.sleep(interval * rng.uniform(0.5, 1.5))
            except Exception as e:  # noqa: BLE001
                self.stats.inc("fuzz", "errors")
                self.stats.example("fuzz", f"{type(e).__name__}: {e}")
            finally:
                conn.close()

    # -- garbage ---------------------------------------------------------------------------

    async def garbage(self, i: int) -> None:
        rng = self.rng(f"garbage-{i}")
        interval = self.cfg.garbage_connections / self.cfg.garbage_rate
        while not self.stop.is_set():
            kind, data = garbage(rng, self.advertised)
            conn = await self.open("garbage", "127.0.0.2", settle_s=0.05)
            if conn is None:
                await self.sleep(0.2)
                continue
            try:
                if not await conn.send(data):
                    outcome = "closed"
                else:
                    closed = await conn.closed_within(2.0)
                    outcome = ("answered" if conn.received else
                               "closed" if closed else "no_reaction")
                    if closed:
                        self.stats.inc("garbage", "closes")
                    if outcome == "no_reaction":  # e.g. a size prefix still waiting for its bytes
                        asyncio.get_running_loop().create_task(self._garbage_wait(kind, conn))
                        conn = None
                self.stats.inc("garbage", f"outcome:{kind}:{outcome}")
            finally:
                if conn is not None:
                    conn.close()
            await self.sleep(interval * rng.uniform(0.5, 1.5))

    async def _garbage_wait(self, kind: str, conn: Conn) -> None:
        """A garbage frame with no reaction within 2 s: the broker must still cut it by its
        read timeout."""
        try:
            limit = self.cfg.read_timeout_ms / 1000 + 3.0
            if await conn.closed_within(limit):
                self.stats.inc("garbage", f"outcome:{kind}:no_reaction_then_cut")
            else:
                self.stats.inc("garbage", f"outcome:{kind}:still_open_after_read_timeout")
        finally:
            conn.close()

    # -- lying batches and bombs -----------------------------------------------------------

    async def lies(self, i: int) -> None:
        rng = self.rng(f"lies-{i}")
        batches = await asyncio.get_running_loop().run_in_executor(
            None, lambda: LyingBatches(rng, bombs=self.cfg.bombs, bomb_every=self.cfg.bomb_every))
        response_codec = api.codec(PRODUCE, "response")
        request_codec = api.codec(PRODUCE, "request")
        conn = None
        correlation = 0
        while not self.stop.is_set():
            if conn is None or conn.eof.is_set():
                if conn is not None:
                    conn.close()
                conn = await self.open("lies", "127.0.0.2", keep=True)
                if conn is None:
                    await self.sleep(0.5)
                    continue
            name, batch = batches.next()
            version = rng.choice((7, 8, 9, 10, 11, 12))
            correlation += 1
            payload = bytearray(encode_request_header(
                PRODUCE, version, correlation, "hostile-lies",
                api.request_header_version(PRODUCE, version)))
            request_codec.encode(version, produce_request(self.cfg.lies_topic, 0, batch,
                                                          acks=-1), payload)
            if not await conn.send(framed(bytes(payload))):
                self.stats.inc("lies", f"outcome:{name}:closed")
                self.stats.inc("lies", "closes")
                continue
            frame = await conn.next_frame(60.0)
            if frame is None:
                outcome = "closed" if conn.eof.is_set() else "no_answer"
                if conn.eof.is_set():
                    self.stats.inc("lies", "closes")
                else:
                    conn.close()
                    conn = None
            else:
                try:
                    _, pos = decode_response_header(
                        frame, api.response_header_version(PRODUCE, version))
                    resp, _ = response_codec.decode(version, memoryview(frame), pos)
                    code = resp.responses[0].partition_responses[0].error_code
                    outcome = _error_name(code)
                except Exception as e:  # noqa: BLE001
                    outcome = "undecodable_response"
                    self.stats.example("lies", f"{name}: {type(e).__name__}: {e}")
            self.stats.inc("lies", f"outcome:{name}:{outcome}")
            if outcome == "NONE":
                self.stats.inc("lies", "accepted")
                self.stats.example("lies", f"accepted {name} ({len(batch)} bytes, "
                                           f"Produce v{version})")
            elif outcome in ("INVALID_RECORD", "CORRUPT_MESSAGE"):
                self.stats.inc("lies", "rejected_batches")
            await self.sleep(rng.expovariate(self.cfg.lies_rate))
        if conn is not None:
            conn.close()

    # -- slow ------------------------------------------------------------------------------

    async def slow(self, i: int) -> None:
        rng = self.rng(f"slow-{i}")
        timeout_s = self.cfg.read_timeout_ms / 1000
        correlation = 0
        while not self.stop.is_set():
            correlation += 1
            if rng.random() < 0.5:
                payload = request_payload(18, 3, rng, correlation, default=True)
            else:  # Metadata v12 for one known topic
                p = bytearray(encode_request_header(3, 12, correlation, "hostile", 2))
                api.codec(3, "request").encode(12, message(3, "request", topics=[
                    message(3, "request", "MetadataRequestTopic", name=self.cfg.lies_topic)]),
                    p)
                payload = bytes(p)
            data = framed(payload)
            factor = rng.choice((0.3, 0.6, 1.5, 3.0))
            per_byte = timeout_s * factor / len(data)
            conn = await self.open("slow", "127.0.0.4", settle_s=0.05)
            if conn is None:
                await self.sleep(0.5)
                continue
            started = time.monotonic()
            try:
                sent_all = True
                for b in range(len(data)):
                    last = b == len(data) - 1
                    if self.stop.is_set() or not await conn.send(data[b:b + 1],
                                                                 count=int(last)):
                        sent_all = False
                        break
                    if not last:
                        await asyncio.sleep(per_byte)
                if self.stop.is_set():
                    break
                trickle_s = time.monotonic() - started  # first byte to last (or to the cut)
                if sent_all:
                    deadline = time.monotonic() + 5.0
                    while not conn.received and not conn.eof.is_set() and \
                            time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                # judged by the time the bytes really took (this process may run late)
                within = trickle_s < timeout_s
                if conn.received:
                    outcome = "answered" if within else "answered_past_timeout"
                elif conn.eof.is_set():
                    cut_s = time.monotonic() - started
                    self.stats.inc("slow", "closes")
                    self.stats.sample("slow cut after s", cut_s)
                    outcome = "cut_before_timeout" if cut_s < timeout_s * 0.95 else "cut"
                else:
                    outcome = "no_reaction"
                self.stats.inc("slow", f"outcome:{outcome}")
            finally:
                conn.close()

    # -- stall -----------------------------------------------------------------------------

    async def stall(self, i: int) -> None:
        rng = self.rng(f"stall-{i}")
        while not self.stop.is_set():
            variant = rng.choice(("max_prefix", "max_prefix", "max_prefix_drip",
                                  "half_prefix", "over_max"))
            size = {"max_prefix": DEFAULT_MAX_FRAME_SIZE, "max_prefix_drip": DEFAULT_MAX_FRAME_SIZE,
                    "half_prefix": DEFAULT_MAX_FRAME_SIZE // 2,
                    "over_max": DEFAULT_MAX_FRAME_SIZE + 1}[variant]
            conn = await self.open("stall", "127.0.0.4", settle_s=0.05)
            if conn is None:
                await self.sleep(0.5)
                continue
            started = time.monotonic()
            self.stats.inc("stall", "frames")  # a request started, never finished
            try:
                if not await conn.send(SIZE.pack(size) + struct.pack(">hhi", 0, 9, 1) +
                                       b"\x00\x07", count=0):
                    self.stats.inc("stall", f"outcome:{variant}:closed_at_once")
                    continue
                limit = 2.0 if variant == "over_max" else self.cfg.stall_max_s
                deadline = started + limit
                while not self.stop.is_set() and time.monotonic() < deadline:
                    if await conn.closed_within(min(0.5, deadline - time.monotonic())):
                        break
                    if variant == "max_prefix_drip" and not await conn.send(b"\x00", count=0):
                        break
                if self.stop.is_set() and not conn.eof.is_set():
                    break
                if conn.eof.is_set():
                    self.stats.inc("stall", "closes")
                    self.stats.inc("stall", f"outcome:{variant}:cut")
                    self.stats.sample(f"stall cut after s ({variant})",
                                      time.monotonic() - started)
                else:
                    self.stats.inc("stall", f"outcome:{variant}:still_open_at_{limit:.0f}s")
            finally:
                conn.close()

    # -- fill ----------------------------------------------------------------------------

    async def fill(self, i: int) -> None:
        """A 100 MiB request sent almost whole, as fast as the broker reads it, then nothing:
        several at once must not take the broker's memory past queued.max.request.bytes."""
        rng = self.rng(f"fill-{i}")
        chunk = bytes(1 << 20)
        while not self.stop.is_set():
            await self.sleep(rng.uniform(0, self.cfg.fill_pause_s))
            if self.stop.is_set():
                break
            conn = await self.open("fill", "127.0.0.4")
            if conn is None:
                await self.sleep(0.5)
                continue
            started = time.monotonic()
            self.stats.inc("fill", "frames")
            try:
                size = DEFAULT_MAX_FRAME_SIZE - rng.randrange(0, 1 << 20)
                ok = await conn.send(SIZE.pack(size) + struct.pack(">hhi", 0, 9, 1), count=0)
                sent = 8
                while ok and not self.stop.is_set() and sent + len(chunk) < size:
                    ok = await conn.send(chunk, timeout=self.cfg.stall_max_s, count=0)
                    if ok:
                        sent += len(chunk)
                self.stats.sample("fill MiB sent before blocked or cut", sent / (1 << 20))
                if ok and not self.stop.is_set():
                    limit = started + self.cfg.stall_max_s
                    while not self.stop.is_set() and time.monotonic() < limit:
                        if await conn.closed_within(min(0.5, limit - time.monotonic())):
                            break
                if self.stop.is_set() and not conn.eof.is_set():
                    break
                await conn.closed_within(0.2)
                if conn.eof.is_set():
                    self.stats.inc("fill", "closes")
                    self.stats.inc("fill", "outcome:cut")
                    self.stats.sample("fill cut after s", time.monotonic() - started)
                else:
                    self.stats.inc("fill", "outcome:still_open_at_our_limit")
            finally:
                conn.close()

    # -- pipeline --------------------------------------------------------------------------

    async def pipeline(self, i: int) -> None:
        rng = self.rng(f"pipeline-{i}")
        while not self.stop.is_set():
            conn = await self.open("pipeline", "127.0.0.2")
            if conn is None:
                await self.sleep(0.5)
                continue
            try:
                frames = []
                for c in range(self.cfg.pipeline_depth):
                    if rng.random() < 0.5:
                        payload = request_payload(18, rng.choice((0, 1, 2, 3)), rng, c,
                                                  default=True)
                    else:
                        version = rng.choice((1, 4, 9, 12))
                        p = bytearray(encode_request_header(
                            3, version, c, "hostile", api.request_header_version(3, version)))
                        api.codec(3, "request").encode(version, message(3, "request",
                                                                        topics=None), p)
                        payload = bytes(p)
                    frames.append(framed(payload))
                if not await conn.send(b"".join(frames), timeout=30.0, count=len(frames)):
                    self.stats.inc("pipeline", "closes")
                    continue
                await self.sleep(rng.uniform(2.0, 5.0))
                if rng.random() < 0.5:
                    deadline = time.monotonic() + 30.0
                    while (conn.received < len(frames) and not conn.eof.is_set()
                           and time.monotonic() < deadline):
                        await asyncio.sleep(0.1)
                    outcome = ("all_answered" if conn.received == len(frames) else
                               "closed" if conn.eof.is_set() else "missing_answers")
                    self.stats.inc("pipeline", f"outcome:read:{outcome}")
                else:
                    self.stats.inc("pipeline", "outcome:left_without_reading")
                if conn.eof.is_set():
                    self.stats.inc("pipeline", "closes")
            finally:
                conn.close()
            await self.sleep(0.5)

    # -- flood -----------------------------------------------------------------------------

    async def flood_churn(self) -> None:
        rng = self.rng("flood-churn")
        sem = asyncio.Semaphore(64)
        ask = framed(request_payload(18, 3, rng, 1, default=True))

        async def one(n: int) -> None:
            async with sem:
                conn = await self.open("flood", "127.0.0.5")
                if conn is None:
                    return
                try:
                    if n % 2 == 0:
                        if not await conn.send(ask):
                            self.stats.inc("flood", "outcome:churn:closed")
                            return
                        deadline = time.monotonic() + 5.0
                        while not conn.received and not conn.eof.is_set() and \
                                time.monotonic() < deadline:
                            await asyncio.sleep(0.01)
                        outcome = ("answered" if conn.received else
                                   "closed" if conn.eof.is_set() else "no_answer")
                        self.stats.inc("flood", f"outcome:churn:{outcome}")
                        if outcome == "closed":
                            self.stats.inc("flood", "closes")
                finally:
                    conn.close()

        while not self.stop.is_set():
            await asyncio.gather(*(one(n) for n in range(self.cfg.flood_burst)))
            self.stats.inc("flood", "bursts")
            await self.sleep(rng.uniform(0.5, 1.5))

    async def flood_hold(self) -> None:
        rng = self.rng("flood-hold")
        ask = framed(request_payload(18, 3, rng, 1, default=True))
        sem = asyncio.Semaphore(50)

        async def one() -> Conn | None:
            async with sem:
                return await self.open("flood", "127.0.0.3")

        while not self.stop.is_set():
            conns = [c for c in await asyncio.gather(*(one() for _ in range(self.cfg.flood_hold)))
                     if c is not None]
            try:
                # every connection asks once; the broker answers those it admitted and
                # closes the rest (max.connections.per.ip)
                for c in conns:
                    await c.send(ask)
                deadline = time.monotonic() + 10.0
                while (not self.stop.is_set() and time.monotonic() < deadline
                       and any(not c.received and not c.eof.is_set() for c in conns)):
                    await asyncio.sleep(0.1)
                if self.stop.is_set():
                    break
                answered = sum(1 for c in conns if c.received)
                closed = sum(1 for c in conns if not c.received and c.eof.is_set())
                self.stats.inc("flood", "closes", closed)
                self.stats.inc("flood", "outcome:hold:closed_by_broker", closed)
                self.stats.inc("flood", "outcome:hold:answered", answered)
                self.stats.inc("flood", "outcome:hold:neither", len(conns) - answered - closed)
                self.stats.sample("flood held and answered", answered)
                await self.sleep(self.cfg.flood_hold_s)
                self.stats.sample("flood held still open at the end",
                                  sum(1 for c in conns if c.received and not c.eof.is_set()))
            finally:
                for c in conns:
                    c.close()
            self.stats.inc("flood", "holds")
            await self.sleep(rng.uniform(1.0, 3.0))

    # -- run -------------------------------------------------------------------------------

    async def run(self, duration_s: float, out: Path | None) -> dict:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        started = time.monotonic()
        await self.ask_versions()
        tasks = [loop.create_task(w) for w in self.workers()]

        async def report() -> None:
            while not self.stop.is_set():
                await self.sleep(5.0)
                self._write(out, time.monotonic() - started, final=False)

        reporter = loop.create_task(report())
        await self.sleep(duration_s)
        self.stop.set()
        _, pending = await asyncio.wait(tasks, timeout=10.0)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, reporter, return_exceptions=True)
        for t in tasks:
            if not t.cancelled() and t.exception() is not None:
                e = t.exception()
                self.stats.inc("runner", "worker_crashed")
                self.stats.example("runner", f"{type(e).__name__}: {e}")
        return self._write(out, time.monotonic() - started, final=True)

    def _write(self, out: Path | None, elapsed: float, *, final: bool) -> dict:
        data = {"seed": self.seed, "elapsed_s": round(elapsed, 1), "final": final,
                "config": asdict(self.cfg), **self.stats.to_json()}
        if out is not None:
            tmp = out.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1, default=str))
            tmp.replace(out)
        return data


def _acks0_produce(key: int, version: int, frame: bytes) -> bool:
    """An acks=0 Produce: the broker closes the connection when a partition fails (as Kafka
    does, so the producer notices), which is not a fault."""
    if key != PRODUCE:
        return False
    try:
        from semel.protocol.frame import parse_request_header

        body = memoryview(frame)[4:]
        _, pos = parse_request_header(body, api.request_header_version(key, version))
        request, _ = api.codec(key, "request").decode(version, body, pos)
        return request.acks == 0
    except Exception:  # noqa: BLE001
        return False


def _error_name(code: int) -> str:
    try:
        return Error(code).name
    except ValueError:
        return f"error {code}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.hostile.actors")
    ap.add_argument("--target", required=True, help="host:port of the broker")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--config", default="{}", help="ActorConfig fields as JSON")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    host, port = args.target.rsplit(":", 1)
    fields = json.loads(args.config)
    if "actors" in fields:
        fields["actors"] = tuple(fields["actors"])
    config = ActorConfig(**fields)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    data = runner(Actors(host, int(port), args.seed, config).run(args.duration, args.out))
    if args.out is None:
        print(json.dumps(data, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
