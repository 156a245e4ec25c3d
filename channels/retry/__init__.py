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

Where the channel's account has a scheduler (`channels.retry.pacing.Pacer`), every attempt waits its
turn there first, and a rate limit holds the scheduler's scope (the chat, or the account) for
the platform's whole `retry_after` instead of pausing only the call that got it.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import structlog

from channels.errors import (
    AuthError,
    ChannelError,
    DeliveryError,
    FormattingRejected,
    MessageNotModified,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.retry.pacing import Pacer, Priority

# A bound on each platform call, without a timer per call.
#
# `asyncio.timeout` around every send schedules a timer and cancels it again: a handle, a heap
# push, and a cancelled handle left in the loop's heap for the whole timeout (60 s), which the
# loop keeps sifting and rebuilds when half of it is dead: a real share of a turn's work, for a
# bound meant only for a channel whose own timeouts are missing. Here the running calls are kept
# in a set with their deadlines, and one check, scheduled only while calls run, cancels those
# past due: a call runs at most one tick (`MAX_TICK_S`, or the bound itself when shorter) longer
# than its bound: nothing, for a safety net of a minute.
#
# A call cancelled here ends in `TimeoutError`, as under `asyncio.timeout`; a cancellation from
# anywhere else (an abort, shutdown) is passed on untouched.
T = TypeVar("T")

#: How often running calls are checked, at most (a shorter bound checks as often as it lasts).
MAX_TICK_S = 1.0


@dataclass(eq=False, slots=True)
class _Call:
    task: asyncio.Task[object]
    deadline: float
    #: The task's cancel count when the call began: more than that at its end is someone else's.
    cancels: int
    expired: bool = False


class AttemptDeadlines:
    """Runs awaitables with a bound each; one per event loop user (a `Retrier`). Calls may
    nest, in one task or many: each has its own deadline."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"an attempt's timeout must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._tick_s = min(MAX_TICK_S, timeout_s)
        self._running: set[_Call] = set()
        self._check: asyncio.TimerHandle | None = None
        self._check_loop: asyncio.AbstractEventLoop | None = None

    @property
    def running(self) -> int:
        return len(self._running)

    async def call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """`operation()`'s result; `TimeoutError` once it has run `timeout_s` (give or take
        one tick)."""
        task = asyncio.current_task()
        assert task is not None, "AttemptDeadlines.call runs in a task"
        loop = asyncio.get_running_loop()
        call = _Call(task, loop.time() + self.timeout_s, task.cancelling())
        self._running.add(call)
        if self._check is None or self._check_loop is not loop:  # (a test's loop may be gone)
            self._check = loop.call_later(self._tick_s, self._cancel_overdue)
            self._check_loop = loop
        try:
            return await operation()
        except asyncio.CancelledError:
            # Ours, unless someone else cancelled the task as well.
            if call.expired and task.uncancel() <= call.cancels:
                raise TimeoutError(f"the call took longer than {self.timeout_s:g} s") from None
            raise
        finally:
            self._running.discard(call)

    def _cancel_overdue(self) -> None:
        self._check = None
        if not self._running:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        for call in self._running:
            if not call.expired and call.deadline <= now:
                call.expired = True
                call.task.cancel()
        self._check = loop.call_later(self._tick_s, self._cancel_overdue)


log = structlog.get_logger(__name__)


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


# How long a "too many requests" answer asks to wait: the one reading of a `Retry-After`
# value (a header, or a rate limit's field in a body) that every platform channel and the
# agents' HTTP clients share.
#: What is waited out when a platform says "too many requests" without saying how long (QQ
#: never says; Slack's chat methods allow about one message a second per channel), then the
#: retry layer tries again.
DEFAULT_RETRY_AFTER_S = 1.0


def parse_retry_after(value: object) -> float | None:
    """Seconds from a `Retry-After` value given in seconds (text or a number); None when it is
    absent or not a finite, non-negative number (the HTTP-date form included)."""
    if isinstance(value, bool) or value is None or value == "":
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str | bytes):
        try:
            seconds = float(value)
        except ValueError:
            return None
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def retry_after_s(value: object, default: float = DEFAULT_RETRY_AFTER_S) -> float:
    """`parse_retry_after(value)`, or `default` when it says nothing usable."""
    seconds = parse_retry_after(value)
    return default if seconds is None else seconds


# One platform call with a deadline, whose failures come out as `channels.errors` types.
#
# Every SDK channel wraps its calls the same way: a timeout becomes `TransientError("… timed out
# after N s")`, a network error (`aiohttp.ClientError`, `OSError`) `TransientError("… failed")`,
# and the SDK's own exceptions go through the channel's translation (status codes and platform
# error codes to `RateLimited`, `AuthError`, `MessageTooLong`, ...). A channel says only which
# SDK exceptions it translates and how, once (`platform_calls`):
#
#     line_call = platform_calls(channel=CHANNEL, sdk_errors=(OpenApiException,),
#                                translate=answers_of(ApiException, translate, channel=CHANNEL))
#     async with line_call("get_bot_info", timeout_s):
#         info = await api.get_bot_info()
#
# Most SDKs raise one exception type for the platform's answers and others for requests they
# refused to build; `answers_of` is that translation.
Translate = Callable[[Exception, str], ChannelError]
#: `platform_call` bound to one channel: `(what, timeout_s)` to an `async with` block.
PlatformCall = Callable[[str, float], AbstractAsyncContextManager[None]]
E = TypeVar("E", bound=Exception)


def answers_of(
    api_error: type[E], translate: Callable[[E, str], ChannelError], *, channel: str
) -> Translate:
    """A `Translate` for an SDK that raises `api_error` for what the platform answered (given
    to `translate`) and other exceptions for requests it refused to build: those become a
    plain `ChannelError`, since re-sending the same request cannot help."""

    def translated(error: Exception, what: str) -> ChannelError:
        if isinstance(error, api_error):
            return translate(error, what)
        return ChannelError(f"{what}: {error}", channel=channel)

    return translated


def _untranslated(error: Exception, what: str) -> ChannelError:
    return ChannelError(f"{what}: {error}")


@asynccontextmanager
async def platform_call(
    what: str,
    timeout_s: float,
    *,
    channel: str,
    sdk_errors: tuple[type[Exception], ...] = (),
    translate: Translate = _untranslated,
) -> AsyncIterator[None]:
    """Run the block within `timeout_s`; raise only `ChannelError`s for what it raises."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except sdk_errors as error:
        # The SDK's own exceptions first: some of them are also network errors.
        raise translate(error, what) from error
    except TimeoutError as error:
        raise TransientError(f"{what} timed out after {timeout_s:g} s", channel=channel) from error
    except (aiohttp.ClientError, OSError) as error:
        raise TransientError(f"{what} failed: {error!r}", channel=channel) from error


def platform_calls(
    *,
    channel: str,
    sdk_errors: tuple[type[Exception], ...] = (),
    translate: Translate = _untranslated,
) -> PlatformCall:
    """`platform_call` with one channel's name, SDK exceptions and translation bound."""

    def call(what: str, timeout_s: float) -> AbstractAsyncContextManager[None]:
        return platform_call(
            what, timeout_s, channel=channel, sdk_errors=sdk_errors, translate=translate
        )

    return call
