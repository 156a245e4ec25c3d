"""The Discord channel: a discord.py bot on the gateway, replies over REST.

Each `start()` runs a fresh `GatewayClient` until `stop()` or cancellation: discord.py keeps the
gateway connected (heartbeats, RESUME after a drop, re-IDENTIFY when the session is gone), and the
channel drains received messages in order, filters them (`inbound.py`: own and other bots'
messages, guild messages without a mention) and publishes them. Every outbound call translates
discord.py's exceptions into `channels.errors`, so the manager's single retry policy can act on
them.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import aiohttp
import discord
import structlog
from discord.backoff import ExponentialBackoff

from bus import (
    Attachment,
    Button,
    ButtonRows,
    InboundMessage,
    InboundRefused,
    InboundSender,
    OutboundMessage,
    PipeClosed,
)
from channels.base import PROBE_TIMEOUT_S, Embed
from channels.buttons import TAP_NOT_AVAILABLE, ButtonLimits
from channels.discord.catchup import HandledBook, catch_up_missed
from channels.discord.client import MAX_RATELIMIT_WAIT_S, GatewayClient, Received
from channels.discord.errors import (
    CHANNEL,
    discord_call,
    gateway_failure,
)
from channels.discord.inbound import (
    AttachmentStore,
    InboundPolicy,
    edit_of,
    reaction_of,
    read_tap,
    should_answer,
    to_inbound,
)
from channels.discord.routing import DiscordEndpoints, RoutedHTTPClient
from channels.errors import AuthError, ChannelError, TransientError
from channels.health import ChannelHealth
from channels.lifecycle.bounded import RecentMap
from channels.lifecycle.run_state import RunStateChannel
from channels.media_files import read_file
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.stopping import until_taken
from config import DiscordConfig

# Media paths go out as files; what users send is saved by `channels.discord.inbound`.
log = structlog.get_logger(__name__)

#: Discord takes at most ten files per message.
MAX_FILES_PER_MESSAGE = 10


async def load_files(paths: Sequence[str]) -> list[discord.File]:
    """Outbound media paths read into memory off the event loop, ready to upload."""
    files: list[discord.File] = []
    for path in map(Path, paths):
        data = await read_file(str(path), channel="discord")
        files.append(discord.File(io.BytesIO(data), filename=path.name))
    return files


def batches(files: Sequence[discord.File]) -> list[list[discord.File]]:
    """Files grouped as Discord accepts them, at most ten to a message."""
    return [
        list(files[start : start + MAX_FILES_PER_MESSAGE])
        for start in range(0, len(files), MAX_FILES_PER_MESSAGE)
    ]


# How an outbound message names things on Discord: ids, the message it replies to, and the
# nonce that makes a resend of the same delivery one message.
def snowflake(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ChannelError(f"{what} {value!r} is not a Discord id", channel=CHANNEL) from None


def reply_reference(chat_id: str, reply_to: str | None) -> discord.MessageReference | None:
    if reply_to is None or not reply_to.isdigit():
        return None
    # A reply to a message deleted meanwhile is still sent, as a plain message.
    return discord.MessageReference(
        message_id=int(reply_to), channel_id=int(chat_id), fail_if_not_exists=False
    )


#: What a bot may upload in one message without a boosted server: "10 MiB" (Discord's "Uploading
#: Files", https://discord.com/developers/docs/reference#uploading-files).
MAX_UPLOAD_BYTES = 10 * 1024 * 1024


def delivery_nonce(delivery_id: str | None, batch: int) -> str | None:
    """Discord's nonce (at most 25 characters) for one message of a delivery."""
    if delivery_id is None:
        return None
    digest = hashlib.blake2b(f"{delivery_id}/{batch}".encode(), digest_size=12).hexdigest()
    return digest[:25]


# Discord's published send rate, on top of the route buckets discord.py already keeps.
#
# discord.py reads every route's `X-RateLimit-*` headers and waits out a bucket before it is
# empty, so per-channel limits need nothing more. What it cannot know ahead is the global limit:
# Discord's "My Bot is Being Rate Limited"
# (https://support-dev.discord.com/hc/en-us/articles/6223003921559-My-Bot-is-Being-Rate-Limited):
# "Global Rate Limits - Limit: 50 requests per second across most endpoints - Scope: Applies to
# your entire application" (also https://discord.com/developers/docs/topics/rate-limits#global-rate-limit).
RATE_LIMITS = RateLimits(account=Rate(50, 1.0))


#: Discord's component types and interaction answers: an action row, a button, its styles;
#: a deferred update of the tapped message; a message only its reader sees.
_ACTION_ROW, _BUTTON, _PRIMARY, _LINK = 1, 2, 1, 5
_DEFERRED_UPDATE = 6
_EPHEMERAL = 1 << 6
#: How long a tap may take to become durable: Discord wants its answer within 3 seconds.
_TAP_DURABLE_S = 2.5


def _component(button: Button) -> dict[str, Any]:
    if button.url is not None:
        return {"type": _BUTTON, "style": _LINK, "label": button.text, "url": button.url}
    return {"type": _BUTTON, "style": _PRIMARY, "label": button.text, "custom_id": button.data}


#: What decoding a broken gateway frame raises inside discord.py (bad JSON, a broken zlib stream,
#: a frame that is not an object). The connection is dropped and opened again.
_UNDECODABLE_FRAME = (ValueError, TypeError, AttributeError, KeyError, zlib.error)
#: A second undecodable frame within this long of the first one reconnects with backoff.
_QUIET_PERIOD_S = 60.0


@dataclass(frozen=True, slots=True)
class DiscordTimeouts:
    """How long the channel waits on Discord; the tests shorten them."""

    #: One REST call (the login, a message, an attachment download, the catch-up's reads).
    request_s: float = 60.0
    #: Closing the gateway connection, in `stop()` or after an undecodable frame.
    close_s: float = 5.0
    #: discord.py's wait for the guilds' GUILD_CREATE after READY.
    guild_ready_s: float = 2.0


class DiscordChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["discord"]
    max_upload_bytes = MAX_UPLOAD_BYTES
    #: Discord allows five edits per five seconds in one channel.
    edit_interval_s: ClassVar[float] = 1.0
    buttons_shown = "attached"
    # Message components: at most 5 action rows of 5 buttons, a label of 80 characters (a
    # custom_id takes 100, more than a button's data may hold).
    button_limits = ButtonLimits(max_rows=5, max_per_row=5, max_label=80)

    def __init__(
        self,
        config: DiscordConfig,
        *,
        data_dir: Path,
        timeouts: DiscordTimeouts = DiscordTimeouts(),
    ) -> None:
        self._token = config.token.get_secret_value()
        self._endpoints = DiscordEndpoints(
            api_base_url=config.api_base_url, gateway_url=config.gateway_url
        )
        self._require_mention = config.require_mention
        self._timeouts = timeouts
        self._attachments = AttachmentStore(data_dir, timeout_s=timeouts.request_s)
        self._handled = HandledBook(data_dir / "discord" / "handled.json")
        #: (chat, message id) -> its sender, for the messages passed on lately: a delete
        #: event names no author, and only a sender the allow list lets in may drop one.
        self._senders: RecentMap[tuple[str, str], str] = RecentMap(10_000)
        self._client: GatewayClient | None = None
        self._inbound: InboundSender | None = None
        #: The action rows under the bot's messages, by (chat, message id): what a used
        #: message's buttons are disabled from.
        self._components: RecentMap[tuple[str, str], list[dict[str, Any]]] = RecentMap(10_000)
        self._last_failure: str | None = None
        super().__init__()

    def supports_edit(self) -> bool:
        return True

    # Lifecycle

    async def start(self, inbound: InboundSender) -> None:
        """Run the bot until `stop()` or cancellation; a stopped channel stays stopped."""
        await self._run_state.run(self._run(inbound))

    async def _run(self, inbound: InboundSender) -> None:
        """A fresh client until `stop()` closes it (receiving while its session is up)."""
        received: asyncio.Queue[Received] = asyncio.Queue(maxsize=1024)
        client = GatewayClient(
            self._endpoints,
            received,
            session_up=self._run_state.receiving,
            guild_ready_timeout_s=self._timeouts.guild_ready_s,
            take_interaction=self._take_interaction,
        )
        self._client = client
        self._inbound = inbound
        gateway = asyncio.create_task(self._run_gateway(client), name="discord-gateway")
        pump = asyncio.create_task(
            self._pump_inbound(client, received, inbound), name="discord-inbound"
        )
        catch_up = asyncio.create_task(
            catch_up_missed(client, self._handled, received, self._timeouts.request_s),
            name="discord-catch-up",
        )
        try:
            done, _pending = await asyncio.wait(
                {gateway, pump}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()
        except ChannelError as error:
            self._last_failure = str(error)
            raise
        finally:
            for task in (gateway, pump, catch_up):
                task.cancel()
            try:
                # Collects the tasks we cancelled; our own cancellation still propagates after.
                await asyncio.gather(gateway, pump, catch_up, return_exceptions=True)
            finally:
                await self._close_client(client)
                await self._handled.save()

    async def stop(self) -> None:
        # Closing the client ends the gateway's run: `start()` then lets go of the rest.
        self._run_state.stopping.set()
        client = self._client
        if client is not None and not client.is_closed():
            await self._close_client(client)
        await super().stop()

    async def health_check(self) -> ChannelHealth:
        return self._run_state.health(self._connection_health())

    def _connection_health(self) -> ChannelHealth:
        client = self._client
        if client is None:
            return ChannelHealth.unknown()
        if client.is_closed():
            return ChannelHealth.degraded(self._last_failure or "disconnected")
        if client.is_ready() and client.gateway_connected:
            return ChannelHealth.healthy()
        if client.is_ready():
            return ChannelHealth.degraded("reconnecting to the Discord gateway")
        return ChannelHealth.degraded("connecting to the Discord gateway")

    async def probe(self) -> str | None:
        """GET /users/@me with the token (`doctor`); AuthError when Discord refuses it."""
        http = RoutedHTTPClient(
            asyncio.get_running_loop(),
            self._endpoints,
            max_ratelimit_timeout_s=MAX_RATELIMIT_WAIT_S,
        )
        try:
            async with discord_call("GET /users/@me", PROBE_TIMEOUT_S):
                me = await http.static_login(self._token)
        except discord.LoginFailure:
            raise AuthError(
                "Discord rejected the bot token (401)",
                channel=CHANNEL,
                suggestion="copy the token again from the developer portal (Bot, Reset Token)",
            ) from None
        finally:
            await http.close()
        return f"@{me['username']} (id {me['id']})"

    async def _run_gateway(self, client: GatewayClient) -> None:
        try:
            async with asyncio.timeout(self._timeouts.request_s):
                await client.login(self._token)
            await self._connect(client)
        except (
            discord.ClientException,
            discord.HTTPException,
            aiohttp.ClientError,
            OSError,
            TimeoutError,
            RuntimeError,
        ) as error:
            if self._run_state.stopping.is_set():
                return  # stop() closed the client under a running request
            failure = gateway_failure(error)
            if failure is None:
                raise
            raise failure from error

    async def _connect(self, client: GatewayClient) -> None:
        backoff: ExponentialBackoff[bool] = ExponentialBackoff()
        last_failure_s = -_QUIET_PERIOD_S
        while not client.is_closed():
            try:
                await client.connect(reconnect=True)
            except _UNDECODABLE_FRAME as error:
                # discord.py ends `connect()` on a frame it cannot decode; a broken zlib stream
                # cannot be read further either, so open a new connection: at once after a
                # lone glitch, with backoff when the server keeps sending garbage.
                log.warning("discord.undecodable_gateway_frame", error=repr(error))
                await self._drop_socket(client)
                now_s = time.monotonic()
                if now_s - last_failure_s < _QUIET_PERIOD_S:
                    await asyncio.sleep(backoff.delay())
                last_failure_s = now_s

    async def _drop_socket(self, client: GatewayClient) -> None:
        ws = client.ws
        if ws is None or not ws.open:
            return
        try:
            async with asyncio.timeout(self._timeouts.close_s):
                await ws.close(code=4000)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            log.warning("discord.socket_close_failed", error=repr(error))

    async def _close_client(self, client: GatewayClient) -> None:
        try:
            async with asyncio.timeout(self._timeouts.close_s):
                await client.close()
        except TimeoutError:
            log.warning("discord.close_timed_out", timeout_s=self._timeouts.close_s)

    async def _pump_inbound(
        self,
        client: GatewayClient,
        received: asyncio.Queue[Received],
        inbound: InboundSender,
    ) -> None:
        while True:
            message = await received.get()
            try:
                await self._forward_when_taken(client, message, inbound)
            except PipeClosed:
                raise
            except Exception:
                # Per-message supervision point: one message that cannot be handled is logged
                # and the channel goes on with the next.
                message_id = message.id if isinstance(message, discord.Message) else None
                log.exception("discord.inbound_message_failed", message_id=message_id)

    async def _forward_when_taken(
        self, client: GatewayClient, message: Received, inbound: InboundSender
    ) -> None:
        """Discord does not send a message again: while the gateway's backlog is full, wait."""
        await until_taken(
            lambda: self._forward(client, message, inbound), event="discord.inbound_paused"
        )

    async def _forward(
        self, client: GatewayClient, message: Received, inbound: InboundSender
    ) -> None:
        user = client.user
        if user is None:
            return
        policy = InboundPolicy(bot_user_id=user.id, require_mention=self._require_mention)
        if not isinstance(message, discord.Message):
            change = self._change(message, policy)
            if change is not None:
                await inbound.send(change)
            return
        if not should_answer(message, policy):
            return
        received = to_inbound(message, policy)
        self._senders.remember((received.chat_id, str(message.id)), received.sender_id)
        # A stranger's files are not fetched: the dispatcher will refuse the message.
        if message.attachments and self.is_allowed(received.sender_id):
            received = await self._attachments.receive(message, received, self.max_media_bytes)
        await inbound.send(received)
        self._handled.handled(str(message.channel.id), message.id)
        await self._handled.save_soon()

    # Buttons

    async def _take_interaction(self, interaction: discord.Interaction) -> None:
        """A tap on the bot's button goes to the gateway; once it is durable, Discord gets a
        deferred update (type 6, within its 3 seconds), which changes nothing on screen. A tap
        no button of the bot's sent is answered with a notice only the tapper sees."""
        client, inbound = self._client, self._inbound
        if client is None or client.user is None or inbound is None:
            return
        tap = read_tap(interaction, client.user.id)
        if tap is None:
            if interaction.type is discord.InteractionType.component:
                log.info("discord.tap_not_taken", interaction_id=interaction.id)
                notice = {"content": TAP_NOT_AVAILABLE, "flags": _EPHEMERAL}
                await self._answer_interaction(interaction, {"type": 4, "data": notice})
            return
        held = interaction.message
        if held is not None:
            rows = [
                dict(row.to_dict()) for row in held.components if isinstance(row, discord.ActionRow)
            ]
            self._components.remember((tap.chat_id, str(held.id)), rows)
        try:
            async with asyncio.timeout(_TAP_DURABLE_S):
                await inbound.send(tap)
        except (InboundRefused, TimeoutError) as error:
            # Discord does not send an interaction again: unanswered, the app shows the tap
            # failed, and the user may tap again.
            log.warning(
                "discord.tap_not_taken_now", interaction_id=interaction.id, error=repr(error)
            )
            return
        except PipeClosed:
            return
        await self._answer_interaction(interaction, {"type": _DEFERRED_UPDATE})

    async def _answer_interaction(
        self, interaction: discord.Interaction, answer: dict[str, Any]
    ) -> None:
        """`POST /interactions/{id}/{token}/callback`. One answered before (a redelivered
        event) is refused by Discord: nothing to do then."""
        route = discord.http.Route(
            "POST",
            "/interactions/{interaction_id}/{interaction_token}/callback",
            interaction_id=interaction.id,
            interaction_token=interaction.token,
        )
        try:
            async with discord_call("interaction callback", self._timeouts.request_s):
                await self._require_client().http.request(route, json=answer)
        except ChannelError as error:
            log.info("discord.tap_not_answered", interaction_id=interaction.id, error=str(error))

    async def attach_buttons(self, chat_id: str, message_id: str, buttons: ButtonRows) -> None:
        """The message's components set to `buttons`: one action row a row, a data button's
        `custom_id` its data, a link button Discord's link style."""
        rows = [
            {"type": _ACTION_ROW, "components": [_component(button) for button in row]}
            for row in buttons
        ]
        await self._edit_components(chat_id, message_id, rows)
        self._components.remember((chat_id, message_id), rows)

    async def remove_buttons(self, chat_id: str, message_id: str) -> None:
        """The message's buttons disabled (taken off, when they are no longer known)."""
        rows = self._components.get((chat_id, message_id)) or []
        disabled = [
            {**row, "components": [{**c, "disabled": True} for c in row.get("components", [])]}
            for row in rows
        ]
        await self._edit_components(chat_id, message_id, disabled)

    async def _edit_components(
        self, chat_id: str, message_id: str, rows: list[dict[str, Any]]
    ) -> None:
        route = discord.http.Route(
            "PATCH",
            "/channels/{channel_id}/messages/{message_id}",
            channel_id=snowflake(chat_id, "chat id"),
            message_id=snowflake(message_id, "message id"),
        )
        async with discord_call("edit message components", self._timeouts.request_s):
            await self._require_client().http.request(route, json={"components": rows})

    def _change(
        self,
        event: discord.RawMessageUpdateEvent
        | discord.RawMessageDeleteEvent
        | discord.RawReactionActionEvent,
        policy: InboundPolicy,
    ) -> InboundMessage | None:
        """A user's edit or delete of a message the bot answers, a user's reaction to the
        bot's message, or None."""
        if isinstance(event, discord.RawMessageUpdateEvent):
            return edit_of(event, policy)
        if isinstance(event, discord.RawReactionActionEvent):
            return reaction_of(event, policy.bot_user_id)
        # A delete names no author: only messages this channel passed on are known by theirs.
        chat, message_id = str(event.channel_id), str(event.message_id)
        sender = self._senders.get((chat, message_id))
        if sender is None:
            return None
        return InboundMessage.deletion(CHANNEL, sender, chat, message_id)

    # Outbound

    async def send(self, message: OutboundMessage) -> None:
        await self.send_with_id(message)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        target = self._messageable(message.chat_id)
        reference = reply_reference(message.chat_id, message.reply_to)
        files = await load_files(message.media)
        first_id: str | None = None
        for index, group in enumerate(batches(files) or [[]]):
            content = message.content if index == 0 else ""
            if not content and not group:
                continue
            nonce = delivery_nonce(message.delivery_id, index)
            sent = await self._post(
                target, content, group, reference if index == 0 else None, nonce
            )
            first_id = first_id or str(sent.id)
        return first_id

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """One file as a message's attachment (discord.py's `File`); its nonce makes a resend
        after a crash return the message Discord already made."""
        data = await read_file(attachment.path, channel="discord", max_bytes=MAX_UPLOAD_BYTES)
        upload = discord.File(io.BytesIO(data), filename=attachment.name)
        target = self._messageable(chat_id)
        nonce = delivery_nonce(delivery_key, 0)
        sent = await self._post(target, attachment.caption, [upload], None, nonce)
        return str(sent.id)

    async def _post(
        self,
        target: discord.PartialMessageable,
        content: str,
        files: list[discord.File],
        reference: discord.MessageReference | None,
        nonce: str | None,
    ) -> discord.Message:
        # discord.py's overloads take `files`, `reference` and `nonce` only as real values.
        # With a nonce it also sends `enforce_nonce`: Discord answers a resend of the same
        # nonce (a retry, a redelivery after a crash) with the message it already created.
        text = content or None
        extra: dict[str, Any] = {}
        if files:
            extra["files"] = files
        if reference is not None:
            extra["reference"] = reference
        if nonce is not None:
            extra["nonce"] = nonce
        async with discord_call("send message", self._timeouts.request_s):
            return await target.send(text, **extra)

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        partial = self._partial_message(chat_id, message_id)
        async with discord_call("edit message", self._timeouts.request_s):
            await partial.edit(content=content)

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        partial = self._partial_message(chat_id, message_id)
        async with discord_call("delete message", self._timeouts.request_s):
            try:
                await partial.delete()
            except discord.NotFound:
                log.debug("discord.delete_already_gone", message_id=message_id)

    async def send_typing(self, chat_id: str) -> None:
        target = self._messageable(chat_id)
        async with discord_call("trigger typing", self._timeouts.request_s):
            await target.typing()

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        partial = self._partial_message(chat_id, message_id)
        async with discord_call("add reaction", self._timeouts.request_s):
            await partial.add_reaction(emoji)

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        client = self._require_client()
        partial = self._partial_message(chat_id, message_id)
        assert client.user is not None  # _require_client checked it
        async with discord_call("remove reaction", self._timeouts.request_s):
            await partial.remove_reaction(emoji, client.user)

    async def send_embed(self, chat_id: str, embed: Embed) -> str | None:
        card = discord.Embed(title=embed.title, description=embed.description, colour=embed.color)
        for field in embed.fields:
            card.add_field(name=field.name, value=field.value, inline=field.inline)
        target = self._messageable(chat_id)
        async with discord_call("send embed", self._timeouts.request_s):
            sent = await target.send(embed=card)
        return str(sent.id)

    def _require_client(self) -> GatewayClient:
        client = self._client
        if client is None or client.is_closed() or client.user is None:
            raise TransientError("the Discord client is not logged in", channel=CHANNEL)
        return client

    def _messageable(self, chat_id: str) -> discord.PartialMessageable:
        return self._require_client().get_partial_messageable(snowflake(chat_id, "chat id"))

    def _partial_message(self, chat_id: str, message_id: str) -> discord.PartialMessage:
        return self._messageable(chat_id).get_partial_message(snowflake(message_id, "message id"))
