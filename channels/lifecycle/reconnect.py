"""A long-lived connection, replaced whenever it ends until the channel stops.

Feishu's long connection, QQ's websocket gateway and the WeCom AI bot's websocket each hold one
connection and, when it ends, open the next: at once after a clean end, with exponential backoff
after consecutive failures. `reconnecting` is that loop, once. A refused credential (`AuthError`)
ends it as a `FatalChannelError` (reconnecting cannot fix credentials, so the supervisor marks
the channel Down instead of restarting it), and so does a `FatalChannelError` from inside the
connection; other failures in `retry_on` are logged and waited out.

The pollers (Telegram's getUpdates, email's IMAP session) keep their own loops: what they wait
after a failure depends on what failed (a rate limit's own pause, a full backlog) and on whether
the connection had worked, which this loop does not know.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from channels.errors import AuthError, FatalChannelError
from channels.retry import TRANSIENT_ERRORS, Jitter, Sleep, backoff_delay_s, no_jitter
from channels.stopping import sleep_unless_set

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ReconnectPolicy:
    """The pause before the next connection: `base_s` doubled after each further consecutive
    failure up to `cap_s` (`base_s` after a clean end too), passed through `jitter`."""

    base_s: float = 1.0
    cap_s: float = 60.0
    jitter: Jitter = no_jitter

    def delay_s(self, failures: int) -> float:
        return self.jitter(backoff_delay_s(max(failures, 1), self.base_s, self.cap_s))


def _nothing() -> None:
    return None


async def reconnecting(
    connect: Callable[[], Awaitable[object]],
    stopping: asyncio.Event,
    *,
    channel: str,
    failed_event: str,
    policy: ReconnectPolicy,
    retry_on: tuple[type[Exception], ...] = TRANSIENT_ERRORS,
    refused: str | None = None,
    suggestion: str = "",
    on_ended: Callable[[], None] = _nothing,
    sleep: Sleep = asyncio.sleep,
) -> None:
    """`connect()` (one connection: it returns or raises when that connection ends) again and
    again until `stopping` is set. `failed_event` is the warning logged for a failure;
    `on_ended` runs after every connection, however it ended. An `AuthError` is raised as a
    `FatalChannelError` ("`refused` (error)", or the error's own text), with the error's
    suggestion or else `suggestion`."""
    failures = 0
    while not stopping.is_set():
        try:
            await connect()
            failures = 0
        except AuthError as error:
            raise FatalChannelError(
                f"{refused} ({error})" if refused else str(error),
                channel=channel,
                suggestion=error.suggestion or suggestion,
            ) from error
        except FatalChannelError:
            raise
        except retry_on as error:
            failures += 1
            log.warning(failed_event, error=str(error), failures=failures)
        finally:
            on_ended()
        if stopping.is_set():
            return
        if await sleep_unless_set(stopping, policy.delay_s(failures), sleep):
            return
