"""The "typing..." indicator while a turn runs.

Platforms show it for a few seconds only (Telegram 5 s), so it is refreshed every
`interval_s` until a stop signal, the chat's final reply, or a safety timeout: a turn that never
ends must not leave a bot typing forever. Failing to show it is never worth more than a debug
line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from channels.base import Channel
from channels.retry import Clock
from channels.stopping import sleep_unless_set

log = structlog.get_logger(__name__)

ChatKey = tuple[str, str]


class TypingIndicators:
    """One refresh loop per chat that is typing; the loops live in `run()`'s task group."""

    def __init__(
        self,
        *,
        interval_s: float = 4.0,
        max_duration_s: float = 600.0,
        call_timeout_s: float = 10.0,
        clock: Clock = time.monotonic,
        held: Callable[[str, str], bool] | None = None,
    ) -> None:
        """`held(channel, chat_id)`: a refusal holds the chat, so nothing is sent to it."""
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.interval_s = interval_s
        self.max_duration_s = max_duration_s
        self._call_timeout_s = call_timeout_s
        self._clock = clock
        self._held = held
        self._stops: dict[ChatKey, asyncio.Event] = {}
        self._group: asyncio.TaskGroup | None = None
        self._closing = asyncio.Event()

    def is_typing(self, channel: str, chat_id: str) -> bool:
        return (channel, chat_id) in self._stops

    def start(self, channel: Channel, chat_id: str) -> None:
        """Show "typing" in the chat until `stop`; a chat already typing keeps its loop."""
        key = (channel.name, chat_id)
        if key in self._stops:
            return
        if self._group is None:
            log.debug("typing.not_running", channel=key[0])
            return
        stop = asyncio.Event()
        self._stops[key] = stop
        self._group.create_task(
            self._refresh(channel, chat_id, stop), name=f"typing:{channel.name}:{chat_id}"
        )

    def stop(self, channel: str, chat_id: str) -> None:
        stop = self._stops.pop((channel, chat_id), None)
        if stop is not None:
            stop.set()

    def stop_all(self) -> None:
        for key in list(self._stops):
            self.stop(*key)

    async def run(self) -> None:
        """Host the loops until `close()` or cancellation; every loop ends with it."""
        self._closing.clear()
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                try:
                    await self._closing.wait()
                finally:
                    self._group = None
                    self.stop_all()
        finally:
            self._group = None

    def close(self) -> None:
        self._closing.set()

    async def _refresh(self, channel: Channel, chat_id: str, stop: asyncio.Event) -> None:
        deadline = self._clock() + self.max_duration_s
        try:
            while not stop.is_set():
                if self._clock() >= deadline:
                    log.info(
                        "typing.timed_out",
                        channel=channel.name,
                        chat_id=chat_id,
                        max_duration_s=self.max_duration_s,
                    )
                    break
                if self._held is None or not self._held(channel.name, chat_id):
                    await self._quietly(channel.send_typing, channel.name, chat_id)
                await sleep_unless_set(stop, self.interval_s)
        finally:
            if self._stops.get((channel.name, chat_id)) is stop:
                del self._stops[(channel.name, chat_id)]
            await self._quietly(channel.stop_typing, channel.name, chat_id)

    async def _quietly(
        self, call: Callable[[str], Awaitable[None]], channel: str, chat_id: str
    ) -> None:
        try:
            async with asyncio.timeout(self._call_timeout_s):
                await call(chat_id)
        except Exception as exc:
            # A missing indicator costs nothing; it must never end a turn or the loop.
            log.debug("typing.call_failed", channel=channel, chat_id=chat_id, error=str(exc))
