"""The LINE and Matrix channel configs: required secrets, defaults, unknown keys, user ids."""

from __future__ import annotations

from config import LineConfig, MatrixConfig
from tests.support.config_files import WriteYaml, problems_of


def test_line_defaults_point_at_line_s_own_hosts() -> None:
    config = LineConfig(channel_secret="s", channel_access_token="t")
    assert config.webhook_path == "/line/webhook"
    assert config.api_base_url == "https://api.line.me"
    assert config.data_api_base_url == "https://api-data.line.me"
    assert config.allow == []


def test_the_line_webhook_secret_is_never_optional(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels:
          - type: line
            channel_access_token: "token"
        """,
    )
    (problem,) = problems_of(path)
    assert "channel_secret" in problem.message
    assert problem.line == 2


def test_an_empty_line_secret_is_refused(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels:
          - type: line
            channel_secret: ""
            channel_access_token: "token"
        """,
    )
    (problem,) = problems_of(path)
    assert "channel_secret" in str(problem)


def test_unknown_keys_are_errors(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels:
          - type: matrix
            homeserver: https://matrix.example.org
            user_id: "@octos:example.org"
            access_token: "t"
            auto_joinn: false
        """,
    )
    (problem,) = problems_of(path)
    assert "auto_joinn" in problem.message
    assert problem.line == 6


def test_a_matrix_user_id_must_look_like_one(write_yaml: WriteYaml) -> None:
    path = write_yaml(
        "bot.yaml",
        """
        channels:
          - type: matrix
            homeserver: https://matrix.example.org
            user_id: octos
            access_token: "t"
        """,
    )
    (problem,) = problems_of(path)
    assert "not a Matrix user id" in problem.message
    assert "@localpart:server.name" in problem.suggestion


def test_matrix_defaults() -> None:
    config = MatrixConfig(
        homeserver="https://matrix.example.org", user_id="@octos:example.org", access_token="t"
    )
    assert config.require_mention is True
    assert config.auto_join is True
