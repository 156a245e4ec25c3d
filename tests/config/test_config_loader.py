"""Loading gateway.yaml with its profiles from disk, and the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import (
    DEFAULT_PROFILE_ID,
    ApiChannelConfig,
    CliChannelConfig,
    ConfigError,
    DiscordConfig,
    EchoAgentConfig,
    EmailConfig,
    OpenAIAgentConfig,
    PluginChannelConfig,
    SlackConfig,
    TelegramConfig,
    WebhookAgentConfig,
    default_config,
    load_gateway,
    load_profile,
)
from tests.support.config_files import WriteYaml

ENV = {
    "TELEGRAM_TOKEN": "123456:telegram-secret",
    "DISCORD_TOKEN": "discord-secret",
    "SLACK_BOT_TOKEN": "xoxb-slack-secret",
    "SLACK_APP_TOKEN": "xapp-slack-secret",
    "OPENAI_API_KEY": "sk-openai-secret",
}


def write_full_config(write_yaml: WriteYaml) -> Path:
    gateway = write_yaml(
        "etc/gateway.yaml",
        """
        data_dir: state
        profiles_dir: bots
        http:
          host: 0.0.0.0
          port: 9000
        logging:
          level: DEBUG
          format: json
        bus:
          backend: memory
          capacity: 128
        shutdown_grace_s: 2.5
        """,
    )
    write_yaml(
        "etc/bots/support.yaml",
        """
        agent:
          type: openai
          model: gpt-4o-mini
          api_key: ${OPENAI_API_KEY}
          system_prompt: You help with orders.
          max_history: 20
          timeout_s: 30
        channels:
          - type: telegram
            token: ${TELEGRAM_TOKEN}
            allow: [12345, "@alice"]
            parse_mode: markdownv2
            edit_interval_s: 1.5
          - type: discord
            token: ${DISCORD_TOKEN}
            allow: ["*"]
            require_mention: false
          - type: slack
            bot_token: ${SLACK_BOT_TOKEN}
            app_token: ${SLACK_APP_TOKEN}
            allow: [U123]
        sessions:
          fsync: always
          max_history: 100
          idle_timeout_s: 600
        queue_mode: interrupt
        """,
    )
    write_yaml(
        "etc/bots/aa-local.yaml",
        """
        agent:
          type: webhook
          url: http://127.0.0.1:5000/turn
          headers:
            X-Api-Key: ${HOOK_KEY:-dev-key}
        channels:
          - type: api
            port: 0
            auth_token: api-secret
            cors_origins: [http://localhost:3000]
          - type: cli
          - type: plugin
            class_path: my_channels.irc:IrcChannel
            allow: ["*"]
            options:
              server: irc.example.org
              port: 6697
        """,
    )
    return gateway


def test_full_config_loads(write_yaml: WriteYaml) -> None:
    gateway_path = write_full_config(write_yaml)
    loaded = load_gateway(gateway_path, env=ENV)
    etc = gateway_path.parent.absolute()

    assert loaded.source == gateway_path
    assert loaded.gateway.data_dir == etc / "state"
    assert loaded.gateway.profiles_dir == etc / "bots"
    assert (loaded.gateway.http.host, loaded.gateway.http.port) == ("0.0.0.0", 9000)
    assert (loaded.gateway.logging.level, loaded.gateway.logging.format) == ("debug", "json")
    assert loaded.gateway.bus.capacity == 128
    assert loaded.gateway.shutdown_grace_s == 2.5

    assert list(loaded.profiles) == ["aa-local", "support"]
    assert loaded.profile_sources == {
        "aa-local": etc / "bots" / "aa-local.yaml",
        "support": etc / "bots" / "support.yaml",
    }

    support = loaded.profiles["support"]
    assert isinstance(support.agent, OpenAIAgentConfig)
    assert support.agent.api_key is not None
    assert support.agent.api_key.get_secret_value() == "sk-openai-secret"
    assert (support.agent.max_history, support.agent.timeout_s) == (20, 30)
    telegram, discord, slack = support.channels
    assert isinstance(telegram, TelegramConfig)
    assert telegram.token.get_secret_value() == "123456:telegram-secret"
    assert telegram.allow == [12345, "@alice"]
    assert (telegram.parse_mode, telegram.edit_interval_s) == ("markdownv2", 1.5)
    assert isinstance(discord, DiscordConfig)
    assert discord.require_mention is False
    assert isinstance(slack, SlackConfig)
    assert slack.app_token is not None
    assert (support.sessions.fsync, support.sessions.max_history) == ("always", 100)
    assert support.sessions.idle_timeout_s == 600
    assert support.queue_mode == "interrupt"

    local = loaded.profiles["aa-local"]
    assert isinstance(local.agent, WebhookAgentConfig)
    header = local.agent.headers["X-Api-Key"]
    assert not isinstance(header, str)
    assert header.get_secret_value() == "dev-key"
    api, cli, plugin = local.channels
    assert isinstance(api, ApiChannelConfig)
    assert api.port == 0
    assert api.allow == ["*"]
    assert api.cors_origins == ["http://localhost:3000"]
    assert isinstance(cli, CliChannelConfig)
    assert isinstance(plugin, PluginChannelConfig)
    assert plugin.options == {"server": "irc.example.org", "port": 6697}
    assert loaded.warnings == []


def test_secrets_stay_out_of_the_loaded_config_repr(write_yaml: WriteYaml) -> None:
    loaded = load_gateway(write_full_config(write_yaml), env=ENV)
    text = repr(loaded) + str(loaded.profiles)
    for secret in [*ENV.values(), "api-secret", "dev-key"]:
        assert secret not in text


def test_empty_gateway_yaml_means_all_defaults(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "")
    write_yaml("profiles/main.yaml", "channels: [{type: cli}]\n")
    loaded = load_gateway(gateway_path, env={})
    base = gateway_path.parent.absolute()
    assert loaded.gateway.data_dir == base / "data"
    assert loaded.gateway.profiles_dir == base / "profiles"
    assert isinstance(loaded.profiles["main"].agent, EchoAgentConfig)


def test_absolute_and_home_paths_are_not_rebased(write_yaml: WriteYaml, tmp_path: Path) -> None:
    profiles = tmp_path / "elsewhere"
    gateway_path = write_yaml(
        "conf/gateway.yaml",
        f"""
        data_dir: ~/octos-data
        profiles_dir: {profiles}
        """,
    )
    write_yaml("elsewhere/bot.yaml", "channels: [{type: cli}]\n")
    loaded = load_gateway(gateway_path, env={})
    assert loaded.gateway.profiles_dir == profiles
    assert loaded.gateway.data_dir == Path("~/octos-data").expanduser()


def test_warnings_carry_file_and_line(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "{}\n")
    write_yaml("profiles/quiet.yaml", "channels: []\n")
    loud = write_yaml(
        "profiles/loud.yaml",
        """
        channels:
          - type: cli
          - type: discord
            token: abc
            allow: []
        """,
    )
    loaded = load_gateway(gateway_path, env={})
    quiet = gateway_path.parent / "profiles" / "quiet.yaml"
    assert [(w.file, w.line) for w in loaded.warnings] == [(loud, 5), (quiet, 1)]
    assert "channels[1] (discord) has an empty allow list" in loaded.warnings[0].message
    assert "no channels" in loaded.warnings[1].message
    assert str(loaded.warnings[0]).startswith(f"{loud}:5: ")


def test_missing_allow_key_warns_at_the_channel(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "")
    bot = write_yaml(
        "profiles/bot.yaml",
        """
        queue_mode: followup
        channels:
          - type: discord
            token: abc
        """,
    )
    loaded = load_gateway(gateway_path, env={})
    assert [(w.file, w.line) for w in loaded.warnings] == [(bot, 3)]


def test_profiles_dir_must_exist(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "profiles_dir: nowhere\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway(gateway_path, env={})
    (problem,) = caught.value.problems
    assert problem.file == gateway_path
    assert "profiles_dir" in problem.message
    assert "does not exist" in problem.message


def test_profiles_dir_without_profiles_is_an_error(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "")
    write_yaml("profiles/README.txt", "not a profile\n")
    with pytest.raises(ConfigError, match="no profiles in profiles_dir"):
        load_gateway(gateway_path, env={})


def test_profile_ids_are_checked(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "")
    write_yaml("profiles/my bot.yaml", "channels: [{type: cli}]\n")
    write_yaml("profiles/telegram.yaml", "channels: [{type: cli}]\n")
    write_yaml("profiles/.hidden.yaml", "this: is skipped\n")
    write_yaml("profiles/good_one-2.yml", "channels: [{type: cli}]\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway(gateway_path, env={})
    messages = [problem.message for problem in caught.value.problems]
    assert len(messages) == 2
    assert "profile id 'my bot'" in messages[0]
    assert "'telegram'" in messages[1]
    assert "channel name" in messages[1]


def test_same_profile_in_yaml_and_yml_is_an_error(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("gateway.yaml", "")
    write_yaml("profiles/bot.yaml", "channels: [{type: cli}]\n")
    write_yaml("profiles/bot.yml", "channels: [{type: cli}]\n")
    with pytest.raises(ConfigError, match=r"also defined by bot\.yaml"):
        load_gateway(gateway_path, env={})


def test_problems_of_all_files_are_collected(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml(
        "gateway.yaml",
        """
        http:
          port: eighty
        """,
    )
    write_yaml("profiles/a.yaml", "queue_mode: later\n")
    write_yaml("profiles/b.yaml", "channels: [{type: cli}]\n")
    write_yaml("profiles/c.yaml", "channels: {type: cli\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway(gateway_path, env={})
    files = [problem.file.name for problem in caught.value.problems]
    assert files == ["gateway.yaml", "a.yaml", "c.yaml"]
    assert str(caught.value).startswith("3 problems in the configuration:")


def test_missing_gateway_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_gateway(tmp_path / "absent.yaml", env={})
    (problem,) = caught.value.problems
    assert (problem.line, problem.message) == (None, "file not found")


def test_load_profile_alone(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "solo.yaml",
        """
        agent:
          type: echo
          delay_s: 0.01
          pieces: 5
        channels:
          - type: telegram
            token: ${TOKEN:-123:abc}
            mode: webhook
            webhook_url: https://bot.example/hook
            secret_token: s3cr3t_token
        """,
    )
    profile = load_profile(path, env={})
    assert profile.agent == EchoAgentConfig(delay_s=0.01, pieces=5)
    (telegram,) = profile.channels
    assert isinstance(telegram, TelegramConfig)
    assert telegram.token.get_secret_value() == "123:abc"
    assert telegram.mode == "webhook"


def test_load_profile_reads_os_environ_by_default(
    write_yaml: WriteYaml, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCTOS_TEST_DISCORD", "from-environ")
    path = write_yaml(
        "envbot.yaml", "channels: [{type: discord, token: '${OCTOS_TEST_DISCORD}'}]\n"
    )
    (discord,) = load_profile(path).channels
    assert isinstance(discord, DiscordConfig)
    assert discord.token.get_secret_value() == "from-environ"


def test_default_config() -> None:
    loaded = default_config()
    assert loaded.source is None
    assert loaded.profile_sources == {}
    assert loaded.gateway.data_dir == Path("data")
    assert (loaded.gateway.http.host, loaded.gateway.http.port) == ("127.0.0.1", 8090)
    assert list(loaded.profiles) == [DEFAULT_PROFILE_ID]
    profile = loaded.profiles[DEFAULT_PROFILE_ID]
    assert isinstance(profile.agent, EchoAgentConfig)
    # Streams visibly: each piece a snapshot of its own (snapshots are 0.1 s apart at most).
    assert profile.agent.pieces > 1
    assert profile.agent.delay_s > 0.1
    (api,) = profile.channels
    assert isinstance(api, ApiChannelConfig)
    assert (api.host, api.port, api.allow) == ("127.0.0.1", 8091, ["*"])
    assert loaded.warnings == []


def test_default_config_uses_the_given_data_dir(tmp_path: Path) -> None:
    assert default_config(tmp_path / "d").gateway.data_dir == tmp_path / "d"


def test_an_email_ca_file_is_relative_to_gateway_yaml(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml("etc/gateway.yaml", "profiles_dir: bots\n")
    write_yaml(
        "etc/bots/mail.yaml",
        """
        channels:
          - type: email
            address: bot@example.org
            imap: {host: imap.example.org, password: p, ca_file: tls/our-ca.pem}
            smtp: {host: smtp.example.org, ca_file: /etc/ssl/relay-ca.pem}
        """,
    )
    loaded = load_gateway(gateway_path, env={})
    [email] = loaded.profiles["mail"].channels
    assert isinstance(email, EmailConfig)
    assert email.imap.ca_file == gateway_path.parent.absolute() / "tls" / "our-ca.pem"
    assert email.smtp.ca_file == Path("/etc/ssl/relay-ca.pem")
