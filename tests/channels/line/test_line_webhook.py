"""LINE's webhook: signatures checked before parsing, 200 only once events are durable."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from structlog.testing import capture_logs

from bus import DELETE, EDIT, InboundRefused
from channels.media_info import MEDIA_DETAILS
from tests.channels.line.attacks import ATTACK_NAMES, attack_cases
from tests.channels.line.conftest import ALICE, GROUP, MALLORY, WAIT_S, RunningLine


async def test_a_signed_text_event_is_published_with_its_webhook_event_id(
    line: RunningLine,
) -> None:
    event = line.fake.text_event(ALICE, "hello LINE")
    assert await line.fake.deliver(line.url, [event]) == 200
    [message] = line.inbound.messages
    assert message.channel == "line"
    assert message.content == "hello LINE"
    assert message.sender_id == ALICE
    assert message.chat_id == ALICE
    assert message.message_id == event["webhookEventId"]
    assert message.metadata["line_message_id"] == event["message"]["id"]


async def test_a_group_message_is_in_the_group_chat(line: RunningLine) -> None:
    event = line.fake.text_event(ALICE, "hi all", group_id=GROUP)
    assert await line.fake.deliver(line.url, [event]) == 200
    [message] = line.inbound.messages
    assert (message.sender_id, message.chat_id) == (ALICE, GROUP)


async def test_the_answer_waits_until_the_event_is_durable(line: RunningLine) -> None:
    line.inbound.hold = asyncio.Event()
    event = line.fake.text_event(ALICE, "wait for me")
    posting = asyncio.create_task(line.fake.deliver(line.url, [event]))
    await asyncio.wait_for(line.inbound.entered.wait(), WAIT_S)
    assert not posting.done(), "LINE was answered before the event was durable"
    line.inbound.hold.set()
    assert await asyncio.wait_for(posting, WAIT_S) == 200
    assert [m.content for m in line.inbound.messages] == ["wait for me"]


@pytest.mark.parametrize("name", ATTACK_NAMES)
async def test_forged_stale_and_unsigned_requests_are_refused(line: RunningLine, name: str) -> None:
    [case] = [case for case in attack_cases(line.fake) if case.name == name]
    with capture_logs() as logs:
        status = await line.fake.post_webhook(line.url, case.body, case.headers)
    assert status == case.status, case.name
    assert line.inbound.messages == [], case.name
    refusals = [e for e in logs if e["event"] == "line.webhook_refused"]
    assert [e["reason"] for e in refusals] == [case.reason], case.name


async def test_a_signed_body_that_is_not_line_s_shape_is_a_400(line: RunningLine) -> None:
    for body in (b"[1, 2]", b'{"events": "no"}', b"not json"):
        assert await line.fake.post_webhook(line.url, body, line.fake.sign(body)) == 400
    assert line.inbound.messages == []


async def test_a_redelivered_event_is_published_once(line: RunningLine) -> None:
    event = line.fake.text_event(ALICE, "once")
    assert await line.fake.deliver(line.url, [event]) == 200
    again = json.loads(json.dumps(event))
    again["deliveryContext"]["isRedelivery"] = True
    assert await line.fake.deliver(line.url, [again]) == 200
    assert [m.content for m in line.inbound.messages] == ["once"]


async def test_a_full_backlog_is_answered_with_retry_after_and_the_retry_is_taken(
    line: RunningLine,
) -> None:
    line.inbound.refuse_next = InboundRefused("global", 3.0, "backlog full")
    event = line.fake.text_event(ALICE, "busy?")
    body = line.fake.body_of([event])
    async with (
        aiohttp.ClientSession() as http,
        http.post(line.url, data=body, headers=line.fake.sign(body)) as response,
    ):
        assert response.status == 503
        assert response.headers["Retry-After"] == "3"
    assert line.inbound.messages == []
    assert await line.fake.deliver(line.url, [event]) == 200
    assert [m.content for m in line.inbound.messages] == ["busy?"]


async def test_non_message_events_and_malformed_events_are_skipped(line: RunningLine) -> None:
    fake = line.fake
    follow = {**fake.text_event(ALICE, "x"), "type": "follow", "follow": {"isUnblocked": False}}
    follow.pop("message")
    broken = {"type": "message", "mode": "active"}
    standby = {**fake.text_event(ALICE, "not mine"), "mode": "standby"}
    assert (
        await fake.deliver(line.url, [follow, broken, standby, fake.text_event(ALICE, "ok")]) == 200
    )
    assert [m.content for m in line.inbound.messages] == ["ok"]


async def test_images_are_downloaded_from_the_data_api_for_allowed_senders_only(
    line: RunningLine,
) -> None:
    fake = line.fake
    mine = fake.image_event(ALICE, b"\xff\xd8 alice's photo")
    theirs = fake.image_event(MALLORY, b"\xff\xd8 mallory's photo")
    assert await fake.deliver(line.url, [mine, theirs]) == 200
    alice, mallory = line.inbound.messages
    assert fake.content_requests == [mine["message"]["id"]]
    [path] = alice.media
    with open(path, "rb") as saved:  # noqa: ASYNC230 (a small local file in a test)
        assert saved.read() == b"\xff\xd8 alice's photo"
    assert alice.content == ""
    assert alice.metadata[MEDIA_DETAILS][path] == {"mime": "image/jpeg"}
    assert mallory.media == []
    assert mallory.content == "[image]"


async def test_audio_carries_its_duration_and_a_file_its_name(line: RunningLine) -> None:
    fake = line.fake
    voice = fake.media_event(ALICE, "audio", b"m4a audio", mimetype="audio/x-m4a", duration_ms=4200)
    plan = fake.media_event(
        ALICE, "file", b"%PDF-1.7", mimetype="application/pdf", file_name="plan.pdf"
    )
    assert await fake.deliver(line.url, [voice, plan]) == 200

    spoken, document = line.inbound.messages
    [voice_path] = spoken.media
    assert spoken.metadata[MEDIA_DETAILS][voice_path] == {"mime": "audio/mp4", "duration_s": 4.2}
    [plan_path] = document.media
    assert document.metadata[MEDIA_DETAILS][plan_path] == {"name": "plan.pdf"}


async def test_a_file_over_the_limit_is_named_and_not_downloaded(line: RunningLine) -> None:
    line.channel.max_media_bytes = 1000
    fake = line.fake
    big = fake.media_event(
        ALICE,
        "file",
        b"x" * 10,
        mimetype="application/zip",
        file_name="photos.zip",
        stated_size=31 * 1024 * 1024,
    )
    assert await fake.deliver(line.url, [big]) == 200

    [message] = line.inbound.messages
    assert message.media == []
    assert message.content == (
        "[file: photos.zip, 31 MB, not downloaded: larger than the 1000 bytes limit]"
    )
    assert fake.content_requests == []


async def test_an_edit_and_an_unsend_name_the_message_by_its_event_id(line: RunningLine) -> None:
    fake = line.fake
    sent = fake.text_event(ALICE, "meet at 5", group_id=GROUP)
    sent_at = sent["timestamp"]
    later = fake.edit_event(sent, "meet at 6", timestamp_ms=sent_at + 2_000)
    # LINE may send edits out of order: the earlier one, arriving last, is dropped.
    earlier = fake.edit_event(sent, "meet at 5:30", timestamp_ms=sent_at + 1_000)
    assert await fake.deliver(line.url, [sent, later, earlier, fake.unsend_event(sent)]) == 200
    original, edit, delete = line.inbound.messages
    event_id = sent["webhookEventId"]
    assert original.message_id == event_id
    assert (edit.content, edit.chat_id, edit.sender_id) == ("meet at 6", GROUP, ALICE)
    assert edit.metadata[EDIT] == {"message_id": event_id}
    assert edit.message_id == f"{event_id}:edit:{later['webhookEventId']}"
    assert (delete.content, delete.chat_id, delete.sender_id) == ("", GROUP, ALICE)
    assert delete.metadata == {DELETE: {"message_id": event_id}}
    assert delete.message_id == f"{event_id}:delete"


async def test_an_edit_of_a_message_not_passed_on_names_line_s_id(line: RunningLine) -> None:
    unknown = line.fake.text_event(ALICE, "sent before a restart", group_id=GROUP)
    edit = line.fake.edit_event(unknown, "edited after it")
    assert await line.fake.deliver(line.url, [edit]) == 200
    [message] = line.inbound.messages
    assert message.content == "edited after it"
    assert message.metadata[EDIT] == {"message_id": unknown["message"]["id"]}
