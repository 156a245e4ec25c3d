"""News of inbound messages for a bounded worker's idle runners: wake up and sweep now.

A bounded worker's runner with nothing to do would otherwise learn of a new message only at
its next sweep, `fetch_wait_s` later (a request to the HTTP API waited that long for an idle
worker). JetStream hands every message published to a stream's subjects to core NATS
subscribers too, so a worker subscribes to the inbound subjects and each arrival wakes one
idle runner (the one idle longest; with none idle, the next runner to go idle sweeps again at
once instead of waiting). The notice is only a hint: a lost one (core NATS drops a slow subscriber's
messages) costs the wait it saves, and messages offered again without a publish (after a
retry's backoff, after `ack_wait`) are found by the periodic sweep as before. The price is a
copy of every inbound message to every worker.
"""

from __future__ import annotations

import asyncio
from collections import deque

from nats.aio.msg import Msg

from cluster.follower import SubjectFollower

#: Notices held for a worker that falls behind before core NATS drops them (they are hints).
PENDING_NOTICES = 1024


class Arrivals(SubjectFollower):
    PENDING_MESSAGES = PENDING_NOTICES

    def __init__(self) -> None:
        super().__init__()
        #: Idle runners, longest idle first: each arrival wakes one.
        self._idle: deque[asyncio.Future[bool]] = deque()
        #: An arrival came while no runner was idle: the next to go idle must not wait.
        self._unseen = False

    def seen(self) -> None:
        """A runner is about to sweep: what arrived so far, it will find."""
        self._unseen = False

    async def next(self, stop: asyncio.Task[bool], wait_s: float) -> None:
        """Until an arrival wakes this runner, the stop, or `wait_s` (what arrives without a
        notice, a retry after its backoff, is found by the sweep that follows)."""
        if self._unseen:
            self._unseen = False
            return
        woken: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._idle.append(woken)
        try:
            await asyncio.wait({woken, stop}, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not woken.done():
                self._idle.remove(woken)
                woken.cancel()

    async def _on_message(self, _msg: Msg) -> None:
        while self._idle:
            woken = self._idle.popleft()
            if not woken.done():
                woken.set_result(True)
                return
        self._unseen = True
