"""Slack (`type: slack`): a slack-bolt `AsyncApp` over Socket Mode or HTTP events.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use Slack.
"""

from __future__ import annotations

from channels.markup.slack import render_mrkdwn
from channels.registry import channel_factory
from channels.slack.bolt_app import BotIdentity
from channels.slack.channel import SlackChannel, SlackTimeouts
from channels.slack.errors import translate_api_error
from channels.slack.socket_mode import proxy_for

__all__ = [
    "BotIdentity",
    "SlackChannel",
    "SlackTimeouts",
    "create",
    "proxy_for",
    "render_mrkdwn",
    "translate_api_error",
]


create = channel_factory(SlackChannel)
