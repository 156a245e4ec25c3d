"""Photos, voice notes and files a user sends on Telegram (and a photo on Discord) reach the
agent, through the daemon.

The openai agent sees a photo as an `image_url` part; a voice note is transcribed by the
profile's `/audio/transcriptions` endpoint before the turn, and the transcript is what the
session keeps; the webhook agent gets attachments with links the gateway serves (the exact
bytes; a wrong token is refused); a file over `max_media_bytes` and a failed transcription
leave placeholders, and the turn still runs.
"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from PIL import Image

from tests.e2e.conftest import WAIT_S, logged, running_daemon
from tests.e2e.telegram_profiles import polling_profile
from tests.fakes.discord_server import FakeAttachment, FakeDiscord, FakeUser
from tests.fakes.openai_server import FakeOpenAI, ScriptedCompletion
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.webhook_server import FakeWebhook, ScriptedReply
from tests.support.daemon import free_port

pytestmark = pytest.mark.slow

USER = 5150


def jpeg(width: int = 64, height: int = 48) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, "JPEG")
    return buffer.getvalue()


def openai_agent(fake: FakeOpenAI) -> str:
    return f"{{type: openai, base_url: {fake.base_url}, model: fake-model}}"


def user_contents(request_body: dict[str, Any]) -> list[Any]:
    return [m["content"] for m in request_body["messages"] if m["role"] == "user"]


async def test_a_photo_reaches_the_model_as_an_image_part(tmp_path: Path) -> None:
    photo = jpeg()
    async with FakeTelegram() as telegram, FakeOpenAI() as model:
        model.script(ScriptedCompletion(text="A red square."))
        profile = polling_profile(telegram, USER, openai_agent(model))
        async with running_daemon(tmp_path, {"main": profile}):
            telegram.push_message(USER, caption="what is this?", photo=photo, user_id=USER)
            await telegram.wait_for_calls("sendMessage", timeout_s=30)
    [request] = [r for r in model.requests if r.path == "/v1/chat/completions"]
    [content] = user_contents(request.body)
    assert content[0] == {"type": "text", "text": "what is this?"}
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.partition(",")[2]) == photo


async def test_a_discord_photo_reaches_the_model_as_an_image_part(tmp_path: Path) -> None:
    photo = jpeg()
    alice = FakeUser(id=111_111_111_111_111_111, username="alice")
    dm = 300_000_000_000_000_001
    async with FakeDiscord() as discord, FakeOpenAI() as model:
        model.script(ScriptedCompletion(text="A red square."))
        profile = f"""\
agent: {openai_agent(model)}
channels:
  - type: discord
    token: "{discord.token}"
    api_base_url: {discord.api_base_url}
    gateway_url: {discord.gateway_url}
    allow: [{alice.id}]
"""
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            await daemon.wait_log(logged("discord.gateway_ready"))
            await discord.wait_ready(WAIT_S)
            picture = FakeAttachment("square.jpg", photo, "image/jpeg")
            await discord.push_message(dm, alice, "what is this?", attachments=[picture])
            await discord.wait_until(lambda: discord.bot_messages(dm), WAIT_S)
    [request] = [r for r in model.requests if r.path == "/v1/chat/completions"]
    [content] = user_contents(request.body)
    assert content[0] == {"type": "text", "text": "what is this?"}
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.partition(",")[2]) == photo


async def test_a_voice_note_is_transcribed_and_its_words_are_the_user_message(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as telegram, FakeOpenAI() as model:
        model.transcript = "please book a table for two"
        profile = polling_profile(telegram, USER, openai_agent(model)) + (
            f"transcription: {{base_url: {model.base_url}, model: whisper-1, language: en}}\n"
        )
        async with running_daemon(tmp_path, {"main": profile}):
            telegram.push_message(USER, voice=(b"OggS voice bytes", 42), user_id=USER)
            await telegram.wait_for_calls("sendMessage", timeout_s=30)
            telegram.push_message(USER, "and at eight", user_id=USER)
            await telegram.wait_for_calls("sendMessage", 2, timeout_s=30)
    [(fields, (_name, audio))] = model.transcriptions
    assert audio == b"OggS voice bytes"
    assert (fields["model"], fields["language"]) == ("whisper-1", "en")
    first, second = [r for r in model.requests if r.path == "/v1/chat/completions"]
    assert user_contents(first.body) == ["please book a table for two"]
    # The next turn's history comes from the session: it kept the words (and names the audio).
    earlier, latest = user_contents(second.body)
    assert earlier.startswith("please book a table for two\n[audio: ")
    assert latest == "and at eight"


async def test_a_failed_transcription_leaves_a_placeholder_and_the_turn_runs(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as telegram, FakeOpenAI() as model:
        model.transcription_status = 500
        profile = polling_profile(telegram, USER, openai_agent(model)) + (
            f"transcription: {{base_url: {model.base_url}}}\n"
        )
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            telegram.push_message(USER, voice=(b"OggS voice bytes", 42), user_id=USER)
            await telegram.wait_for_calls("sendMessage", timeout_s=30)
            warning = await daemon.wait_log(logged("transcription.failed"))
    assert warning["channel"] == "telegram"
    assert warning["message_id"]
    [request] = [r for r in model.requests if r.path == "/v1/chat/completions"]
    assert user_contents(request.body) == [
        "[voice message, 0:42, not transcribed: the transcriber answered HTTP 500]"
    ]


async def test_an_unreadable_image_is_named_and_the_warning_names_the_message(
    tmp_path: Path,
) -> None:
    async with FakeTelegram() as telegram, FakeOpenAI() as model:
        profile = polling_profile(telegram, USER, openai_agent(model))
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            telegram.push_message(USER, caption="and this?", photo=b"not an image", user_id=USER)
            await telegram.wait_for_calls("sendMessage", timeout_s=30)
            warning = await daemon.wait_log(logged("media.image_not_shown"))
    assert warning["channel"] == "telegram"
    assert warning["message_id"]
    [request] = [r for r in model.requests if r.path == "/v1/chat/completions"]
    [content] = user_contents(request.body)
    assert content.startswith("and this?\n[image: ")
    assert "not shown: it cannot be read" in content


async def test_a_file_over_the_limit_is_named_not_downloaded(tmp_path: Path) -> None:
    async with FakeTelegram() as telegram, FakeOpenAI() as model:
        profile = polling_profile(telegram, USER, openai_agent(model)) + "max_media_bytes: 1000\n"
        async with running_daemon(tmp_path, {"main": profile}) as daemon:
            telegram.push_message(
                USER, caption="read this", document=("report.pdf", b"%PDF" * 500), user_id=USER
            )
            await telegram.wait_for_calls("sendMessage", timeout_s=30)
            warning = await daemon.wait_log(logged("media.not_downloaded"))
    assert (warning["channel"], warning["name"]) == ("telegram", "report.pdf")
    assert warning["message_id"]
    assert telegram.calls("getFile") == []
    [request] = [r for r in model.requests if r.path == "/v1/chat/completions"]
    assert user_contents(request.body) == [
        "read this\n[file: report.pdf, 2 KB, not downloaded: larger than the 1000 bytes limit]"
    ]


async def test_the_webhook_agent_gets_links_that_serve_the_exact_bytes(tmp_path: Path) -> None:
    document = b"quarterly numbers\n" * 100
    async with FakeTelegram() as telegram, FakeWebhook() as hook:
        hook.script(ScriptedReply(text="Got it."))
        profile = polling_profile(telegram, USER, f"{{type: webhook, url: {hook.url}}}")
        async with running_daemon(tmp_path, {"main": profile}):
            telegram.push_message(
                USER, caption="numbers", document=("q3.txt", document), user_id=USER
            )
            await telegram.wait_for_calls("sendMessage", timeout_s=30)
            request = hook.requests[0].json
            [attachment] = request["message"]["attachments"]
            async with aiohttp.ClientSession() as http:
                async with http.get(attachment["url"]) as served:
                    assert served.status == 200
                    body = await served.read()
                prefix, _, token = attachment["url"].rpartition("/")
                forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
                async with http.get(f"{prefix}/{forged}") as refused:
                    assert refused.status == 403
                async with http.get(f"{prefix}/") as listing:
                    assert listing.status in (403, 404)
    assert body == document
    assert hashlib.sha256(body).hexdigest() == attachment["sha256"]
    assert {k: attachment[k] for k in ("kind", "mime", "name", "size")} == {
        "kind": "file",
        "mime": "text/plain",
        "name": "q3.txt",
        "size": len(document),
    }
    assert str(tmp_path) not in hook.requests[0].body.decode()
    assert request["sender"] == {"id": f"{USER}|alice", "name": "Alice"}
    assert request["chat"] == {"id": str(USER), "type": "private", "title": None}


async def test_a_file_posted_to_the_http_api_reaches_the_agent(tmp_path: Path) -> None:
    photo = jpeg()
    port = free_port()
    async with FakeWebhook() as hook:
        hook.script(ScriptedReply(text="A red square."))
        profile = (
            f"agent: {{type: webhook, url: {hook.url}}}\nchannels: [{{type: api, port: {port}}}]\n"
        )
        async with (
            running_daemon(tmp_path, {"main": profile}) as daemon,
            aiohttp.ClientSession() as http,
        ):
            await daemon.wait_log(logged("api.web_chat_ready"))
            upload = {"data": base64.b64encode(photo).decode(), "name": "red.jpg"}
            request = {"chat_id": "web-1", "content": "what is this?", "attachments": [upload]}
            async with http.post(f"http://127.0.0.1:{port}/v1/chat", json=request) as answered:
                assert (answered.status, (await answered.json())["reply"]) == (200, "A red square.")
            [attachment] = hook.requests[0].json["message"]["attachments"]
            async with http.get(attachment["url"]) as served:
                body = await served.read()
    assert (attachment["kind"], attachment["mime"], attachment["name"]) == (
        "image",
        "image/jpeg",
        "red.jpg",
    )
    assert body == photo
