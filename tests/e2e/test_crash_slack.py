"""Slack HTTP events across a SIGKILL: an event Slack was told was received is answered once,
and Slack's retries of it (same `event_id`, `X-Slack-Retry-Num`) after the restart are
recognised from the journal, not answered a second time."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S
from tests.e2e.slack_profiles import WEBHOOK_PATH, slack_http_profile
from tests.fakes.slack_server import FakeSlack
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

ALICE = "UALICE0001"
AGENT = "{type: echo, delay_s: 0.8, pieces: 2}"


def final_texts(fake: FakeSlack, channel: str) -> list[str]:
    return [str(message["text"]) for message in fake.bot_messages(channel)]


async def post(url: str, fake: FakeSlack, body: dict[str, Any], retry: int = 0) -> int:
    data = json.dumps(body).encode()
    headers = fake.sign(data)
    if retry:
        headers |= {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"}
    async with aiohttp.ClientSession() as http, http.post(url, data=data, headers=headers) as r:
        return r.status


async def test_an_acknowledged_event_survives_a_sigkill_and_its_retries_are_not_answered(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as fake:
        profile = slack_http_profile(fake, ALICE, agent=AGENT)
        config = write_config(tmp_path, {"main": profile}, http_port=free_port())
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await daemon.wait_log(lambda e: e.get("event") == "slack.receiving")
            url = daemon.http_url + WEBHOOK_PATH
            answered = fake.event_callback(
                fake.user_message(
                    "DCRASH0001", ALICE, "answered before the kill", channel_type="im"
                )
            )
            in_flight = fake.event_callback(
                fake.user_message("DCRASH0002", ALICE, "in flight at the kill", channel_type="im")
            )
            assert await post(url, fake, answered) == 200
            await fake.wait_until(
                lambda: final_texts(fake, "DCRASH0001") == ["answered before the kill"], WAIT_S
            )
            assert await post(url, fake, in_flight) == 200
            # Acknowledged means durable: killed at once, mid-turn.
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
            url = daemon.http_url + WEBHOOK_PATH
            await daemon.wait_log(lambda e: e.get("event") == "slack.receiving")
            await fake.wait_until(
                lambda: "in flight at the kill" in final_texts(fake, "DCRASH0002"), WAIT_S
            )
            # Slack retries both, as it does when an answer seemed slow.
            assert await post(url, fake, answered, retry=1) == 200
            assert await post(url, fake, in_flight, retry=1) == 200
            # A later message in each chat is answered: the retries were handled before it.
            for channel in ("DCRASH0001", "DCRASH0002"):
                later = fake.event_callback(
                    fake.user_message(channel, ALICE, f"later in {channel}", channel_type="im")
                )
                assert await post(url, fake, later) == 200

                def answered_later(c: str = channel) -> bool:
                    return final_texts(fake, c)[-1:] == [f"later in {c}"]

                await fake.wait_until(answered_later, WAIT_S)
        finally:
            await daemon.stop()
        assert final_texts(fake, "DCRASH0001") == [
            "answered before the kill",
            "later in DCRASH0001",
        ]
        shown = final_texts(fake, "DCRASH0002")
        # The kill may have cut the streamed first half of the reply short; the reply itself
        # is there exactly once.
        assert shown.count("in flight at the kill") == 1
        assert shown[-1] == "later in DCRASH0002"
        assert all("in flight at the kill".startswith(text) for text in shown[:-1])
