"""QQ's buttons (`keyboard: true`): the keyboard payload, the tap parser, and the channel sending
keyboards and taking taps against the fake QQ, on the webhook and the websocket path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from bus import CALLBACK, TAPPED_SENT_AT, Button, InboundMessage, OutboundMessage
from channels.access.allow import AllowList
from channels.buttons import fit_buttons, unpacked_tap
from channels.lifecycle.reconnect import ReconnectPolicy
from channels.qq import QQBotChannel, QQKeyboardChannel, create
from channels.qq.channel import MalformedEvent, parse_tap
from channels.qq.keyboard import (
    KEYBOARD_LIMITS,
    callback_data,
    keyboard,
    reply_target,
    with_labels,
)
from channels.registry import ChannelContext
from config import QQBotConfig
from tests.channels.inbound_gate import GatedInbound
from tests.channels.qq.configs import PATH, qq_config
from tests.channels.started import OnBus, once, started_on_bus, webhooks_started
from tests.fakes.qq_server import FakeQQ, Reply

WAIT_S = 10.0
ALICE = "alice-openid"
ROWS = [
    [Button(text="Approve", data="refund:42:yes"), Button(text="Deny", data="refund:42:no")],
    [Button(text="Policy", url="https://example.com/refunds")],
]


# The payload and the tap, on their own


def test_the_keyboard_has_callback_buttons_carrying_their_message_and_link_buttons() -> None:
    sent = keyboard(ROWS, "turn-7.0", 1_700_000_000)
    rows = sent["content"]["rows"]
    assert [[b["render_data"]["label"] for b in row["buttons"]] for row in rows] == [
        ["Approve", "Deny"],
        ["Policy"],
    ]
    approve, deny, policy = (b for row in rows for b in row["buttons"])
    assert [approve["id"], deny["id"], policy["id"]] == ["1", "2", "3"]
    assert approve["render_data"] == {"label": "Approve", "visited_label": "Approve", "style": 1}
    assert approve["action"]["type"] == 1
    assert approve["action"]["permission"] == {"type": 2}
    assert approve["action"]["unsupport_tips"]
    assert json.loads(deny["action"]["data"]) == {
        "m": "turn-7.0",
        "d": "refund:42:no",
        "s": 1_700_000_000,
        "t": "Deny",
    }
    assert policy["action"]["type"] == 0
    assert policy["action"]["data"] == "https://example.com/refunds"
    assert policy["render_data"]["style"] == 0


def test_buttons_are_cut_to_five_rows_of_five() -> None:
    many = [[Button(text=f"{r}.{n}", data=f"{r}.{n}") for n in range(7)] for r in range(6)]
    fitted = fit_buttons(many, KEYBOARD_LIMITS, channel="qq-bot", warned=set())
    rows = keyboard(fitted, "m", 0)["content"]["rows"]
    assert [len(row["buttons"]) for row in rows] == [5] * 5


def tap_of(raw: str) -> tuple[str, object, int | None]:
    tap = unpacked_tap(raw)
    return tap.label, tap.metadata()[CALLBACK], tap.sent_at


def test_a_tapped_buttons_data_gives_back_label_data_message_and_time() -> None:
    content, callback, sent_at = tap_of(callback_data("turn-7.0", "refund:42:no", "Deny", 99))
    assert (content, callback, sent_at) == (
        "Deny",
        {"data": "refund:42:no", "message_id": "turn-7.0"},
        99,
    )
    # A template keyboard's data (not ours): the data is the content, of no known message.
    assert tap_of("/menu") == ("/menu", {"data": "/menu", "message_id": None}, None)
    assert tap_of('{"d": 5}') == ('{"d": 5}', {"data": '{"d": 5}', "message_id": None}, None)


def test_a_reply_names_a_message_by_msg_id_and_a_tap_by_its_event() -> None:
    assert reply_target("ROBOT1.0_abc") == {"msg_id": "ROBOT1.0_abc"}
    assert reply_target("tap:INTERACTION_CREATE:e1") == {"event_id": "INTERACTION_CREATE:e1"}


def test_a_refused_keyboards_text_lists_the_labels_and_links() -> None:
    assert with_labels("Refund?", ROWS) == (
        "Refund?\n\nApprove | Deny\nPolicy: https://example.com/refunds"
    )
    assert with_labels("Refund?", []) == "Refund?"


def interaction(
    data: dict[str, Any], *, event_id: str | None = "INTERACTION_CREATE:e1"
) -> dict[str, Any]:
    event: dict[str, Any] = {"op": 0, "t": "INTERACTION_CREATE", "s": 3, "d": data}
    if event_id is not None:
        event["id"] = event_id
    return event


def tapped(**fields: Any) -> dict[str, Any]:
    raw = callback_data("turn-7.0", "refund:42:yes", "Approve", 1_700_000_000)
    return {
        "id": "i-1",
        "type": 11,
        "data": {"type": 11, "resolved": {"button_data": raw, "button_id": "1"}},
        **fields,
    }


def test_a_c2c_tap_is_a_message_of_the_chat_named_by_its_event() -> None:
    tap = parse_tap(interaction(tapped(chat_type=2, scene="c2c", user_openid=ALICE)))
    assert (tap.interaction_id, tap.message_id, tap.kind) == (
        "i-1",
        "tap:INTERACTION_CREATE:e1",
        "c2c",
    )
    message = tap.inbound
    assert message is not None
    assert (message.chat_id, message.sender_id, message.content, message.message_id) == (
        f"c2c:{ALICE}",
        ALICE,
        "Approve",
        "tap:INTERACTION_CREATE:e1",
    )
    assert message.metadata[CALLBACK] == {"data": "refund:42:yes", "message_id": "turn-7.0"}
    assert message.metadata[TAPPED_SENT_AT] == 1_700_000_000


def test_a_group_tap_is_the_members_in_the_group() -> None:
    data = tapped(chat_type=1, scene="group", group_openid="G1", group_member_openid="bob")
    message = parse_tap(interaction(data)).inbound
    assert message is not None
    assert (message.chat_id, message.sender_id) == ("group:G1", "bob")


def test_taps_not_passed_on_still_name_their_interaction() -> None:
    guild = parse_tap(interaction(tapped(chat_type=0, scene="guild", guild_id="g")))
    assert (guild.interaction_id, guild.inbound) == ("i-1", None)
    assert "guild" in guild.skipped
    menu = parse_tap(interaction({**tapped(chat_type=2, user_openid=ALICE), "type": 12}))
    assert (menu.interaction_id, menu.inbound) == ("i-1", None)
    nameless = parse_tap(interaction(tapped(chat_type=2)))
    assert nameless.inbound is None
    no_data = parse_tap(interaction({**tapped(chat_type=2, user_openid=ALICE), "data": {}}))
    assert no_data.inbound is None
    # Without the dispatch's event id the interaction's stands in for it.
    plain = parse_tap(interaction(tapped(chat_type=2, user_openid=ALICE), event_id=None))
    assert plain.message_id == "tap:i-1"
    with pytest.raises(MalformedEvent):
        parse_tap(interaction({"type": 11}))
    with pytest.raises(MalformedEvent):
        parse_tap({"op": 0, "t": "INTERACTION_CREATE"})


def test_the_setting_picks_the_channel(tmp_path: Path) -> None:
    context = ChannelContext(profile="main", data_dir=tmp_path)
    plain = QQBotConfig.model_validate({"app_id": "1", "app_secret": "s"})
    assert plain.keyboard is False
    assert type(create(plain, context)) is QQBotChannel
    assert QQBotChannel.buttons_shown == "numbered"
    keyed = plain.model_copy(update={"keyboard": True})
    assert type(create(keyed, context)) is QQKeyboardChannel
    assert QQKeyboardChannel.buttons_shown == "in_send"
    assert QQKeyboardChannel.button_limits == KEYBOARD_LIMITS


# The channel against the fake QQ


@dataclass
class Webhooked:
    fake: FakeQQ
    channel: QQKeyboardChannel
    inbound: GatedInbound
    url: str

    async def asked(self, text: str = "refund please") -> InboundMessage:
        """Alice writes; the message the channel passed on."""
        before = len(self.inbound.messages)
        status, _ = await self.fake.deliver(self.url, self.fake.c2c_message(ALICE, text))
        assert status == 200
        return (await self.inbound.wait_for(before + 1))[-1]

    async def with_keyboard(self) -> Reply:
        """Alice asks; the channel answers with ROWS: the reply QQ took."""
        asked = await self.asked()
        await self.channel.send(reply_to(asked, "Approve the refund?", ROWS, "turn-1.0"))
        [shown] = self.fake.keyboards_to(f"c2c:{ALICE}")
        return shown


def reply_to(
    message: InboundMessage,
    text: str,
    buttons: list[list[Button]] | None = None,
    delivery_id: str | None = None,
) -> OutboundMessage:
    return OutboundMessage(
        channel="qq-bot",
        chat_id=message.chat_id,
        content=text,
        reply_to=message.message_id,
        buttons=buttons or [],
        delivery_id=delivery_id,
    )


@pytest.fixture
async def webhooked() -> AsyncIterator[Webhooked]:
    async with FakeQQ() as fake:
        channel = QQKeyboardChannel(qq_config(fake, keyboard=True))
        channel.allow = AllowList([ALICE])
        inbound = GatedInbound()
        ready = once(channel.wait_receiving)
        async with webhooks_started(channel, inbound, ready, name="test:qq-keys") as (_, origin):
            await fake.wait_until(lambda: fake.token_requests >= 1, WAIT_S)
            yield Webhooked(fake, channel, inbound, origin + PATH)


async def test_a_reply_with_buttons_is_markdown_with_the_keyboard(webhooked: Webhooked) -> None:
    fake = webhooked.fake
    shown = await webhooked.with_keyboard()
    assert (shown.msg_type, shown.content, shown.msg_seq) == (2, "Approve the refund?", 1)
    assert [b["render_data"]["label"] for b in shown.buttons()] == ["Approve", "Deny", "Policy"]
    # A reply without buttons stays plain text.
    asked = await webhooked.asked("thanks")
    await webhooked.channel.send(reply_to(asked, "You're welcome."))
    assert fake.replies[-1].msg_type == 0
    assert fake.violations == []


async def test_a_refused_keyboard_is_sent_as_text_with_the_labels(webhooked: Webhooked) -> None:
    fake = webhooked.fake
    fake.refuse_markdown = True
    asked = await webhooked.asked()
    with capture_logs() as logs:
        await webhooked.channel.send(reply_to(asked, "Approve the refund?", ROWS))
    assert [(r.msg_type, r.status, r.msg_seq) for r in fake.replies] == [(2, 403, 1), (0, 200, 1)]
    assert fake.replies_to(f"c2c:{ALICE}") == [
        "Approve the refund?\n\nApprove | Deny\nPolicy: https://example.com/refunds"
    ]
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["qq.keyboard_refused"]


async def test_a_tap_is_passed_on_once_acknowledged_once_durable_and_answered_by_event(
    webhooked: Webhooked,
) -> None:
    fake, inbound = webhooked.fake, webhooked.inbound
    shown = await webhooked.with_keyboard()
    event = fake.tap(shown, "Deny", ALICE)
    interaction_id = event["d"]["id"]
    inbound.hold()
    delivery = asyncio.create_task(fake.deliver(webhooked.url, event), name="test:tap")
    await inbound.holding.wait()
    # Not durable yet: QQ is not told.
    assert interaction_id not in fake.interaction_acks
    assert not delivery.done()
    inbound.release.set()
    assert await delivery == (200, {"op": 12, "d": 0, "code": 0})
    assert fake.interaction_acks[interaction_id] == [0]
    tap = inbound.messages[-1]
    assert (tap.content, tap.metadata[CALLBACK]) == (
        "Deny",
        {"data": "refund:42:no", "message_id": "turn-1.0"},
    )
    # Delivered again: not passed on again, answered again.
    assert (await fake.deliver(webhooked.url, event))[0] == 200
    assert fake.interaction_acks[interaction_id] == [0, 0]
    assert [m.message_id for m in inbound.messages].count(tap.message_id) == 1
    # The answer to the tap names its event.
    await webhooked.channel.send(reply_to(tap, "Denied."))
    answer = fake.replies[-1]
    assert (answer.content, answer.msg_id, answer.status) == ("Denied.", event["id"], 200)
    assert fake.violations == []


async def test_a_tap_refused_by_a_full_backlog_is_not_acknowledged(webhooked: Webhooked) -> None:
    fake = webhooked.fake
    shown = await webhooked.with_keyboard()
    event = fake.tap(shown, "Approve", ALICE)
    webhooked.inbound.refuse_next()
    status, _ = await fake.deliver(webhooked.url, event)
    assert status == 503  # QQ delivers it again later
    assert fake.interaction_acks == {}
    assert (await fake.deliver(webhooked.url, event))[0] == 200
    assert fake.interaction_acks == {event["d"]["id"]: [0]}


Gatewayed = OnBus[FakeQQ, QQBotChannel]


@pytest.fixture(params=[True, False], ids=["keyboard", "no keyboard"])
async def gatewayed(request: pytest.FixtureRequest) -> AsyncIterator[Gatewayed]:
    async with FakeQQ() as fake:
        fake.heartbeat_interval_ms = 50
        config = qq_config(fake, mode="websocket", keyboard=request.param)
        kind = QQKeyboardChannel if request.param else QQBotChannel
        channel = kind(config, reconnect=ReconnectPolicy(base_s=0.05))
        ready = once(channel.wait_receiving)
        async with started_on_bus(channel, ready, name="test:qq-keys-ws", capacity=16) as (
            agent,
            _task,
        ):
            yield Gatewayed(fake, channel, agent)


async def test_over_the_gateway_taps_come_only_with_the_keyboard(gatewayed: Gatewayed) -> None:
    fake, channel = gatewayed.fake, gatewayed.channel
    [identify] = fake.identifies
    asks_for_taps = bool(identify["intents"] & (1 << 26))
    assert asks_for_taps == (channel.buttons_shown == "in_send")
    await fake.push_gateway(fake.c2c_message(ALICE, "refund please"))
    asked = await gatewayed.next_inbound()
    await channel.send(reply_to(asked, "Approve the refund?", ROWS, "turn-2.0"))
    [shown] = [r for r in fake.replies if r.msg_id == asked.message_id]
    if not asks_for_taps:
        assert shown.msg_type == 0  # without the keyboard the manager lists the buttons
        return
    event = fake.tap(shown, "Approve", ALICE)
    frame = await fake.push_gateway(event)
    tap = await gatewayed.next_inbound()
    assert (tap.content, tap.metadata[CALLBACK]["message_id"]) == ("Approve", "turn-2.0")
    await fake.wait_until(lambda: event["d"]["id"] in fake.interaction_acks, WAIT_S)
    # The sequence moves past the tap once it is handled, as past a message.
    await fake.wait_until(lambda: frame["s"] in fake.heartbeats, WAIT_S)
    assert fake.violations == []
