"""The event loop the daemon (and the benchmark, which measures the daemon) runs on.

uvloop by default: libuv's loop in C schedules callbacks, timers and sockets for a fraction of
the stdlib loop's Python, and a turn is mostly callbacks (about 8% less loop CPU a turn at 100
busy chats in `python -m bench gateway`). `event_loop: asyncio` in gateway.yaml runs on the
stdlib loop instead, for a platform uvloop does not build on or to rule the loop out when
debugging.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import structlog

from config.gateway import EventLoopKind

log = structlog.get_logger(__name__)

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T], kind: EventLoopKind = "uvloop") -> T:
    """`main` to completion on a new loop of `kind`, as `asyncio.run` does."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            # Only where uvloop has no build (Windows): say so once and run all the same.
            log.warning(
                "event_loop.uvloop_missing",
                detail="uvloop is not installed; running on the asyncio loop",
                suggestion="pip install uvloop, or set event_loop: asyncio in gateway.yaml",
            )
        else:
            return uvloop.run(main)
    return asyncio.run(main)


def running_kind() -> EventLoopKind:
    """Which kind of loop this code runs on (for the start-up log and the status)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"
