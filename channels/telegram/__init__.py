"""Telegram, through python-telegram-bot (v22): long polling or webhook, HTML replies, edits.

`create(config, context)` is the factory the channel registry calls for `type: telegram`.
"""

from __future__ import annotations

import os

# PTB 22 warns (PTBDeprecationWarning) inside its own RetryAfter on every 429 unless time periods
# are opted into its v23 form, `timedelta`; this code reads both forms. A user may still say no.
os.environ.setdefault("PTB_TIMEDELTA", "true")

from channels.markup.telegram import render, render_html, render_markdown_v2
from channels.registry import ChannelContext
from channels.retry import Backoff
from channels.telegram.channel import DEFAULT_COMMANDS, TelegramChannel
from config import TelegramConfig

__all__ = [
    "DEFAULT_COMMANDS",
    "Backoff",
    "TelegramChannel",
    "create",
    "render",
    "render_html",
    "render_markdown_v2",
]


def create(config: TelegramConfig, context: ChannelContext) -> TelegramChannel:
    return TelegramChannel(
        config, data_dir=context.data_dir, inbound_reactions=context.inbound_reactions
    )
