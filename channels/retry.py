"""The one retry policy every channel's sends and edits go through.

Channels translate their SDK's failures into `channels.errors`; this module decides what each
means: a rate limit waits the platform's own `retry_after`, a transient failure backs off
exponentially with jitter, a refusal that re-sending cannot fix gives up at once. Whatever gives
up leaves as a typed `DeliveryError` whose `reason` is a short label for metrics.

A reply is not given up for a failure that can pass: while the manager delivers one it sets
`reply_deadline`, and every send, edit and finish of that delivery is tried again (capped
exponential backoff, a rate limit's full `retry_after`) until the deadline; only then, or at a
refusal, does it fail, as `expired` or with the refusal's reason. A stream's intermediate edits
have no deadline: they give up after `max_attempts`, since a later snapshot or the final
replaces them.

Where the channel's account has a scheduler (`channels.pacing.Pacer`), every attempt waits its
turn there first, and a rate limit holds the scheduler's scope (the chat, or the account) for
the platform's whole `retry_after` instead of pausing only the call that got it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import structlog

from channels.attempt_deadlines import AttemptDeadlines
from channels.errors import (
    AuthError,
    DeliveryError,
    FormattingRejected,
    MessageNotModified,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.pacing import Pacer, Priority

log = structlog.get_logger(__name__)

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
#: Maps a computed backoff delay to the delay actually waited (randomised in production).
Jitter = Callable[[float], float]


class Reason:
    """The labels `DeliveryError.reason` and the metrics use."""

    RATE_LIMITED = "rate_limited"
    TRANSIENT = "transient"
    TOO_LONG = "too_long"
    AUTH = "auth"
    FORMATTING = "formatting"
    NO_CHANNEL = "no_channel"
    UNKNOWN = "unknown"
    #: Failed for longer than the profile's `delivery_deadline_s`.
    EXPIRED = "expired"


#: The wall-clock time (seconds since the epoch) until which the reply being delivered in this
#: task is retried; None outside a reply's delivery. Set by `ChannelManager.deliver`, so every
#: call the reply's delivery makes, however deep in the stream editor, inherits it.
reply_deadline: ContextVar[float | None] = ContextVar("reply_deadline", default=None)


def full_jitter(delay_s: float) -> float:
    """Anywhere in [0, delay]: spreads reconnecting clients the most (AWS "full jitter")."""
    return random.uniform(0.0, delay_s)


def equal_jitter(delay_s: float) -> float:
    """Half fixed, half random: never retries at once, still spreads retries out."""
    return delay_s / 2 + random.uniform(0.0, delay_s / 2)


def no_jitter(delay_s: float) -> float:
    return delay_s


def backoff_delay_s(attempt: int, base_s: float, cap_s: float) -> float:
    """`base * 2**(attempt-1)`, capped; attempt 1 waits `base`."""
    if attempt < 1:
        return 0.0
    # The exponent is bounded so a long failure streak cannot overflow a float.
    return min(cap_s, base_s * 2.0 ** min(attempt - 1, 62))


@dataclass(frozen=True, slots=True)
class Backoff:
    """An exponential backoff: `initial_s` after the first failure, doubled after each further
    one up to `max_s`. A poller (Telegram's getUpdates, an IMAP session) doubles the pause it
    keeps with `next`; a send's retries and a channel's restarts count failures (`delay_s`)."""

    initial_s: float = 5.0
    max_s: float = 60.0

    def next(self, delay_s: float) -> float:
        return min(delay_s * 2, self.max_s)

    def delay_s(self, failures: int) -> float:
        return backoff_delay_s(failures, self.initial_s, self.max_s)


#: Failures worth trying again after a pause, including the ones a channel forgot to wrap.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    TransientError,
    TimeoutError,
    OSError,
    aiohttp.ClientError,
)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, TRANSIENT_ERRORS)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one send or edit is tried again; `backoff` paces the transient failures."""

    max_attempts: int = 5
    backoff: Backoff = Backoff(initial_s=1.0, max_s=30.0)
    #: A platform asking for a longer pause than this is obeyed only this far.
    max_retry_after_s: float = 300.0
    #: Bounds each single attempt, in case a channel's own timeouts are missing.
    attempt_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")


RetryListener = Callable[[str, str], None]
"""Called as `(channel, reason)` before every retry, for metrics."""

#: The scheduler of a channel's account, by channel name; None where nothing is paced.
PacerOf = Callable[[str], Pacer | None]


def _unpaced(channel: str) -> Pacer | None:
    return None


class Retrier:
    """Runs one platform call under the retry policy."""

    def __init__(
        self,
        policy: RetryPolicy | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        jitter: Jitter = equal_jitter,
        on_retry: RetryListener | None = None,
        wall_clock: Clock = time.time,
        pacer_of: PacerOf = _unpaced,
    ) -> None:
        self.policy = policy or RetryPolicy()
        self._pacer_of = pacer_of
        self._wall_clock = wall_clock
        self._deadlines = AttemptDeadlines(self.policy.attempt_timeout_s)
        self._sleep = sleep
        self._jitter = jitter
        self._on_retry = on_retry

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        channel: str,
        chat_id: str,
        action: str,
        priority: Priority = Priority.REPLY,
    ) -> T | None:
        """The operation's result, or `None` when the platform said "not modified".

        `FormattingRejected` is passed through untouched: only the caller knows the plain
        text to fall back to. Every other failure that ends the attempts is a `DeliveryError`.
        `priority` orders the call in its account's scheduler, where it has one.
        """
        policy = self.policy
        deadline = reply_deadline.get()
        pacer = self._pacer_of(channel)
        attempt = 0
        while True:
            attempt += 1
            waits = True
            try:
                if pacer is None:
                    return await self._deadlines.call(operation)
                async with pacer.sending(chat_id, priority):
                    return await self._deadlines.call(operation)
            except MessageNotModified:
                return None
            except (FormattingRejected, DeliveryError):
                raise
            except RateLimited as exc:
                # A reply waits the platform's whole pause: asking earlier only earns another.
                cap_s = policy.max_retry_after_s if deadline is None else exc.retry_after_s
                reason, delay_s = Reason.RATE_LIMITED, min(exc.retry_after_s, cap_s)
                error: Exception = exc
                if pacer is not None:
                    # The scheduler holds the whole scope, this call's next turn included.
                    pacer.refused(chat_id, exc.retry_after_s, account_wide=exc.account_wide)
                    delay_s, waits = exc.retry_after_s, False
            except (MessageTooLong, AuthError) as exc:
                reason = Reason.TOO_LONG if isinstance(exc, MessageTooLong) else Reason.AUTH
                raise self._give_up(exc, reason, channel, chat_id, action, attempt) from exc
            except Exception as exc:
                if not is_transient(exc):
                    raise self._give_up(
                        exc, Reason.UNKNOWN, channel, chat_id, action, attempt
                    ) from exc
                reason, error = Reason.TRANSIENT, exc
                delay_s = self._jitter(policy.backoff.delay_s(attempt))
            if deadline is None and attempt >= policy.max_attempts:
                raise self._give_up(error, reason, channel, chat_id, action, attempt) from error
            if deadline is not None and self._wall_clock() + delay_s > deadline:
                raise self._give_up(
                    error, Reason.EXPIRED, channel, chat_id, action, attempt
                ) from error
            log.info(
                "retry.retrying",
                channel=channel,
                chat_id=chat_id,
                action=action,
                attempt=attempt,
                reason=reason,
                delay_s=round(delay_s, 3),
                error=str(error),
            )
            if self._on_retry is not None:
                self._on_retry(channel, reason)
            if waits:
                await self._sleep(delay_s)

    @staticmethod
    def _give_up(
        exc: Exception, reason: str, channel: str, chat_id: str, action: str, attempts: int
    ) -> DeliveryError:
        described = f"{type(exc).__name__}: {exc}"
        return DeliveryError(
            f"{action} to chat {chat_id} failed after {attempts} attempt(s) ({described})",
            reason=reason,
            channel=channel,
            attempts=attempts,
        )
