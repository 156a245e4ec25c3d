"""In a cluster, a platform that is down holds back no other channel's replies.

Replies are delivered one at a time per outbound partition, and one whose platform is down is
retried until its delivery deadline, holding its partition all the while. So each channel has
partitions of its own: with one partition per channel, a Telegram bot refusing every
`sendMessage` (500) holds Telegram's partition, and a Slack profile's replies on the same
cluster (real NATS and PostgreSQL, an ingress and a worker daemon) are delivered meanwhile.
Telegram's reply arrives, once, when it is back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.e2e.cluster_daemons import cluster_config, processes, start_role
from tests.e2e.conftest import WAIT_S
from tests.e2e.slack_profiles import slack_socket_profile
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.support.daemon import DaemonProcess
from tests.support.postgres import fresh_scope

pytestmark = pytest.mark.slow

TELEGRAM_USER = 5101
SLACK_USER = "U0ALICE0001"
SLACK_DM = "DOUTAGE0001"


def replies_done(ingress: DaemonProcess, profile: str) -> int:
    """Replies of `profile` the ingress delivered, recorded and acknowledged."""
    return sum(
        1
        for event in ingress.logs
        if event.get("event") == "cluster.reply_done" and event.get("profile") == profile
    )


def telegram_retries(ingress: DaemonProcess) -> int:
    return sum(
        1
        for event in ingress.logs
        if event.get("event") == "retry.retrying" and event.get("channel") == "telegram"
    )


async def test_a_platform_down_holds_back_no_other_channels_replies(
    tmp_path: Path, nats_prefix: str, postgres_dsn: str
) -> None:
    down, other = fresh_scope(), fresh_scope()
    async with FakeTelegram() as telegram, FakeSlack() as slack, processes() as running:
        profiles = {
            down: polling_profile(telegram, TELEGRAM_USER, "{type: echo}"),
            other: slack_socket_profile(slack, SLACK_USER),
        }
        config = cluster_config(
            tmp_path, profiles, prefix=nats_prefix, dsn=postgres_dsn, partitions=1
        )
        ingress, worker = await asyncio.gather(
            start_role(config, "ingress"), start_role(config, "worker")
        )
        running += [ingress, worker]
        await slack.wait_connected(timeout_s=WAIT_S)

        telegram.fail_next("sendMessage", 500, "Internal Server Error", times=1_000_000)
        telegram.push_message(TELEGRAM_USER, "are you there?", user_id=TELEGRAM_USER)
        # Telegram's reply holds its partition, retried.
        await ingress.wait_log(lambda _event: telegram_retries(ingress) >= 2)
        await slack.push_event(
            slack.user_message(SLACK_DM, SLACK_USER, "and you?", channel_type="im")
        )
        await ingress.wait_log(lambda _event: replies_done(ingress, other) == 1)
        assert [m["text"] for m in slack.bot_messages(SLACK_DM)] == ["and you?"]
        assert replies_done(ingress, down) == 0

        telegram.recover("sendMessage")
        await ingress.wait_log(lambda _event: replies_done(ingress, down) == 1, timeout_s=60)
        assert [m["text"] for m in telegram.bot_messages(TELEGRAM_USER)] == ["are you there?"]
