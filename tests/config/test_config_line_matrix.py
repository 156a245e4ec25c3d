"""The LINE and Matrix channel configs: required secrets, defaults, unknown keys, user ids."""

from __future__ import annotations

from config import LineConfig, MatrixConfig
from tests.support.config_files import ProblemsIn


def test_line_defaults_point_at_line_s_own_hosts() -> None:
    config = LineConfig(channel_secret="s", channel_access_token="t")
    assert config.webhook_path == "/line/webhook"
    assert config.api_base_url == "https://api.line.me"
    assert config.data_api_base_url == "https://api-data.line.me"
    assert config.allow == []


def test_the_line_webhook_secret_is_never_optional(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: line
            channel_access_token: "token"
        """
    )
    assert "channel_secret" in problem.message
    assert problem.line == 2


def test_an_empty_line_secret_is_refused(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: line
            channel_secret: ""
            channel_access_token: "token"
        """
    )
    assert "channel_secret" in str(problem)


def test_unknown_keys_are_errors(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: matrix
            homeserver: https://matrix.example.org
            user_id: "@octos:example.org"
            access_token: "t"
            auto_joinn: false
        """
    )
    assert "auto_joinn" in problem.message
    assert problem.line == 6


def test_a_matrix_user_id_must_look_like_one(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(
        """
        channels:
          - type: matrix
            homeserver: https://matrix.example.org
            user_id: octos
            access_token: "t"
        """
    )
    assert "not a Matrix user id" in problem.message
    assert "@localpart:server.name" in problem.suggestion


def test_matrix_defaults() -> None:
    config = MatrixConfig(
        homeserver="https://matrix.example.org", user_id="@octos:example.org", access_token="t"
    )
    assert config.require_mention is True
    assert config.auto_join is True
