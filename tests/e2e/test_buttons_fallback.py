"""Buttons where a platform has none (Matrix here): the reply ends with a numbered list, and a
reply of just the number is the tap of that button, through the daemon subprocess."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import WAIT_S, logged, running_daemon
from tests.fakes.matrix_server import SERVER, FakeMatrix
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply

pytestmark = pytest.mark.slow

ALICE = f"@alice:{SERVER}"
BUTTONS = [
    [{"text": "Approve", "data": "refund:42:yes"}, {"text": "Deny", "data": "refund:42:no"}],
]


def taps_seen(webhook: FakeWebhook) -> list[dict[str, Any]]:
    return [
        post.json["message"]["callback"]
        for post in webhook.requests
        if "callback" in post.json["message"]
    ]


async def test_matrix_shows_a_numbered_list_and_2_taps_the_second_button(tmp_path: Path) -> None:
    async with FakeMatrix() as matrix, FakeWebhook() as webhook:
        profile = f"""\
agent: {{type: webhook, url: "{webhook.url}"}}
queue_mode: followup
channels:
  - type: matrix
    homeserver: {matrix.homeserver}
    user_id: "{matrix.bot_user_id}"
    access_token: "{matrix.access_token}"
    allow: ["{ALICE}"]
"""
        async with running_daemon(tmp_path, {"mx": profile}) as daemon:
            await daemon.wait_log(logged("matrix.receiving"))
            await matrix.wait_until(lambda: matrix.long_polls_waiting > 0, WAIT_S)
            room = matrix.create_room([ALICE])
            webhook.script(ScriptedReply(text="Approve the refund?", buttons=BUTTONS))
            matrix.say(room, ALICE, "refund please")
            listed = "Approve the refund?\n\nReply 1 for Approve, 2 for Deny"
            await matrix.wait_until(lambda: listed in matrix.shown(room), WAIT_S)

            webhook.script(ScriptedReply(text="Denied."))
            matrix.say(room, ALICE, "2")
            await matrix.wait_until(lambda: "Denied." in matrix.shown(room), WAIT_S)
            [tap] = taps_seen(webhook)
            assert tap["data"] == "refund:42:no"
            assert webhook.requests[-1].json["message"]["content"] == "Deny"

            # The list belonged to the last reply: once another reply came, a number is text.
            webhook.script(ScriptedReply(text="One what?"))
            matrix.say(room, ALICE, "1")
            await matrix.wait_until(lambda: "One what?" in matrix.shown(room), WAIT_S)
            assert webhook.requests[-1].json["message"]["content"] == "1"
            assert len(taps_seen(webhook)) == 1
