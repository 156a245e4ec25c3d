"""A Telegram `Update`, read into what the gateway needs to know about a user's message.

Only messages from people, their edits (`edited_message`, an edit of the message it names:
`bus.EDIT`), their taps on the bot's inline buttons (`callback_query`) and, where the profile
asks for them, their reactions (`message_reaction`: `bus.REACTION`, the emoji added) count:
channel posts and other bots are not turns. Telegram tells neither whose message was reacted to
nor its text, so a reaction reads "[reaction 👍 to a message]" here (the channel manager
quotes the text when this process sent the message, `SentTexts`). A reply to a message carries
it quoted (`bus.REPLY_TO`). Telegram tells a bot of no deletes. In a group with
`require_mention`, a message goes through only when it is addressed to the bot (an @mention, a
command for it, or a reply to one of its messages). The bot's own mention is cut out of the text
in every chat. Entity offsets are in UTF-16 code units, as Telegram counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from telegram import (
    CallbackQuery,
    Message,
    MessageEntity,
    MessageReactionUpdated,
    ReactionTypeEmoji,
    TelegramObject,
    Update,
    User,
)
from telegram.constants import ChatType

from bus import EDIT, REACTION, REPLY_TO, InboundMessage, quoted, reaction_note
from channels.buttons import tap_metadata
from channels.media_info import with_placeholders

CHANNEL = "telegram"
_GROUP_TYPES = frozenset({ChatType.GROUP, ChatType.SUPERGROUP})


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is, from getMe: mentions and replies are matched against it."""

    id: int
    username: str


@dataclass(frozen=True, slots=True)
class MediaRef:
    """A file attached to a message, still on Telegram's servers."""

    kind: str
    file_id: str
    file_unique_id: str
    file_name: str | None = None
    file_size: int | None = None
    mime_type: str | None = None
    #: Seconds, for voice notes, audio and video.
    duration: int | None = None


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A message for the gateway and its files, still on Telegram's servers."""

    message: InboundMessage
    media: tuple[MediaRef, ...] = ()
    #: A button tap: the query to answer (`answerCallbackQuery`) once the tap is durable.
    callback_query_id: str | None = None

    def with_files(self, paths: Sequence[str], placeholders: Sequence[str] = ()) -> InboundMessage:
        """The message with the files downloaded to `paths` (the ones that could be) and the
        placeholders naming the others after its text."""
        if not paths and not placeholders:
            return self.message
        content = with_placeholders(self.message.content, placeholders)
        return self.message.model_copy(update={"media": list(paths), "content": content})


def sender_id_of(user: User) -> str:
    """`"id|username"` (or the id alone): allow lists may name either."""
    return f"{user.id}|{user.username}" if user.username else str(user.id)


def dedup_id(chat_id: int | str, message_id: int) -> str:
    return f"{chat_id}:{message_id}"


def read_update(
    update: Update, bot: BotIdentity, *, require_mention: bool
) -> IncomingMessage | None:
    """The user's message in `update`, or None when the gateway should not see it."""
    if update.callback_query is not None:
        return read_tap(update.callback_query, bot)
    if update.message_reaction is not None:
        return read_reaction(update.message_reaction, update.update_id)
    message = update.message or update.edited_message
    if message is None:
        return None
    user = message.from_user
    if user is None or user.is_bot:
        return None
    text = message.text if message.text is not None else (message.caption or "")
    entities = message.entities if message.text is not None else message.caption_entities
    naming_the_bot = _spans_naming_the_bot(text, entities, bot)
    if (
        message.chat.type in _GROUP_TYPES
        and require_mention
        and not (naming_the_bot or _is_reply_to(message, bot))
        and not _is_bare_command(text, entities)
    ):
        return None
    text = _strip_spans(text, naming_the_bot)
    # An edit changes the text (or a caption): the message's files stay those it came with.
    media = _media_of(message) if update.edited_message is None else ()
    if not text.strip() and not media:
        return None
    # Telegram numbers messages per chat; the chat id makes the id unique for dedup.
    message_id = dedup_id(message.chat.id, message.message_id)
    metadata = _metadata(message, user, bot)
    if update.edited_message is not None:
        metadata[EDIT] = {"message_id": message_id}
        # Each edit has its own date: a redelivered update is the same edit.
        edited_at = message.edit_date.timestamp() if message.edit_date else update.update_id
        message_id = f"{message_id}:edit:{edited_at:.0f}"
    inbound = InboundMessage(
        channel=CHANNEL,
        sender_id=sender_id_of(user),
        chat_id=str(message.chat.id),
        content=text.strip(),
        timestamp=message.date,
        metadata=metadata,
        message_id=message_id,
    )
    return IncomingMessage(inbound, media)


def read_tap(query: CallbackQuery, bot: BotIdentity) -> IncomingMessage | None:
    """A tap on one of the bot's inline buttons, as a message of its chat: the button's text,
    and `metadata.callback`. None for what no button of the bot's message sent (a forged or
    stale query, an inline-mode message): it reaches no agent, and is only answered."""
    held = query.message
    user = query.from_user
    if not isinstance(held, Message) or query.data is None or user.is_bot:
        return None
    if held.from_user is None or held.from_user.id != bot.id:
        return None
    markup = held.reply_markup
    rows = markup.inline_keyboard if markup is not None else ()
    label = next(
        (button.text for row in rows for button in row if button.callback_data == query.data),
        None,
    )
    if label is None:
        return None
    metadata = _metadata(held, user, bot)
    metadata.update(tap_metadata(query.data, str(held.message_id), held.date.timestamp()))
    metadata.pop(REPLY_TO, None)
    inbound = InboundMessage(
        channel=CHANNEL,
        sender_id=sender_id_of(user),
        chat_id=str(held.chat.id),
        content=label,
        metadata=metadata,
        # The query's id is unique per tap: a redelivered update is the same tap.
        message_id=f"tap:{query.id}",
    )
    return IncomingMessage(inbound, callback_query_id=query.id)


def read_reaction(reaction: MessageReactionUpdated, update_id: int) -> IncomingMessage | None:
    """A user's reaction added to a message, as a message of its chat; None for a reaction
    taken back, one of a custom or paid kind, or one from a chat rather than a person."""
    user = reaction.user
    if user is None or user.is_bot:
        return None
    before = {kind.emoji for kind in reaction.old_reaction if isinstance(kind, ReactionTypeEmoji)}
    added = [
        kind.emoji
        for kind in reaction.new_reaction
        if isinstance(kind, ReactionTypeEmoji) and kind.emoji not in before
    ]
    if not added:
        return None
    emoji = added[0]
    metadata: dict[str, Any] = {
        "chat_type": str(reaction.chat.type),
        "sender_name": user.full_name,
        REACTION: {"emoji": emoji, "message_id": str(reaction.message_id)},
    }
    if user.username:
        metadata["username"] = user.username
    inbound = InboundMessage(
        channel=CHANNEL,
        sender_id=sender_id_of(user),
        chat_id=str(reaction.chat.id),
        content=reaction_note(emoji, None),
        timestamp=reaction.date,
        metadata=metadata,
        # The update's id is unique per event: a redelivered update is the same reaction.
        message_id=f"reaction:{update_id}",
    )
    return IncomingMessage(inbound)


def _metadata(message: Message, user: User, bot: BotIdentity) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "chat_type": str(message.chat.type),
        "telegram_message_id": message.message_id,
        "sender_name": user.full_name,
    }
    if user.username:
        metadata["username"] = user.username
    if message.chat.title:
        metadata["chat_title"] = message.chat.title
    replied = message.reply_to_message
    # In a forum, every message of a topic "replies" to the topic's first message: that is
    # where it was asked, not what it quotes.
    if replied is not None and not (
        message.is_topic_message and replied.message_id == message.message_thread_id
    ):
        text = replied.text if replied.text is not None else replied.caption
        from_bot = replied.from_user is not None and replied.from_user.id == bot.id
        metadata[REPLY_TO] = quoted(str(replied.message_id), text, from_bot=from_bot)
    if message.is_topic_message and message.message_thread_id is not None:
        metadata["message_thread_id"] = message.message_thread_id
    return metadata


def _is_reply_to(message: Message, bot: BotIdentity) -> bool:
    replied = message.reply_to_message
    return replied is not None and replied.from_user is not None and replied.from_user.id == bot.id


def _spans_naming_the_bot(
    text: str, entities: Sequence[MessageEntity], bot: BotIdentity
) -> list[tuple[int, int]]:
    """Where `text` names this bot: its mentions, and the `@botname` of `/command@botname`
    (which the gateway's commands do not expect). Either addresses the bot in a group; both are
    cut from what the agent reads."""
    spans = []
    handle = f"@{bot.username}".casefold()
    for entity in entities:
        named = _utf16_slice(text, entity.offset, entity.length)
        if entity.type == MessageEntity.MENTION and named.casefold() == handle:
            spans.append((entity.offset, entity.length))
        elif entity.type == MessageEntity.TEXT_MENTION:
            if entity.user is not None and entity.user.id == bot.id:
                spans.append((entity.offset, entity.length))
        elif entity.type == MessageEntity.BOT_COMMAND and named.casefold().endswith(handle):
            suffix_units = _utf16_len(named) - _utf16_len(named[: -len(handle)])
            spans.append((entity.offset + entity.length - suffix_units, suffix_units))
    return spans


def _is_bare_command(text: str, entities: Sequence[MessageEntity]) -> bool:
    """A `/command` without a bot name at the start of a group message is for every bot."""
    return any(
        entity.type == MessageEntity.BOT_COMMAND
        and entity.offset == 0
        and "@" not in _utf16_slice(text, entity.offset, entity.length)
        for entity in entities
    )


def _media_of(message: Message) -> tuple[MediaRef, ...]:
    refs: list[MediaRef] = []
    if message.photo:
        largest = message.photo[-1]
        refs.append(
            MediaRef(
                "photo",
                largest.file_id,
                largest.file_unique_id,
                None,
                largest.file_size,
                "image/jpeg",
            )
        )
    for kind in ("document", "audio", "voice", "video", "video_note", "animation"):
        attachment = getattr(message, kind, None)
        if attachment is None or (kind == "document" and message.animation is not None):
            continue
        refs.append(
            MediaRef(
                kind,
                attachment.file_id,
                attachment.file_unique_id,
                getattr(attachment, "file_name", None),
                attachment.file_size,
                getattr(attachment, "mime_type", None),
                _seconds(attachment),
            )
        )
    return tuple(refs)


def _seconds(attachment: TelegramObject) -> int | None:
    """An attachment's duration in whole seconds, as the Bot API sent it (PTB's `duration`
    property warns of its coming change of type)."""
    duration = attachment.to_dict().get("duration")
    return duration if isinstance(duration, int) else None


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _utf16_slice(text: str, offset: int, length: int) -> str:
    encoded = text.encode("utf-16-le")
    return encoded[offset * 2 : (offset + length) * 2].decode("utf-16-le", errors="replace")


def _strip_spans(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """`text` without the given UTF-16 spans, the space they leave collapsed."""
    if not spans:
        return text
    encoded = text.encode("utf-16-le")
    pieces: list[bytes] = []
    cursor = 0
    for offset, length in sorted(spans):
        start = max(offset * 2, cursor)
        pieces.append(encoded[cursor:start])
        cursor = max(cursor, (offset + length) * 2)
    pieces.append(encoded[cursor:])
    kept = [piece.decode("utf-16-le", errors="replace") for piece in pieces]
    joined = kept[0]
    for piece in kept[1:]:
        if joined.endswith((" ", "\n")) and piece.startswith(" "):
            piece = piece[1:]
        joined += piece
    return joined.strip()
