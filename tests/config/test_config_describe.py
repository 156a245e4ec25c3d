"""The key reference that the README's configuration table is built from."""

from __future__ import annotations

from typing import get_args

from pydantic import BaseModel

from config import (
    AGENT_TYPES,
    CHANNEL_TYPES,
    ApiChannelConfig,
    CliChannelConfig,
    DiscordConfig,
    EchoAgentConfig,
    EmailConfig,
    FeishuConfig,
    GatewayConfig,
    LineConfig,
    MatrixConfig,
    OpenAIAgentConfig,
    PluginChannelConfig,
    ProfileConfig,
    QQBotConfig,
    SessionsConfig,
    SlackConfig,
    TelegramConfig,
    TwilioConfig,
    WebhookAgentConfig,
    WecomBotConfig,
    WeComConfig,
    WhatsAppConfig,
)
from config.describe import (
    describe_config_keys,
    describe_gateway_keys,
    describe_profile_keys,
)

#: Every channel type's model, kept by hand on purpose: a new type must be looked at here.
CHANNEL_MODELS: dict[str, type[BaseModel]] = {
    "telegram": TelegramConfig,
    "discord": DiscordConfig,
    "slack": SlackConfig,
    "api": ApiChannelConfig,
    "cli": CliChannelConfig,
    "plugin": PluginChannelConfig,
    "twilio": TwilioConfig,
    "whatsapp": WhatsAppConfig,
    "line": LineConfig,
    "matrix": MatrixConfig,
    "email": EmailConfig,
    "feishu": FeishuConfig,
    "wecom": WeComConfig,
    "wecom-bot": WecomBotConfig,
    "qq-bot": QQBotConfig,
}
TOP_MODELS: list[type[BaseModel]] = [
    GatewayConfig,
    ProfileConfig,
    EchoAgentConfig,
    OpenAIAgentConfig,
    WebhookAgentConfig,
    *CHANNEL_MODELS.values(),
]


def models_within(model: type[BaseModel]) -> set[type[BaseModel]]:
    """`model` and every model its fields hold, however deep (in unions, lists, dicts too)."""
    found: set[type[BaseModel]] = set()
    waiting: list[object] = [model]
    while waiting:
        item = waiting.pop()
        if isinstance(item, type) and issubclass(item, BaseModel):
            if item not in found:
                found.add(item)
                waiting.extend(info.annotation for info in item.model_fields.values())
        else:
            waiting.extend(get_args(item))
    return found


ALL_MODELS: list[type[BaseModel]] = sorted(
    set().union(*(models_within(model) for model in TOP_MODELS)), key=lambda m: m.__name__
)


def test_the_walk_reaches_the_nested_models() -> None:
    names = {model.__name__ for model in ALL_MODELS}
    assert {"HttpConfig", "LoggingConfig", "BusConfig", "SessionsConfig"} <= names
    assert {"LineConfig", "EmailConfig", "FeishuConfig"} <= names


def test_every_field_of_every_model_has_a_description() -> None:
    for model in ALL_MODELS:
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
            assert not info.description.endswith(" "), f"{model.__name__}.{name}"


def test_keys_are_unique_and_all_described() -> None:
    rows = describe_config_keys()
    keys = [key for key, _, _ in rows]
    assert len(keys) == len(set(keys))
    assert all(type_text and description for _, type_text, description in rows)
    assert rows == [*describe_gateway_keys(), *describe_profile_keys()]


def test_every_variant_field_is_listed() -> None:
    keys = {key for key, _, _ in describe_profile_keys()}
    assert set(CHANNEL_MODELS) == set(CHANNEL_TYPES)
    for tag, model in CHANNEL_MODELS.items():
        for name in model.model_fields:
            assert f"channels[].{tag}.{name}" in keys
    agent_models: dict[str, type[BaseModel]] = {
        "echo": EchoAgentConfig,
        "openai": OpenAIAgentConfig,
        "webhook": WebhookAgentConfig,
    }
    assert set(agent_models) == set(AGENT_TYPES)
    for tag, model in agent_models.items():
        for name in model.model_fields:
            assert f"agent.{tag}.{name}" in keys
    for name in SessionsConfig.model_fields:
        assert f"sessions.{name}" in keys


def test_selected_rows() -> None:
    rows = {key: (type_text, description) for key, type_text, description in describe_config_keys()}
    assert rows["channels[].telegram.token"] == (
        "secret string, required",
        "Bot token from @BotFather.",
    )
    assert rows["http.port"][0] == "integer, default 8090"
    assert rows["channels[].telegram.mode"][0] == "'polling' | 'webhook', default 'polling'"
    assert rows["channels[].api.allow"][0] == 'list of string | integer, default ["*"]'
    assert rows["agent.openai.api_key"][0] == "secret string or null, default null"
    assert rows["agent"][0] == "mapping with type: echo | openai | webhook"
    assert rows["channels"][0].startswith("list of mappings with type: telegram | discord")
    assert rows["sessions"][0] == "mapping"
    assert rows["queue_mode"][0] == "'collect' | 'followup' | 'interrupt', default 'collect'"


def test_variant_type_key_comes_first() -> None:
    keys = [key for key, _, _ in describe_profile_keys() if key.startswith("channels[].telegram.")]
    assert keys[0] == "channels[].telegram.type"
