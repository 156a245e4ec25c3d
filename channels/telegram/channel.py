"""The Telegram channel: python-telegram-bot's `Bot`, long polling or a webhook, and replies.

`start()` checks the token (getMe), publishes the bot's commands (setMyCommands), then receives
updates until `stop()` or cancellation: by long polling (its own loop, so offsets, backoff and
shutdown are in our hands) or through the daemon's HTTP server (webhook mode). Each update is
read, its files downloaded for allowed senders, and published on the bus. Sending, editing and
the rest go through `TelegramSender`; the manager owns retries. Each part of a reply to a
message asked in a forum topic goes to that topic (the topic is remembered per message, so
after a restart only the part that replies to the question lands there).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import structlog
from aiohttp import web
from telegram import Bot, BotCommand, Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

from bus import (
    Attachment,
    ButtonRows,
    InboundMessage,
    InboundRefused,
    InboundSender,
    OutboundMessage,
    PipeClosed,
)
from channels.base import PROBE_TIMEOUT_S
from channels.buttons import TAP_NOT_AVAILABLE, ButtonLimits
from channels.errors import AuthError, ChannelError, FatalChannelError, TransientError
from channels.health import ChannelHealth
from channels.lifecycle.bounded import RecentMap
from channels.lifecycle.run_state import RunStateChannel
from channels.media_info import not_downloaded, record_details
from channels.retry import Backoff
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS
from channels.telegram.errors import CHANNEL, rejected_token, translate, translated
from channels.telegram.media import MAX_UPLOAD_BYTES, MEDIA_KINDS, download, media_dir, refusal
from channels.telegram.outbound import TelegramSender
from channels.telegram.polling import (
    ALLOWED_UPDATES,
    ALLOWED_WITH_REACTIONS,
    GOODBYE_TIMEOUT_S,
    UpdatePoller,
    UpdatesRequest,
    WebhookReceiver,
)
from channels.telegram.updates import BotIdentity, IncomingMessage, read_update
from config import TelegramConfig

# Telegram's published send rates, which the manager's scheduler keeps every call within.
#
# Telegram Bot FAQ, "My bot is hitting limits, how do I avoid this?"
# (https://core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this): "When sending
# messages inside a particular chat, avoid sending more than one message per second. We may allow
# short bursts that go over this limit, but eventually you'll begin receiving 429 errors. If
# you're sending bulk notifications to multiple users, the API will not allow more than 30
# messages per second or so. ... your bot will not be able to send more than 20 messages per
# minute to the same group." Edits count like messages here: the FAQ does not exempt them, and
# flood waits on edit streams are the most reported failure.
RATE_LIMITS = RateLimits(
    account=Rate(30, 1.0),
    chat=Rate(1, 1.0),
    group=Rate(20, 60.0),
)


def is_group_chat(chat_id: str) -> bool:
    """Groups, supergroups and channels have negative ids; a user's private chat a positive one."""
    return chat_id.startswith("-")


log = structlog.get_logger(__name__)

#: The gateway's commands, as Telegram offers them in the chat's "/" menu.
DEFAULT_COMMANDS: tuple[tuple[str, str], ...] = (
    ("new", "Start a new conversation topic"),
    ("s", "Switch to a topic"),
    ("switch", "Switch to a topic"),
    ("sessions", "List your topics"),
    ("back", "Go back to the previous topic"),
    ("delete", "Delete a topic"),
    ("reset", "Clear the current conversation"),
    ("status", "Show the session's status"),
    ("help", "Show what the bot can do"),
    ("stop", "Stop the current reply"),
)

_CONNECT_TIMEOUT_S = 30.0
_SHUTDOWN_WAIT_S = 2.0
_DOWNLOAD_TIMEOUT_S = 60.0


class TelegramChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit = PLATFORM_LIMITS["telegram"]
    #: An image over the 10 MB of `sendPhoto` goes as a document: one limit for every kind.
    max_upload_bytes = MAX_UPLOAD_BYTES
    edit_interval_s = 1.0
    buttons_shown = "attached"
    # Telegram documents callback_data's 1-64 bytes, and no label limit: what its apps show
    # well is a few short buttons a row.
    button_limits = ButtonLimits(max_rows=8, max_per_row=8, max_label=64)

    def __init__(
        self,
        config: TelegramConfig,
        *,
        data_dir: Path,
        commands: Sequence[tuple[str, str]] = DEFAULT_COMMANDS,
        backoff: Backoff | None = None,
        inbound_reactions: bool = False,
    ) -> None:
        self._config = config
        self._allowed_updates = ALLOWED_WITH_REACTIONS if inbound_reactions else ALLOWED_UPDATES
        self._data_dir = data_dir
        self._commands = tuple(commands)
        self._updates_request = UpdatesRequest(
            connection_pool_size=1, read_timeout=10.0, connect_timeout=10.0, pool_timeout=5.0
        )
        self._request = HTTPXRequest(
            connection_pool_size=32,
            read_timeout=20.0,
            write_timeout=20.0,
            connect_timeout=10.0,
            pool_timeout=5.0,
            media_write_timeout=60.0,
        )
        self._bot = Bot(
            config.token.get_secret_value(),
            base_url=config.base_url,
            base_file_url=config.base_file_url,
            request=self._request,
            get_updates_request=self._updates_request,
        )
        self._sender = TelegramSender(self._bot, config.parse_mode)
        #: (chat, message id) -> the forum topic the message was asked in.
        self._topics: RecentMap[tuple[str, str], int] = RecentMap(10_000)
        # A webhook is taken only once getMe answered; a poller in a cluster may wait for its
        # lease for good (another process polls), which is no reason to be unready.
        super().__init__(
            ChannelHealth.starting("getMe has not answered yet")
            if config.mode == "webhook"
            else ChannelHealth.unknown()
        )
        self._poller = UpdatePoller(
            self._bot,
            self._updates_request,
            poll_timeout_s=config.poll_timeout_s,
            backoff=backoff or Backoff(),
            on_health=self._run_state.report,
            allowed_updates=self._allowed_updates,
        )
        secret = config.secret_token.get_secret_value() if config.secret_token else None
        self._receiver = WebhookReceiver(self._bot, secret)
        self._identity: BotIdentity | None = None
        #: The HTTP clients are shut down (by the first `stop()`).
        self._closed = False

    @property
    def single_poller(self) -> bool:
        # One getUpdates at a time per bot (a second gets 409); webhooks go to any process.
        return self._config.mode == "polling"

    # Receiving

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run(self._receive(inbound))

    async def _receive(self, inbound: InboundSender) -> None:
        """getMe, then updates until `stop()`: the poller confirms its offset, a webhook is
        deleted, before this returns."""
        try:
            await self._connect()
            if self._config.mode == "webhook":
                # Healthy since getMe answered: updates are taken from now on (reading one
                # needs the bot's identity), also while the webhook is being set.
                self._receiver.handle = partial(self._handle_update, inbound)
                self._run_state.receiving.set()
            await self._publish_commands()
            if self._config.mode == "webhook":
                await self._serve_webhook()
            else:
                await self._poll(inbound)
        finally:
            self._receiver.handle = None

    async def _connect(self) -> None:
        try:
            async with asyncio.timeout(_CONNECT_TIMEOUT_S):
                await self._bot.initialize()
        except TimeoutError as exc:
            self._run_state.report(ChannelHealth.degraded("getMe timed out"))
            raise TransientError(
                f"getMe took over {_CONNECT_TIMEOUT_S} s", channel=CHANNEL
            ) from exc
        except TelegramError as exc:
            if (rejected := rejected_token(exc, FatalChannelError)) is not None:
                raise rejected from None
            self._run_state.report(ChannelHealth.degraded(f"getMe failed: {exc.message}"))
            raise translate(exc, "getMe") from exc
        self._identity = BotIdentity(self._bot.id, self._bot.username)
        self._run_state.report(ChannelHealth.healthy())
        log.info("telegram.connected", bot=self._bot.username, mode=self._config.mode)

    async def _publish_commands(self) -> None:
        commands = [BotCommand(command, text) for command, text in self._commands]
        try:
            with translated("setMyCommands"):
                await self._bot.set_my_commands(commands)
        except ChannelError as exc:
            # The "/" menu is a convenience; the bot works without it.
            log.warning("telegram.commands_not_published", error=str(exc))

    async def _poll(self, inbound: InboundSender) -> None:
        with translated("deleteWebhook"):
            # A webhook left from an earlier run makes every getUpdates fail with 409.
            await self._bot.delete_webhook(drop_pending_updates=False)
        self._run_state.receiving.set()
        try:
            await self._poller.run(partial(self._handle_update, inbound), self._run_state.stopping)
        finally:
            await self._poller.confirm()

    async def _serve_webhook(self) -> None:
        if not self._config.webhook_url:
            raise FatalChannelError(
                "webhook mode without webhook_url", channel=CHANNEL, suggestion="set webhook_url"
            )
        secret = self._config.secret_token
        if secret is None:  # the config model requires it; a hand-built config may not
            raise FatalChannelError(
                "webhook mode without secret_token", channel=CHANNEL, suggestion="set secret_token"
            )
        with translated("setWebhook"):
            await self._bot.set_webhook(
                self._config.webhook_url,
                secret_token=secret.get_secret_value(),
                allowed_updates=self._allowed_updates,
            )
        try:
            await self._run_state.stopping.wait()
        finally:
            self._receiver.handle = None
            await self._delete_webhook()

    async def _delete_webhook(self) -> None:
        try:
            async with asyncio.timeout(GOODBYE_TIMEOUT_S):
                await self._bot.delete_webhook()
        except (TelegramError, TimeoutError) as exc:
            log.warning("telegram.webhook_not_deleted", error=repr(exc))

    async def _handle_update(self, inbound: InboundSender, update: Update) -> None:
        identity = self._identity
        if identity is None:
            raise RuntimeError("updates arrive only after getMe")
        try:
            incoming = read_update(update, identity, require_mention=self._config.require_mention)
            if incoming is None:
                log.debug("telegram.update_ignored", update_id=update.update_id)
                if update.callback_query is not None:
                    # No button of the bot's message as Telegram has it now sent this: its
                    # keyboard was taken off (used), or the query is not the bot's.
                    await self._sender.answer_tap(update.callback_query.id, TAP_NOT_AVAILABLE)
                return
            message = await self._download_media(incoming) if incoming.media else incoming.message
            await inbound.send(message)
            topic = message.metadata.get("message_thread_id")
            if isinstance(topic, int) and message.message_id is not None:
                self._topics.remember((message.chat_id, message.message_id), topic)
            if incoming.callback_query_id is not None:
                # Durable now: the spinner stops, whatever the agent takes to answer.
                await self._sender.answer_tap(incoming.callback_query_id)
        except (PipeClosed, InboundRefused):
            raise  # nothing was stored: the update must be offered again, not acknowledged
        except Exception:  # supervision point: one update must not stop the channel
            log.exception("telegram.update_failed", update_id=update.update_id)

    async def _download_media(self, incoming: IncomingMessage) -> InboundMessage:
        """The message with its files downloaded, and those that could not be named in its
        text. A stranger's files are not fetched: the dispatcher will refuse the message."""
        message = incoming.message
        if not self.is_allowed(message.sender_id):
            return message
        directory = media_dir(self._data_dir, message.chat_id)
        message_id = int(message.metadata["telegram_message_id"])
        paths: list[str] = []
        placeholders: list[str] = []
        for ref in incoming.media:
            kind = MEDIA_KINDS.get(ref.kind, "file")
            reason = refusal(ref, self.max_media_bytes)
            if reason is None:
                try:
                    path = await download(
                        self._bot,
                        ref,
                        directory,
                        message_id,
                        timeout_s=_DOWNLOAD_TIMEOUT_S,
                        max_bytes=self.max_media_bytes,
                    )
                except ChannelError as exc:
                    reason = str(exc.args[0]) if exc.args else str(exc)
                else:
                    paths.append(str(path))
                    record_details(
                        message.metadata,
                        str(path),
                        name=ref.file_name,
                        mime=ref.mime_type,
                        duration_s=ref.duration,
                    )
                    continue
            placeholders.append(
                not_downloaded(
                    message, kind=kind, name=ref.file_name, size=ref.file_size, reason=reason
                )
            )
        return incoming.with_files(paths, placeholders)

    async def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Let a running start() confirm its offset before the HTTP clients close.
        await self._run_state.stop_within(_SHUTDOWN_WAIT_S, channel=CHANNEL)
        await self._bot.shutdown()
        await asyncio.gather(self._updates_request.shutdown(), self._request.shutdown())

    def web_routes(self) -> Sequence[web.AbstractRouteDef]:
        if self._config.mode != "webhook":
            return ()
        return (web.post(self._config.webhook_path, self._receiver.handle_request),)

    async def probe(self) -> str | None:
        """getMe: who the token belongs to (`doctor`); AuthError when Telegram refuses it."""
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                me = await self._bot.get_me()
        except TimeoutError as exc:
            raise TransientError(
                f"getMe took over {PROBE_TIMEOUT_S} s",
                channel=CHANNEL,
                suggestion="check that base_url is reachable from this machine",
            ) from exc
        except TelegramError as exc:
            if (rejected := rejected_token(exc, AuthError)) is not None:
                raise rejected from None
            raise translate(exc, "getMe") from None
        return f"@{me.username} (id {me.id})"

    # Sending

    def is_group_chat(self, chat_id: str) -> bool:
        return is_group_chat(chat_id)

    def supports_edit(self) -> bool:
        return True

    def format_outbound(self, content: str) -> str:
        return self._sender.format(content)

    async def send(self, message: OutboundMessage) -> None:
        await self.send_with_id(message)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        return await self._sender.send(
            message, self._topic_of(message.chat_id, message.answered_ids())
        )

    def _topic_of(self, chat_id: str, answered: Sequence[str]) -> int | None:
        """The forum topic of the first message answered that was asked in one."""
        for message_id in answered:
            topic = self._topics.get((chat_id, message_id))
            if topic is not None:
                return topic
        return None

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        topic = self._topic_of(chat_id, [reply_to] if reply_to else [])
        return await self._sender.send_attachment(chat_id, attachment, reply_to, topic)

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        await self._sender.edit(chat_id, message_id, content)

    async def delete_message(self, chat_id: str, message_id: str) -> None:
        await self._sender.delete(chat_id, message_id)

    async def send_typing(self, chat_id: str) -> None:
        await self._sender.chat_action(chat_id, "typing")

    async def send_listening(self, chat_id: str) -> None:
        await self._sender.chat_action(chat_id, "record_voice")

    async def attach_buttons(self, chat_id: str, message_id: str, buttons: ButtonRows) -> None:
        await self._sender.attach_buttons(chat_id, message_id, buttons)

    async def remove_buttons(self, chat_id: str, message_id: str) -> None:
        await self._sender.remove_buttons(chat_id, message_id)

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        await self._sender.react(chat_id, message_id, emoji)

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        await self._sender.react(chat_id, message_id, None)
