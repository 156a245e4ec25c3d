"""The discord.py `Client` the Discord channel runs: one per `start()`.

It differs from a stock client in three ways, each for a reason:
- its HTTP client is a `RoutedHTTPClient`, so the bot talks to its configured endpoints without
  touching discord.py's process-wide URLs;
- every gateway event parser is guarded: discord.py calls parsers straight from its receive loop,
  so one malformed MESSAGE_CREATE (a missing key, a wrong type) would otherwise end `connect()`;
  the guard logs the event and skips it, and the connection carries on;
- received messages, and the raw events of their edits and deletes (no message cache: the
  raw events are the only ones that come), go into a bounded queue that the channel drains in
  order, instead of being handled in the task discord.py spawns per event; interactions
  (button taps), which Discord wants answered within 3 seconds, are handed to the channel at
  once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import discord
import structlog

from channels.discord.routing import DiscordEndpoints, RoutedHTTPClient

log = structlog.get_logger(__name__)

#: discord.py waits out rate limits up to this long itself; longer ones surface as errors so the
#: manager can decide (the library refuses values below 30 s).
MAX_RATELIMIT_WAIT_S = 30.0

#: How long a received message may wait for room in the channel's backlog before it is dropped.
BACKLOG_WAIT_S = 60.0

#: What the channel drains: a new message, an edit or a delete of one (`MESSAGE_UPDATE`,
#: `MESSAGE_DELETE`), or a reaction added to one (`MESSAGE_REACTION_ADD`).
Received = (
    discord.Message
    | discord.RawMessageUpdateEvent
    | discord.RawMessageDeleteEvent
    | discord.RawReactionActionEvent
)

#: What a malformed gateway payload raises inside a discord.py parser.
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


def bot_intents() -> discord.Intents:
    intents = discord.Intents.default()
    intents.message_content = True
    intents.dm_messages = True
    return intents


class GatewayClient(discord.Client):
    """A discord.py client that routes its endpoints and hands messages to a queue."""

    def __init__(
        self,
        endpoints: DiscordEndpoints,
        received: asyncio.Queue[Received],
        *,
        session_up: asyncio.Event,
        guild_ready_timeout_s: float = 2.0,
        take_interaction: Callable[[discord.Interaction], Awaitable[None]] | None = None,
    ) -> None:
        # discord.py warns at its first client that voice libraries are missing; no voice is used.
        discord.VoiceClient.warn_nacl = False
        discord.VoiceClient.warn_dave = False
        super().__init__(
            intents=bot_intents(),
            # The bot repeats what an agent wrote: it must never ping @everyone or a role.
            allowed_mentions=discord.AllowedMentions(everyone=False, roles=False),
            max_messages=None,
            guild_ready_timeout=guild_ready_timeout_s,
            max_ratelimit_timeout=MAX_RATELIMIT_WAIT_S,
        )
        routed = RoutedHTTPClient(
            self.loop, endpoints, max_ratelimit_timeout_s=MAX_RATELIMIT_WAIT_S
        )
        # The connection state keeps its own reference to the HTTP client: swap both together,
        # before anything has logged in.
        self.http = routed
        self._connection.http = routed
        _guard_parsers(self._connection.parsers)
        self._received = received
        self._take_interaction = take_interaction
        #: Set while a gateway session is up: from READY or RESUMED until the next disconnect
        #: (the channel passes its run state's `receiving`).
        self.session_up = session_up

    @property
    def gateway_connected(self) -> bool:
        """A session is up and its websocket open (False from a drop until RESUMED or READY)."""
        return self.session_up.is_set() and self.ws is not None and self.ws.open

    async def on_message(self, message: discord.Message) -> None:
        await self._queue(message, message.id)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        await self._queue(payload, payload.message_id)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self._queue(payload, payload.message_id)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        await self._queue(payload, payload.message_id)

    async def _queue(self, item: Received, message_id: int) -> None:
        # discord.py runs this in a task of its own per event, which nobody awaits: it must not
        # wait forever on a backlog that is no longer drained.
        try:
            await asyncio.wait_for(self._received.put(item), timeout=BACKLOG_WAIT_S)
        except TimeoutError:
            log.error("discord.inbound_backlog_full", message_id=message_id, wait_s=BACKLOG_WAIT_S)

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        # In discord.py's task for the event: an interaction must be answered within Discord's
        # 3 seconds, so it does not wait in line behind the messages.
        if self._take_interaction is not None:
            await self._take_interaction(interaction)

    async def on_disconnect(self) -> None:
        self.session_up.clear()
        log.info("discord.gateway_disconnected")

    async def on_resumed(self) -> None:
        self.session_up.set()
        log.info("discord.gateway_resumed")

    async def on_ready(self) -> None:
        self.session_up.set()
        user = self.user
        log.info("discord.gateway_ready", bot_id=user.id if user else None)

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        # discord.py calls this from inside its own `except Exception` around event handlers.
        log.exception("discord.event_handler_failed", event=event_method)


def _guard_parsers(parsers: dict[str, Callable[[Any], None]]) -> None:
    for event, parse in list(parsers.items()):
        parsers[event] = _skipping_malformed(event, parse)


def _skipping_malformed(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
    def parse_or_skip(data: Any) -> None:
        try:
            parse(data)
        except _MALFORMED as error:
            log.warning("discord.malformed_event_skipped", gateway_event=event, error=repr(error))

    return parse_or_skip
