"""Telegram's flood control, enforced by the fake when asked (`FakeTelegram(flood=FloodControl())`).

Each scope is a token bucket checked by GCRA (the "virtual scheduling" form): the bot (30
messages a second), each chat (1 a second), each group chat (20 a minute, on top of its chat's);
`slack_s` forgives the jitter of a request's arrival, as a real server must. A message that
does not fit is answered 429 with `parameters.retry_after` (whole seconds, as Telegram gives
them) and holds its scope that long: any request to a held scope (a chat action too) is refused
with the wait as it stands, and each new excess within a minute of the previous refusal doubles
the next hold (up to `MAX_RETRY_AFTER_S`), as Telegram's flood waits grow for a bot that keeps
flooding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: The methods that send or change a message: what the limits count. Chat actions are not
#: counted, but a held chat refuses them too.
_ACTIONS = ("sendchataction",)
#: Refusals this close together count as repeated.
_REPEATED_WITHIN_S = 60.0
#: The longest wait one refusal asks for, however often the bot asked too early (Telegram's
#: have no published cap; this keeps a benchmark of an unpaced bot finite).
MAX_RETRY_AFTER_S = 30


@dataclass(slots=True)
class _Bucket:
    """GCRA: `tat` is when the bucket would be empty again at the steady rate."""

    count: int
    per_s: float
    tat: float = 0.0

    def wait_s(self, now: float, slack_s: float) -> float:
        """Seconds until one more message fits; 0 when it fits now."""
        interval = self.per_s / self.count
        tolerance = (self.count - 1) * interval + slack_s
        return max(0.0, self.tat - tolerance - now)

    def take(self, now: float) -> None:
        self.tat = max(self.tat, now) + self.per_s / self.count


@dataclass(slots=True)
class _Hold:
    until: float = 0.0
    strikes: int = 0
    last_at: float = -math.inf


@dataclass
class FloodControl:
    """The limits the fake enforces; `refusals` lists each 429 as (time, chat_id)."""

    per_bot: tuple[int, float] = (30, 1.0)
    per_chat: tuple[int, float] = (1, 1.0)
    per_group: tuple[int, float] = (20, 60.0)
    slack_s: float = 0.05
    refusals: list[tuple[float, str]] = field(default_factory=list)
    _bot: _Bucket = field(init=False)
    _chats: dict[str, _Bucket] = field(default_factory=dict, init=False)
    _groups: dict[str, _Bucket] = field(default_factory=dict, init=False)
    _holds: dict[str, _Hold] = field(default_factory=dict, init=False)
    _bot_hold: _Hold = field(default_factory=_Hold, init=False)
    _refuse_next: dict[str, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._bot = _Bucket(*self.per_bot)

    def refuse_next(self, chat_id: str, retry_after_s: int) -> None:
        """The next message to the chat is refused with this `retry_after`, which then holds
        the chat, as if it had flooded."""
        self._refuse_next[chat_id] = retry_after_s

    def check(self, method: str, chat_id: str | None, now: float) -> int | None:
        """None when the request may pass (and is counted); else the `retry_after` to answer."""
        counted = method.lower().startswith(("send", "edit")) and method.lower() not in _ACTIONS
        if chat_id is None or not (counted or method.lower() in _ACTIONS):
            return None
        for hold in (self._bot_hold, self._holds.get(chat_id)):
            if hold is not None and now < hold.until:
                self.refusals.append((now, chat_id))
                return math.ceil(hold.until - now)
        if not counted:
            return None
        if (retry_after := self._refuse_next.pop(chat_id, None)) is not None:
            return self._refuse(self._holds.setdefault(chat_id, _Hold()), chat_id, retry_after, now)
        chat = self._chats.setdefault(chat_id, _Bucket(*self.per_chat))
        buckets = [(chat, self._holds.setdefault(chat_id, _Hold()))]
        if chat_id.startswith("-"):
            group = self._groups.setdefault(chat_id, _Bucket(*self.per_group))
            buckets.append((group, self._holds[chat_id]))
        buckets.append((self._bot, self._bot_hold))
        for bucket, hold in buckets:
            if (wait_s := bucket.wait_s(now, self.slack_s)) > 0:
                return self._refuse(hold, chat_id, wait_s, now)
        for bucket, _hold in buckets:
            bucket.take(now)
        return None

    def _refuse(self, hold: _Hold, chat_id: str, wait_s: float, now: float) -> int:
        hold.strikes = hold.strikes + 1 if now - hold.last_at <= _REPEATED_WITHIN_S else 1
        hold.last_at = now
        retry_after = min(MAX_RETRY_AFTER_S, math.ceil(wait_s) << (hold.strikes - 1))
        hold.until = max(hold.until, now + retry_after)
        self.refusals.append((now, chat_id))
        return retry_after
