"""Connection limits of one HTTP listener: slow clients are cut off, too many are turned away.

aiohttp bounds neither the time a client takes to send its headers or body nor how many
connections are open, so a few hundred slow ("slowloris") connections can exhaust the file
descriptors and take every listener of the process down. `ConnectionGuard` wraps aiohttp's
protocol for each accepted connection and:

- answers 503 and closes a connection at once when `max_connections` are open (kept below the
  open-file limit), so the process always has descriptors left;
- closes a connection that has not sent a request's headers within `header_timeout_s` (counted
  from connecting, or from the first byte of a kept-alive connection's next request) with 408;
- reads every request body before the handler runs, within `body_timeout_s` and the listener's
  body limit (408 / 413, JSON), so handlers read a complete, cached body (`request.read()`);
- closes a kept-alive connection after `keepalive_timeout_s` idle or
  `max_requests_per_connection` requests.

Use it with `GuardedSite` in place of aiohttp's `TCPSite`, and put `guard.middleware` first.
"""

from __future__ import annotations

import asyncio
import enum
import json
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from config.http_limits import HttpLimitsConfig


# A log event that may happen thousands of times a second, logged at most once per interval.
#
# The first occurrence is logged at once; later ones are counted and the count is logged with the
# next occurrence after the interval has passed, so a flood costs one line per interval.
class _Logger(Protocol):
    def warning(self, event: str, **fields: object) -> object: ...


@dataclass(eq=False)
class IntervalLog:
    event: str
    interval_s: float
    logger: _Logger
    clock: Callable[[], float] = time.monotonic
    #: Occurrences since this was made, logged or not.
    total: int = field(default=0, init=False)
    _last_logged: float | None = field(default=None, init=False, repr=False)
    _unlogged: int = field(default=0, init=False, repr=False)

    def note(self, **fields: object) -> None:
        """One more occurrence; logged (with the count since the last line) when due."""
        self.total += 1
        self._unlogged += 1
        now = self.clock()
        if self._last_logged is not None and now - self._last_logged < self.interval_s:
            return
        self.logger.warning(self.event, count=self._unlogged, interval_s=self.interval_s, **fields)
        self._last_logged = now
        self._unlogged = 0


log = structlog.get_logger(__name__)

#: A listener keeps at most this share of the process's open-file limit.
FD_SHARE = 4
#: How long a turned-away connection stays half-open for its client to read the 503.
LINGER_S = 1.0


def effective_max_connections(configured: int) -> int:
    """`configured`, lowered to a quarter of the soft open-file limit when above it."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return configured
    return max(1, min(configured, soft // FD_SHARE))


def raw_response(status: int, reason: str, message: str, headers: str = "") -> bytes:
    """A complete HTTP/1.1 JSON response that closes the connection, for use below aiohttp."""
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
    )
    return head.encode() + body


class _State(enum.Enum):
    HEADERS = "headers"  # waiting for a request's headers
    BUSY = "busy"  # a request is being handled
    IDLE = "idle"  # kept alive between requests


class GuardedConnection(asyncio.Protocol):
    """One accepted connection: aiohttp's protocol inside, with a deadline while it waits."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._state = _State.HEADERS
        self._refused = False
        self._lingers = False
        self.requests = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if not self._guard.admit(self):
            self._refused = True
            self._turn_away(self._transport)
            return
        self._arm(self._guard.limits.header_timeout_s)
        self._inner.connection_made(transport)

    def _turn_away(self, transport: asyncio.Transport) -> None:
        """503, then a half-close: the client reads the answer and EOF instead of a reset
        (closing a socket whose client is still sending resets it). The socket lingers for
        `LINGER_S` at most, and not at all when too many already linger."""
        transport.write(self._guard.full_response)
        if self._guard.lingering >= self._guard.max_connections or not transport.can_write_eof():
            transport.close()
            return
        self._guard.lingering += 1
        self._lingers = True
        transport.write_eof()
        self._timer = asyncio.get_running_loop().call_later(LINGER_S, transport.abort)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._state is _State.IDLE:
            self._state = _State.HEADERS
            self._arm(self._guard.limits.header_timeout_s)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._refused else self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._lingers:
            self._guard.lingering -= 1
        if self._refused:
            return
        self._guard.release(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if not self._refused:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if not self._refused:
            self._inner.resume_writing()

    def request_started(self) -> None:
        self._disarm()
        self._state = _State.BUSY
        self.requests += 1

    def request_finished(self) -> None:
        self._state = _State.IDLE
        self._arm(self._guard.limits.keepalive_timeout_s)

    def _arm(self, delay_s: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._state is _State.HEADERS:
            self._guard.timeouts.note(listener=self._guard.listener)
            transport.write(raw_response(408, "Request Timeout", "headers took too long"))
        transport.close()


class ConnectionGuard:
    """The limits of one listener and the connections it has open."""

    def __init__(self, limits: HttpLimitsConfig, listener: str, max_body_bytes: int) -> None:
        self.limits = limits
        self.listener = listener
        self.max_body_bytes = max_body_bytes
        self.max_connections = effective_max_connections(limits.max_connections)
        if self.max_connections < limits.max_connections:
            log.warning(
                "http.connection_cap_lowered",
                listener=listener,
                configured=limits.max_connections,
                effective=self.max_connections,
                suggestion="raise the open-file limit (ulimit -n) or lower max_connections",
            )
        self._open: dict[asyncio.BaseTransport, GuardedConnection] = {}
        #: Turned-away connections still half-open (see `GuardedConnection._turn_away`).
        self.lingering = 0
        interval_s = limits.accept_error_interval_s
        self.refusals = IntervalLog("http.connections_refused", interval_s, log)
        self.timeouts = IntervalLog("http.header_timeout", interval_s, log)
        self.full_response = raw_response(
            503, "Service Unavailable", "too many connections; retry later", "Retry-After: 1\r\n"
        )

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def protocol_factory(
        self, inner: Callable[[], asyncio.Protocol]
    ) -> Callable[[], asyncio.Protocol]:
        return lambda: GuardedConnection(self, inner())

    def admit(self, connection: GuardedConnection) -> bool:
        transport = connection._transport
        if transport is None or len(self._open) >= self.max_connections:
            self.refusals.note(listener=self.listener, cap=self.max_connections)
            return False
        self._open[transport] = connection
        return True

    def release(self, connection: GuardedConnection) -> None:
        if connection._transport is not None:
            self._open.pop(connection._transport, None)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = self._open.get(request.transport) if request.transport else None
        if connection is not None:
            connection.request_started()
        try:
            refused = await self._read_body(request)
            if refused is not None:
                refused.force_close()
                return refused
            response = await handler(request)
            if connection is not None and (
                connection.requests >= self.limits.max_requests_per_connection
            ):
                response.force_close()
            return response
        finally:
            if connection is not None:
                connection.request_finished()

    async def _read_body(self, request: web.Request) -> web.Response | None:
        """Read the whole body into aiohttp's cache, or say why not (408 / 413)."""
        if not request.can_read_body:
            return None
        length = request.content_length
        if length is not None and length > self.max_body_bytes:
            return _too_large(self.max_body_bytes)
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                await request.read()
        except TimeoutError:
            log.info("http.body_timeout", listener=self.listener, path=request.path)
            return web.json_response(
                {"error": f"the body took longer than {self.limits.body_timeout_s:g} s"},
                status=408,
            )
        except web.HTTPRequestEntityTooLarge:
            return _too_large(self.max_body_bytes)
        return None


def _too_large(limit: int) -> web.Response:
    return web.json_response(
        {"error": f"body is over the limit of {limit} bytes; send less"}, status=413
    )


def guarded_runner(app: web.Application, guard: ConnectionGuard) -> web.AppRunner:
    """aiohttp's runner with its own settings matched to the guard: its idle timeout, and how
    long it reads on to discard the rest of a refused body before closing (no longer than a
    turned-away connection lingers)."""
    return web.AppRunner(
        app,
        access_log=None,
        handle_signals=False,
        keepalive_timeout=guard.limits.keepalive_timeout_s,
        lingering_time=LINGER_S,
    )


class GuardedSite(web.BaseSite):
    """aiohttp's TCPSite, with each connection under a `ConnectionGuard`."""

    def __init__(
        self, runner: web.BaseRunner, host: str, port: int, guard: ConnectionGuard
    ) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._guard = guard

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            reuse_address=True,
            backlog=min(128, self._guard.max_connections),
        )


# Accept errors of every listener of the event loop, logged once per interval with a count.
#
# When the process runs out of file descriptors, asyncio's server retries `accept()` every second
# and reports each failure to the loop's exception handler with a traceback: a flood of identical
# lines, fast enough under a slowloris attack to fill a disk. `install_accept_error_log` puts a
# handler in front that turns them into one `http.accept_failed` line per interval, with how many
# there were, and passes every other report on unchanged.
log = structlog.get_logger(__name__)

ACCEPT_FAILED = "socket.accept() out of system resource"


class AcceptErrorLog:
    def __init__(self, interval_s: float, previous: Any) -> None:
        self.errors = IntervalLog("http.accept_failed", interval_s, log)
        self._previous = previous

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith(ACCEPT_FAILED):
            error = context.get("exception")
            self.errors.note(
                error=str(error),
                suggestion="raise the open-file limit (ulimit -n) or lower max_connections",
            )
            return
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


def install_accept_error_log(loop: asyncio.AbstractEventLoop, interval_s: float) -> AcceptErrorLog:
    """Install the handler on `loop` (once: a second call returns the installed one)."""
    current = loop.get_exception_handler()
    if isinstance(current, AcceptErrorLog):
        return current
    handler = AcceptErrorLog(interval_s, current)
    loop.set_exception_handler(handler)
    return handler
