"""How an outbound message names things on Discord: ids, the message it replies to, and the
nonce that makes a resend of the same delivery one message."""

from __future__ import annotations

import hashlib

import discord

from channels.discord.errors import CHANNEL
from channels.errors import ChannelError


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


def delivery_nonce(delivery_id: str | None, batch: int) -> str | None:
    """Discord's nonce (at most 25 characters) for one message of a delivery."""
    if delivery_id is None:
        return None
    digest = hashlib.blake2b(f"{delivery_id}/{batch}".encode(), digest_size=12).hexdigest()
    return digest[:25]
