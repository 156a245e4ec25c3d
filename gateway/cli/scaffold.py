"""What `octos-gateway init` writes: gateway.yaml, one profile and a `.env` naming each secret.

Pure text generation from the user's choices, so it is testable without a terminal. Every secret
is referenced as `${VAR}` in the profile and listed in `.env` with a placeholder value: the
result passes `check` at once, and `doctor` then says which placeholder still needs its real
value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from config.channels import DEFAULT_API_PORT
from config.gateway import DEFAULT_HEALTH_PORT

AgentChoice = Literal["echo", "openai"]
CHANNEL_CHOICES = ("telegram", "discord", "slack", "api", "cli")
DEFAULT_CHANNELS = ("api",)
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_PROFILE = "main"


@dataclass(frozen=True, slots=True)
class ScaffoldChoices:
    channels: tuple[str, ...] = DEFAULT_CHANNELS
    agent: AgentChoice = "echo"
    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    profile: str = DEFAULT_PROFILE


@dataclass(frozen=True, slots=True)
class SecretVar:
    """A secret a profile names as `${name}`: `.env` lists it with its placeholder value."""

    name: str
    placeholder: str
    comment: str


_PAIRING = """\
    allow: []                       # user ids or @usernames; "*" = everyone
    pairing: true                   # a stranger gets a code: octos-gateway pair CODE -c ...
"""

_CHANNELS: dict[str, tuple[str, tuple[SecretVar, ...]]] = {
    "telegram": (
        "  - type: telegram\n    token: ${TELEGRAM_BOT_TOKEN}\n" + _PAIRING,
        (
            SecretVar(
                "TELEGRAM_BOT_TOKEN", "paste-the-token-from-BotFather", "Telegram: @BotFather"
            ),
        ),
    ),
    "discord": (
        "  - type: discord\n    token: ${DISCORD_BOT_TOKEN}\n" + _PAIRING,
        (
            SecretVar(
                "DISCORD_BOT_TOKEN",
                "paste-the-bot-token",
                "Discord: developer portal, your application, Bot, Reset Token",
            ),
        ),
    ),
    "slack": (
        "  - type: slack\n    bot_token: ${SLACK_BOT_TOKEN}\n    app_token: ${SLACK_APP_TOKEN}\n"
        + _PAIRING,
        (
            SecretVar("SLACK_BOT_TOKEN", "xoxb-paste-the-bot-token", "Slack: OAuth & Permissions"),
            SecretVar(
                "SLACK_APP_TOKEN",
                "xapp-paste-the-app-token",
                "Slack: Basic Information, App-Level Tokens (connections:write)",
            ),
        ),
    ),
    "api": (
        f"  - type: api                     # web chat on http://127.0.0.1:{DEFAULT_API_PORT}\n"
        f"    host: 127.0.0.1\n    port: {DEFAULT_API_PORT}\n"
        "    auth_token: ${API_TOKEN:-}     # empty: no token needed on loopback\n",
        (SecretVar("API_TOKEN", "", "HTTP API: a bearer token, needed once host is not loopback"),),
    ),
    "cli": ("  - type: cli                     # this terminal\n", ()),
}


#: Each placeholder `.env` holds until the user pastes the real secret, and its variable.
_PLACEHOLDERS = {
    secret.placeholder: secret.name
    for _, secrets in _CHANNELS.values()
    for secret in secrets
    if secret.placeholder
}


def placeholder_variable(value: str) -> str | None:
    """The variable whose placeholder from `init` `value` still is; None for a real value."""
    return _PLACEHOLDERS.get(value)


def gateway_yaml() -> str:
    return f"""\
# octos-gateway's own settings (written by octos-gateway init)
data_dir: data                      # sessions, pairing codes, the allow-list overlay
profiles_dir: profiles              # one <id>.yaml per bot
http: {{host: 127.0.0.1, port: {DEFAULT_HEALTH_PORT}}}  # status page /, /healthz, /readyz, /metrics
logging: {{level: info, format: console}}
"""


def profile_yaml(choices: ScaffoldChoices) -> str:
    if choices.agent == "openai":
        agent = (
            "agent:\n  type: openai\n"
            f"  base_url: {json.dumps(choices.base_url)}\n"
            f"  model: {json.dumps(choices.model)}\n"
            "  api_key: ${OPENAI_API_KEY:-}     # empty for local servers (Ollama, llama.cpp)\n"
        )
    else:
        agent = "agent: {type: echo, delay_s: 0.15, pieces: 6}   # repeats what you say\n"
    channels = "".join(_CHANNELS[name][0] for name in choices.channels)
    heading = f"# The bot {choices.profile!r} (written by octos-gateway init)\n"
    return f"{heading}{agent}channels:\n{channels}"


def secrets_of(choices: ScaffoldChoices) -> list[SecretVar]:
    found = [secret for name in choices.channels for secret in _CHANNELS[name][1]]
    if choices.agent == "openai":
        found.append(SecretVar("OPENAI_API_KEY", "", "the agent's API key (empty if none)"))
    return found


def env_file(choices: ScaffoldChoices) -> str:
    lines = [
        "# Secrets of the profiles beside this file; the real environment overrides them.",
        "# Replace each placeholder, then: octos-gateway doctor -c gateway.yaml",
    ]
    for secret in secrets_of(choices):
        lines += [f"# {secret.comment}", f"{secret.name}={secret.placeholder}"]
    return "\n".join(lines) + "\n"
