"""The fake Bot API itself: the wire format the tests of the channel rely on."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tests.fakes.telegram_server import FakeTelegram

TIMEOUT = aiohttp.ClientTimeout(total=10)


async def call(
    fake: FakeTelegram, method: str, *, token: str | None = None, **params: Any
) -> tuple[int, dict[str, Any]]:
    url = f"{fake.base_url}{token or fake.token}/{method}"
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.post(url, json=params) as response,
    ):
        return response.status, await response.json()


async def test_answers_have_telegrams_envelope(fake: FakeTelegram) -> None:
    status, body = await call(fake, "getMe")
    assert status == 200
    assert body["ok"] is True
    assert body["result"]["is_bot"] is True

    status, body = await call(fake, "sendMessage", chat_id=1, text="")
    assert (status, body["ok"], body["error_code"]) == (400, False, 400)
    assert body["description"] == "Bad Request: message text is empty"


@pytest.mark.parametrize(("token", "status"), [("1:wrong", 401), ("garbage", 404)])
async def test_a_bad_token_is_refused_like_telegram(
    fake: FakeTelegram, token: str, status: int
) -> None:
    answer_status, body = await call(fake, "getMe", token=token)
    assert answer_status == status
    assert body["ok"] is False


async def test_injected_429_carries_retry_after_then_passes(fake: FakeTelegram) -> None:
    fake.fail_next("sendMessage", 429, "Too Many Requests: retry after 3", retry_after=3, times=2)
    for _ in range(2):
        status, body = await call(fake, "sendMessage", chat_id=1, text="x")
        assert status == 429
        assert body["parameters"] == {"retry_after": 3}
    status, _ = await call(fake, "sendMessage", chat_id=1, text="x")
    assert status == 200


async def test_get_updates_holds_the_request_until_an_update_comes(fake: FakeTelegram) -> None:
    poll = asyncio.create_task(call(fake, "getUpdates", timeout=30))
    await fake.wait_until(lambda: fake.long_polls_waiting == 1)
    assert not poll.done()
    update_id = fake.push_update({"message": {"message_id": 1}})
    status, body = await asyncio.wait_for(poll, 5)
    assert status == 200
    assert [u["update_id"] for u in body["result"]] == [update_id]
    # One request, answered once: no busy loop behind the scenes.
    assert len(fake.calls("getUpdates")) == 1


async def test_get_updates_honours_the_offset(fake: FakeTelegram) -> None:
    first = fake.push_update({"message": {"message_id": 1}})
    second = fake.push_update({"message": {"message_id": 2}})
    _, body = await call(fake, "getUpdates")
    assert [u["update_id"] for u in body["result"]] == [first, second]
    _, body = await call(fake, "getUpdates", offset=second)
    assert [u["update_id"] for u in body["result"]] == [second]
    _, body = await call(fake, "getUpdates", offset=second + 1)
    assert body["result"] == []
    assert fake.pending_update_ids == []


async def test_get_updates_conflicts_with_a_webhook(fake: FakeTelegram) -> None:
    await call(fake, "setWebhook", url="https://example.com/hook")
    status, body = await call(fake, "getUpdates")
    assert status == 409
    assert "webhook is active" in body["description"]


async def test_edits_report_not_modified_and_html_is_measured_after_parsing(
    fake: FakeTelegram,
) -> None:
    _, body = await call(fake, "sendMessage", chat_id=5, text="<b>hi</b>", parse_mode="HTML")
    message_id = body["result"]["message_id"]
    status, body = await call(
        fake, "editMessageText", chat_id=5, message_id=message_id, text="<b>hi</b>",
        parse_mode="HTML",
    )  # fmt: skip
    assert status == 400
    assert body["description"].startswith("Bad Request: message is not modified")
    # 4096 visible characters fit even though the markup around them is longer.
    long_text = "<b>" + "x" * 4096 + "</b>"
    status, _ = await call(fake, "sendMessage", chat_id=5, text=long_text, parse_mode="HTML")
    assert status == 200
    status, body = await call(fake, "sendMessage", chat_id=5, text="😀" * 2049)
    assert (status, body["description"]) == (400, "Bad Request: message is too long")


async def test_message_ids_increase_per_chat(fake: FakeTelegram) -> None:
    ids = []
    for chat in (1, 1, 2, 1):
        _, body = await call(fake, "sendMessage", chat_id=chat, text="x")
        ids.append((chat, body["result"]["message_id"]))
    assert ids == [(1, 1), (1, 2), (2, 1), (1, 3)]
