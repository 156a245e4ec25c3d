"""`${VAR}` expansion: in strings, from the given environment, with file:line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import ConfigError, DiscordConfig, TelegramConfig, load_gateway, load_profile
from config.interpolate import expand_variables, interpolate_tree
from tests.support.config_files import WriteYaml


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "1"}, "1"),
        ("x-${A}-${B}-y", {"A": "1", "B": "2"}, "x-1-2-y"),
        ("${A:-fallback}", {}, "fallback"),
        ("${A:-fallback}", {"A": ""}, "fallback"),
        ("${A:-fallback}", {"A": "set"}, "set"),
        ("${A:-}", {}, ""),
        ("${A:-a:b}c}", {}, "a:bc}"),
        ("$${A}", {"A": "1"}, "${A}"),
        ("$$${A}", {"A": "1"}, "$${A}"),
        ("pa$$word $5 $A", {"A": "1"}, "pa$$word $5 $A"),
        ("${A}", {"A": "${B}"}, "${B}"),
    ],
)
def test_expand_variables(text: str, env: dict[str, str], expected: str) -> None:
    assert expand_variables(text, env) == (expected, [])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${MISSING}", "environment variable 'MISSING' is not set"),
        ("${not valid}", "invalid variable reference"),
        ("${1ABC}", "invalid variable reference"),
        ("abc ${OPEN", "'${' is not closed by '}'"),
    ],
)
def test_expand_variables_problems(text: str, message: str) -> None:
    expanded, problems = expand_variables(text, {}, ("channels", 0, "token"))
    assert expanded == text
    assert [(p.path, p.message) for p in problems] == [(("channels", 0, "token"), message)]


def test_interpolate_tree_touches_string_values_only() -> None:
    data = {"${K}": "${V}", "n": 5, "items": ["${V}", True, None], "nested": {"x": "$${V}"}}
    result = interpolate_tree(data, {"K": "key", "V": "value"})
    assert result.data == {
        "${K}": "value",
        "n": 5,
        "items": ["value", True, None],
        "nested": {"x": "${V}"},
    }
    assert result.problems == []
    assert result.expanded == {("${K}",), ("items", 0), ("nested", "x")}


def test_variables_fill_a_profile(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels:
          - type: telegram
            token: ${TELEGRAM_TOKEN}
            poll_timeout_s: ${POLL_S:-12.5}
            require_mention: ${MENTION:-false}
            allow: ["${OWNER_ID}", 42]
          - type: discord
            token: 'prefix-${DISCORD_TOKEN}'
        """,
    )
    env = {"TELEGRAM_TOKEN": "9:tok", "OWNER_ID": "777", "DISCORD_TOKEN": "dtok"}
    telegram, discord = load_profile(path, env=env).channels
    assert isinstance(telegram, TelegramConfig)
    assert telegram.token.get_secret_value() == "9:tok"
    assert telegram.poll_timeout_s == 12.5
    assert telegram.require_mention is False
    assert telegram.allow == ["777", 42]
    assert isinstance(discord, DiscordConfig)
    assert discord.token.get_secret_value() == "prefix-dtok"


def test_unset_variable_names_variable_file_and_line(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels:
          - type: discord
            allow: ["*"]
            token: ${DISCORD_TOKEN}
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_profile(path, env={})
    (problem,) = caught.value.problems
    assert (problem.file, problem.line) == (path, 4)
    assert problem.message == (
        "environment variable 'DISCORD_TOKEN' is not set (in channels[0].token)"
    )
    assert "${DISCORD_TOKEN:-" in problem.suggestion
    assert str(problem).startswith(f"{path}:4: environment variable 'DISCORD_TOKEN'")


def test_block_scalar_reports_the_line_of_the_value(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels: [{type: cli}]
        agent:
          type: openai
          model: m
          system_prompt: >
            You are ${BOT_NAME},
            a helpful bot.
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_profile(path, env={})
    (problem,) = caught.value.problems
    assert problem.line == 5
    assert "'BOT_NAME'" in problem.message


def test_every_unset_variable_in_every_file_is_reported(write_yaml: WriteYaml) -> None:
    gateway = write_yaml(
        "gateway.yaml",
        """
        http:
          port: ${HTTP_PORT}
        """,
    )
    write_yaml(
        "profiles/a.yaml",
        """
        channels:
          - type: telegram
            token: ${A_TOKEN}
          - type: discord
            token: ${B_TOKEN}
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_gateway(gateway, env={})
    assert [(p.file.name, p.line) for p in caught.value.problems] == [
        ("gateway.yaml", 2),
        ("a.yaml", 3),
        ("a.yaml", 5),
    ]
    assert ["HTTP_PORT" in caught.value.problems[0].message] == [True]
    # Every command reads the .env beside gateway.yaml too, and `init` said to fill it in: the
    # advice names it, whether or not it exists yet.
    env_file = gateway.parent / ".env"
    assert not env_file.exists()
    for problem, name in zip(
        caught.value.problems, ("HTTP_PORT", "A_TOKEN", "B_TOKEN"), strict=True
    ):
        assert problem.suggestion.startswith(
            f"set {name} in the environment or in {env_file}, or give a default"
        )


def test_gateway_values_come_from_variables(write_yaml: WriteYaml) -> None:
    gateway = write_yaml(
        "gateway.yaml",
        """
        data_dir: ${DATA_DIR:-/srv/octos}
        http:
          port: ${HTTP_PORT:-8090}
        logging:
          level: ${LOG_LEVEL:-info}
        """,
    )
    write_yaml("profiles/bot.yaml", "channels: [{type: cli}]\n")
    loaded = load_gateway(gateway, env={"HTTP_PORT": "0", "LOG_LEVEL": "ERROR"})
    assert loaded.gateway.data_dir == Path("/srv/octos")
    assert loaded.gateway.http.port == 0
    assert loaded.gateway.logging.level == "error"
