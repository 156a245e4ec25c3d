"""Reply tokens: answering with one is free, pushing costs the account's monthly quota.

A message event carries a reply token that LINE accepts once, for about a minute. The channel
keeps each one under the event's id (the inbound `message_id`, which a turn's reply names as
`reply_to`) until it is used or too old; after a restart they are gone and replies are pushed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from channels.lifecycle.bounded import AgedMap

#: LINE documents reply tokens as valid for one minute; this leaves time for the request.
REPLY_TOKEN_TTL_S = 50.0
#: Tokens of events not answered yet; past this many the oldest go (their replies are pushed).
MAX_TOKENS = 4096


class ReplyTokens:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._tokens: AgedMap[str, str] = AgedMap(MAX_TOKENS, REPLY_TOKEN_TTL_S, clock)

    def remember(self, event_id: str, token: str) -> None:
        self._tokens.put(event_id, token)

    def take(self, event_id: str | None) -> str | None:
        """The event's token if it is still valid; it is forgotten either way."""
        if event_id is None:
            return None
        return self._tokens.pop(event_id)

    def give_back(self, event_id: str, token: str) -> None:
        """A token a refused request did not use (a 429), for the retry."""
        self._tokens.put(event_id, token)
