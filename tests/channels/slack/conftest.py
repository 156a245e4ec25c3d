"""A running Slack channel (the real slack-bolt and slack_sdk) against the fake Slack."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bus import InboundMessage
from channels.slack import SlackChannel, SlackTimeouts
from config import SlackConfig
from tests.channels.conftest import fake_fixture
from tests.channels.started import OnBus, started_on_bus
from tests.fakes.slack_server import FakeSlack

WAIT_S = 10.0
ALICE = "UALICE0001"
BOB = "UBOB000001"
DM = "DALICE0001"
GENERAL = "CGENERAL01"

#: What slack_sdk and slack-bolt read from the environment by themselves, besides the proxy
#: variables that tests/channels/conftest.py clears for every channel test.
_AMBIENT = (
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_CLIENT_ID",
    "SLACK_CLIENT_SECRET",
)

#: Short, so a dropped connection is noticed at once; pongs come back within 0.25 s.
TEST_TIMEOUTS = SlackTimeouts(request_s=5.0, connect_s=5.0, ping_interval_s=0.5)


@pytest.fixture(autouse=True)
def _no_ambient_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slack credentials in the developer's environment must not reach the tests."""
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)


def slack_config(fake: FakeSlack, *, mode: str = "socket", **fields: Any) -> SlackConfig:
    return SlackConfig.model_validate(
        {
            "bot_token": fake.bot_token,
            "app_token": fake.app_token if mode == "socket" else None,
            "signing_secret": fake.signing_secret if mode == "http" else None,
            "mode": mode,
            "base_url": fake.base_url,
            **fields,
        }
    )


def make_channel(
    fake: FakeSlack,
    data_dir: Path,
    *,
    mode: str = "socket",
    timeouts: SlackTimeouts = TEST_TIMEOUTS,
    **fields: Any,
) -> SlackChannel:
    """The channel on the fake Slack; `fields` go to its config."""
    config = slack_config(fake, mode=mode, **fields)
    return SlackChannel(config, data_dir=data_dir, timeouts=timeouts)


@dataclass
class RunningSlack(OnBus[FakeSlack, SlackChannel]):
    task: asyncio.Task[None]
    data_dir: Path

    async def push_and_ack(
        self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0
    ) -> str:
        """Push an event and wait for its ack, which comes once the channel has queued it."""
        pushed_id, envelope_id = await self.fake.push_event(
            event, event_id=event_id, retry_attempt=retry_attempt
        )
        await self.fake.wait_until(lambda: self.fake.acked(envelope_id), WAIT_S)
        return pushed_id

    async def say(self, channel: str, user: str, text: str, **kw: Any) -> InboundMessage:
        """A user posts, the event goes out, the agent receives the inbound message."""
        await self.fake.push_event(self.fake.user_message(channel, user, text, **kw))
        return await self.next_inbound()


@asynccontextmanager
async def run_slack(fake: FakeSlack, data_dir: Path, **options: Any) -> AsyncIterator[RunningSlack]:
    """The channel started on a fresh bus and receiving; stopped and awaited afterwards."""
    channel = make_channel(fake, data_dir, **options)

    async def ready(_task: asyncio.Task[None]) -> None:
        await channel.wait_receiving()
        if options.get("mode", "socket") == "socket":
            await fake.wait_connected(timeout_s=WAIT_S)

    async with started_on_bus(channel, ready, name="slack-under-test") as (agent, task):
        yield RunningSlack(fake, channel, agent, task, data_dir)


fake_slack = fake_fixture(FakeSlack)


@pytest.fixture
async def slack(fake_slack: FakeSlack, tmp_path: Path) -> AsyncIterator[RunningSlack]:
    async with run_slack(fake_slack, tmp_path) as running:
        yield running
