"""Configuration errors as a person sees them: file, line, message, suggestion; no secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from config import CHANNEL_TYPES, ConfigError, ConfigProblem, load_gateway, load_profile
from tests.support.config_files import ProblemsIn, WriteYaml, problems_of


def test_problem_text_format() -> None:
    problem = ConfigProblem(Path("bots/a.yaml"), 7, "missing required key 'token'", "add it")
    assert str(problem) == "bots/a.yaml:7: missing required key 'token'; add it"
    assert str(ConfigProblem(Path("g.yaml"), None, "file not found", "check")) == (
        "g.yaml: file not found; check"
    )


def test_typo_reports_its_line_and_a_did_you_mean(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        agent:
          type: echo
        channels:
          - type: cli
          - type: telegram
            tokne: "123:abc"
        """,
    )
    problems = problems_of(path)
    assert [(p.line, p.message) for p in problems] == [
        (5, "missing required key 'token' in channels[1] (telegram)"),
        (6, "unknown key 'tokne' in channels[1] (telegram)"),
    ]
    assert problems[1].suggestion == "did you mean 'token'?"
    assert str(problems[1]) == (
        f"{path}:6: unknown key 'tokne' in channels[1] (telegram); did you mean 'token'?"
    )


def test_missing_secret_suggests_an_environment_variable(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: slack
            app_token: xapp-1
        """
    )
    assert problem.line == 2
    assert problem.message == "missing required key 'bot_token' in channels[0] (slack)"
    assert "${SLACK_BOT_TOKEN}" in problem.suggestion


def test_unknown_top_level_key_without_close_match_lists_the_keys(
    problems_in: ProblemsIn,
) -> None:
    (problem,) = problems_in(
        """
        channels: []
        frobnicate: true
        """
    )
    assert (problem.line, problem.message) == (2, "unknown key 'frobnicate' at the top level")
    assert problem.suggestion.endswith(
        "agent, channels, sessions, queue_mode, max_media_bytes, transcription, "
        "delivery_deadline_s, buttons_ttl_s, buttons_single_use, edits, working_reaction, "
        "inbound_reactions, agents, routes, agent_switch"
    )


def test_wrong_types(problems_in: ProblemsIn) -> None:
    problems = problems_in(
        """
        agent:
          type: echo
          delay_s: soon
          pieces: 2.5
        channels:
          - type: telegram
            token: "1:a"
            require_mention: perhaps
            allow: [1, [2]]
        sessions: 10
        """
    )
    assert [(p.line, p.message) for p in problems] == [
        (3, "'delay_s' in agent (echo): expected a number"),
        (4, "'pieces' in agent (echo): expected a whole number"),
        (8, "'require_mention' in channels[0] (telegram): expected true or false"),
        (9, "'allow[1]' in channels[0] (telegram): expected a string or a whole number"),
        (10, "'sessions': expected a mapping of keys to values"),
    ]
    assert problems[0].suggestion == "for example 0 (the default)"


def test_out_of_range_and_invalid_choices(problems_in: ProblemsIn) -> None:
    problems = problems_in(
        """
        channels:
          - type: api
            port: 99999
          - type: telegram
            token: "1:a"
            mode: pooling
        """
    )
    assert [(p.line, p.message) for p in problems] == [
        (3, "'port' in channels[0] (api): must be at most 65535"),
        (6, "'mode' in channels[1] (telegram): invalid value 'pooling'"),
    ]
    assert problems[1].suggestion == "did you mean 'polling'? use one of: polling, webhook"


def test_unknown_channel_type_lists_the_known_ones(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: cli
          - type: telegarm
            token: x
        """
    )
    assert problem.line == 3
    assert problem.message == "unknown channel type 'telegarm' in channels[1]"
    assert problem.suggestion == (
        f"did you mean 'telegram'? known types: {', '.join(CHANNEL_TYPES)}"
    )
    assert CHANNEL_TYPES[:6] == ("telegram", "discord", "slack", "api", "cli", "plugin")


def test_channel_without_type(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - token: x
        """
    )
    assert (problem.line, problem.message) == (2, "missing required key 'type' in channels[0]")
    assert "telegram" in problem.suggestion


def test_unknown_agent_type(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels: [{type: cli}]
        agent:
          type: opanai
          model: x
        """
    )
    assert (problem.line, problem.message) == (2, "unknown agent type 'opanai' in agent")
    assert problem.suggestion.startswith("did you mean 'openai'?")


def test_duplicate_channel_type_points_at_the_second(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: discord
            token: a
          - type: cli
          - type: discord
            token: b
        """
    )
    assert problem.line == 5
    assert "channel 'discord' is already configured in channels[0]" in problem.message


def test_mode_validators_point_at_mode(problems_in: ProblemsIn) -> None:
    problems = problems_in(
        """
        channels:
          - type: telegram
            token: "1:a"
            mode: webhook
          - type: slack
            bot_token: xoxb-1
            mode: http
        """
    )
    assert [(p.line, p.message) for p in problems] == [
        (4, "'mode' in channels[0] (telegram): webhook mode requires 'webhook_url'"),
        (7, "'mode' in channels[1] (slack): http mode requires 'signing_secret'"),
    ]


def test_slack_socket_mode_by_default_needs_app_token(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: slack
            bot_token: xoxb-1
        """
    )
    assert problem.line == 2
    assert problem.message == "'mode' in channels[0] (slack): socket mode requires 'app_token'"


def test_invalid_yaml_reports_the_marks_line(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: telegram
            token: "123:abc
        agent: {}
        """
    )
    assert problem.message.startswith("invalid YAML: ")
    assert problem.line == 5
    assert "123:abc" not in str(problem)


def test_invalid_yaml_indentation(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: cli
         bad: indent
        """
    )
    assert problem.message.startswith("invalid YAML: ")
    assert problem.line == 3


def test_top_level_must_be_a_mapping(write_yaml: WriteYaml) -> None:
    path = write_yaml("bot.yaml", "- type: cli\n")
    (problem,) = problems_of(path)
    assert (problem.line, problem.message) == (
        1,
        "expected a mapping of keys to values at the top level",
    )


def test_duplicate_yaml_keys_are_errors(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        queue_mode: collect
        channels: [{type: cli}]
        queue_mode: interrupt
        """
    )
    assert (problem.line, problem.message) == (
        3,
        "duplicate key 'queue_mode' (first given on line 1)",
    )


def test_merge_keys_and_anchors_work(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        x-common: &common
          allow: ["*"]
        """,
    )
    (problem,) = problems_of(path)
    assert problem.message == "unknown key 'x-common' at the top level"
    anchored = write_yaml(
        "anchored.yaml",
        """
        channels:
          - &tg
            type: telegram
            token: "1:a"
            allow: [1]
          - <<: *tg
            type: discord
            token: d
        """,
    )
    channels = load_profile(anchored, env={}).channels
    assert [channel.type for channel in channels] == ["telegram", "discord"]
    assert channels[1].allow == [1]


def test_secrets_are_not_echoed_in_errors(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        agent:
          type: webhook
          url: ${HOOK_URL}
          headers:
            Authorization: 12345
        channels:
          - type: telegram
            token: ${TG_TOKEN}
            secret_token: "not valid SECRET-1"
            mode: ${TG_TOKEN}
          - type: api
            port: ${TG_TOKEN}
            auth_token: ${UNSET_IS_NO_TOKEN:-}
          - type: discord
            token: ${EMPTY}
        """,
    )
    env = {"HOOK_URL": "ftp://SECRET-2@host", "TG_TOKEN": "SECRET-3", "EMPTY": ""}
    problems = problems_of(path, env)
    assert len(problems) == 6
    text = "\n".join(str(problem) for problem in problems)
    assert "SECRET" not in text
    assert "12345" not in text
    assert [p.line for p in problems] == [3, 5, 9, 10, 12, 15]
    assert "'token' in channels[2] (discord): is empty" in text


def test_gateway_errors_still_check_the_profiles(write_yaml: WriteYaml) -> None:
    gateway_path = write_yaml(
        "gateway.yaml",
        """
        profiles_dir: bots
        logging:
          level: loud
        shutdown_grace_s: -1
        """,
    )
    write_yaml("bots/one.yaml", "queue_mode: 3\n")
    with pytest.raises(ConfigError) as caught:
        load_gateway(gateway_path, env={})
    assert [(p.file.name, p.line) for p in caught.value.problems] == [
        ("gateway.yaml", 3),
        ("gateway.yaml", 4),
        ("one.yaml", 1),
    ]
    assert caught.value.problems[0].message == "'level' in logging: invalid value 'loud'"
    assert caught.value.problems[1].message == "'shutdown_grace_s': must be at least 0"


def test_error_text_has_no_pydantic_dump(write_yaml: WriteYaml) -> None:
    path = write_yaml("bot.yaml", "channels: [{type: cli, allow: {a: 1}}]\nsessions: {x: 1}\n")
    with pytest.raises(ConfigError) as caught:
        load_profile(path, env={})
    text = str(caught.value)
    for pydantic_word in ("validation error", "input_value", "errors.pydantic.dev", "type="):
        assert pydantic_word not in text
    assert len(caught.value.problems) == 2


def test_telegram_webhook_mode_requires_a_secret_token(problems_in: ProblemsIn) -> None:
    problems = problems_in(
        """
        channels:
          - type: telegram
            token: "1:a"
            mode: webhook
            webhook_url: https://bot.example.com/telegram/webhook
        """
    )
    assert len(problems) == 1
    assert problems[0].line == 4
    assert "webhook mode requires 'secret_token'" in problems[0].message
    assert "secret_token:" in str(problems[0])


def test_a_route_to_an_unknown_agent_names_its_line(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        agents:
          coder: {type: echo}
        routes:
          - match: {prefix: /code}
            agent: coder
          - match: {chat_type: group}
            agent: reviewer
        """
    )
    assert problem.line == 7
    assert "names agent 'reviewer'" in problem.message
    assert "default, coder" in problem.suggestion


def test_agent_and_a_default_in_agents_is_an_error_at_the_second(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        agent: {type: echo}
        agents:
          default: {type: echo}
        """
    )
    assert problem.line == 3
    assert "both name the default agent" in problem.message
