"""Slack (`type: slack`): a slack-bolt `AsyncApp` over Socket Mode or HTTP events.

`create(config, context)` is the factory the channel registry calls; the registry imports this
module only for profiles that use Slack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from channels.markup.slack import render_mrkdwn
from channels.slack.bolt_app import BotIdentity
from channels.slack.channel import DEFAULT_BASE_URL, SlackChannel
from channels.slack.errors import translate_api_error
from channels.slack.socket_mode import proxy_for

if TYPE_CHECKING:
    from channels.registry import ChannelContext
    from config import SlackConfig

__all__ = [
    "DEFAULT_BASE_URL",
    "BotIdentity",
    "SlackChannel",
    "create",
    "proxy_for",
    "render_mrkdwn",
    "translate_api_error",
]


def create(config: SlackConfig, context: ChannelContext) -> SlackChannel:
    """Build the Slack channel of one profile from its validated config."""
    app_token = config.app_token.get_secret_value() if config.app_token is not None else None
    signing_secret = (
        config.signing_secret.get_secret_value() if config.signing_secret is not None else None
    )
    channel = SlackChannel(
        bot_token=config.bot_token.get_secret_value(),
        app_token=app_token,
        mode=config.mode,
        signing_secret=signing_secret,
        base_url=config.base_url,
        webhook_path=config.webhook_path,
        data_dir=context.data_dir,
    )
    return channel
