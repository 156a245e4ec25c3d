"""Slack (`type: slack`): a slack-bolt `AsyncApp` over Socket Mode or HTTP events.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use Slack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.markup.slack import render_mrkdwn
from channels.slack.bolt_app import BotIdentity
from channels.slack.channel import SlackChannel
from channels.slack.errors import translate_api_error
from channels.slack.socket_mode import proxy_for

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import SlackConfig

__all__ = [
    "BotIdentity",
    "SlackChannel",
    "create",
    "proxy_for",
    "render_mrkdwn",
    "translate_api_error",
]


def create(config: SlackConfig, context: ChannelContext) -> SlackChannel:
    return SlackChannel(config, data_dir=context.data_dir)
