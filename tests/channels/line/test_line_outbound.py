"""LINE replies: the reply token while valid, then pushes with an idempotent retry key."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from bus import CALLBACK, TAPPED_SENT_AT, Attachment, Button, OutboundMessage
from channels.buttons import fit_buttons
from channels.errors import (
    AuthError,
    ChannelError,
    FatalChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.health import HealthStatus
from channels.media_links import MediaLinks
from tests.channels.line.conftest import (
    ALICE,
    GROUP,
    WAIT_S,
    RunningLine,
    make_channel,
)
from tests.fakes.line_server import FakeLine
from tests.support.inbound import RecordingInbound


async def received(line: RunningLine, text: str, **options: object) -> str:
    """Deliver a text event; its webhookEventId (what a reply names as reply_to)."""
    event = line.fake.text_event(ALICE, text, **options)  # type: ignore[arg-type]
    assert await line.fake.deliver(line.url, [event]) == 200
    return str(event["webhookEventId"])


def reply(
    text: str, *, chat: str = ALICE, reply_to: str | None = None, delivery_id: str | None = None
) -> OutboundMessage:
    return OutboundMessage(
        channel="line", chat_id=chat, content=text, reply_to=reply_to, delivery_id=delivery_id
    )


async def test_the_first_part_uses_the_reply_token_and_the_rest_is_pushed(
    line: RunningLine,
) -> None:
    event_id = await received(line, "two parts please")
    await line.channel.send(reply("part one", reply_to=event_id, delivery_id="turn-1"))
    await line.channel.send(reply("part two", delivery_id="turn-1"))
    delivered = line.fake.delivered_to(ALICE)
    assert [(d.message["text"], d.via) for d in delivered] == [
        ("part one", "reply"),
        ("part two", "push"),
    ]
    assert delivered[1].retry_key is not None


def reply_file(data_dir: Path, name: str, data: bytes, mime: str) -> Attachment:
    path = data_dir / "media" / "out" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    kind = "image" if mime.startswith("image/") else "file"
    digest = hashlib.sha256(data).hexdigest()
    return Attachment(
        kind=kind, mime=mime, name=name, size=len(data), sha256=digest, path=str(path)
    )


async def test_an_image_goes_as_an_image_message_by_its_public_https_link(
    line: RunningLine, tmp_path: Path
) -> None:
    channel = line.channel
    chart = reply_file(tmp_path, "chart.png", b"\x89PNG chart", "image/png")
    report = reply_file(tmp_path, "q3.pdf", b"%PDF-1.4", "application/pdf")
    # Without a public HTTPS address LINE could not fetch it: the link as text.
    channel.media_links = MediaLinks(b"s" * 32, tmp_path, base_url="http://127.0.0.1:8080")
    await channel.send_attachment(ALICE, chart, reply_to=None, delivery_key="turn-1.1")
    channel.media_links = MediaLinks(b"s" * 32, tmp_path, base_url="https://bot.example.org")
    await channel.send_attachment(ALICE, chart, reply_to=None, delivery_key="turn-2.1")
    await channel.send_attachment(ALICE, report, reply_to=None, delivery_key="turn-2.2")
    # A resend after a crash has the same key: LINE shows it once.
    await channel.send_attachment(ALICE, chart, reply_to=None, delivery_key="turn-2.1")
    first, image, document = [d.message for d in line.fake.delivered_to(ALICE)]
    assert first["type"] == "text"
    assert "http://127.0.0.1:8080/media/" in first["text"]
    assert image["type"] == "image"
    assert image["originalContentUrl"].startswith("https://bot.example.org/media/")
    assert image["previewImageUrl"] == image["originalContentUrl"]
    assert document["type"] == "text"
    assert "https://bot.example.org/media/" in document["text"]


async def test_a_resend_after_a_crash_is_not_shown_twice(line: RunningLine) -> None:
    again = reply("exactly once", delivery_id="turn-7.0")
    await line.channel.send(again)
    # The same part of the same reply, sent again (a restart re-delivers it): LINE says 409.
    await line.channel.send(again)
    assert line.fake.texts_to(ALICE) == ["exactly once"]
    statuses = [call.status for call in line.fake.calls_to("/v2/bot/message/push")]
    assert statuses == [200, 409]
    keys = {call.headers["X-Line-Retry-Key"] for call in line.fake.calls_to("/v2/bot/message/push")}
    assert len(keys) == 1


async def test_two_parts_of_one_reply_get_different_retry_keys(line: RunningLine) -> None:
    await line.channel.send(reply("first", delivery_id="turn-9"))
    await line.channel.send(reply("second", delivery_id="turn-9"))
    assert line.fake.texts_to(ALICE) == ["first", "second"]


async def test_without_a_delivery_id_each_push_gets_a_fresh_key(line: RunningLine) -> None:
    await line.channel.send(reply("same text"))
    await line.channel.send(reply("same text"))
    assert line.fake.texts_to(ALICE) == ["same text", "same text"]


async def test_an_expired_or_used_reply_token_falls_back_to_a_push(line: RunningLine) -> None:
    line.fake.reply_token_ttl_s = -1.0  # every token the fake hands out is already expired
    event_id = await received(line, "late")
    await line.channel.send(reply("answer", reply_to=event_id))
    assert [(d.message["text"], d.via) for d in line.fake.delivered_to(ALICE)] == [
        ("answer", "push")
    ]


async def test_a_redelivered_event_s_token_is_not_used(line: RunningLine) -> None:
    event_id = await received(line, "again", redelivery=True)
    await line.channel.send(reply("answer", reply_to=event_id))
    assert not line.fake.calls_to("/v2/bot/message/reply")
    assert line.fake.texts_to(ALICE) == ["answer"]


async def test_a_429_is_a_rate_limit_and_the_token_survives_for_the_retry(
    line: RunningLine,
) -> None:
    event_id = await received(line, "hurry")
    line.fake.rate_limit_next("/v2/bot/message/reply")
    with pytest.raises(RateLimited):
        await line.channel.send(reply("answer", reply_to=event_id))
    await line.channel.send(reply("answer", reply_to=event_id))
    assert [d.via for d in line.fake.delivered_to(ALICE)] == ["reply"]


async def test_refusals_are_typed(line: RunningLine) -> None:
    line.fake.fail_next("/v2/bot/message/push", 500, "Internal error")
    with pytest.raises(TransientError):
        await line.channel.send(reply("x"))
    with pytest.raises(ChannelError) as refused:
        await line.channel.send(reply("x", chat="not-a-line-chat"))
    assert "Failed to send messages" in str(refused.value)


async def test_too_long_text_is_refused_as_too_long(line: RunningLine) -> None:
    with pytest.raises(MessageTooLong):
        await line.channel.send(reply("字" * 5001))


async def test_the_loading_animation_shows_in_one_on_one_chats_only(line: RunningLine) -> None:
    await line.channel.send_typing(ALICE)
    await line.channel.send_typing(ALICE)  # within the refresh interval: not asked again
    await line.channel.send_typing(GROUP)
    assert line.fake.loading == [{"chatId": ALICE, "loadingSeconds": 20}]


async def test_the_next_turn_shows_the_loading_animation_again(line: RunningLine) -> None:
    await line.channel.send_typing(ALICE)
    await line.channel.stop_typing(ALICE)  # the turn ended: its refresh interval with it
    await line.channel.send_typing(ALICE)
    assert line.fake.loading == [{"chatId": ALICE, "loadingSeconds": 20}] * 2


async def test_probe_names_the_bot(line: RunningLine) -> None:
    assert await line.channel.probe() == (
        "Fake LINE bot (@123fake, U0000000000000000000000000000b0t)"
    )
    health = await line.channel.health_check()
    assert health.status is HealthStatus.HEALTHY


async def test_a_wrong_access_token_is_fatal_and_marks_the_channel_down(
    fake: FakeLine, tmp_path: Path
) -> None:
    channel = make_channel(fake, tmp_path, token="revoked-token")
    with pytest.raises(AuthError):
        await channel.probe()
    with pytest.raises(FatalChannelError) as fatal:
        await channel.start(RecordingInbound())
    assert "channel_access_token" in str(fatal.value)
    assert (await channel.health_check()).status is HealthStatus.DOWN
    await channel.stop()


async def test_stop_ends_start_and_closes_the_clients(fake: FakeLine, tmp_path: Path) -> None:
    channel = make_channel(fake, tmp_path)
    task = asyncio.create_task(channel.start(RecordingInbound()))
    await asyncio.wait_for(channel.wait_receiving(), WAIT_S)
    await channel.stop()
    await channel.stop()
    await asyncio.wait_for(task, WAIT_S)
    assert task.exception() is None


async def test_probe_outside_start_leaves_no_client_open(fake: FakeLine, tmp_path: Path) -> None:
    channel = make_channel(fake, tmp_path)
    assert await channel.probe() == "Fake LINE bot (@123fake, U0000000000000000000000000000b0t)"
    assert channel._clients is None


async def test_buttons_are_quick_replies_and_a_postback_is_their_tap(line: RunningLine) -> None:
    event_id = await received(line, "refund please")
    buttons = [
        [Button(text="Approve", data="refund:42:yes"), Button(text="Deny", data="refund:42:no")],
        [Button(text="Docs", url="https://example.com/refunds")],
    ]
    message = reply("Approve the refund?", reply_to=event_id, delivery_id="turn-9.0")
    await line.channel.send(message.model_copy(update={"buttons": buttons}))
    [actions] = line.fake.quick_replies_to(ALICE)
    assert [(a["type"], a["label"], a.get("displayText")) for a in actions] == [
        ("postback", "Approve", "Approve"),
        ("postback", "Deny", "Deny"),
        ("uri", "Docs", None),
    ]
    assert actions[2]["uri"] == "https://example.com/refunds"

    tap = line.fake.postback_event(ALICE, actions[1]["data"])
    assert await line.fake.deliver(line.url, [tap]) == 200
    tapped = line.inbound.messages[-1]
    assert (tapped.content, tapped.chat_id, tapped.message_id) == (
        "Deny",
        ALICE,
        tap["webhookEventId"],
    )
    assert tapped.metadata[CALLBACK] == {"data": "refund:42:no", "message_id": "turn-9.0"}
    assert isinstance(tapped.metadata[TAPPED_SENT_AT], int)


async def test_a_postback_the_gateway_did_not_write_is_a_tap_of_no_known_message(
    line: RunningLine,
) -> None:
    # A rich menu's postback, set up in LINE's console: its data as it is.
    assert await line.fake.deliver(line.url, [line.fake.postback_event(ALICE, "menu=help")]) == 200
    [tapped] = line.inbound.messages
    assert tapped.content == "menu=help"
    assert tapped.metadata[CALLBACK] == {"data": "menu=help", "message_id": None}


async def test_quick_replies_are_cut_to_line_s_limits(line: RunningLine) -> None:
    long_data = "x" * 64
    buttons = [[Button(text=f"Choice number {n} of many", data=long_data) for n in range(15)]]
    fitted = fit_buttons(buttons, line.channel.button_limits, channel="line", warned=set())
    message = reply("Pick one", delivery_id="turn-10." + "9" * 60)
    await line.channel.send(message.model_copy(update={"buttons": fitted}))
    [actions] = line.fake.quick_replies_to(ALICE)
    assert len(actions) == 13
    assert all(len(a["label"]) <= 20 and len(a["data"]) <= 300 for a in actions)
