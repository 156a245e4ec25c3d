"""Slack profiles on the fake: in Socket Mode (the default), or in HTTP mode, where Slack's events
are posted to the daemon's own HTTP server at the webhook path, signed with the fake's signing
secret."""

from __future__ import annotations

from tests.fakes.slack_server import FakeSlack

WEBHOOK_PATH = "/slack/events"


def slack_http_profile(
    fake: FakeSlack, allow: str, *, agent: str = "{type: echo}", path: str = WEBHOOK_PATH
) -> str:
    """The `agent` behind Slack in HTTP mode at `path`, allowing the user `allow`."""
    return f"""\
agent: {agent}
channels:
  - type: slack
    mode: http
    bot_token: "{fake.bot_token}"
    signing_secret: "{fake.signing_secret}"
    base_url: {fake.base_url}
    webhook_path: {path}
    allow: [{allow}]
"""


def slack_socket_profile(fake: FakeSlack, allow: str, *, agent: str = "{type: echo}") -> str:
    """The `agent` behind Slack in Socket Mode on the fake, allowing the user `allow`."""
    return f"""\
agent: {agent}
channels:
  - type: slack
    bot_token: "{fake.bot_token}"
    app_token: "{fake.app_token}"
    base_url: {fake.base_url}
    allow: [{allow}]
"""
