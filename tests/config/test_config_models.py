"""The configuration models on their own: defaults, variants, validators, secrecy, warnings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr, TypeAdapter, ValidationError

from config import (
    ApiChannelConfig,
    ChannelConfig,
    CliChannelConfig,
    ConfigValueError,
    DiscordConfig,
    EchoAgentConfig,
    GatewayConfig,
    HttpConfig,
    OpenAIAgentConfig,
    PluginChannelConfig,
    ProfileConfig,
    SlackConfig,
    TelegramConfig,
    WebhookAgentConfig,
)

CHANNELS: TypeAdapter[ChannelConfig] = TypeAdapter(ChannelConfig)


def test_gateway_defaults() -> None:
    gateway = GatewayConfig()
    assert gateway.data_dir == Path("data")
    assert gateway.profiles_dir == Path("profiles")
    assert (gateway.http.host, gateway.http.port) == ("127.0.0.1", 8090)
    assert (gateway.logging.level, gateway.logging.format) == ("info", "console")
    assert (gateway.bus.backend, gateway.bus.capacity) == ("memory", 4096)
    assert gateway.shutdown_grace_s == 10.0


@pytest.mark.parametrize(
    ("written", "level"), [("DEBUG", "debug"), ("Warning", "warning"), ("warn", "warning")]
)
def test_log_level_is_case_insensitive(written: str, level: str) -> None:
    gateway = GatewayConfig.model_validate({"logging": {"level": written}})
    assert gateway.logging.level == level


def test_http_port_zero_is_allowed_and_out_of_range_is_not() -> None:
    assert GatewayConfig.model_validate({"http": {"port": 0}}).http.port == 0
    with pytest.raises(ValidationError):
        GatewayConfig.model_validate({"http": {"port": 70000}})


def test_only_the_memory_bus_exists() -> None:
    with pytest.raises(ValidationError):
        GatewayConfig.model_validate({"bus": {"backend": "nats"}})


def test_resolve_paths_keeps_absolute_and_resolves_relative(tmp_path: Path) -> None:
    gateway = GatewayConfig(data_dir=Path("/var/lib/octos"), profiles_dir=Path("bots"))
    resolved = gateway.resolve_paths(tmp_path)
    assert resolved.data_dir == Path("/var/lib/octos")
    assert resolved.profiles_dir == tmp_path / "bots"


def test_profile_defaults_to_echo_agent_and_no_channels() -> None:
    profile = ProfileConfig()
    assert isinstance(profile.agent, EchoAgentConfig)
    assert (profile.agent.delay_s, profile.agent.pieces) == (0.0, 3)
    assert profile.channels == []
    assert profile.queue_mode == "collect"
    sessions = profile.sessions
    assert (sessions.fsync, sessions.max_history, sessions.fork_copy) == ("batch", 50, 10)
    assert (sessions.max_file_mb, sessions.max_open, sessions.max_concurrent_turns) == (
        10,
        1000,
        10,
    )
    assert sessions.idle_timeout_s == 1800


def test_agent_without_type_is_echo() -> None:
    profile = ProfileConfig.model_validate({"agent": {"delay_s": 0.5}})
    assert profile.agent == EchoAgentConfig(delay_s=0.5)


def test_openai_agent() -> None:
    profile = ProfileConfig.model_validate(
        {
            "agent": {
                "type": "openai",
                "model": "llama3",
                "base_url": "http://127.0.0.1:11434/v1",
                "api_key": "sk-secret",
                "system_prompt": "Be brief.",
                "temperature": 0.2,
                "max_tokens": 512,
            }
        }
    )
    agent = profile.agent
    assert isinstance(agent, OpenAIAgentConfig)
    assert agent.model == "llama3"
    assert agent.base_url == "http://127.0.0.1:11434/v1"
    assert agent.api_key is not None
    assert agent.api_key.get_secret_value() == "sk-secret"
    assert (agent.max_history, agent.timeout_s) == (40, 120)
    assert (agent.temperature, agent.max_tokens) == (0.2, 512)


def test_openai_agent_requires_a_model() -> None:
    with pytest.raises(ValidationError):
        ProfileConfig.model_validate({"agent": {"type": "openai"}})


def test_webhook_agent_keeps_header_values_secret() -> None:
    profile = ProfileConfig.model_validate(
        {
            "agent": {
                "type": "webhook",
                "url": "https://agent.example/turn",
                "headers": {"Authorization": "Bearer hunter2"},
                "secret": "hmac-key",
            }
        }
    )
    agent = profile.agent
    assert isinstance(agent, WebhookAgentConfig)
    header = agent.headers["Authorization"]
    assert isinstance(header, SecretStr)
    assert header.get_secret_value() == "Bearer hunter2"
    assert agent.secret is not None
    assert agent.secret.get_secret_value() == "hmac-key"
    assert "hunter2" not in repr(profile)
    assert "hmac-key" not in str(profile)


def test_every_channel_type_parses_to_its_model() -> None:
    cases: list[tuple[dict[str, object], type[object]]] = [
        ({"type": "telegram", "token": "1:a"}, TelegramConfig),
        ({"type": "discord", "token": "d"}, DiscordConfig),
        ({"type": "slack", "bot_token": "xoxb-1", "app_token": "xapp-1"}, SlackConfig),
        ({"type": "api"}, ApiChannelConfig),
        ({"type": "cli"}, CliChannelConfig),
        ({"type": "plugin", "class_path": "tests.fakes.chan:FakeChannel"}, PluginChannelConfig),
    ]
    for data, model in cases:
        assert type(CHANNELS.validate_python(data)) is model


def test_telegram_defaults() -> None:
    telegram = TelegramConfig(token=SecretStr("1:a"))
    assert telegram.base_url == "https://api.telegram.org/bot"
    assert telegram.base_file_url == "https://api.telegram.org/file/bot"
    assert (telegram.mode, telegram.webhook_path) == ("polling", "/telegram/webhook")
    assert (telegram.require_mention, telegram.parse_mode) == (True, "html")
    assert telegram.poll_timeout_s == 30
    assert telegram.allow == []
    assert telegram.edit_interval_s is None


def test_telegram_webhook_mode_requires_webhook_url() -> None:
    with pytest.raises(ValidationError) as caught:
        TelegramConfig.model_validate({"token": "1:a", "mode": "webhook"})
    raised = caught.value.errors()[0]["ctx"]["error"]
    assert isinstance(raised, ConfigValueError)
    assert "webhook_url" in raised.message
    assert raised.at == ("mode",)
    webhook = TelegramConfig.model_validate(
        {
            "token": "1:a",
            "mode": "webhook",
            "webhook_url": "https://bot.example/tg",
            "secret_token": "s3cret",
        }
    )
    assert webhook.webhook_url == "https://bot.example/tg"


def test_telegram_webhook_mode_requires_a_secret_token() -> None:
    with pytest.raises(ValidationError) as caught:
        TelegramConfig.model_validate(
            {"token": "1:a", "mode": "webhook", "webhook_url": "https://bot.example/tg"}
        )
    raised = caught.value.errors()[0]["ctx"]["error"]
    assert isinstance(raised, ConfigValueError)
    assert "secret_token" in raised.message
    assert raised.at == ("mode",)


def test_telegram_secret_token_must_use_telegrams_charset() -> None:
    with pytest.raises(ValidationError):
        TelegramConfig.model_validate({"token": "1:a", "secret_token": "has spaces"})
    ok = TelegramConfig.model_validate({"token": "1:a", "secret_token": "abc_DEF-123"})
    assert ok.secret_token is not None


def test_slack_mode_credentials() -> None:
    with pytest.raises(ValidationError, match="app_token"):
        SlackConfig.model_validate({"bot_token": "xoxb-1"})
    with pytest.raises(ValidationError, match="signing_secret"):
        SlackConfig.model_validate({"bot_token": "xoxb-1", "mode": "http"})
    http = SlackConfig.model_validate(
        {"bot_token": "xoxb-1", "mode": "http", "signing_secret": "s"}
    )
    assert (http.mode, http.webhook_path, http.base_url) == (
        "http",
        "/slack/events",
        "https://slack.com/api/",
    )


def test_api_and_cli_allow_everyone_by_default_but_others_nobody() -> None:
    assert ApiChannelConfig().allow == ["*"]
    assert CliChannelConfig().allow == ["*"]
    assert DiscordConfig(token=SecretStr("d")).allow == []
    api = ApiChannelConfig()
    assert (api.host, api.port, api.auth_token, api.cors_origins, api.max_body_bytes) == (
        "127.0.0.1",
        8091,
        None,
        [],
        1_000_000,
    )


def test_allow_entries_keep_ids_and_usernames_but_refuse_booleans() -> None:
    telegram = TelegramConfig.model_validate({"token": "1:a", "allow": [12345, "@alice", "*"]})
    assert telegram.allow == [12345, "@alice", "*"]
    with pytest.raises(ValidationError):
        TelegramConfig.model_validate({"token": "1:a", "allow": [True]})


def test_urls_are_checked_and_kept_verbatim() -> None:
    with pytest.raises(ValidationError):
        TelegramConfig.model_validate({"token": "1:a", "base_url": "api.telegram.org/bot"})
    with pytest.raises(ValidationError):
        DiscordConfig.model_validate({"token": "d", "gateway_url": "https://gateway.discord.gg"})
    local = TelegramConfig.model_validate({"token": "1:a", "base_url": "http://127.0.0.1:9/bot"})
    assert local.base_url == "http://127.0.0.1:9/bot"


def test_empty_secret_is_refused_when_required_and_unset_when_optional() -> None:
    with pytest.raises(ValidationError):
        DiscordConfig.model_validate({"token": ""})
    api = ApiChannelConfig.model_validate({"auth_token": ""})
    assert api.auth_token is None
    telegram = TelegramConfig.model_validate({"token": "1:a", "webhook_url": ""})
    assert telegram.webhook_url is None


def test_plugin_class_path_form_and_hidden_options() -> None:
    with pytest.raises(ValidationError):
        PluginChannelConfig.model_validate({"class_path": "no_colon_here"})
    plugin = PluginChannelConfig.model_validate(
        {"class_path": "my_pkg.chan:MyChannel", "options": {"password": "p4ss"}}
    )
    assert plugin.options == {"password": "p4ss"}
    assert "p4ss" not in repr(plugin)


def test_one_channel_per_type_but_plugins_by_class_path() -> None:
    with pytest.raises(ValidationError) as caught:
        ProfileConfig.model_validate(
            {
                "channels": [
                    {"type": "cli"},
                    {"type": "api"},
                    {"type": "cli"},
                ]
            }
        )
    raised = caught.value.errors()[0]["ctx"]["error"]
    assert isinstance(raised, ConfigValueError)
    assert raised.at == (2,)
    assert "channels[0]" in raised.message
    plugins = ProfileConfig.model_validate(
        {
            "channels": [
                {"type": "plugin", "class_path": "a.b:One"},
                {"type": "plugin", "class_path": "a.b:Two"},
            ]
        }
    )
    assert [channel.routing_key for channel in plugins.channels] == [
        "plugin:a.b:One",
        "plugin:a.b:Two",
    ]
    with pytest.raises(ValidationError):
        ProfileConfig.model_validate(
            {
                "channels": [
                    {"type": "plugin", "class_path": "a.b:One"},
                    {"type": "plugin", "class_path": "a.b:One"},
                ]
            }
        )


def test_secrets_never_appear_in_repr_or_str() -> None:
    profile = ProfileConfig.model_validate(
        {
            "agent": {"type": "openai", "model": "m", "api_key": "sk-LEAK1"},
            "channels": [
                {"type": "telegram", "token": "123:LEAK2", "secret_token": "LEAK3"},
                {"type": "slack", "bot_token": "xoxb-LEAK4", "app_token": "xapp-LEAK5"},
                {"type": "api", "auth_token": "LEAK6"},
            ],
        }
    )
    for text in (repr(profile), str(profile), repr(profile.channels), str(profile.agent)):
        assert "LEAK" not in text


def test_models_are_immutable() -> None:
    gateway = GatewayConfig()
    with pytest.raises(ValidationError):
        gateway.shutdown_grace_s = 1.0  # type: ignore[misc]


def test_warnings_for_no_channels_and_empty_allow_lists() -> None:
    assert [warning.at for warning in ProfileConfig().warnings()] == [("channels",)]
    profile = ProfileConfig.model_validate(
        {"channels": [{"type": "discord", "token": "d"}, {"type": "cli"}]}
    )
    warnings = profile.warnings()
    assert [warning.at for warning in warnings] == [("channels", 0, "allow")]
    assert "empty allow list" in warnings[0].message


def test_warning_for_api_open_to_the_network_without_token() -> None:
    exposed = ProfileConfig.model_validate({"channels": [{"type": "api", "host": "0.0.0.0"}]})
    assert [warning.at for warning in exposed.warnings()] == [("channels", 0, "host")]
    guarded = ProfileConfig.model_validate(
        {"channels": [{"type": "api", "host": "0.0.0.0", "auth_token": "t"}]}
    )
    assert guarded.warnings() == []
    assert ProfileConfig(channels=[ApiChannelConfig(host="::1")]).warnings() == []


@pytest.mark.parametrize("bad", ["http://chat.example.com", "chat.example.com:8080", "", "[::1]"])
def test_allowed_hosts_are_plain_names(bad: str) -> None:
    with pytest.raises(ValidationError, match="is not a host name"):
        HttpConfig(allowed_hosts=[bad])
    with pytest.raises(ValidationError, match="is not a host name"):
        ApiChannelConfig(allowed_hosts=[bad])


def test_allowed_hosts_are_lower_case_names_wildcards_or_addresses() -> None:
    config = HttpConfig(allowed_hosts=["Chat.Example.com.", "*.x.org", "*", "::1", "10.0.0.1"])
    assert config.allowed_hosts == ["chat.example.com", "*.x.org", "*", "::1", "10.0.0.1"]
