"""`probe()` (what `doctor` runs): auth.test (and the app token) against the fake Slack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from channels.errors import AuthError
from tests.channels.slack.conftest import make_channel
from tests.fakes.slack_server import FakeSlack


async def test_probe_names_the_bot_and_checks_the_app_token(tmp_path: Path) -> None:
    async with FakeSlack() as fake:
        who = await make_channel(fake, tmp_path).probe()
        methods = [request.method for request in fake.requests]
    assert who == f"@octos (id {fake.bot_user_id}) in Octos Test"
    assert methods == ["auth.test", "apps.connections.open"]


async def test_http_mode_probes_only_the_bot_token(tmp_path: Path) -> None:
    async with FakeSlack() as fake:
        await make_channel(fake, tmp_path, mode="http").probe()
        assert [request.method for request in fake.requests] == ["auth.test"]


@pytest.mark.parametrize("which", ["bot_token", "app_token"])
async def test_a_token_slack_refuses_is_an_auth_error(tmp_path: Path, which: str) -> None:
    async with FakeSlack() as fake:
        wrong_token: dict[str, Any] = {which: "xoxb-1-wrong"}  # a config field, not `timeouts`
        channel = make_channel(fake, tmp_path, **wrong_token)
        with pytest.raises(AuthError) as raised:
            await channel.probe()
    assert "invalid_auth" in str(raised.value)
