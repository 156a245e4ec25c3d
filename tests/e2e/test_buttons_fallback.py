"""Buttons where a platform has none (Matrix, email): the reply ends with a numbered list, and a
reply of just the number is the tap of that button, through the daemon subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import WAIT_S, logged, running_daemon
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.matrix_server import SERVER, FakeMatrix
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.webhook_server import APPROVE_OR_DENY, FakeWebhook, ScriptedReply

pytestmark = pytest.mark.slow

ALICE = f"@alice:{SERVER}"


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
            webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
            matrix.say(room, ALICE, "refund please")
            listed = "Approve the refund?\n\nReply 1 for Approve, 2 for Deny"
            await matrix.wait_until(lambda: listed in matrix.shown(room), WAIT_S)

            webhook.script(ScriptedReply(text="Denied."))
            matrix.say(room, ALICE, "2")
            await matrix.wait_until(lambda: "Denied." in matrix.shown(room), WAIT_S)
            [tap] = webhook.taps()
            assert tap["data"] == "refund:42:no"
            assert webhook.requests[-1].json["message"]["content"] == "Deny"

            # The list belonged to the last reply: once another reply came, a number is text.
            webhook.script(ScriptedReply(text="One what?"))
            matrix.say(room, ALICE, "1")
            await matrix.wait_until(lambda: "One what?" in matrix.shown(room), WAIT_S)
            assert webhook.requests[-1].json["message"]["content"] == "1"
            assert len(webhook.taps()) == 1


async def test_email_ends_the_reply_with_a_numbered_list_and_2_taps_the_second_button(
    tmp_path: Path,
) -> None:
    alice = "alice@example.org"
    async with FakeImap() as imap, FakeSmtp() as smtp, FakeWebhook() as webhook:
        profile = f"""\
agent: {{type: webhook, url: "{webhook.url}"}}
queue_mode: followup
channels:
  - type: email
    address: {imap.username}
    imap: {{host: 127.0.0.1, port: {imap.port}, security: none, password: "{imap.password}"}}
    smtp: {{host: 127.0.0.1, port: {smtp.port}, security: none, password: "{smtp.password}"}}
    allow: [{alice}]
"""
        async with running_daemon(tmp_path, {"mail": profile}) as daemon:
            await daemon.wait_log(logged("email.imap_connected"))
            await imap.wait_until(lambda: imap.idling > 0, WAIT_S)
            webhook.script(ScriptedReply(text="Approve the refund?", buttons=APPROVE_OR_DENY))
            await imap.deliver(make_mail(alice, "refund please", message_id="<r1@client.example>"))
            await smtp.wait_until(lambda: len(smtp.to(alice)) == 1, WAIT_S)
            [asked] = smtp.to(alice)
            assert "Reply 1 for Approve, 2 for Deny" in asked.text

            webhook.script(ScriptedReply(text="Denied."))
            await imap.deliver(make_mail(alice, "2", message_id="<r2@client.example>"))
            await smtp.wait_until(lambda: len(smtp.to(alice)) == 2, WAIT_S)
            assert "Denied." in smtp.to(alice)[-1].text
            [tap] = webhook.taps()
            assert tap["data"] == "refund:42:no"
            assert webhook.requests[-1].json["message"]["content"] == "Deny"
