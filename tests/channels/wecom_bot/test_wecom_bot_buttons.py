"""The WeCom AI bot's buttons: the template card a reply's buttons become, a tap's event, and
the channel showing one and passing the other on, against the fake WeCom server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from bus import CALLBACK, TAPPED_SENT_AT, Button, InboundMessage, OutboundMessage
from bus.envelope import ANSWERS
from channels.errors import RateLimited
from channels.wecom_bot.frames import (
    BUTTON_KEY_MAX_BYTES,
    MalformedFrame,
    PressedButton,
    button_card,
    button_key,
    parse_card_tap,
    parse_frame,
    pressed_button,
    task_id_for,
    used_card,
)
from tests.channels.wecom_bot.conftest import Running
from tests.fakes.wecom_bot_server import TASK_ID

WAIT_S = 10.0
SENT_AT = 1_750_000_000
APPROVE = Button(text="Approve", data="refund:42:yes")
DENY = Button(text="Deny", data="refund:42:no")
DOCS = Button(text="Docs", url="https://example.com/refunds")


def keys_of(card: dict[str, Any]) -> list[PressedButton]:
    return [pressed_button(button["key"]) for button in card["button_list"]]


# -- the card -------------------------------------------------------------------------------


def test_a_short_reply_is_the_cards_title_and_each_key_carries_its_button() -> None:
    shown = button_card("Approve the refund?", [[APPROVE, DENY]], task_id="t1", sent_at=SENT_AT)
    assert shown.text_before is None
    assert shown.card is not None
    card = shown.card
    assert (card["card_type"], card["main_title"], card["task_id"]) == (
        "button_interaction",
        {"title": "Approve the refund?"},
        "t1",
    )
    assert [(b["text"], b["style"]) for b in card["button_list"]] == [("Approve", 1), ("Deny", 1)]
    assert keys_of(card) == [
        PressedButton("refund:42:yes", "Approve", "Approve the refund?", SENT_AT),
        PressedButton("refund:42:no", "Deny", "Approve the refund?", SENT_AT),
    ]


def test_a_longer_reply_goes_before_the_card_titled_by_its_last_line() -> None:
    text = "Your refund of **30 EUR** for order 42 is ready.\n\nShall I approve it now, today?"
    shown = button_card(text, [[APPROVE], [DENY]], task_id="t2", sent_at=SENT_AT)
    assert shown.text_before == text
    assert shown.card is not None
    # Plain text, cut to the 26 characters WeCom recommends for a title.
    assert shown.card["main_title"] == {"title": "Shall I approve it now, t…"}
    assert len(shown.card["main_title"]["title"]) == 26


def test_markdown_in_a_short_reply_is_plain_in_the_title() -> None:
    shown = button_card("**Approve** it?", [[APPROVE, DENY]], task_id="t3", sent_at=SENT_AT)
    assert shown.card is not None
    assert (shown.text_before, shown.card["main_title"]["title"]) == (None, "Approve it?")


def test_links_stay_in_the_text_and_links_alone_make_no_card() -> None:
    shown = button_card("Approve it?", [[APPROVE, DOCS]], task_id="t4", sent_at=SENT_AT)
    assert shown.text_before == "Approve it?\n\nDocs: https://example.com/refunds"
    assert shown.card is not None
    assert [b["text"] for b in shown.card["button_list"]] == ["Approve"]
    only_links = button_card("Read this.", [[DOCS]], task_id="t5", sent_at=SENT_AT)
    assert only_links.card is None
    assert only_links.text_before == "Read this.\n\nDocs: https://example.com/refunds"


def test_past_six_buttons_the_card_keeps_six_and_says_so() -> None:
    many = [[Button(text=f"B{n}", data=f"d{n}") for n in range(4)] for _ in range(2)]
    with capture_logs() as logs:
        shown = button_card("Pick one", many, task_id="t6", sent_at=SENT_AT)
    assert shown.card is not None
    assert [b["text"] for b in shown.card["button_list"]] == ["B0", "B1", "B2", "B3", "B0", "B1"]
    assert len({b["key"] for b in shown.card["button_list"]}) == 6
    assert [e["event"] for e in logs] == ["wecom_bot.card_buttons_cut"]


def test_buttons_without_text_are_titled_by_their_labels() -> None:
    shown = button_card("", [[APPROVE, DENY]], task_id="t7", sent_at=SENT_AT)
    assert shown.card is not None
    assert (shown.text_before, shown.card["main_title"]["title"]) == (None, "Approve / Deny")


def test_the_task_id_is_the_parts_delivery_id_in_the_characters_wecom_takes() -> None:
    part = "0197a3c2-5b1e-7d40-8a6f-2c9e1b7d3f10.0"
    assert task_id_for(part) == "octos-0197a3c2-5b1e-7d40-8a6f-2c9e1b7d3f10@0"
    assert task_id_for(part) == task_id_for(part)
    long = task_id_for("x" * 300)
    assert TASK_ID.fullmatch(long)
    assert long == task_id_for("x" * 300)
    fresh = {task_id_for(None) for _ in range(3)}
    assert len(fresh) == 3
    assert all(TASK_ID.fullmatch(each) for each in fresh)


def test_a_key_stays_within_1024_bytes_dropping_the_title_then_the_label() -> None:
    data = "\x00" * 64  # each escaped as \u0000: 384 bytes of JSON
    key = button_key(0, data, "\x01" * 10, "\x02" * 100, SENT_AT)
    assert len(key.encode()) <= BUTTON_KEY_MAX_BYTES
    assert pressed_button(key) == PressedButton(data, "\x01" * 10, None, SENT_AT)
    squeezed = button_key(0, "\x00" * 200, "\x01" * 10, "\x02" * 26, SENT_AT)
    assert pressed_button(squeezed) == PressedButton("\x00" * 200, "\x00" * 200, None, SENT_AT)


def test_a_key_no_card_of_ours_wrote_is_its_own_data_and_label() -> None:
    assert pressed_button("BUTTONKEYONE") == PressedButton(
        "BUTTONKEYONE", "BUTTONKEYONE", None, None
    )
    assert pressed_button('{"n": 0}') == PressedButton('{"n": 0}', '{"n": 0}', None, None)


def test_a_used_card_shows_its_title_the_choice_and_the_chosen_button_alone() -> None:
    key = button_key(1, "refund:42:no", "Deny", "Approve the refund?", SENT_AT)
    card = used_card("t8", pressed_button(key), key)
    assert card == {
        "card_type": "button_interaction",
        "main_title": {"title": "Approve the refund?", "desc": "✓ Deny"},
        "button_list": [{"text": "Deny", "style": 1, "key": key}],
        "task_id": "t8",
    }
    foreign = used_card("t9", pressed_button("A_VERY_LONG_BUTTON_KEY"), "A_VERY_LONG_BUTTON_KEY")
    assert foreign["main_title"]["title"] == "A_VERY_LONG_BUTTON_KEY"
    assert foreign["button_list"][0]["text"] == "A_VERY_LO…"


# -- the tap's event ------------------------------------------------------------------------


def event_frame(event: dict[str, Any], **body: Any) -> str:
    base = {"msgid": "evMSG1", "from": {"userid": "bob"}, "msgtype": "event", "event": event}
    return json.dumps(
        {"cmd": "aibot_event_callback", "headers": {"req_id": "ev_1"}, "body": base | body}
    )


def test_a_tap_is_read_from_the_documented_template_card_event() -> None:
    event = {
        "eventtype": "template_card_event",
        "template_card_event": {
            "card_type": "button_interaction",
            "event_key": "KEY",
            "task_id": "octos-t1",
            "selected_items": {"selected_item": []},
        },
    }
    tap = parse_card_tap(parse_frame(event_frame(event, chattype="group", chatid="wrGROUP1")))
    assert (tap.req_id, tap.msg_id, tap.sender_id) == ("ev_1", "evMSG1", "bob")
    assert (tap.chat_id, tap.chat_type, tap.task_id, tap.event_key) == (
        "wrGROUP1",
        "group",
        "octos-t1",
        "KEY",
    )
    single = parse_card_tap(parse_frame(event_frame(event, chattype="single")))
    assert (single.chat_id, single.chat_type) == ("bob", "single")


def test_a_tap_in_the_sdks_flat_form_is_read_too() -> None:
    event = {"eventtype": "template_card_event", "event_key": "KEY", "task_id": "octos-t2"}
    tap = parse_card_tap(parse_frame(event_frame(event)))
    assert (tap.task_id, tap.event_key) == ("octos-t2", "KEY")


def test_a_tap_without_its_card_or_key_is_malformed() -> None:
    no_task = {"eventtype": "template_card_event", "template_card_event": {"event_key": "K"}}
    with pytest.raises(MalformedFrame, match="task_id"):
        parse_card_tap(parse_frame(event_frame(no_task)))
    no_key = {"eventtype": "template_card_event", "template_card_event": {"task_id": "t"}}
    with pytest.raises(MalformedFrame, match="event_key"):
        parse_card_tap(parse_frame(event_frame(no_key)))
    with pytest.raises(MalformedFrame, match="userid"):
        parse_card_tap(parse_frame(event_frame(no_key, **{"from": {}})))


# -- the channel ------------------------------------------------------------------------------


def reply(
    message: InboundMessage, text: str, buttons: list[list[Button]], *, part: str | None = None
) -> OutboundMessage:
    return OutboundMessage(
        channel="wecom-bot",
        chat_id=message.chat_id,
        content=text,
        reply_to=message.message_id,
        metadata={ANSWERS: [message.message_id]},
        buttons=buttons,
        delivery_id=part,
    )


async def asked(running: Running, text: str, buttons: list[list[Button]]) -> str:
    """Alice asks; the reply `text` with `buttons` answers her: the card's task id."""
    await running.fake.push_text("alice", "refund please")
    message = await running.next_inbound()
    await running.channel.send(reply(message, text, buttons))
    [sent] = running.fake.cards_to("alice")
    return sent.task_id


async def test_a_short_reply_with_buttons_answers_the_callback_with_the_card(
    running: Running,
) -> None:
    fake = running.fake
    req_id, _ = await fake.push_text("alice", "refund please")
    message = await running.next_inbound()
    await running.channel.send(reply(message, "Approve the refund?", [[APPROVE, DENY]]))
    [sent] = fake.cards_sent
    assert (sent.req_id, sent.chat_id) == (req_id, None)
    assert sent.card["main_title"] == {"title": "Approve the refund?"}
    assert fake.frames(req_id) == []
    assert fake.markdown_to("alice") == []
    assert fake.violations == []


async def test_a_long_reply_answers_the_callback_and_its_card_follows(running: Running) -> None:
    fake = running.fake
    req_id, _ = await fake.push_text("alice", "refund please")
    message = await running.next_inbound()
    text = "The refund of 30 EUR for order 42 is ready to go.\n\nApprove it?"
    await running.channel.send(reply(message, text, [[APPROVE, DENY]]))
    assert fake.finished_text(req_id) == text
    [sent] = fake.cards_sent
    assert (sent.req_id, sent.chat_id) == (None, "alice")
    assert sent.card["main_title"] == {"title": "Approve it?"}
    assert fake.violations == []


async def test_a_stream_shown_growing_is_finished_by_the_reply_and_its_card_follows(
    running: Running,
) -> None:
    fake, channel = running.fake, running.channel
    req_id, _ = await fake.push_text("alice", "refund please")
    message = await running.next_inbound()
    part = "0197a3c2-5b1e-7d40-8a6f-2c9e1b7d3f10.0"
    stream_id = await channel.send_with_id(reply(message, "Approve", [], part=part))
    assert stream_id == part
    await channel.send(reply(message, "Approve the refund?", [[APPROVE, DENY]], part=part))
    assert fake.finished_text(req_id) == "Approve the refund?"
    [sent] = fake.cards_to("alice")
    assert sent.task_id == task_id_for(part)
    # A snapshot the stream editor shows late changes nothing on the finished stream.
    await channel.edit_message("alice", stream_id, "Approve the")
    assert [f.content for f in fake.frames(req_id)] == ["Approve", "Approve the refund?"]
    assert fake.violations == []


async def test_a_retried_part_sends_its_text_once_and_then_its_card(running: Running) -> None:
    fake, channel = running.fake, running.channel
    req_id, _ = await fake.push_text("alice", "refund please")
    message = await running.next_inbound()
    text = "The refund of 30 EUR for order 42 is ready to go.\n\nApprove it?"
    part = "0197a3c2-5b1e-7d40-8a6f-2c9e1b7d3f11.0"
    fake.rate_limit_next_card()
    with pytest.raises(RateLimited):
        await channel.send(reply(message, text, [[APPROVE, DENY]], part=part))
    assert fake.finished_text(req_id) == text
    await channel.send(reply(message, text, [[APPROVE, DENY]], part=part))
    assert [sent.task_id for sent in fake.cards_to("alice")] == [task_id_for(part)]
    assert fake.markdown_to("alice") == []
    assert [f.finish for f in fake.frames(req_id)] == [True]
    assert fake.violations == []


async def test_a_tap_is_a_message_naming_the_card_and_the_card_is_replaced(
    running: Running,
) -> None:
    fake = running.fake
    before = int(time.time())
    task_id = await asked(running, "Approve the refund?", [[APPROVE, DENY]])
    card = fake.cards[task_id]
    deny_key = card["button_list"][1]["key"]
    event_req, event_id = await fake.push_card_event("alice", task_id, deny_key)
    tap = await running.next_inbound()
    assert (tap.sender_id, tap.chat_id, tap.content, tap.message_id) == (
        "alice",
        "alice",
        "Deny",
        event_id,
    )
    assert tap.metadata[CALLBACK] == {"data": "refund:42:no", "message_id": task_id}
    assert tap.metadata[TAPPED_SENT_AT] >= before
    await fake.wait_until(lambda: fake.card_updates, WAIT_S)
    [update] = fake.card_updates
    assert (update.req_id, update.task_id) == (event_req, task_id)
    assert fake.cards[task_id]["main_title"] == {"title": "Approve the refund?", "desc": "✓ Deny"}
    assert [b["text"] for b in fake.cards[task_id]["button_list"]] == ["Deny"]
    assert fake.violations == []


async def test_a_tap_delivered_twice_is_passed_on_and_answered_once(running: Running) -> None:
    fake = running.fake
    task_id = await asked(running, "Approve the refund?", [[APPROVE, DENY]])
    approve_key = fake.cards[task_id]["button_list"][0]["key"]
    _req, event_id = await fake.push_card_event("alice", task_id, approve_key)
    await fake.push_card_event("alice", task_id, approve_key, msg_id=event_id)
    await fake.push_text("alice", "after the taps")
    assert (await running.next_inbound()).content == "Approve"
    assert (await running.next_inbound()).content == "after the taps"
    await fake.wait_until(lambda: fake.card_updates, WAIT_S)
    assert len(fake.card_updates) == 1


async def test_a_later_tap_on_a_used_card_shows_the_first_choice_again(running: Running) -> None:
    fake = running.fake
    task_id = await asked(running, "Approve the refund?", [[APPROVE, DENY]])
    approve_key, deny_key = (b["key"] for b in fake.cards[task_id]["button_list"])
    await fake.push_card_event("alice", task_id, approve_key)
    await running.next_inbound()
    # A client that still showed the whole card.
    await fake.push_card_event("alice", task_id, deny_key)
    assert (await running.next_inbound()).content == "Deny"
    await fake.wait_until(lambda: len(fake.card_updates) == 2, WAIT_S)
    assert [u.card["main_title"]["desc"] for u in fake.card_updates] == ["✓ Approve"] * 2
    assert [b["key"] for b in fake.cards[task_id]["button_list"]] == [approve_key]


async def test_a_strangers_tap_leaves_the_card_as_it_is(running: Running) -> None:
    fake = running.fake
    group = "wrGROUP7"
    await fake.push_text("alice", "refund please", chat_id=group)
    message = await running.next_inbound()
    await running.channel.send(reply(message, "Approve the refund?", [[APPROVE, DENY]]))
    await running.channel.send(reply(message, "And this one?", [[APPROVE, DENY]]))
    first, second = (sent.task_id for sent in fake.cards_to(group))
    key = fake.cards[first]["button_list"][0]["key"]
    await fake.push_card_event("mallory", first, key, chat_id=group)
    assert (await running.next_inbound()).sender_id == "mallory"  # the dispatcher refuses it
    other_key = fake.cards[second]["button_list"][0]["key"]
    await fake.push_card_event("alice", second, other_key, chat_id=group)
    await running.next_inbound()
    # Updates go out in the order of the taps: the stranger's would have come first.
    await fake.wait_until(lambda: fake.card_updates, WAIT_S)
    assert [u.task_id for u in fake.card_updates] == [second]
    assert len(fake.cards[first]["button_list"]) == 2
