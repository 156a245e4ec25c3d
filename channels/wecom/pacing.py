"""WeCom's quiet limit: an application may send a member at most 30 messages a minute, and
WeCom drops what is over it without an error. So the channel counts for itself: a send that
would pass the limit is refused with `RateLimited` for exactly as long as the oldest send in
the window needs to age out, and the retry layer waits that long and sends it then.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

#: 发送应用消息: "每应用对同一个成员不可超过30次/分" (U: per member, per minute).
MAX_SENDS = 30
WINDOW_S = 60.0


@dataclass(eq=False)
class SendWindow:
    """At most `max_sends` per member in any `window_s`, for the `max_members` seen last."""

    max_sends: int = MAX_SENDS
    window_s: float = WINDOW_S
    _: KW_ONLY
    max_members: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _sent: OrderedDict[str, deque[float]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def reserve(self, member: str) -> float:
        """0 and the send is counted, or the seconds to wait before it may go."""
        now = self.clock()
        sent = self._sent.setdefault(member, deque())
        self._sent.move_to_end(member)
        while sent and now - sent[0] >= self.window_s:
            sent.popleft()
        if len(sent) >= self.max_sends:
            return self.window_s - (now - sent[0])
        sent.append(now)
        while len(self._sent) > self.max_members:
            self._sent.popitem(last=False)
        return 0.0
