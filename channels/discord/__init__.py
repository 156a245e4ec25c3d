"""Discord (`type: discord`): a discord.py 2.x bot on the gateway.

The registry imports this module only for profiles that use Discord, and calls `create`.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    # discord.py imports `audioop` for voice, which Python 3.11+ deprecates; no voice is used
    # here, and a test run that turns warnings into errors must still import the library.
    warnings.filterwarnings("ignore", "'audioop' is deprecated", DeprecationWarning)
    import discord  # noqa: F401

from channels.discord.channel import DiscordChannel, DiscordTimeouts
from channels.discord.routing import (
    DEFAULT_API_BASE_URL,
    DEFAULT_GATEWAY_URL,
    DiscordEndpoints,
)
from channels.registry import channel_factory

__all__ = [
    "DEFAULT_API_BASE_URL",
    "DEFAULT_GATEWAY_URL",
    "DiscordChannel",
    "DiscordEndpoints",
    "DiscordTimeouts",
    "create",
]


create = channel_factory(DiscordChannel)
