"""The Feishu/Lark channel: events over the long connection or a webhook, replies as cards.

`start()` fetches a tenant access token and the bot's identity (`bot/v3/info`: its open id
tells a mention of the bot apart; refused credentials are fatal), then receives: over the
long connection (`longconn.py`, the default: no public URL needed) or through the daemon's
HTTP server (`webhook.py`). Either way an event reaches `_take`, which reads the message and
hands it to the gateway; the platform is acknowledged after that returns. A photo, file, voice
note or video of an allowed sender is downloaded first (`channels.media_files.MediaIntake`) to
`{data_dir}/media/feishu/<chat_id>/`.

Replies are interactive cards with one Markdown element and `update_multi`, so a streamed
reply is shown growing by updating the card (PATCH, at most 5 a second per message). A reply's
buttons are put on its last card by updating it (an `action` element a row; a button's value
`{"data", "text"}`, a link a `url` button) and taken off the same way once tapped; a tap is a
`card.action.trigger` callback, answered once it is durable. A reply's image is uploaded
(im/v1/images) and sent as an `image` message by its `image_key`; any other file, or an image
too large for that, by im/v1/files as a `file` message.

A reaction is im/v1/messages/{id}/reactions with Feishu's emoji type ("THUMBSUP"), taken back
by deleting it by the reaction id its creation answered with. The gateway names a user's
message by its event id (the dedup key), so the message id of each is remembered to react to.

With the profile's `inbound_reactions`, a user's reaction to one of the bot's messages
(`im.message.reaction.created_v1`, which names neither the chat nor the message's author) is
passed on: the chat of each message the bot sent is remembered, and a message not remembered
(sent before a restart, or someone else's) is looked up once (im/v1/messages/{id}: its chat and
sender). Without the setting reactions are dropped here, and nothing is looked up.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import structlog
from aiohttp import web

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
from channels.buttons import ButtonLimits
from channels.errors import (
    AuthError,
    ChannelError,
    FatalChannelError,
    RateLimited,
    TransientError,
)
from channels.feishu.api import CHANNEL, FeishuApi
from channels.feishu.events import (
    EventEnvelope,
    MalformedEvent,
    Reaction,
    Received,
    read_envelope,
    read_message,
    read_reaction,
    read_recall,
)
from channels.feishu.longconn import RECONNECT, LongConnection
from channels.feishu.webhook import WebhookReceiver
from channels.lifecycle.bounded import RecentMap
from channels.lifecycle.reconnect import ReconnectPolicy
from channels.lifecycle.run_state import RunStateChannel
from channels.media_files import MediaStore, read_file, safe_file_name
from channels.retry.pacing import Rate, RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.web.webhook import UnreadableJson, json_payload
from config import FeishuConfig

# Replies as interactive cards: one Markdown element, `update_multi` so the card can be
# updated in place (a streamed reply) for everyone in the chat.
#: Feishu keeps a message `uuid` for an hour and sends the same uuid only once (at most 50).
UUID_CHARS = 50


def card(text: str, buttons: Sequence[Sequence[Button]] = ()) -> dict[str, Any]:
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": text}]
    elements.extend(
        {"tag": "action", "actions": [card_button(button) for button in row]} for row in buttons
    )
    return {"config": {"wide_screen_mode": True, "update_multi": True}, "elements": elements}


def card_button(button: Button) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "tag": "button",
        "text": {"tag": "plain_text", "content": button.text},
        "type": "default",
    }
    if button.url is not None and button.data is None:
        shown["url"] = button.url
    else:
        shown["value"] = {"data": button.data, "text": button.text}
    return shown


def card_content(text: str, buttons: Sequence[Sequence[Button]] = ()) -> str:
    """The card as the stringified JSON Feishu's `content` field takes (UTF-8 kept as is, so a
    CJK character costs its 3 bytes, not a 6-byte escape)."""
    return json.dumps(card(text, buttons), ensure_ascii=False, separators=(",", ":"))


#: Cards whose text the channel remembers, to put buttons on them and take them off again.
REMEMBERED_CARDS = 10_000
#: The wait a reaction's refusal names when its message could not be looked up for a passing
#: reason: Feishu delivers an unanswered event again after 5 s at the soonest anyway.
LOOKUP_RETRY_S = 5.0
#: Feishu's card buttons: a few to a row reads well on a phone; labels stay short.
CARD_BUTTON_LIMITS = ButtonLimits(max_rows=5, max_per_row=5, max_label=40)


# Feishu open platform, "上传图片" (im/v1/images): JPG, PNG, WEBP, GIF, BMP, ICO, TIFF, HEIC
# up to 10 MB; "上传文件" (im/v1/files): any file up to 30 MB, its `file_type` one of opus, mp4,
# pdf, doc, xls, ppt, else stream. A larger image goes as a file.
MB = 1024 * 1024
MAX_IMAGE_BYTES = 10 * MB
MAX_FILE_BYTES = 30 * MB
IMAGE_TYPES = frozenset(
    {
        "image/jpeg",
        "image/png",
        "image/webp",
        "image/gif",
        "image/bmp",
        "image/x-icon",
        "image/vnd.microsoft.icon",
        "image/tiff",
        "image/heic",
    }
)
FILE_TYPES = {
    "application/pdf": "pdf",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "doc",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xls",
    "application/vnd.ms-powerpoint": "ppt",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "ppt",
}


def request_uuid(delivery_id: str | None, content: str) -> str:
    """Idempotency key of one message: stable across resends of the same delivery (each chunk
    of a reply has its own), fresh when the gateway gave no delivery id."""
    if delivery_id is None:
        return uuid.uuid4().hex
    digest = hashlib.sha256(f"{delivery_id}\0{content}".encode()).hexdigest()
    return digest[:UUID_CHARS]


# Feishu's (and Lark's) published send rates, which the manager's scheduler keeps every call
# within.
#
# Feishu open platform, im/v1/messages create ("发送消息",
# https://open.feishu.cn/document/server-docs/im-v1/message/create): "向同一用户发送消息的限频为
# 5 QPS、向同一群组发送消息的限频为群内机器人共享 5 QPS" (5 a second to one user, 5 a second to one
# group, shared by its bots), and the API's own level "1000 次/分钟、50 次/秒"
# (https://open.feishu.cn/document/server-docs/api-call-guide/frequency-control): 16 a second
# keeps under both 1,000 a minute and 50 in any second.
RATE_LIMITS = RateLimits(account=Rate(16, 1.0), chat=Rate(5, 1.0))

#: The message resource API serves files of at most 100 MB.
MAX_RESOURCE_BYTES = 100 * 1024 * 1024


log = structlog.get_logger(__name__)


#: Feishu refuses card request bodies over 30 KB, and the card's text is JSON-escaped twice on
#: the way (the card is a string inside the request): a newline costs 3 bytes there, a quote 4.
#: The 30,000 bytes of `PLATFORM_LIMITS["feishu"]` leave no room for that, so cards carry at
#: most two thirds of it.
CARD_TEXT_LIMIT = PlatformLimit(PLATFORM_LIMITS["feishu"].max_units * 2 // 3, "bytes")


class FeishuChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = CARD_TEXT_LIMIT
    max_upload_bytes = MAX_FILE_BYTES
    #: Feishu allows 5 card updates a second per message; 4 leaves room for clock skew.
    edit_interval_s: ClassVar[float] = 0.25
    buttons_shown = "attached"
    button_limits = CARD_BUTTON_LIMITS

    def __init__(
        self,
        config: FeishuConfig,
        *,
        data_dir: Path,
        reconnect: ReconnectPolicy = RECONNECT,
        inbound_reactions: bool = False,
    ) -> None:
        self._config = config
        self._inbound_reactions = inbound_reactions
        self._api = FeishuApi(config.base_url, config.app_id, config.app_secret.get_secret_value())
        self._media = MediaStore(data_dir, CHANNEL, max_bytes=MAX_RESOURCE_BYTES)
        self._bot_open_id: str | None = None
        self._inbound: InboundSender | None = None
        #: message id -> the text its card shows (a card is updated whole).
        self._card_texts: RecentMap[str, str] = RecentMap(REMEMBERED_CARDS)
        #: (chat, Feishu message id) -> (its event id, its sender), for the messages passed on
        #: lately: a recall names the Feishu id and no sender, the gateway knows the event id.
        self._passed: RecentMap[tuple[str, str], tuple[str, str]] = RecentMap(REMEMBERED_CARDS)
        #: (message id, emoji) -> the id of the bot's reaction there, to delete it by.
        self._reaction_ids: RecentMap[tuple[str, str], str] = RecentMap(REMEMBERED_CARDS)
        #: event id of a user's message -> its message id (`om_...`).
        self._message_ids: RecentMap[str, str] = RecentMap(REMEMBERED_CARDS)
        #: Feishu message id -> the chat of the bot's message, or None for a message looked
        #: up and found to be someone else's: what a user's reaction to it needs to know.
        self._bot_messages: RecentMap[str, str | None] = RecentMap(REMEMBERED_CARDS)
        # Starting until events are taken (the bot's identity is needed to read a group
        # message); the long connection reports itself from then on.
        super().__init__()
        self.connection = LongConnection(
            self._api,
            self._take_frame,
            on_health=self._run_state.report,
            reconnect=reconnect,
            connected=self._run_state.receiving,
        )
        self._receiver: WebhookReceiver | None = None
        if config.mode == "webhook":
            if config.encrypt_key is None or config.verification_token is None:
                raise ValueError("webhook mode needs encrypt_key and verification_token")
            self._receiver = WebhookReceiver(
                config.encrypt_key.get_secret_value(),
                config.verification_token.get_secret_value(),
            )

    # Receiving

    async def start(self, inbound: InboundSender) -> None:
        await self._run_state.run_until_stopped(self._receive(inbound), name="feishu-receive")

    async def _receive(self, inbound: InboundSender) -> None:
        """The bot's identity, then events (webhooks, or the long connection: receiving
        while it is connected) until `stop()`; refused credentials are fatal."""
        try:
            await self._identify()
        except AuthError as exc:
            raise self._refused(exc) from exc
        self._inbound = inbound
        try:
            if self._receiver is not None:
                self._receiver.handle = self._take
                self._run_state.receiving.set()
                log.info("feishu.receiving", mode="webhook", path=self._config.webhook_path)
                await self._run_state.stopping.wait()
            else:
                await self.connection.run(self._run_state.stopping)
        finally:
            if self._receiver is not None:
                self._receiver.handle = None
            self._inbound = None

    def _refused(self, exc: AuthError) -> FatalChannelError:
        return self._run_state.refused(
            "Feishu refused the app credentials",
            exc,
            channel=CHANNEL,
            suggestion=exc.suggestion or "check app_id and app_secret",
        )

    async def _identify(self) -> str:
        name, self._bot_open_id = await bot_identity(self._api)
        return f"{name} ({self._bot_open_id})"

    async def _take(self, envelope: EventEnvelope) -> None:
        """Hand one event's message to the gateway; returns once it is durable."""
        inbound = self._inbound
        if inbound is None:
            raise PipeClosed("the Feishu channel is not receiving")
        recalled = read_recall(envelope)
        if recalled is not None:
            await self._take_recall(inbound, *recalled)
            return
        reaction = read_reaction(envelope)
        if reaction is not None:
            await self._take_reaction(inbound, reaction)
            return
        received = read_message(
            envelope, self._bot_open_id, require_mention=self._config.require_mention
        )
        if received is None:
            log.debug("feishu.event_ignored", event_type=envelope.event_type)
            return
        message = await self._with_file(received)
        await inbound.send(message)
        feishu_id = message.metadata.get("feishu_message_id")
        if isinstance(feishu_id, str) and message.message_id is not None:
            self._message_ids.remember(message.message_id, feishu_id)
            passed = (message.message_id, message.sender_id)
            self._passed.remember((message.chat_id, feishu_id), passed)

    async def _take_recall(self, inbound: InboundSender, chat_id: str, feishu_id: str) -> None:
        """A recall as a delete of the message it names, when this channel passed it on."""
        passed = self._passed.get((chat_id, feishu_id))
        if passed is None:
            log.info("feishu.recall_of_unknown_message", chat_id=chat_id, message_id=feishu_id)
            return
        original, sender_id = passed
        await inbound.send(InboundMessage.deletion(CHANNEL, sender_id, chat_id, original))

    async def _take_reaction(self, inbound: InboundSender, reaction: Reaction) -> None:
        """A user's reaction to one of the bot's messages, passed on with the profile's
        `inbound_reactions`; a reaction to someone else's message is not for the agent."""
        if not self._inbound_reactions:
            log.debug("feishu.reaction_ignored", reason="inbound_reactions")
            return
        chat_id = await self._chat_of_bot_message(reaction.message_id)
        if chat_id is None:
            log.debug("feishu.reaction_not_on_bot_message", message_id=reaction.message_id)
            return
        await inbound.send(reaction.message(chat_id, emoji_of_type(reaction.emoji_type)))

    async def _chat_of_bot_message(self, message_id: str) -> str | None:
        """The chat of the bot's message `message_id`; None when it is someone else's, or
        Feishu will not show it (deleted, in a chat the bot left, or a group message without
        the scope to read it). A failure that can pass refuses the event (`InboundRefused`),
        so Feishu delivers it again."""
        if message_id in self._bot_messages:
            return self._bot_messages[message_id]
        try:
            body = await self._api.call(
                "GET",
                f"/open-apis/im/v1/messages/{quote(message_id, safe='')}",
                "im/v1/messages GET",
            )
        except RateLimited as exc:
            raise InboundRefused("global", exc.retry_after_s, str(exc)) from exc
        except TransientError as exc:
            raise InboundRefused("global", LOOKUP_RETRY_S, str(exc)) from exc
        except ChannelError as exc:
            log.info("feishu.reacted_message_unreadable", message_id=message_id, error=str(exc))
            self._bot_messages.remember(message_id, None)
            return None
        chat_id = bot_message_chat(body, self._config.app_id)
        self._bot_messages.remember(message_id, chat_id)
        return chat_id

    async def _with_file(self, received: Received) -> InboundMessage:
        """The message with its file downloaded; a stranger's is not (the dispatcher will
        refuse the message): the kind alone stands for what was sent."""
        message, resource = received.message, received.resource
        if resource is None:
            return message
        if not self.is_allowed(message.sender_id):
            return message.model_copy(update={"content": f"[{resource.kind}]"})
        message_id = str(message.metadata["feishu_message_id"])
        intake = self._media.intake(message, self.max_media_bytes)
        fetch = partial(
            self._api.fetch_resource,
            self._media,
            message_id=message_id,
            key=resource.key,
            resource_type=resource.resource_type,
            chat_id=message.chat_id,
            name=f"{message_id}_{safe_file_name(resource.name or resource.key)}",
            max_bytes=intake.max_bytes,
        )
        await intake.take(
            fetch, name=resource.name, kind=resource.kind, duration_s=resource.duration_s
        )
        return intake.message()

    async def _take_frame(self, payload: bytes) -> bool:
        """An event from the long connection; True once it may be acknowledged."""
        try:
            await self._take(read_envelope(json_payload(payload)))
        except InboundRefused as exc:
            # Not acknowledged: Feishu delivers the event again later.
            log.warning("feishu.event_deferred", retry_after_s=exc.retry_after_s)
            return False
        except (MalformedEvent, UnreadableJson) as exc:
            log.warning("feishu.malformed_event_skipped", error=str(exc))
        except PipeClosed:
            raise
        except Exception:  # supervision point: one event must not end the connection
            # Not acknowledged: Feishu delivers it again (a bounded number of times).
            log.exception("feishu.event_failed")
            return False
        return True

    async def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.handle = None
        await super().stop()
        await self._api.close()

    def web_routes(self) -> Sequence[web.AbstractRouteDef]:
        if self._receiver is None:
            return ()
        return (web.post(self._config.webhook_path, self._receiver.handle_request),)

    async def probe(self) -> str | None:
        # Its own client: a probe neither disturbs nor outlives a running channel's session.
        config = self._config
        api = FeishuApi(config.base_url, config.app_id, config.app_secret.get_secret_value())
        try:
            name, open_id = await bot_identity(api)
        finally:
            await api.close()
        return f"{name} ({open_id})"

    # Sending

    def supports_edit(self) -> bool:
        return True

    async def send(self, message: OutboundMessage) -> None:
        await self.send_with_id(message)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        if not message.content.strip():
            return None
        message_id = await self._create(
            message.chat_id,
            "interactive",
            card_content(message.content),
            request_uuid(message.delivery_id, message.content),
        )
        if message_id is not None:
            # Buttons are put on (and taken off) a card by replacing it whole, text included.
            self._card_texts.remember(message_id, message.content)
        return message_id

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """Upload the file, then send the message naming its key; the message's `uuid` comes
        from `delivery_key`, so a resend within Feishu's hour shows it once (the upload is
        repeated: Feishu has no key for it)."""
        data = await read_file(
            attachment.path,
            channel=CHANNEL,
            max_bytes=MAX_FILE_BYTES,
            limit_note="Feishu takes files up to 30 MB",
        )
        if attachment.mime in IMAGE_TYPES and len(data) <= MAX_IMAGE_BYTES:
            body = await self._api.upload(
                "/open-apis/im/v1/images",
                "im/v1/images",
                {"image_type": "message"},
                file_field="image",
                file_name=attachment.name,
                data=data,
            )
            msg_type, key_name = "image", "image_key"
        else:
            fields = {
                "file_type": FILE_TYPES.get(attachment.mime, "stream"),
                "file_name": attachment.name,
            }
            body = await self._api.upload(
                "/open-apis/im/v1/files",
                "im/v1/files",
                fields,
                file_field="file",
                file_name=attachment.name,
                data=data,
            )
            msg_type, key_name = "file", "file_key"
        uploaded = body.get("data")
        key = uploaded.get(key_name) if isinstance(uploaded, dict) else None
        if not isinstance(key, str):
            raise ChannelError(f"the upload answered without {key_name}", channel=CHANNEL)
        content = json.dumps({key_name: key})
        return await self._create(chat_id, msg_type, content, request_uuid(delivery_key, ""))

    async def _create(self, chat_id: str, msg_type: str, content: str, key: str) -> str | None:
        """im/v1/messages create; the new message's id."""
        body = await self._api.call(
            "POST",
            "/open-apis/im/v1/messages",
            "im/v1/messages",
            params={"receive_id_type": "chat_id"},
            json={"receive_id": chat_id, "msg_type": msg_type, "content": content, "uuid": key},
        )
        data = body.get("data")
        message_id = data.get("message_id") if isinstance(data, dict) else None
        if not isinstance(message_id, str):
            return None
        self._bot_messages.remember(message_id, chat_id)
        return message_id

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        await self._update_card(message_id, content)

    async def attach_buttons(self, chat_id: str, message_id: str, buttons: ButtonRows) -> None:
        text = self._card_texts.get(message_id)
        if text is None:
            raise ChannelError(
                f"the text of card {message_id} is not known to put buttons on", channel=CHANNEL
            )
        await self._update_card(message_id, text, buttons)

    async def remove_buttons(self, chat_id: str, message_id: str) -> None:
        text = self._card_texts.get(message_id)
        if text is None:
            # Sent before a restart: the card keeps its buttons; a second tap is still refused.
            log.info("feishu.buttons_left_on_card", message_id=message_id)
            return
        await self._update_card(message_id, text)

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        kind = emoji_type(emoji)
        if kind is None:
            log.warning("feishu.reaction_unknown", emoji=emoji)
            return
        if (message_id, emoji) in self._reaction_ids:
            return
        target = self._message_ids.get(message_id, message_id)
        if not target.startswith("om_"):
            log.warning("feishu.reaction_target_unknown", message_id=message_id)
            return
        body = await self._api.call(
            "POST",
            f"/open-apis/im/v1/messages/{target}/reactions",
            "im/v1/messages reactions",
            json={"reaction_type": {"emoji_type": kind}},
        )
        data = body.get("data")
        reaction_id = data.get("reaction_id") if isinstance(data, dict) else None
        if isinstance(reaction_id, str):
            self._reaction_ids.remember((message_id, emoji), reaction_id)

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        reaction_id = self._reaction_ids.get((message_id, emoji))
        if reaction_id is None:
            log.warning("feishu.reaction_not_known", message_id=message_id)
            return
        target = self._message_ids.get(message_id, message_id)
        await self._api.call(
            "DELETE",
            f"/open-apis/im/v1/messages/{target}/reactions/{reaction_id}",
            "im/v1/messages reactions DELETE",
        )
        self._reaction_ids.pop((message_id, emoji), None)

    async def _update_card(
        self, message_id: str, text: str, buttons: Sequence[Sequence[Button]] = ()
    ) -> None:
        await self._api.call(
            "PATCH",
            f"/open-apis/im/v1/messages/{message_id}",
            "im/v1/messages PATCH",
            json={"content": card_content(text, buttons)},
        )
        self._card_texts.remember(message_id, text)


#: Feishu names its reactions ("THUMBSUP", not "👍"): the emoji agents react with that have a
#: Feishu counterpart. Feishu has no eyes; its sideways glance stands in for 👀.
_EMOJI_TYPES = {
    "👀": "GLANCE",
    "👍": "THUMBSUP",
    "👎": "ThumbsDown",
    "✅": "DONE",
    "✔️": "CheckMark",
    "❌": "CrossMark",
    "❤️": "HEART",
    "❤": "HEART",
    "🎉": "PARTY",
    "🙏": "THANKS",
    "🔥": "Fire",
    "😂": "LOL",
    "🤔": "THINKING",
    "⏳": "OneSecond",
    "👌": "OK",
    "😀": "SMILE",
    "👏": "APPLAUSE",
    "💪": "MUSCLE",
    "💯": "Hundred",
}


#: Feishu's emoji types back to the emoji agents read; read backwards, so where two emoji share
#: a type the first listed wins ("❤️" over "❤").
_EMOJI_OF_TYPE = {kind: emoji for emoji, kind in reversed(_EMOJI_TYPES.items())}


def emoji_of_type(kind: str) -> str:
    """The emoji of Feishu's emoji type `kind`: its character where one is known here, else
    the type's name as such ("JIAYI")."""
    return _EMOJI_OF_TYPE.get(kind, kind)


def emoji_type(emoji: str) -> str | None:
    """Feishu's emoji type of `emoji`: a known emoji character, or a type name as such
    ("THUMBSUP"); None for a character with no Feishu counterpart here."""
    if emoji in _EMOJI_TYPES:
        return _EMOJI_TYPES[emoji]
    if emoji and all(c.isascii() and (c.isalnum() or c == "_") for c in emoji):
        return emoji
    return None


def bot_message_chat(body: dict[str, Any], app_id: str) -> str | None:
    """The chat of the message in an im/v1/messages GET answer (`data.items[0]`) when the app
    `app_id` sent it; None for another sender's."""
    data = body.get("data")
    items = data.get("items") if isinstance(data, dict) else None
    message = items[0] if isinstance(items, list) and items else None
    if not isinstance(message, dict):
        return None
    sender, chat_id = message.get("sender"), message.get("chat_id")
    if not isinstance(sender, dict) or not isinstance(chat_id, str) or not chat_id:
        return None
    if sender.get("sender_type") != "app" or sender.get("id") != app_id:
        return None
    return chat_id


async def bot_identity(api: FeishuApi) -> tuple[str, str]:
    """The bot's name and open id (`bot/v3/info`)."""
    body = await api.call("GET", "/open-apis/bot/v3/info", "bot/v3/info")
    bot = body.get("bot")
    open_id = bot.get("open_id") if isinstance(bot, dict) else None
    if not isinstance(bot, dict) or not isinstance(open_id, str) or not open_id:
        raise ChannelError("bot/v3/info did not name the bot", channel=CHANNEL)
    return str(bot.get("app_name", "")), open_id
