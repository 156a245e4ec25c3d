"""The agent answers with images and files, through the daemon and the platform fakes.

A webhook reply naming an image URL and a PDF (base64) arrives on Telegram as `sendPhoto` and
`sendDocument` with the exact bytes, after the text, on Slack by `files_upload_v2`, on Discord
as attachments, on Matrix as `m.image` and `m.file` from the media repository; the same reply
arrives once after a SIGKILL between the recorded outcome and the send; a URL the gateway
cannot fetch leaves the text and a note; a file over the platform's limit (Discord's 10 MiB) is
an apology, not a silent drop; the openai
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
from tests.e2e.slack_profiles import slack_socket_profile
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.discord_server import FakeDiscord, FakeUser
from tests.fakes.discord_server.models import RecordedRequest as DiscordRequest
from tests.fakes.imap_server import FakeImap
from tests.fakes.mail import make_mail
from tests.fakes.matrix_server import SERVER as MATRIX_SERVER
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.openai_server import FakeOpenAI, ScriptedCompletion
from tests.fakes.slack_server import FakeSlack
from tests.fakes.smtp_server import FakeSmtp
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.daemon import DaemonProcess, free_port, write_config

pytestmark = pytest.mark.slow

USER = 6160
ALICE = "alice@example.org"
SLACK_USER, SLACK_DM = "UALICE0001", "DALICE0001"
DISCORD_USER = FakeUser(id=111_111_111_111_111_111, username="alice")
DISCORD_DM = 300_000_000_000_000_201
MATRIX_USER = f"@alice:{MATRIX_SERVER}"
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


def discord_posts(fake: FakeDiscord) -> list[DiscordRequest]:
    return fake.requests_to("POST", rf"/channels/{DISCORD_DM}/messages")


def matrix_files(fake: FakeMatrix, room: str) -> list[dict[str, Any]]:
    """The contents of the bot's file events in `room`."""
    events = [event["content"] for event in fake.bot_events(room)]
    return [content for content in events if "url" in content]


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


async def test_slack_gets_each_file_by_files_upload_v2(tmp_path: Path) -> None:
    async with FakeSlack() as slack, FakeWebhook() as hook:
        hook.script(chart_and_report(hook))
        profile = slack_socket_profile(slack, SLACK_USER, agent=webhook_agent(hook))
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            await slack.wait_connected(timeout_s=WAIT_S)
            await daemon.wait_log(logged("slack.receiving"))
            await slack.push_event(
                slack.user_message(SLACK_DM, SLACK_USER, "numbers?", channel_type="im")
            )
            await slack.wait_until(lambda: len(slack.files) == 2, WAIT_S)
    by_name = {str(f["name"]): f["data"] for f in slack.files.values()}
    assert by_name == {"chart.png": PNG, "q3.pdf": PDF}
    shown = slack.bot_messages(SLACK_DM)
    assert shown[0]["text"] == "Here are the numbers."
    assert [f["name"] for m in shown[1:] for f in m["files"]] == ["chart.png", "q3.pdf"]


def discord_profile(discord: FakeDiscord, hook: FakeWebhook) -> str:
    return f"""\
agent: {webhook_agent(hook)}
channels:
  - type: discord
    token: "{discord.token}"
    api_base_url: {discord.api_base_url}
    gateway_url: {discord.gateway_url}
    allow: [{DISCORD_USER.id}]
"""


async def test_discord_gets_each_file_as_an_attachment(tmp_path: Path) -> None:
    async with FakeDiscord() as discord, FakeWebhook() as hook:
        hook.script(chart_and_report(hook))
        async with running_daemon(tmp_path, {"main": discord_profile(discord, hook)}) as daemon:
            await daemon.wait_log(logged("discord.gateway_ready"))
            await discord.wait_ready(WAIT_S)
            await discord.push_message(DISCORD_DM, DISCORD_USER, "numbers?")
            await discord.wait_until(
                lambda: sum(len(p.files) for p in discord_posts(discord)) == 2, WAIT_S
            )
    posted = discord_posts(discord)
    assert posted[0].content == "Here are the numbers."
    files = [(f.filename, f.data) for post in posted for f in post.files]
    assert files == [("chart.png", PNG), ("q3.pdf", PDF)]
    assert all(post.json.get("nonce") for post in posted[1:])


async def test_matrix_gets_m_image_and_m_file_from_the_media_repository(tmp_path: Path) -> None:
    async with FakeMatrix() as matrix, FakeWebhook() as hook:
        hook.script(chart_and_report(hook))
        room = matrix.create_room([MATRIX_USER])
        profile = f"""\
agent: {webhook_agent(hook)}
channels:
  - type: matrix
    homeserver: {matrix.homeserver}
    user_id: "{matrix.bot_user_id}"
    access_token: "{matrix.access_token}"
    allow: ["{MATRIX_USER}"]
"""
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            await daemon.wait_log(logged("matrix.receiving"))
            await matrix.wait_until(lambda: matrix.long_polls_waiting > 0, WAIT_S)
            matrix.say(room, MATRIX_USER, "numbers?")
            await matrix.wait_until(lambda: len(matrix_files(matrix, room)) == 2, WAIT_S)
    assert [(name, data) for name, _type, data in matrix.uploads] == [
        ("chart.png", PNG),
        ("q3.pdf", PDF),
    ]
    image, document = matrix_files(matrix, room)
    assert (image["msgtype"], image["body"], image["info"]["mimetype"]) == (
        "m.image",
        "chart.png",
        "image/png",
    )
    assert (document["msgtype"], document["body"]) == ("m.file", "q3.pdf")
    assert matrix.media[image["url"].rpartition("/")[2]][0] == PNG


async def test_a_file_over_the_platforms_limit_is_an_apology_not_a_silent_drop(
    tmp_path: Path,
) -> None:
    video = b"\x00" * (11 * 1024 * 1024)
    async with FakeDiscord() as discord, FakeWebhook() as hook:
        url = hook.serve("talk.mp4", video, "video/mp4")
        hook.script(ScriptedReply(text="The talk:", attachments=({"url": url},)))
        async with running_daemon(tmp_path, {"main": discord_profile(discord, hook)}) as daemon:
            await daemon.wait_log(logged("discord.gateway_ready"))
            await discord.wait_ready(WAIT_S)
            await discord.push_message(DISCORD_DM, DISCORD_USER, "the talk?")
            warning = await daemon.wait_log(logged("delivery.attachment_too_large"))
            await discord.wait_until(lambda: len(discord_posts(discord)) == 2, WAIT_S)
    assert (warning["channel"], warning["file"], warning["size"]) == (
        "discord",
        "talk.mp4",
        len(video),
    )
    text, apology = (post.content for post in discord_posts(discord))
    assert text == "The talk:"
    assert apology == (
        "Sorry, I could not send talk.mp4 here: it is 11 MB, and discord takes at most 10 MB."
    )
    assert not any(post.files for post in discord_posts(discord))
