"""Dispatch: one request frame in, one response frame (or none) out.

Looks the API up in the handler table, checks the version against ``protocol.api``,
parses the header and body with the generated codecs, runs the handler and encodes its
response. A ``KafkaError`` escaping a handler becomes the handler's ``error_response``; an
unknown API key, one Kafka has but semel does not serve (Kafka's SocketServer closes for a
key it does not enable on the listener too), an unsupported version (other than
ApiVersions, which answers UNSUPPORTED_VERSION in a v0 response as KIP-511 requires) or a
body that does not parse ends the connection, as Apache Kafka 4.x does.

Client quotas (broker/quotas/), once any is set: the request's bytes count against the
client's produce quota, its event-loop time (``_Timed``) against the request quota (not for
acks=0 produce or WriteTxnMarkers, as Kafka), Fetch accounts its own response bytes; the
longer throttle goes into the response's ``throttle_time_ms`` and the connection stops
reading for that long (``throttle``) after the response is sent at once (KIP-219). While no
quota is set none of this runs and Produce takes its fast path.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Coroutine
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from semel.broker.context import RequestContext
from semel.broker.handlers import HANDLERS
from semel.broker.quotas import NANOS_TO_PERCENTAGE
from semel.broker.security.session import BEFORE_AUTHENTICATION, SASL_HANDSHAKE, Session
from semel.protocol import api
from semel.protocol.errors import Error, KafkaError, ProtocolError
from semel.protocol.frame import encode_response_header, parse_request_header, peek_api_key_version
from semel.protocol.primitives import FrameBuilder
from semel.protocol.produce_fast import encode_response as encode_produce_response

if TYPE_CHECKING:
    from semel.broker.server import Broker

log = logging.getLogger("broker.dispatch")
PRODUCE = 0
FETCH = 1
API_VERSIONS = 18
_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")  # protocol.frame's, for the inline peek
_LOADED = HANDLERS.loaded  # the handler modules imported so far (HANDLERS imports the rest)
# APIs the request quota exempts (Kafka: cluster actions, answered exempt from throttling)
REQUEST_QUOTA_EXEMPT = frozenset({27})  # WriteTxnMarkers


class CloseConnection(Exception):
    """The request cannot be answered; the connection is closed (Kafka does the same).

    ``reason`` names the kind of problem in the bad-input metric."""

    def __init__(self, message: str, reason: str = "malformed_request") -> None:
        super().__init__(message)
        self.reason = reason


def advertised_versions() -> dict[int, tuple[int, int]]:
    """The API table the broker advertises: codecs we have and handlers we run."""
    return {k: v for k, v in api.SUPPORTED.items() if k in HANDLERS}


class Dispatcher:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.supported = advertised_versions()
        self.metrics = broker.metrics
        self.quotas = broker.quotas
        self.timeouts = None  # produce's Timeouts for the loop requests are deferred on

    def dispatch(self, frame: memoryview, session: Session,
                 release: Callable[[], None] | None = None,
                 throttle: Callable[[int], None] | None = None, *,
                 defer_on: asyncio.AbstractEventLoop,
                 ) -> list | asyncio.Future | Coroutine | None:
        """The response frame (size prefix included) as buffers for ``writelines``, or None
        when no response is sent (acks=0); or, for a request that runs a handler, a
        coroutine that returns them (``await`` it). Large fetched records are not copied into
        the frame. Raises CloseConnection, as the coroutine may.
        ``throttle(ms)``: a quota was exceeded; the connection reads nothing more for ms.
        ``defer_on``: a Produce of the fast path waiting for the disk does not suspend; a
        future of this loop is returned instead, which gets the buffers once it is answered
        (the connection then needs no task for it). The checks and the fast path run in
        this call, without a coroutine (most requests of a busy producer end here)."""
        if session.raw_tokens:
            return self._raw_token(frame, session)
        if len(frame) < 8:  # peek_api_key_version, inline
            try:
                peek_api_key_version(frame)
            except ProtocolError as e:
                raise CloseConnection(str(e)) from None
        api_key, version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
        handler = _LOADED.get(api_key)
        if handler is None:
            handler = HANDLERS.get(api_key)  # an API's first request imports its module
            if handler is None:
                raise CloseConnection(f"unknown api key {api_key}", "unknown_api")
        if api_key not in BEFORE_AUTHENTICATION and not session.authenticated:
            raise CloseConnection(
                f"unexpected Kafka request of type {api.BY_KEY[api_key].name} during SASL "
                "handshake", "unauthenticated")
        # an expired session may only begin a re-authentication (and finish one it began):
        # anything else, ApiVersions included, closes the connection, as in Kafka's SocketServer
        if (session.expires_ms is not None and api_key != SASL_HANDSHAKE
                and not (session.sasl is not None and session.sasl.reauthenticating)
                and session.expired(self.broker.monotonic_ms())):
            raise CloseConnection(
                f"the SASL session of {session.principal} expired without "
                "re-authentication (connections.max.reauth.ms)", "session_expired")
        lo, hi = self.supported[api_key]
        if not lo <= version <= hi:
            if api_key == API_VERSIONS:
                if self.metrics is not None:
                    self.metrics.count_error(API_VERSIONS, Error.UNSUPPORTED_VERSION)
                return self._unsupported_api_versions(correlation_id)
            raise CloseConnection(f"unsupported version {version} of api {api_key}",
                                  "unsupported_version")
        started = perf_counter()
        broker = self.broker
        interceptor = broker.interceptor
        quotas = self.quotas
        if (api_key == PRODUCE and broker.authorizer is None and not quotas.enabled
                and (interceptor is None or interceptor.quiet)):
            fast = handler.fast_path(broker, frame, version)
            if fast is not None:
                if fast.waits:
                    # acks=all, not durable yet: the connection's next request may start
                    # while this one waits for the disk
                    if release is not None:
                        release()
                    timeouts = self.timeouts
                    if timeouts is None or timeouts.loop is not defer_on:
                        timeouts = self.timeouts = handler.Timeouts(defer_on)
                    return fast.answer_when_durable(
                        defer_on, partial(self._fast_answer, fast, correlation_id, started),
                        timeouts)
                return self._fast_answer(fast, correlation_id, started)
        return self._handle(frame, session, release, throttle, handler, api_key, version,
                            correlation_id, started)

    async def _handle(self, frame: memoryview, session: Session,
                      release: Callable[[], None] | None,
                      throttle: Callable[[int], None] | None, handler, api_key: int,
                      version: int, correlation_id: int, started: float) -> list | None:
        """``dispatch`` past its checks: decode, run the handler, encode its response."""
        broker = self.broker
        interceptor = broker.interceptor
        quotas = self.quotas
        try:
            header, pos = parse_request_header(frame, api.request_header_version(api_key, version))
            request_codec = api.codec(api_key, "request")
            request, _ = request_codec.decode(version, frame, pos)
        except ProtocolError as e:
            raise CloseConnection(f"malformed {api.BY_KEY[api_key].name} v{version}: {e}") from None
        ctx = RequestContext(header, broker, session, release)
        # interceptor: tests' fault injection (semel.broker.faults)
        fault = None if interceptor is None else interceptor.intercept(
            api_key, header, request, session)
        timed = None
        try:
            if fault is not None and fault.error is not None:
                # an acks=0 produce is never answered, also when failed on purpose
                response = None if getattr(request, "acks", None) == 0 \
                    else handler.error_response(request, fault.error)
            elif quotas.request.enabled:
                timed = _Timed(handler.handle(ctx, request))
                response = await timed
            else:
                response = await handler.handle(ctx, request)
        except KafkaError as e:
            log.debug("%s failed: %s", api.BY_KEY[api_key].name, e)
            response = handler.error_response(request, e.code)
        if fault is not None and await fault.after_handling():
            return None  # the response is dropped (or the connection closed instead)
        if quotas.enabled:
            self._throttle(api_key, header, session, request, response, len(frame),
                           0 if timed is None else timed.ns, throttle)
        if response is None:  # acks=0 produce
            return None
        out = FrameBuilder(4)  # size prefix, filled in by chunks()
        out += encode_response_header(correlation_id, api.response_header_version(api_key, version))
        api.codec(api_key, "response").encode(version, response, out)
        if self.metrics is not None:
            # latency, and the error codes in the response (which: broker/metrics.py)
            self.metrics.observe_request(api_key, perf_counter() - started, response)
        return out.chunks()

    def _throttle(self, api_key: int, header, session: Session, request, response,
                  size: int, request_ns: int, throttle: Callable[[int], None] | None) -> None:
        """Record the request against the client's quotas; if one is exceeded, put the
        throttle time into the response and mute the connection (Kafka's KafkaApis and
        RequestHandlerHelper: the longer of the bandwidth and request throttles, counted
        against the quota type that caused it)."""
        quotas = self.quotas
        now = self.broker.monotonic_ms()
        user = session.principal.name
        client_id = header.client_id or ""
        bandwidth = 0
        bandwidth_quota = None
        exempt = api_key in REQUEST_QUOTA_EXEMPT
        if api_key == PRODUCE:
            bandwidth_quota = quotas.produce
            if bandwidth_quota.enabled:
                bandwidth = bandwidth_quota.record(user, client_id, size, now)
            exempt = request.acks == 0
        elif api_key == FETCH and response is not None:
            bandwidth_quota = quotas.fetch  # fetch.py recorded its response's bytes
            bandwidth = response.throttle_time_ms
        requested = 0
        if quotas.request.enabled and not exempt:
            requested = quotas.request.record(user, client_id,
                                              request_ns * NANOS_TO_PERCENTAGE, now)
        throttle_ms = max(bandwidth, requested)
        if throttle_ms <= 0:
            return
        (bandwidth_quota if bandwidth > requested else quotas.request).throttled_for(throttle_ms)
        if response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = throttle_ms
        if throttle is not None:
            throttle(throttle_ms)

    def _fast_answer(self, fast, correlation_id: int, started: float) -> list:
        """The answer to a Produce request the fast path appended."""
        out = encode_produce_response(fast.version, correlation_id, fast.results)  # fast.encode
        metrics = self.metrics
        if metrics is not None:
            metrics.observe_request(PRODUCE, perf_counter() - started)
            if fast.any_failed:
                for code in fast.error_codes():
                    metrics.count_error(PRODUCE, code)
        return [out]

    def _raw_token(self, frame: memoryview, session: Session) -> list:
        """A bare SASL token after SaslHandshake v0, answered with a bare token; a failure
        closes the connection without an answer, as Kafka does."""
        step = session.sasl.step(bytes(frame))
        if step.error != Error.NONE:
            raise CloseConnection(f"SASL authentication failed: {step.error_message}",
                                  "authentication_failed")
        if step.done:
            session.raw_tokens = False
            session.authenticated_as(step.principal, step.session_lifetime_ms,
                                     self.broker.monotonic_ms())
        return [_SIZE.pack(len(step.challenge)), step.challenge]

    def _unsupported_api_versions(self, correlation_id: int) -> bytes:
        from semel.broker.handlers import api_versions

        response = api_versions.unsupported_version_response(self.supported)
        out = bytearray(4)
        out += encode_response_header(correlation_id, 0)
        api.codec(API_VERSIONS, "response").encode(0, response, out)
        _SIZE.pack_into(out, 0, len(out) - 4)
        return [out]


class _Timed:
    """Awaits a coroutine and adds up the time it runs on the event loop (``ns``), not the
    time it is suspended: Kafka's request-thread time, for the request quota."""

    __slots__ = ("coro", "ns")

    def __init__(self, coro) -> None:
        self.coro = coro
        self.ns = 0

    def __await__(self):
        coro = self.coro
        value = error = None
        while True:
            start = time.perf_counter_ns()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.ns += time.perf_counter_ns() - start
                return stop.value
            except BaseException:
                self.ns += time.perf_counter_ns() - start
                raise
            self.ns += time.perf_counter_ns() - start
            value = error = None
            try:
                value = yield yielded
            except BaseException as exc:  # noqa: BLE001 - cancellation etc., passed on
                error = exc
