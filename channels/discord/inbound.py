"""Discord messages as the gateway sees them: which are answered, their text and ids, and the
attachments saved for the agent.

Attachments users send land in `{data_dir}/media/discord/<channel_id>/<attachment id>_<name>`,
saved by `channels.media_files` (safe names, size limit, off the event loop).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import discord

from bus import EDIT, REACTION, REPLY_TO, InboundMessage, quoted, reaction_note
from channels.buttons import tap_metadata
from channels.discord.errors import CHANNEL
from channels.errors import ChannelError
from channels.media_files import MediaStore, safe_file_name

#: Discord's default upload limit; larger attachments are not downloaded.
DEFAULT_MAX_ATTACHMENT_BYTES = 25 * 1024 * 1024


class AttachmentStore:
    """Saves the attachments of received messages under one profile's data directory."""

    def __init__(
        self,
        data_dir: Path,
        *,
        max_bytes: int = DEFAULT_MAX_ATTACHMENT_BYTES,
        timeout_s: float = 60.0,
    ) -> None:
        self._store = MediaStore(data_dir, "discord", max_bytes=max_bytes, timeout_s=timeout_s)

    async def receive(
        self, message: discord.Message, inbound: InboundMessage, max_bytes: int
    ) -> InboundMessage:
        """`inbound` with `message`'s attachments saved, and those over `max_bytes` (or the
        store's own limit) or that cannot be fetched named in its text."""
        intake = self._store.intake(inbound, max_bytes)
        for attachment in message.attachments:
            await intake.take(
                partial(self._save, message.channel.id, attachment),
                name=attachment.filename,
                mime=attachment.content_type,
                size=attachment.size,
                duration_s=attachment.duration,
            )
        return intake.message()

    async def _save(self, channel_id: int, attachment: discord.Attachment) -> Path:
        try:
            data = await attachment.read()
        except (discord.HTTPException, aiohttp.ClientError, OSError) as error:
            raise ChannelError(f"Discord refused the download: {error}", channel=CHANNEL) from error
        target = (
            self._store.root
            / str(channel_id)
            / f"{attachment.id}_{safe_file_name(attachment.filename)}"
        )
        return await self._store.save(target, data)


# Which Discord messages the bot answers, and what the gateway sees of them.
#
# DMs are always answered. In guild channels, with `require_mention` the bot answers only messages
# that mention it, and the mention is taken out of the text. The bot never answers itself or
# another bot (two bots answering each other never stop).
#: The message types a person writes; joins, pins, boosts and the like are not addressed to us.
_CONVERSATION_TYPES = frozenset({discord.MessageType.default, discord.MessageType.reply})


@dataclass(frozen=True, slots=True)
class InboundPolicy:
    bot_user_id: int
    require_mention: bool = True


def is_direct(message: discord.Message) -> bool:
    return isinstance(message.channel, discord.DMChannel)


def mentions_bot(message: discord.Message, bot_user_id: int) -> bool:
    return bot_user_id in message.raw_mentions or any(
        user.id == bot_user_id for user in message.mentions
    )


def should_answer(message: discord.Message, policy: InboundPolicy) -> bool:
    author = message.author
    if author.id == policy.bot_user_id or author.bot:
        return False
    if message.type not in _CONVERSATION_TYPES:
        return False
    if not message.content.strip() and not message.attachments:
        return False
    if is_direct(message) or not policy.require_mention:
        return True
    return mentions_bot(message, policy.bot_user_id)


def strip_mention(content: str, bot_user_id: int) -> str:
    """The text without the bot's `<@id>` / `<@!id>` mentions, spaces tidied where they were."""
    return re.sub(rf"\s*<@!?{bot_user_id}>\s*", " ", content).strip()


def guild_id_of(message: discord.Message) -> int | None:
    if message.guild is not None:
        return message.guild.id
    # A guild the client has not cached yet still names itself on the channel.
    guild_id = getattr(message.channel, "guild_id", None)
    return guild_id if isinstance(guild_id, int) else None


def to_inbound(message: discord.Message, policy: InboundPolicy) -> InboundMessage:
    """The bus message for one Discord message the bot answers.

    `sender_id` is `"<user id>|<username>"`, so an allow list may name either.
    """
    author = message.author
    guild_id = guild_id_of(message)
    metadata: dict[str, object] = {
        "guild_id": None if guild_id is None else str(guild_id),
        "is_dm": is_direct(message),
        "sender_user_id": str(author.id),
        "sender_name": author.display_name,
    }
    reference = message.reference
    if reference is not None and reference.message_id is not None:
        # Discord resolves the message a reply quotes (when it still exists).
        replied = reference.resolved
        text, from_bot = None, False
        if isinstance(replied, discord.Message):
            text, from_bot = replied.content, replied.author.id == policy.bot_user_id
        metadata[REPLY_TO] = quoted(str(reference.message_id), text, from_bot=from_bot)
    return InboundMessage(
        channel=CHANNEL,
        sender_id=f"{author.id}|{author.name}",
        chat_id=str(message.channel.id),
        content=strip_mention(message.content, policy.bot_user_id),
        timestamp=message.created_at,
        message_id=str(message.id),
        metadata=metadata,
    )


def read_tap(interaction: discord.Interaction, bot_user_id: int) -> InboundMessage | None:
    """A tap on one of the bot's buttons (a component interaction), as a message of its chat:
    the button's label, and `metadata.callback`. None for what no button the bot put under its
    own message sent (a forged or foreign interaction): it reaches no agent."""
    if interaction.type is not discord.InteractionType.component:
        return None
    data: dict[str, Any] = dict(interaction.data or {})
    custom_id = data.get("custom_id")
    held = interaction.message
    if not isinstance(custom_id, str) or held is None or held.author.id != bot_user_id:
        return None
    label = next(
        (
            button.label or custom_id
            for row in held.components
            if isinstance(row, discord.ActionRow)
            for button in row.children
            if isinstance(button, discord.Button) and button.custom_id == custom_id
        ),
        None,
    )
    channel_id = interaction.channel_id
    if label is None or channel_id is None:
        return None
    user = interaction.user
    guild_id = interaction.guild_id
    return InboundMessage(
        channel=CHANNEL,
        sender_id=f"{user.id}|{user.name}",
        chat_id=str(channel_id),
        content=label,
        # The interaction's id is unique per tap: a redelivered event is the same tap.
        message_id=f"tap:{interaction.id}",
        metadata={
            **tap_metadata(custom_id, str(held.id), held.created_at.timestamp()),
            "guild_id": None if guild_id is None else str(guild_id),
            "is_dm": guild_id is None,
            "sender_user_id": str(user.id),
            "sender_name": user.display_name,
        },
    )


def edit_of(event: discord.RawMessageUpdateEvent, policy: InboundPolicy) -> InboundMessage | None:
    """A user's edit of a message the bot answers (`MESSAGE_UPDATE` with a new `edited_at`:
    an embed unfurl changes no text), or None."""
    message = event.message
    if message.edited_at is None or not should_answer(message, policy):
        return None
    inbound = to_inbound(message, policy)
    metadata = {**inbound.metadata, EDIT: {"message_id": inbound.message_id}}
    edit_id = f"{inbound.message_id}:edit:{message.edited_at.timestamp():.3f}"
    # An edit changes the text: the files stay those the message came with.
    return inbound.model_copy(update={"message_id": edit_id, "metadata": metadata})


def reaction_of(event: discord.RawReactionActionEvent, bot_user_id: int) -> InboundMessage | None:
    """A user's reaction added to one of the bot's messages (`MESSAGE_REACTION_ADD`), or None.
    Discord gives such an event no id of its own, nor the message's text: the reaction is one
    per user, message and emoji."""
    if event.message_author_id != bot_user_id or event.user_id == bot_user_id:
        return None
    member = event.member
    if member is not None and member.bot:
        return None
    # A custom emoji reads as its name (`:party:`); a standard one as the character.
    emoji = str(event.emoji) if event.emoji.is_unicode_emoji() else f":{event.emoji.name}:"
    message_id = str(event.message_id)
    sender = f"{event.user_id}|{member.name}" if member is not None else str(event.user_id)
    return InboundMessage(
        channel=CHANNEL,
        sender_id=sender,
        chat_id=str(event.channel_id),
        content=reaction_note(emoji, None),
        message_id=f"reaction:{message_id}:{event.user_id}:{emoji}",
        metadata={REACTION: {"emoji": emoji, "message_id": message_id}},
    )
