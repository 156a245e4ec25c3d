"""Accept errors of every listener of the event loop, logged once per interval with a count.

When the process runs out of file descriptors, asyncio's server retries `accept()` every second
and reports each failure to the loop's exception handler with a traceback: a flood of identical
lines (47 MB in 30 s under a slowloris attack). `install_accept_error_log` puts a handler in
front that turns them into one `http.accept_failed` line per interval, with how many there were,
and passes every other report on unchanged.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from channels.interval_log import IntervalLog

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
