"""One outbound scheduler per channel account: every platform call waits its turn here, so a
burst is spread over the platform's published limits instead of being refused.

A platform limits how fast a bot may send in several scopes at once: the whole account (Telegram
about 30 messages a second per bot), one chat (about one a second), a group chat (20 a minute).
Each scope is a token bucket (`aiolimiter.AsyncLimiter`, one per scope and chat); a call may go
once every scope it touches has room. The account's token is taken right before the request
leaves (one taken earlier than its request would let the next follow too closely). A chat has
one call in flight at a time, and its tokens are taken when that call has been answered: the
answer comes after the platform saw the request, so the chat's next request is spaced from that
one however long the HTTP client kept it queued.

Replies go before stream edits: calls compete for the account in `Priority` order, then in the
order they came. An edit that waits longest is the one the stream editor replaces anyway (the
router skips snapshots a newer one supersedes), so under pressure a stream's edits coalesce
while its final waits only behind other replies.

A "too many requests" answer holds its whole scope for the platform's full `retry_after`: the
chat that got it, or the whole account when the platform says the limit is global or when
several chats are refused together (the account's limit, whatever the platform calls it).
Nothing in a held scope is sent before the hold ends, typing indicators included.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import IntEnum

import structlog
from aiolimiter import AsyncLimiter

from channels.stopping import Sleep, sleep_unless_set

log = structlog.get_logger(__name__)

#: Refusals of two different chats this close together are taken as the account's limit.
TOGETHER_S = 1.0
#: How often a call blocked only by a chat's (or group's) bucket looks again, at most: the
#: bucket says whether it has room, not when it will.
CHAT_POLL_S = 0.1
#: Chats whose buckets are kept before idle ones (full again, nobody waiting) are forgotten.
MAX_IDLE_CHATS = 1024


class Priority(IntEnum):
    """Which call goes first when several wait for the account; lower goes first."""

    #: A reply's messages: its first message, its chunks, a stream's final text.
    REPLY = 0
    #: A stream's intermediate edit: a later snapshot or the final replaces it.
    EDIT = 1


@dataclass(frozen=True, slots=True)
class Rate:
    """At most `count` calls in any `per_s` seconds, `count` of them at once in a burst."""

    count: int
    per_s: float

    def __post_init__(self) -> None:
        if self.count < 1 or self.per_s <= 0:
            raise ValueError(f"a rate needs count >= 1 and per_s > 0, got {self}")

    def bucket(self) -> AsyncLimiter:
        return AsyncLimiter(self.count, self.per_s)

    def __str__(self) -> str:
        return f"{self.count}/{self.per_s:g}s"


@dataclass(frozen=True, slots=True)
class RateLimits:
    """A platform's published limits for one account, as its package declares them (and a
    profile's `rate_limits` overrides them). A scope left None is not paced; a refusal still
    holds it."""

    #: Every call of the account together (Telegram's ~30 a second per bot).
    account: Rate | None = None
    #: The calls to one chat.
    chat: Rate | None = None
    #: The calls to one group chat, on top of `chat` (Telegram's 20 a minute).
    group: Rate | None = None
    #: False: no scheduler at all; each refused call waits its own `retry_after` and nothing
    #: else does (the baseline `bench/pacing.py` compares pacing with).
    paced: bool = True


@dataclass(eq=False, slots=True)
class _Waiting:
    """One call waiting for its turn."""

    priority: Priority
    seq: int
    chat_id: str
    #: Set to make the call look again (its turn may have come).
    nudge: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def order(self) -> tuple[int, int]:
        return (self.priority, self.seq)


@dataclass(eq=False, slots=True)
class _ChatBuckets:
    chat: AsyncLimiter | None
    group: AsyncLimiter | None
    #: A call to the chat has left and not been answered yet.
    in_flight: bool = False

    def has_room(self) -> bool:
        # Asked of every waiting call each time a call looks for the first one ready: spelled
        # out, where a generator would be resumed once per bucket.
        chat, group = self.chat, self.group
        return (
            not self.in_flight
            and (chat is None or chat.has_capacity())
            and (group is None or group.has_capacity())
        )

    def is_idle(self) -> bool:
        return not self.in_flight and all(
            bucket is None or bucket.has_capacity(bucket.max_rate)
            for bucket in (self.chat, self.group)
        )

    async def take(self) -> None:
        # Each had room when the call left, and only that call could take from them since:
        # neither waits.
        for bucket in (self.chat, self.group):
            if bucket is not None:
                await bucket.acquire()


class Pacer:
    """The scheduler of one channel account's outbound calls (see the module docstring)."""

    def __init__(
        self,
        channel: str,
        limits: RateLimits,
        *,
        is_group: Callable[[str], bool] = lambda chat_id: False,
        clock: Callable[[], float] | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        """`clock` and `sleep` time the holds (the event loop's clock by default, which the
        buckets always use): the manager gives its own, so tests wait out holds on a fake."""
        self.channel = channel
        self.limits = limits
        self._is_group = is_group
        self._clock = clock or _loop_time
        self._sleep = sleep
        self._account = None if limits.account is None else limits.account.bucket()
        self._chats: dict[str, _ChatBuckets] = {}
        self._waiting: list[_Waiting] = []
        self._seq = itertools.count()
        #: True while one call takes the account's next token (the only one that waits on it).
        self._gate_taken = False
        self._account_held_until = 0.0
        self._chat_held_until: dict[str, float] = {}
        #: (when, chat) of the latest refusals, to tell the account's limit from a chat's.
        self._recent_refusals: list[tuple[float, str]] = []

    # -- holds ------------------------------------------------------------------------------

    def refused(self, chat_id: str, retry_after_s: float, *, account_wide: bool = False) -> None:
        """The platform refused a call to `chat_id` for `retry_after_s`: hold the chat (or the
        account) that long, all of it, however long that is."""
        now = self._clock()
        until = now + retry_after_s
        self._chat_held_until[chat_id] = max(self._chat_held_until.get(chat_id, 0.0), until)
        self._recent_refusals = [
            (at, chat) for at, chat in self._recent_refusals if now - at <= TOGETHER_S
        ]
        together = {chat for _at, chat in self._recent_refusals} - {chat_id}
        self._recent_refusals.append((now, chat_id))
        if account_wide or together:
            # Chats refused together share the longest of their holds.
            until = max([until, *(self._chat_held_until.get(chat, 0.0) for chat in together)])
            self._account_held_until = max(self._account_held_until, until)
        log.warning(
            "pacing.held",
            channel=self.channel,
            chat_id=chat_id,
            scope="account" if account_wide or together else "chat",
            retry_after_s=round(retry_after_s, 3),
        )
        self._nudge_all()

    def held(self, chat_id: str) -> bool:
        """Whether a refusal holds the chat (or the whole account) now."""
        return self._held_for_s(chat_id) > 0

    def _held_for_s(self, chat_id: str) -> float:
        now = self._clock()
        chat_until = self._chat_held_until.get(chat_id, 0.0)
        if chat_until and chat_until <= now:
            del self._chat_held_until[chat_id]
        return max(0.0, chat_until - now, self._account_held_until - now)

    # -- turns ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def sending(
        self, chat_id: str, priority: Priority = Priority.REPLY
    ) -> AsyncIterator[None]:
        """Around one call to `chat_id`: enters when it may leave (see `turn`), and takes the
        chat's tokens once it has been answered (or has failed)."""
        await self.turn(chat_id, priority)
        buckets = self._buckets(chat_id)
        buckets.in_flight = True
        try:
            yield
        finally:
            buckets.in_flight = False
            await buckets.take()
            for waiting in self._waiting:
                if waiting.chat_id == chat_id:
                    waiting.nudge.set()
            self._nudge_first_ready()

    async def turn(self, chat_id: str, priority: Priority = Priority.REPLY) -> None:
        """Return when one call to `chat_id` may leave now: no hold on it, no call to it in
        flight, room in every bucket it touches (the account's taken), and no call of a higher
        priority (or an earlier one of the same) ready to go before it. `sending` also takes
        the chat's tokens; `turn` alone leaves them."""
        waiting = _Waiting(priority, next(self._seq), chat_id)
        self._waiting.append(waiting)
        try:
            while not await self._try_turn(waiting):
                pass
        finally:
            self._waiting.remove(waiting)
            self._nudge_first_ready()

    async def _try_turn(self, waiting: _Waiting) -> bool:
        """One look: True once the call has its turn (its tokens taken); else waits a while."""
        waiting.nudge.clear()
        if self._blocked_for_s(waiting.chat_id) > 0:
            # Whoever counted on this call going first must look again.
            self._nudge_first_ready()
            if (held_s := self._held_for_s(waiting.chat_id)) > 0:
                await sleep_unless_set(waiting.nudge, held_s, self._sleep)
            else:
                await _wait(waiting.nudge, self._bucket_wait_s())
            return False
        first = self._first_ready()
        if self._gate_taken or first is not waiting:
            if first is not None and first is not waiting:
                first.nudge.set()  # it may be napping past the moment it became ready
            await waiting.nudge.wait()
            return False
        self._gate_taken = True
        try:
            if self._account is not None:
                await self._account.acquire()
            # A hold may have come, or another call filled the chat, while this one waited for
            # the account: then the account's token is lost, which errs only on the slow side.
            return self._blocked_for_s(waiting.chat_id) == 0
        finally:
            self._gate_taken = False
            self._nudge_first_ready()

    def _blocked_for_s(self, chat_id: str) -> float:
        """How long the chat's own scopes keep a call waiting: a hold exactly, a full bucket
        about (it is looked at again then); 0 when the call may compete for the account."""
        if self._chat_held_until or self._account_held_until:  # else no refusal holds it
            held_s = self._held_for_s(chat_id)
            if held_s > 0:
                return held_s
        buckets = self._chats.get(chat_id)
        if buckets is None or buckets.has_room():
            return 0.0
        return self._bucket_wait_s()

    def _bucket_wait_s(self) -> float:
        """How long a call waits before looking at a full chat bucket again."""
        rates = [rate for rate in (self.limits.chat, self.limits.group) if rate is not None]
        return min([CHAT_POLL_S, *(rate.per_s / rate.count for rate in rates)])

    def _first_ready(self) -> _Waiting | None:
        first: _Waiting | None = None
        for waiting in self._waiting:
            if self._blocked_for_s(waiting.chat_id) == 0 and (
                first is None or waiting.order < first.order
            ):
                first = waiting
        return first

    def _nudge_first_ready(self) -> None:
        first = self._first_ready()
        if first is not None:
            first.nudge.set()

    def _nudge_all(self) -> None:
        for waiting in self._waiting:
            waiting.nudge.set()

    def _buckets(self, chat_id: str) -> _ChatBuckets:
        buckets = self._chats.get(chat_id)
        if buckets is None:
            if len(self._chats) >= MAX_IDLE_CHATS:
                self._forget_idle_chats()
            group = self.limits.group if self._is_group(chat_id) else None
            buckets = _ChatBuckets(
                None if self.limits.chat is None else self.limits.chat.bucket(),
                None if group is None else group.bucket(),
            )
            self._chats[chat_id] = buckets
        return buckets

    def _forget_idle_chats(self) -> None:
        # A full bucket is the same as a new one: forgetting it changes nothing.
        busy = {waiting.chat_id for waiting in self._waiting}
        for chat_id in [c for c, b in self._chats.items() if c not in busy and b.is_idle()]:
            del self._chats[chat_id]


def _loop_time() -> float:
    # aiolimiter's buckets run on the event loop's clock.
    return asyncio.get_running_loop().time()


async def _wait(event: asyncio.Event, delay_s: float) -> None:
    """Until `event` is set or `delay_s` has passed."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(delay_s):
            await event.wait()
