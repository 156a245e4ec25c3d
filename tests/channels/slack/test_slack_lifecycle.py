"""Start, stop, cancellation, bad tokens, health, proxies, and a connection that drops."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from bus import create_bus
from channels.errors import FatalChannelError, TransientError
from channels.health import HealthStatus
from channels.registry import ChannelContext, build_channel
from channels.slack import SlackChannel, proxy_for
from config.channels import SlackConfig
from tests.channels.slack.conftest import (
    ALICE,
    DM,
    TEST_TIMEOUTS,
    WAIT_S,
    RunningSlack,
    make_channel,
    run_slack,
)
from tests.fakes.slack_server import FakeSlack


async def test_start_authenticates_and_connects_through_the_configured_base_url(
    slack: RunningSlack,
) -> None:
    fake = slack.fake
    assert [r.method for r in fake.requests] == ["auth.test", "apps.connections.open"]
    auth_test, connections_open = fake.requests
    assert auth_test.headers["Authorization"] == f"Bearer {fake.bot_token}"
    assert connections_open.headers["Authorization"] == f"Bearer {fake.app_token}"
    identity = slack.channel.identity
    assert identity is not None
    assert (identity.user_id, identity.bot_id) == (fake.bot_user_id, fake.bot_id)


@pytest.mark.parametrize("method", ["auth.test", "apps.connections.open"])
@pytest.mark.parametrize("error", ["invalid_auth", "token_revoked"])
async def test_refused_credentials_on_start_are_fatal(
    fake_slack: FakeSlack, tmp_path: Path, method: str, error: str
) -> None:
    fake_slack.fail_next(method, error)
    channel = make_channel(fake_slack, tmp_path)
    _agent, publisher = create_bus(8)

    with pytest.raises(FatalChannelError, match=error):
        await channel.start(publisher.inbound_sender())

    health = await channel.health_check()
    assert health.status is HealthStatus.DOWN
    assert fake_slack.open_connections == 0


async def test_a_wrong_app_token_is_fatal(fake_slack: FakeSlack, tmp_path: Path) -> None:
    channel = make_channel(fake_slack, tmp_path, app_token="xapp-1-wrong")
    _agent, publisher = create_bus(8)

    with pytest.raises(FatalChannelError, match="invalid_auth"):
        await channel.start(publisher.inbound_sender())


async def test_an_unreachable_slack_is_transient(tmp_path: Path) -> None:
    async with FakeSlack() as fake:
        base_url = fake.base_url
    config = SlackConfig(bot_token="xoxb-1", app_token="xapp-1", base_url=base_url)
    channel = SlackChannel(config, data_dir=tmp_path)
    _agent, publisher = create_bus(8)

    with pytest.raises(TransientError):
        await channel.start(publisher.inbound_sender())


async def test_a_socket_that_cannot_connect_times_out_as_transient(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake_slack.socket_available = False
    # The same bound covers apps.connections.open, which must answer well within it even on a
    # loaded machine: it is the websocket that is meant to time out.
    channel = make_channel(fake_slack, tmp_path, timeouts=replace(TEST_TIMEOUTS, connect_s=2.0))
    _agent, publisher = create_bus(8)

    with pytest.raises(TransientError, match="no Socket Mode connection"):
        await channel.start(publisher.inbound_sender())
    assert fake_slack.open_connections == 0


async def test_stop_twice_and_start_after_stop(slack: RunningSlack) -> None:
    await slack.channel.stop()
    await slack.channel.stop()
    async with asyncio.timeout(WAIT_S):
        await slack.task
    await slack.fake.wait_until(lambda: slack.fake.open_connections == 0)

    _agent, publisher = create_bus(8)
    await slack.channel.start(publisher.inbound_sender())  # a stopped channel stays stopped
    assert (await slack.channel.health_check()).status is HealthStatus.DOWN


async def test_stop_before_start_returns_at_once(fake_slack: FakeSlack, tmp_path: Path) -> None:
    channel = make_channel(fake_slack, tmp_path)
    async with asyncio.timeout(1):
        await channel.stop()
    assert fake_slack.requests == []


async def test_cancellation_ends_start_within_a_second(slack: RunningSlack) -> None:
    slack.task.cancel()
    async with asyncio.timeout(1):
        with pytest.raises(asyncio.CancelledError):
            await slack.task
    await slack.fake.wait_until(lambda: slack.fake.open_connections == 0)


async def test_stop_during_connecting_returns_promptly(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    fake_slack.socket_available = False
    channel = make_channel(fake_slack, tmp_path, timeouts=replace(TEST_TIMEOUTS, connect_s=60.0))
    _agent, publisher = create_bus(8)
    task = asyncio.create_task(channel.start(publisher.inbound_sender()), name="connecting")
    await fake_slack.wait_until(lambda: fake_slack.calls("apps.connections.open"))

    async with asyncio.timeout(1):
        await channel.stop()
        await task


async def test_health_follows_the_connection(fake_slack: FakeSlack, tmp_path: Path) -> None:
    channel = make_channel(fake_slack, tmp_path)
    assert (await channel.health_check()).status is HealthStatus.STARTING

    async with run_slack(fake_slack, tmp_path) as running:
        assert (await running.channel.health_check()).status is HealthStatus.HEALTHY
        fake_slack.socket_available = False
        await fake_slack.drop_connections()
        await fake_slack.wait_until(lambda: fake_slack.open_connections == 0)
        await fake_slack.wait_until(lambda: len(fake_slack.calls("apps.connections.open")) >= 2)
        health = await running.channel.health_check()
        assert health.status is HealthStatus.DEGRADED
        assert "reconnecting" in health.reason

        fake_slack.socket_available = True
        await fake_slack.wait_connected(2, timeout_s=WAIT_S)
        # An acknowledged envelope shows the new connection is up at the client's end too.
        await running.push_and_ack(fake_slack.user_message(DM, ALICE, "back", channel_type="im"))
        assert (await running.channel.health_check()).status is HealthStatus.HEALTHY

    assert (await running.channel.health_check()).status is HealthStatus.DOWN


@pytest.mark.parametrize("graceful", [False, True])
async def test_a_dropped_connection_is_reconnected_and_nothing_answered_twice(
    slack: RunningSlack, graceful: bool
) -> None:
    fake = slack.fake
    post = fake.user_message(DM, ALICE, "before the drop", channel_type="im")
    event_id = await slack.push_and_ack(post)
    assert (await slack.next_inbound()).content == "before the drop"

    if graceful:
        await fake.send_disconnect()
    else:
        await fake.drop_connections()
    await fake.wait_connected(2, timeout_s=WAIT_S)
    await fake.wait_until(lambda: fake.open_connections == 1)

    # Slack re-delivers an event whose ack it never saw, with the same event_id.
    await slack.push_and_ack(post, event_id=event_id, retry_attempt=1)
    assert (await slack.say(DM, ALICE, "after", channel_type="im")).content == "after"
    assert slack.agent.inbound_depth() == 0
    assert len(fake.calls("apps.connections.open")) == 2


async def test_a_proxy_in_the_environment_is_bypassed_as_no_proxy_says(
    fake_slack: FakeSlack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on port 9: every request sent through this proxy would fail.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "slack.internal")
    assert proxy_for("https://slack.com/api/") == "http://127.0.0.1:9"
    assert proxy_for("https://slack.internal/api/") is None

    async with run_slack(fake_slack, tmp_path) as running:
        assert running.channel.web.proxy is None
        assert (await running.say(DM, ALICE, "through", channel_type="im")).content == "through"


async def test_the_registry_builds_the_channel_from_a_profile(
    fake_slack: FakeSlack, tmp_path: Path
) -> None:
    config = SlackConfig.model_validate(
        {
            "bot_token": fake_slack.bot_token,
            "app_token": fake_slack.app_token,
            "base_url": fake_slack.base_url,
            "allow": [ALICE],
        }
    )
    channel = build_channel(config, ChannelContext(profile="p1", data_dir=tmp_path))

    assert isinstance(channel, SlackChannel)
    assert channel.is_allowed(ALICE)
    assert not channel.is_allowed("USTRANGER1")
    assert channel.web.base_url == fake_slack.base_url
    assert channel.web_routes() == []


def test_mode_credentials_are_required() -> None:
    with pytest.raises(ValidationError, match="app_token"):
        SlackConfig.model_validate({"bot_token": "xoxb-1"})
    with pytest.raises(ValidationError, match="signing_secret"):
        SlackConfig.model_validate({"bot_token": "xoxb-1", "mode": "http"})
