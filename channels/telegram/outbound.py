"""Everything the bot says: messages, files, edits of streamed replies, typing, reactions,
inline buttons and the answers to their taps.

Each call is one Bot API request whose failure is translated into a channel error; the channel
manager decides about retries. Text marked as formatted (or recognised as this channel's own
rendering) is sent with the configured parse mode, anything else as plain text.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Literal

import structlog
from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InputFile,
    Message,
    ReactionTypeEmoji,
    ReplyParameters,
)
from telegram.constants import ChatAction, ParseMode
from telegram.error import TelegramError

from bus import Attachment, ButtonRows, OutboundMessage
from channels.base import FORMATTED
from channels.errors import FormattingRejected
from channels.markup.telegram import ParseModeName, render
from channels.media_files import read_file
from channels.split.limits import utf16_units
from channels.telegram.errors import translated
from channels.telegram.media import MAX_PHOTO_BYTES, MAX_UPLOAD_BYTES, Upload, load_upload

log = structlog.get_logger(__name__)

#: Telegram's limit for a photo or document caption, in UTF-16 units.
CAPTION_LIMIT = 1024
#: What `sendVoice` takes (OGG with Opus); other audio goes by `sendAudio`.
VOICE_MIMES = frozenset({"audio/ogg", "audio/opus"})
_PARSE_MODES: dict[ParseModeName, str | None] = {
    "html": ParseMode.HTML,
    "markdownv2": ParseMode.MARKDOWN_V2,
    "none": None,
}


class RenderedTexts:
    """Texts this channel rendered lately, each with its Markdown source.

    An edit carries no "formatted" flag, so an edited text is either the manager's rendering
    (from `format_outbound`) or raw Markdown; remembering renderings tells the two apart, and
    gives the source back when Telegram refuses the markup.
    """

    def __init__(self, capacity: int = 256) -> None:
        self._capacity = capacity
        self._sources: OrderedDict[bytes, str] = OrderedDict()

    @staticmethod
    def _key(rendered: str) -> bytes:
        return hashlib.blake2b(rendered.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def remember(self, rendered: str, source: str) -> None:
        key = self._key(rendered)
        self._sources[key] = source
        self._sources.move_to_end(key)
        while len(self._sources) > self._capacity:
            self._sources.popitem(last=False)

    def source_of(self, text: str) -> str | None:
        return self._sources.get(self._key(text))


def chat_ref(chat_id: str) -> int | str:
    """Telegram takes numeric chat ids, or `@channelname` for public channels."""
    try:
        return int(chat_id)
    except ValueError:
        return chat_id


def telegram_message_id(message_id: str) -> int:
    """A Telegram message id from ours: `"42"` or the inbound dedup form `"<chat>:42"`."""
    return int(message_id.rsplit(":", 1)[-1])


class TelegramSender:
    def __init__(self, bot: Bot, parse_mode: ParseModeName) -> None:
        self._bot = bot
        self._mode: ParseModeName = parse_mode
        self._parse_mode = _PARSE_MODES[parse_mode]
        self._rendered = RenderedTexts()

    def format(self, markdown: str) -> str:
        rendered = render(markdown, self._mode)
        if not rendered.strip():
            # Markup around nothing (an empty code block): the source says more than nothing.
            return markdown
        if rendered != markdown:
            self._rendered.remember(rendered, markdown)
        return rendered

    async def send(self, message: OutboundMessage, topic: int | None = None) -> str | None:
        """Deliver a message that already fits; the id of the message holding its text. In a
        forum it goes to `topic` (a message that is no reply would land in General)."""
        parse_mode = self._parse_mode if message.metadata.get(FORMATTED) else None
        reply = _reply_parameters(message.reply_to)
        if message.media:
            return await self._send_media(message, parse_mode, reply, topic)
        if not message.content.strip():
            log.debug("telegram.empty_message_skipped", chat_id=message.chat_id)
            return None
        sent = await self._send_text(message.chat_id, message.content, parse_mode, reply, topic)
        return str(sent.message_id)

    async def _send_text(
        self,
        chat_id: str,
        text: str,
        parse_mode: str | None,
        reply: ReplyParameters | None,
        topic: int | None,
    ) -> Message:
        with translated("sendMessage"):
            return await self._bot.send_message(
                chat_ref(chat_id),
                text,
                parse_mode=parse_mode,
                reply_parameters=reply,
                message_thread_id=topic,
            )

    async def _send_media(
        self,
        message: OutboundMessage,
        parse_mode: str | None,
        reply: ReplyParameters | None,
        topic: int | None,
    ) -> str | None:
        caption = message.content if message.content.strip() else None
        text_id: str | None = None
        if caption is not None and utf16_units(caption) > CAPTION_LIMIT:
            sent = await self._send_text(message.chat_id, caption, parse_mode, reply, topic)
            text_id, caption, reply = str(sent.message_id), None, None
        holder = text_id
        for path in message.media:
            upload = await load_upload(path)
            sent = await self._send_file(message.chat_id, upload, caption, parse_mode, reply, topic)
            # Without a text message of its own, the first file carries the caption.
            holder = holder or str(sent.message_id)
            caption, reply = None, None
        return holder

    async def _send_file(
        self,
        chat_id: str,
        upload: Upload,
        caption: str | None,
        parse_mode: str | None,
        reply: ReplyParameters | None,
        topic: int | None,
    ) -> Message:
        # A photo is shown inline; anything else goes as a document (Telegram's two methods
        # take the same arguments).
        method, send = (
            ("sendPhoto", self._bot.send_photo)
            if upload.as_photo
            else ("sendDocument", self._bot.send_document)
        )
        with translated(method):
            return await send(
                chat_ref(chat_id),
                upload.file,
                caption=caption,
                parse_mode=parse_mode if caption else None,
                reply_parameters=reply,
                message_thread_id=topic,
            )

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, reply_to: str | None, topic: int | None
    ) -> str:
        """One file of a reply, by its kind: a photo (`sendPhoto`, up to 10 MB), a voice note
        (`sendVoice`, OGG/Opus), audio, video, anything else as a document."""
        data = await read_file(
            attachment.path,
            channel="telegram",
            max_bytes=MAX_UPLOAD_BYTES,
            limit_note="the Bot API takes files up to 50 MB",
        )
        upload = InputFile(data, filename=attachment.name)
        caption = attachment.caption[:CAPTION_LIMIT] or None
        reply = _reply_parameters(reply_to)
        target = chat_ref(chat_id)
        bot = self._bot
        # The five methods take the chat, the file (positional) and the same options.
        send: Callable[..., Awaitable[Message]]
        if attachment.kind == "image" and len(data) <= MAX_PHOTO_BYTES:
            method, send = "sendPhoto", bot.send_photo
        elif attachment.kind == "audio" and attachment.mime in VOICE_MIMES:
            method, send = "sendVoice", bot.send_voice
        elif attachment.kind == "audio":
            method, send = "sendAudio", bot.send_audio
        elif attachment.kind == "video":
            method, send = "sendVideo", bot.send_video
        else:
            method, send = "sendDocument", bot.send_document
        with translated(method):
            sent = await send(
                target, upload, caption=caption, reply_parameters=reply, message_thread_id=topic
            )
        return str(sent.message_id)

    async def edit(self, chat_id: str, message_id: str, content: str) -> None:
        """Replace a streamed message's text: Markdown, or this channel's own rendering of it."""
        if not content.strip():
            return
        source = self._rendered.source_of(content)
        if source is not None or self._parse_mode is None:
            text, fallback = content, source
        else:
            text, fallback = self.format(content), content
        try:
            await self._edit_text(chat_id, message_id, text, self._parse_mode)
        except FormattingRejected:
            if self._parse_mode is None or fallback is None:
                raise
            # The edit API has no "send it plain" flag for the manager to flip: do it here.
            log.warning("telegram.edit_markup_rejected", chat_id=chat_id, message_id=message_id)
            await self._edit_text(chat_id, message_id, fallback, None)

    async def _edit_text(
        self, chat_id: str, message_id: str, text: str, parse_mode: str | None
    ) -> None:
        with translated("editMessageText"):
            await self._bot.edit_message_text(
                text,
                chat_id=chat_ref(chat_id),
                message_id=telegram_message_id(message_id),
                parse_mode=parse_mode,
            )

    async def delete(self, chat_id: str, message_id: str) -> None:
        with translated("deleteMessage"):
            await self._bot.delete_message(chat_ref(chat_id), telegram_message_id(message_id))

    async def react(self, chat_id: str, message_id: str, emoji: str | None) -> None:
        """Set the bot's reaction (Telegram allows one per bot); None takes it back."""
        reaction = [ReactionTypeEmoji(emoji)] if emoji else []
        with translated("setMessageReaction"):
            await self._bot.set_message_reaction(
                chat_ref(chat_id), telegram_message_id(message_id), reaction
            )

    async def attach_buttons(self, chat_id: str, message_id: str, buttons: ButtonRows) -> None:
        """Put an inline keyboard under the bot's message (`editMessageReplyMarkup`)."""
        markup = InlineKeyboardMarkup(
            [
                [
                    InlineKeyboardButton(button.text, url=button.url)
                    if button.url is not None
                    else InlineKeyboardButton(button.text, callback_data=button.data)
                    for button in row
                ]
                for row in buttons
            ]
        )
        with translated("editMessageReplyMarkup"):
            await self._bot.edit_message_reply_markup(
                chat_ref(chat_id), telegram_message_id(message_id), reply_markup=markup
            )

    async def remove_buttons(self, chat_id: str, message_id: str) -> None:
        """The keyboard taken off (`editMessageReplyMarkup` without one)."""
        with translated("editMessageReplyMarkup"):
            await self._bot.edit_message_reply_markup(
                chat_ref(chat_id), telegram_message_id(message_id)
            )

    async def answer_tap(self, query_id: str, notice: str | None = None) -> None:
        """`answerCallbackQuery`: the spinner on the tapped button stops (`notice` shown as a
        toast). A query answered before (a redelivered update) or too old is refused by
        Telegram; nothing to do then."""
        try:
            await self._bot.answer_callback_query(query_id, text=notice)
        except TelegramError as error:
            log.info("telegram.tap_not_answered", query_id=query_id, error=error.message)

    async def chat_action(
        self, chat_id: str, action: Literal["typing", "record_voice"] = "typing"
    ) -> None:
        with translated("sendChatAction"):
            await self._bot.send_chat_action(chat_ref(chat_id), ChatAction(action))


def _reply_parameters(reply_to: str | None) -> ReplyParameters | None:
    if not reply_to:
        return None
    try:
        message_id = telegram_message_id(reply_to)
    except ValueError:
        log.debug("telegram.reply_to_ignored", reply_to=reply_to)
        return None
    # A reply to a message deleted in the meantime is sent as a plain message, not refused.
    return ReplyParameters(message_id, allow_sending_without_reply=True)
