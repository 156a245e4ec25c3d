"""Buttons on LINE, through the daemon subprocess, line-bot-sdk and the fake LINE Platform.

The webhook agent's reply with two buttons arrives as quick reply items with postback actions;
a tap (a `postback` event) reaches the agent as `message.callback` once, also when LINE
redelivers the event, and across a SIGKILL right after its 200; the 200 comes once the tap is
durable, while the agent is still answering; a second tap on the same message's buttons reaches
no agent, and the chat is told they were used.
"""

from __future__ import annotations

import asyncio
import copy
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged
from tests.fakes.line_server import FakeLine
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, write_config

pytestmark = pytest.mark.slow

ALICE = "U1111111111111111111111111111a11"
PATH = "/line/webhook"


def profile(line: FakeLine, webhook: FakeWebhook) -> str:
    return f"""\
agent: {{type: webhook, url: "{webhook.url}", timeout_s: 30}}
queue_mode: followup
channels:
  - type: line
    channel_secret: "{line.channel_secret}"
    channel_access_token: "{line.access_token}"
    webhook_path: {PATH}
    api_base_url: {line.api_base_url}
    data_api_base_url: {line.data_api_base_url}
    allow: [{ALICE}]
"""


def said(line: FakeLine, text: str) -> bool:
    return text in line.texts_to(ALICE)


async def started(config: Path) -> DaemonProcess:
    daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
    await daemon.wait_log(logged("line.receiving"))
    return daemon


async def asked_with_buttons(
    line: FakeLine, webhook: FakeWebhook, daemon: DaemonProcess
) -> list[dict[str, Any]]:
    """The user asks; the agent answers with two buttons: the quick reply actions shown."""
    webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
    event = line.text_event(ALICE, "refund please")
    assert await line.deliver(daemon.http_url + PATH, [event]) == 200
    await line.wait_until(lambda: any(line.quick_replies_to(ALICE)), WAIT_S)
    [actions] = [shown for shown in line.quick_replies_to(ALICE) if shown]
    return actions


async def test_buttons_are_quick_replies_and_a_tap_reaches_the_agent_once(
    tmp_path: Path,
) -> None:
    async with FakeLine() as line, FakeWebhook() as webhook:
        daemon = await started(write_config(tmp_path, {"ln": profile(line, webhook)}))
        url = daemon.http_url + PATH
        try:
            actions = await asked_with_buttons(line, webhook, daemon)
            [held] = [d.message for d in line.delivered_to(ALICE) if d.message.get("quickReply")]
            assert held["text"] == "Approve the refund?"
            assert [(a["type"], a["label"], a["displayText"]) for a in actions] == [
                ("postback", "Approve", "Approve"),
                ("postback", "Deny", "Deny"),
            ]

            # A slow agent: it answers only once the test has seen the tap's 200.
            webhook.script(ScriptedReply(text="Denied.", held=True))
            tap = line.postback_event(ALICE, actions[1]["data"])
            answered = asyncio.create_task(line.deliver(url, [tap]), name="line-tap")
            await webhook.control.holding.wait()
            assert await answered == 200  # while the agent still holds its answer
            redelivered = copy.deepcopy(tap)
            redelivered["deliveryContext"]["isRedelivery"] = True
            assert await line.deliver(url, [redelivered]) == 200
            assert not said(line, "Denied.")
            webhook.control.release.set()
            await line.wait_until(lambda: said(line, "Denied."), WAIT_S)
            [callback] = webhook.taps()
            assert callback["data"] == "refund:42:no"
            held_id = callback["message_id"]
            assert isinstance(held_id, str)
            assert held_id
            assert webhook.requests[-1].json["message"]["content"] == "Deny"

            # A second tap on the same message's buttons (a postback LINE had already sent
            # when it took the quick replies away) reaches no agent; the chat is told.
            asked = len(webhook.requests)
            late = line.postback_event(ALICE, actions[0]["data"])
            assert await line.deliver(url, [late]) == 200
            await line.wait_until(
                lambda: any("Already answered" in text for text in line.texts_to(ALICE)), WAIT_S
            )
            assert len(webhook.requests) == asked
            assert webhook.taps() == [{"data": "refund:42:no", "message_id": held_id}]
            assert line.texts_to(ALICE).count("Denied.") == 1
        finally:
            await daemon.stop()


async def test_a_tap_is_answered_once_across_a_sigkill_after_its_200(tmp_path: Path) -> None:
    async with FakeLine() as line, FakeWebhook() as webhook:
        config = write_config(tmp_path, {"ln": profile(line, webhook)})
        daemon = await started(config)
        try:
            actions = await asked_with_buttons(line, webhook, daemon)
            # The agent is asked, and killed with the daemon before it answers; the restarted
            # daemon asks it again, for the same turn.
            webhook.script(ScriptedReply(text="Approved.", held=True))
            webhook.script(ScriptedReply(text="Approved."))
            tap = line.postback_event(ALICE, actions[0]["data"])
            answered = asyncio.create_task(
                line.deliver(daemon.http_url + PATH, [tap]), name="line-tap"
            )
            await webhook.control.holding.wait()
            assert await answered == 200
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
            webhook.control.release.set()
            await webhook.control.client_disconnected.wait()
            daemon = await started(config)
            await line.wait_until(lambda: said(line, "Approved."), WAIT_S)
            # LINE redelivers the event (its webhook redelivery): the same tap, not a second.
            redelivered = copy.deepcopy(tap)
            redelivered["deliveryContext"]["isRedelivery"] = True
            assert await line.deliver(daemon.http_url + PATH, [redelivered]) == 200
            duplicates = await daemon.metric(
                "octos_messages_in_total", profile="ln", channel="line", outcome="duplicate"
            )
            assert duplicates == 1
            [callback] = webhook.taps()
            assert callback["data"] == "refund:42:yes"
            assert line.texts_to(ALICE).count("Approved.") == 1
        finally:
            await daemon.stop()
