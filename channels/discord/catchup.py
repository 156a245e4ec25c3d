"""Catch-up after a restart: Discord keeps no queue for a bot that was away.

Messages posted while the daemon was down (or killed before a message it had received was
durable) are never sent again over the gateway. `HandledBook` remembers, per chat, the newest
message the gateway has taken, in a small file under the channel's data directory; on the next
start, chats handled within the last 24 hours are read back from the REST history after that
message and handed to the gateway like live ones (its dedup by message id drops any overlap).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import discord
import structlog

from channels.discord.client import GatewayClient, Received
from channels.discord.errors import discord_call
from channels.errors import ChannelError
from sessions.durable import read_state_file, write_state_file

log = structlog.get_logger(__name__)

CATCH_UP_WINDOW_S = 24 * 3600.0
#: The most history read back per chat on one start, and the most chats (the latest handled).
CATCH_UP_LIMIT = 100
CATCH_UP_CHATS = 500
DISCORD_EPOCH_MS = 1_420_070_400_000
#: How often the book is written while messages flow; it is always written on the way out.
SAVE_INTERVAL_S = 1.0


def snowflake_time_s(snowflake: int) -> float:
    return ((snowflake >> 22) + DISCORD_EPOCH_MS) / 1000.0


class HandledBook:
    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._last: dict[str, int] = {}
        self._dirty = False
        self._saved_at = 0.0

    async def load(self) -> None:
        raw = await asyncio.to_thread(read_state_file, self._path)
        if raw is None:
            return
        try:
            data = json.loads(raw)
            self._last = {str(chat): int(last) for chat, last in dict(data).items()}
        except (ValueError, TypeError) as error:
            log.warning("discord.catchup_book_unreadable", path=str(self._path), error=str(error))

    def handled(self, chat_id: str, message_id: int) -> None:
        if message_id > self._last.get(chat_id, 0):
            self._last[chat_id] = message_id
            self._dirty = True

    def recent(self) -> dict[str, int]:
        """Chats handled within the catch-up window, with the newest message handled."""
        cutoff = self._clock() - CATCH_UP_WINDOW_S
        return {chat: last for chat, last in self._last.items() if snowflake_time_s(last) >= cutoff}

    async def save_soon(self) -> None:
        """Write the book if it changed and the last write is older than the interval."""
        if self._dirty and self._clock() - self._saved_at >= SAVE_INTERVAL_S:
            await self.save()

    async def save(self) -> None:
        if not self._dirty:
            return
        self._last = self.recent()
        payload = json.dumps(self._last).encode()
        self._dirty = False
        self._saved_at = self._clock()
        await asyncio.to_thread(write_state_file, self._path, payload)
        log.debug("discord.handled_book_saved", chats=len(self._last))


async def catch_up_missed(
    client: GatewayClient,
    book: HandledBook,
    received: asyncio.Queue[Received],
    timeout_s: float,
) -> None:
    """Once connected, queue what the chats handled lately got while the bot was away."""
    await book.load()
    await client.session_up.wait()
    for chat_id, last in book.recent().items():
        try:
            async with discord_call("read history", timeout_s):
                # The channel itself, not a partial one: a message read from history must
                # know whether it is a DM (answered without a mention) or a guild channel.
                target = await client.fetch_channel(int(chat_id))
                if not isinstance(target, discord.abc.Messageable):
                    continue
                missed = [
                    message
                    async for message in target.history(
                        after=discord.Object(id=last), limit=CATCH_UP_LIMIT, oldest_first=True
                    )
                ]
        except ChannelError as error:
            log.warning("discord.catch_up_failed", chat_id=chat_id, error=str(error))
            continue
        for message in missed:
            await received.put(message)
        if missed:
            log.info("discord.caught_up", chat_id=chat_id, messages=len(missed))
