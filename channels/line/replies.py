"""Reply tokens: answering with one is free, pushing costs the account's monthly quota.

A message event carries a reply token that LINE accepts once, for about a minute. The channel
keeps each one under the event's id (the inbound `message_id`, which a turn's reply names as
`reply_to`) until it is used or too old; after a restart they are gone and replies are pushed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from channels.bounded import RecentMap

#: LINE documents reply tokens as valid for one minute; this leaves time for the request.
REPLY_TOKEN_TTL_S = 50.0


# Bounded in size and age like the WeCom bot's ReplyBook, which keeps other things: a token is
# taken once, a callback is used and watched for its window.
class ReplyTokens:
    def __init__(
        self,
        *,
        ttl_s: float = REPLY_TOKEN_TTL_S,
        capacity: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._tokens: RecentMap[str, tuple[str, float]] = RecentMap(capacity)

    def remember(self, event_id: str, token: str) -> None:
        self._tokens.remember(event_id, (token, self._clock() + self._ttl_s))

    def take(self, event_id: str | None) -> str | None:
        """The event's token if it is still valid; it is forgotten either way."""
        if event_id is None:
            return None
        entry = self._tokens.pop(event_id, None)
        if entry is None or entry[1] < self._clock():
            return None
        return entry[0]

    def give_back(self, event_id: str, token: str) -> None:
        """A token a refused request did not use (a 429), for the retry."""
        self._tokens[event_id] = (token, self._clock() + self._ttl_s)
