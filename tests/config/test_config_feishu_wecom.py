"""The Feishu and WeCom channel models: their keys, defaults, and the errors a user can meet."""

from __future__ import annotations

import pytest

from config import FeishuConfig, WeComConfig
from tests.support.config_files import ProblemsIn, WriteYaml, problems_of

DOC_AES_KEY = "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"


def wecom_profile(*keys: str) -> str:
    """A profile of one WeCom channel with corp_id, agent_id and secret (lines 1 to 5), then
    `keys` (its other lines, from line 6), for the tests of its problems."""
    head = [
        "channels:",
        "  - type: wecom",
        "    corp_id: ww1",
        "    agent_id: 1000002",
        "    secret: s",
    ]
    return "\n".join([*head, *(f"    {key}" for key in keys)]) + "\n"


def test_feishu_defaults() -> None:
    config = FeishuConfig(app_id="cli_a", app_secret="s")
    assert config.mode == "websocket"
    assert config.webhook_path == "/feishu/events"
    assert config.base_url == "https://open.feishu.cn"
    assert config.require_mention is True
    assert config.allow == []


def test_wecom_defaults() -> None:
    config = WeComConfig(
        corp_id="ww1", agent_id=1, secret="s", token="t", encoding_aes_key=DOC_AES_KEY
    )
    assert config.webhook_path == "/wecom/callback"
    assert config.api_base_url == "https://qyapi.weixin.qq.com"
    assert config.allow == []


@pytest.mark.parametrize("missing", ["encrypt_key", "verification_token"])
def test_feishu_webhook_mode_names_the_missing_secret(write_yaml: WriteYaml, missing: str) -> None:
    present = {"encrypt_key": "k", "verification_token": "t"}
    del present[missing]
    extra = "".join(f"    {key}: {value}\n" for key, value in present.items())
    path = write_yaml(
        "bot.yaml",
        "channels:\n  - type: feishu\n    app_id: cli_a\n    app_secret: s\n    mode: webhook\n"
        + extra,
    )
    (problem,) = problems_of(path)
    assert missing in problem.message
    assert "mode: websocket" in problem.suggestion


@pytest.mark.parametrize(
    ("key", "reason"),
    [("jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2", "42 characters"), ("!" * 43, "not base64")],
)
def test_a_wrong_encoding_aes_key_is_explained(
    problems_in: ProblemsIn, key: str, reason: str
) -> None:
    (problem,) = problems_in(wecom_profile("token: t", f'encoding_aes_key: "{key}"'))
    assert problem.line == 7  # the encoding_aes_key line
    assert reason in problem.message
    assert "EncodingAESKey" in problem.suggestion


def test_a_missing_wecom_key_is_named(problems_in: ProblemsIn) -> None:
    (problem,) = problems_in(wecom_profile(f"encoding_aes_key: {DOC_AES_KEY}"))
    assert "token" in problem.message
