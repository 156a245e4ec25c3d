"""Live events an ingress holds until a reply of their chat has been handed over to it.

A turn whose chat still had a reply on its way when it began (`cluster.live_order`) marks its
live events to be shown after that reply. They wait here, by (profile, the reply's message id),
and go into the chat's lane, in order, right behind the reply once it is handed over. Should the
reply never come here (given up, or sent whole by an ingress that found this one gone), they
are dropped after `HOLD_S`: a live event lost costs nothing (the turn's reply, behind it in the
stream, is durable), while one shown late would open a draft after the reply it belongs before.
"""

from __future__ import annotations

import asyncio

import structlog

from cluster.codec import LiveSignal

log = structlog.get_logger(__name__)

#: How long live events wait for the reply they are to follow.
HOLD_S = 30.0
#: Events held for one reply at most (the oldest go first: a snapshot holds the whole text).
MAX_HELD = 256

HeldKey = tuple[str, str]


class HeldSignals:
    def __init__(self) -> None:
        self._held: dict[HeldKey, list[LiveSignal]] = {}
        self._expiry: dict[HeldKey, asyncio.TimerHandle] = {}

    def __len__(self) -> int:
        return sum(map(len, self._held.values()))

    def hold(self, key: HeldKey, signal: LiveSignal) -> None:
        """Keep `signal` until the reply `key` (profile, message id) is handed over."""
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = []
            self._expiry[key] = asyncio.get_running_loop().call_later(HOLD_S, self._drop, key)
        held.append(signal)
        if len(held) > MAX_HELD:
            del held[0]

    def release(self, key: HeldKey) -> list[LiveSignal]:
        """What waited for the reply `key`, in the order it came (now to be shown)."""
        expiry = self._expiry.pop(key, None)
        if expiry is not None:
            expiry.cancel()
        return self._held.pop(key, [])

    def close(self) -> None:
        for key in list(self._held):
            self.release(key)

    def _drop(self, key: HeldKey) -> None:
        dropped = self.release(key)
        log.info("cluster.live_events_dropped", after=key[1], events=len(dropped), held_s=HOLD_S)
