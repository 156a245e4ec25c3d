"""The agent answers with images and files, through the daemon and the platform fakes.

A webhook reply naming an image URL and a PDF (base64) arrives on Telegram as `sendPhoto` and
`sendDocument` with the exact bytes, after the text; the same reply arrives once after a
SIGKILL between the recorded outcome and the send; a URL the gateway cannot fetch leaves the
text and a note; a file over the platform's limit is an apology, not a silent drop; the openai
agent's Markdown image is sent as a photo; an email carries them as attachments; the HTTP API
answers with links that serve the bytes.
"""

from __future__ import annotations

import base64
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import DAEMON_ENV, WAIT_S, logged, running_daemon
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.openai_server import FakeOpenAI, ScriptedCompletion
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

USER = 6160
ALICE = "alice@example.org"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PDF = b"%PDF-1.4\n% a small report\n" + b"0" * 2000 + b"\n%%EOF\n"


def webhook_agent(hook: FakeWebhook) -> str:
    return f"{{type: webhook, url: {hook.url}}}"


def chart_and_report(hook: FakeWebhook, mode: str = "json") -> ScriptedReply:
    """A reply with text, an image by URL and a PDF by its bytes."""
    url = hook.serve("chart.png", PNG, "image/png")
    return ScriptedReply(
        mode=mode,  # type: ignore[arg-type]
        text="Here are the numbers.",
        attachments=(
            {"url": url},
            {"data": base64.b64encode(PDF).decode(), "mime": "application/pdf", "name": "q3.pdf"},
        ),
    )


def texts(telegram: FakeTelegram) -> list[str]:
    """The texts the chat shows now (edits applied)."""
    return [m["text"] for m in telegram.bot_messages(USER) if "text" in m]


def noted(telegram: FakeTelegram) -> bool:
    """Whether the chat shows a reply with a note about a file that could not be sent."""
    return any("could not be sent" in text for text in texts(telegram))


def uploaded(call: Any, field: str) -> bytes:
    return bytes(call.files[field].data)


@pytest.mark.parametrize("mode", ["json", "sse"])
async def test_a_webhook_reply_with_an_image_and_a_pdf_arrives_as_photo_and_document(
    tmp_path: Path, mode: str
) -> None:
    async with FakeTelegram() as telegram, FakeWebhook() as hook:
        hook.script(chart_and_report(hook, mode))
        profile = polling_profile(telegram, USER, webhook_agent(hook))
        async with running_daemon(tmp_path, {"main": profile}):
            telegram.push_message(USER, "the q3 numbers, please", user_id=USER)
            await telegram.wait_for_calls("sendDocument", timeout_s=30)
    [text] = telegram.calls("sendMessage")
    [photo] = telegram.calls("sendPhoto")
    [document] = telegram.calls("sendDocument")
    assert text.params["text"] == "Here are the numbers."
    assert text.at < photo.at < document.at
    assert uploaded(photo, "photo") == PNG
    assert uploaded(document, "document") == PDF
    assert document.files["document"].filename == "q3.pdf"
    kept = sorted(p.name for p in (tmp_path / "data" / "main" / "media" / "out").rglob("*.*"))
    assert kept == ["1-chart.png", "2-q3.pdf"]


async def test_the_files_go_out_once_after_a_sigkill_between_outcome_and_send(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as telegram, FakeWebhook() as hook:
        hook.script(chart_and_report(hook))
        config = write_config(
            tmp_path,
            {"main": polling_profile(telegram, USER, webhook_agent(hook))},
            http_port=free_port(),
        )
        held = telegram.hold("sendPhoto")
        daemon = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            telegram.push_message(USER, "the q3 numbers, please", user_id=USER)
            # The reply's text is out and its first file in hand: the outcome is recorded.
            await telegram.wait_for_calls("sendPhoto", timeout_s=30)
            daemon.signal(signal.SIGKILL)
            await daemon.wait()
        finally:
            await daemon.stop()
        # The upload the kill interrupted never reached the chat.
        telegram.fail_next("sendPhoto", 500, "Internal Server Error: the client left")
        held.set()
        restarted = await DaemonProcess(config, env=DAEMON_ENV).start()
        try:
            await telegram.wait_for_calls("sendDocument", timeout_s=30)
        finally:
            await restarted.stop()
    shown = telegram.bot_messages(USER)
    assert texts(telegram) == ["Here are the numbers."]
    assert len([m for m in shown if "photo" in m]) == 1
    assert len([m for m in shown if "document" in m]) == 1
    assert uploaded(telegram.calls("sendPhoto")[-1], "photo") == PNG
    # The turn ran once, and the file was fetched once: the restart sent what was kept.
    assert len(hook.requests) == 1
    assert hook.fetched == ["chart.png"]


async def test_a_file_that_cannot_be_fetched_leaves_the_text_and_a_note(tmp_path: Path) -> None:
    async with FakeTelegram() as telegram, FakeWebhook() as hook:
        hook.script(
            ScriptedReply(
                text="The chart:",
                attachments=(
                    {"url": hook.serve("gone.png", b"", "image/png", status=404)},
                    {"url": "ftp://files.example.com/chart.png"},
                ),
            )
        )
        profile = polling_profile(telegram, USER, webhook_agent(hook))
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            telegram.push_message(USER, "chart?", user_id=USER)
            warning = await daemon.wait_log(logged("turn.reply_file_unsent"))
            await telegram.wait_until(lambda: noted(telegram), timeout_s=30)
    assert (warning["channel"], warning["file"]) == ("telegram", "gone.png")
    assert warning["turn"]
    [text] = texts(telegram)
    assert text == (
        "The chart:\n\n(gone.png could not be sent: HTTP 404.)\n\n"
        "(chart.png could not be sent: only http(s) URLs are fetched.)"
    )
    assert telegram.calls("sendPhoto") == []


async def test_a_file_over_the_limit_is_not_fetched_and_the_text_says_so(tmp_path: Path) -> None:
    async with FakeTelegram() as telegram, FakeWebhook() as hook:
        hook.script(
            ScriptedReply(
                text="Report:", attachments=({"url": hook.serve("q3.pdf", PDF, "application/pdf")},)
            )
        )
        profile = polling_profile(telegram, USER, webhook_agent(hook)) + "max_media_bytes: 1000\n"
        async with running_daemon(tmp_path, {"main": profile}):
            telegram.push_message(USER, "report?", user_id=USER)
            await telegram.wait_until(lambda: noted(telegram), timeout_s=30)
    [text] = texts(telegram)
    assert text == (
        "Report:\n\n(q3.pdf could not be sent: it is larger than the 1000 bytes limit.)"
    )
    assert telegram.calls("sendDocument") == []


async def test_the_openai_agents_markdown_image_is_sent_as_a_photo(tmp_path: Path) -> None:
    async with FakeTelegram() as telegram, FakeOpenAI() as model, FakeWebhook() as files:
        url = files.serve("cat.png", PNG, "image/png")
        model.script(ScriptedCompletion(text=f"A cat:\n\n![a grey cat]({url})\n\nCute."))
        agent = f"{{type: openai, base_url: {model.base_url}, model: fake-model}}"
        profile = polling_profile(telegram, USER, agent)
        async with running_daemon(tmp_path, {"main": profile}):
            telegram.push_message(USER, "show me a cat", user_id=USER)
            await telegram.wait_for_calls("sendPhoto", timeout_s=30)
    [photo] = telegram.calls("sendPhoto")
    assert uploaded(photo, "photo") == PNG
    assert photo.params["caption"] == "a grey cat"
    assert texts(telegram) == ["A cat:\n\nCute."]


async def test_an_email_reply_carries_the_files_as_attachments(tmp_path: Path) -> None:
    async with FakeImap() as imap, FakeSmtp() as smtp, FakeWebhook() as hook:
        hook.script(chart_and_report(hook))
        profile = f"""\
agent: {webhook_agent(hook)}
channels:
  - type: email
    address: {imap.username}
    imap: {{host: 127.0.0.1, port: {imap.port}, security: none, password: "{imap.password}"}}
    smtp: {{host: 127.0.0.1, port: {smtp.port}, security: none, password: "{smtp.password}"}}
    allow: [{ALICE}]
"""
        async with running_daemon(tmp_path, {"main": profile}):
            await imap.deliver(make_mail(ALICE, "the q3 numbers, please"))
            await smtp.wait_until(lambda: len(smtp.to(ALICE)) == 1, WAIT_S)
    [reply] = smtp.to(ALICE)
    assert reply.text.strip() == "Here are the numbers."
    files = {
        part.get_filename(): (part.get_content_type(), part.get_content())
        for part in reply.message.iter_attachments()
    }
    assert files == {"chart.png": ("image/png", PNG), "q3.pdf": ("application/pdf", PDF)}


async def test_the_http_api_answers_with_links_that_serve_the_files(tmp_path: Path) -> None:
    port = free_port()
    async with FakeWebhook() as hook:
        hook.script(chart_and_report(hook))
        profile = f"agent: {webhook_agent(hook)}\nchannels: [{{type: api, port: {port}}}]\n"
        async with (
            running_daemon(tmp_path, {"main": profile}) as daemon,
            aiohttp.ClientSession() as http,
        ):
            await daemon.wait_log(logged("api.web_chat_ready"))
            async with http.post(
                f"http://127.0.0.1:{port}/v1/chat",
                json={"chat_id": "web-1", "content": "the q3 numbers, please"},
            ) as answered:
                assert answered.status == 200
                body = await answered.json()
            served = []
            for attachment in body["attachments"]:
                async with http.get(attachment["url"]) as response:
                    assert response.status == 200
                    served.append(await response.read())
    assert body["reply"] == "Here are the numbers."
    assert [(a["kind"], a["mime"], a["name"], a["size"]) for a in body["attachments"]] == [
        ("image", "image/png", "chart.png", len(PNG)),
        ("file", "application/pdf", "q3.pdf", len(PDF)),
    ]
    assert served == [PNG, PDF]
    assert str(tmp_path) not in json.dumps(body)
