"""Websocket mode against the fake Feishu: events acknowledged once durable, parts joined,
pings, reconnects, mentions in groups, and credentials refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from bus import CALLBACK, DELETE, REACTION, Button, OutboundMessage
from channels.errors import FatalChannelError
from channels.feishu import FeishuChannel
from channels.health import ChannelHealth
from channels.media_info import MEDIA_DETAILS, describe
from tests.channels.feishu.conftest import (
    ALICE,
    DM,
    GROUP,
    MALLORY,
    config_for,
    run_feishu,
    sent_before_a_restart,
)
from tests.channels.inbound_gate import GatedInbound
from tests.fakes.feishu_server import FakeFeishu


async def test_an_event_is_acknowledged_only_once_it_is_durable(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        running.inbound.hold()
        frame_id = await fake.push_event(fake.message_event(ALICE, DM, "你好 Feishu"))
        await asyncio.wait_for(running.inbound.holding.wait(), 5)
        assert frame_id not in fake.acks, "Feishu was answered before the message was durable"
        running.inbound.release.set()
        await fake.wait_until(lambda: fake.acked(frame_id), 5)

        [message] = running.inbound.messages
        assert (message.channel, message.sender_id, message.chat_id) == ("feishu", ALICE, DM)
        assert message.content == "你好 Feishu"
        assert message.message_id is not None
        assert message.message_id != frame_id
        assert fake.acks[frame_id]["biz_rt"].isdigit()


async def test_a_recall_deletes_a_message_passed_on_by_its_event_id(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        sent = fake.message_event(ALICE, DM, "never mind this")
        unknown = fake.message_event(ALICE, DM, "sent before the daemon started")
        frames = [
            await fake.push_event(event)
            for event in (sent, fake.recall_event(sent), fake.recall_event(unknown))
        ]
        await fake.wait_until(lambda: all(fake.acked(f) for f in frames), 5)

        original, delete = running.inbound.messages
        assert original.message_id == sent["header"]["event_id"]
        assert (delete.sender_id, delete.chat_id, delete.content) == (ALICE, DM, "")
        assert delete.metadata == {DELETE: {"message_id": original.message_id}}
        assert delete.message_id == f"{original.message_id}:delete"


async def test_a_payload_in_several_frames_is_joined(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        text = "分片 " * 400
        frame_id = await fake.push_event(fake.message_event(ALICE, DM, text), parts=3)
        await fake.wait_until(lambda: fake.acked(frame_id), 5)
        assert [m.content for m in running.inbound.messages] == [text.strip()]


async def test_a_refused_event_is_left_unacknowledged_for_feishu_to_redeliver(
    fake: FakeFeishu,
) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        running.inbound.refuse_next()
        event = fake.message_event(ALICE, DM, "later")
        refused = await fake.push_event(event)
        redelivered = await fake.push_event(event)
        await fake.wait_until(lambda: fake.acked(redelivered), 5)
        assert refused not in fake.acks
        assert [m.content for m in running.inbound.messages] == ["later"]


async def test_in_groups_only_mentions_of_the_bot_reach_the_agent(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        chatter = await fake.push_event(
            fake.message_event(ALICE, GROUP, "just chatting", chat_type="group")
        )
        asked = await fake.push_event(
            fake.message_event(ALICE, GROUP, "what time is it", chat_type="group", mention_bot=True)
        )
        await fake.wait_until(lambda: fake.acked(chatter) and fake.acked(asked), 5)
        assert [m.content for m in running.inbound.messages] == ["what time is it"]


async def test_pings_are_sent_and_a_dropped_connection_is_replaced(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        await fake.wait_until(lambda: fake.pings >= 2, 10)  # the fake's PingInterval is 1 s
        await fake.drop_connections()
        await fake.wait_connected(count=2)
        frame_id = await fake.push_event(fake.message_event(ALICE, DM, "still there?"))
        await fake.wait_until(lambda: fake.acked(frame_id), 5)
        assert [m.content for m in running.inbound.messages] == ["still there?"]
        assert running.channel.connection.connections == 2


async def test_malformed_frames_and_events_are_skipped(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        await fake.push_raw(b"\xff\x00 not protobuf")
        broken = await fake.push_event({"schema": "2.0", "header": {}})
        frame_id = await fake.push_event(fake.message_event(ALICE, DM, "after the junk"))
        await fake.wait_until(lambda: fake.acked(frame_id), 5)
        assert fake.acked(broken)  # unreadable for good: acknowledged so it is not resent
        assert [m.content for m in running.inbound.messages] == ["after the junk"]


async def test_a_wrong_secret_is_fatal_and_the_channel_down(
    fake: FakeFeishu, tmp_path: Path
) -> None:
    channel = FeishuChannel(config_for(fake, app_secret="wrong"), data_dir=tmp_path)
    with pytest.raises(FatalChannelError, match="10014"):
        await asyncio.wait_for(channel.start(GatedInbound()), 5)
    assert (await channel.health_check()).is_down
    await channel.stop()


async def test_stop_ends_start_while_connected(fake: FakeFeishu) -> None:
    async with run_feishu(fake) as running:
        await asyncio.wait_for(running.channel.wait_receiving(), 5)
        assert await running.channel.health_check() == ChannelHealth.healthy()
        await running.channel.stop()
        await asyncio.wait({running.task}, timeout=2)
        assert running.task.done()
        assert running.task.exception() is None
    await fake.wait_until(lambda: fake.open_connections == 0, 5)


async def test_a_refused_upgrade_is_fatal_when_the_app_may_not_connect(
    fake: FakeFeishu, tmp_path: Path
) -> None:
    fake.refuse_handshakes("403", "long connection not enabled")
    channel = FeishuChannel(config_for(fake), data_dir=tmp_path)
    with pytest.raises(FatalChannelError, match="403"):
        await asyncio.wait_for(channel.start(GatedInbound()), 5)
    await channel.stop()


async def test_a_busy_refusal_is_retried(fake: FakeFeishu) -> None:
    fake.refuse_handshakes("514", "exceeded connection limit")
    async with run_feishu(fake) as running:
        await fake.wait_until(lambda: fake.handshakes_refused >= 2, 10)
        assert not running.task.done()
        fake.refuse_handshakes("")  # accepted again
        await asyncio.wait_for(running.channel.wait_receiving(), 10)


async def test_an_image_is_downloaded_with_the_message_resource_api(fake: FakeFeishu) -> None:
    photo = fake.resource_event(ALICE, DM, "image", {"image_key": "img_v2_photo"})
    fake.add_resource(photo, "img_v2_photo", b"\xff\xd8 alice's photo", "image/jpeg", "image")
    voice = fake.resource_event(ALICE, DM, "audio", {"file_key": "file_v2_v", "duration": 4200})
    fake.add_resource(voice, "file_v2_v", b"OggS voice", "audio/ogg", "file")
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        frame_ids = [await fake.push_event(event) for event in (photo, voice)]
        await fake.wait_until(lambda: all(fake.acked(frame_id) for frame_id in frame_ids), 5)

        image, spoken = running.inbound.messages
        [path] = image.media
        with open(path, "rb") as saved:  # noqa: ASYNC230 (a small local file in a test)
            assert saved.read() == b"\xff\xd8 alice's photo"
        assert path.endswith(".jpg")
        assert image.content == ""
        [voice_path] = spoken.media
        assert spoken.metadata[MEDIA_DETAILS][voice_path] == {"duration_s": 4.2}
        assert describe(voice_path).kind == "audio"
    photo_id = photo["event"]["message"]["message_id"]
    assert (photo_id, "img_v2_photo", "image") in fake.resource_requests


async def test_a_file_over_the_limit_is_named_and_not_kept(fake: FakeFeishu) -> None:
    event = fake.resource_event(ALICE, DM, "file", {"file_key": "file_v2_z", "file_name": "a.zip"})
    fake.add_resource(event, "file_v2_z", b"x" * 2000, "application/zip", "file")
    async with run_feishu(fake) as running:
        running.channel.max_media_bytes = 1000
        await fake.wait_connected()
        frame_id = await fake.push_event(event)
        await fake.wait_until(lambda: fake.acked(frame_id), 5)

        [message] = running.inbound.messages
    assert message.media == []
    assert message.content == "[file: a.zip, not downloaded: larger than the 1000 bytes limit]"


async def test_a_refused_download_leaves_a_placeholder(fake: FakeFeishu) -> None:
    event = fake.resource_event(ALICE, DM, "file", {"file_key": "file_v2_r", "file_name": "r.pdf"})
    fake.add_resource(event, "file_v2_r", b"%PDF", "application/pdf", "file")
    fake.refused_resources.add("file_v2_r")
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        with capture_logs() as logs:
            frame_id = await fake.push_event(event)
            await fake.wait_until(lambda: fake.acked(frame_id), 5)

        [message] = running.inbound.messages
    assert message.media == []
    assert message.content == "[file: r.pdf, not downloaded: the download answered HTTP 400]"
    [warning] = [entry for entry in logs if entry["event"] == "media.not_downloaded"]
    assert (warning["channel"], warning["message_id"]) == ("feishu", message.message_id)


async def test_a_strangers_file_is_not_downloaded(fake: FakeFeishu) -> None:
    event = fake.resource_event(MALLORY, DM, "image", {"image_key": "img_v2_m"})
    fake.add_resource(event, "img_v2_m", b"\xff\xd8", "image/jpeg", "image")
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        frame_id = await fake.push_event(event)
        await fake.wait_until(lambda: fake.acked(frame_id), 5)
        [message] = running.inbound.messages
    assert (message.content, message.media) == ("[image]", [])
    assert fake.resource_requests == []


async def test_buttons_go_on_the_card_and_a_tap_is_answered_once_durable(
    fake: FakeFeishu,
) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        channel = running.channel
        held = await channel.send_with_id(
            OutboundMessage(channel="feishu", chat_id=DM, content="Approve the refund?")
        )
        assert held is not None
        buttons = [
            [
                Button(text="Approve", data="refund:42:yes"),
                Button(text="Deny", data="refund:42:no"),
            ],
            [Button(text="Docs", url="https://example.com/refunds")],
        ]
        await channel.attach_buttons(DM, held, buttons)
        card = fake.messages[held]
        assert card.text == "Approve the refund?"
        assert [[b["text"]["content"] for b in row] for row in card.buttons] == [
            ["Approve", "Deny"],
            ["Docs"],
        ]
        assert card.buttons[1][0]["url"] == "https://example.com/refunds"

        running.inbound.hold()
        value = card.buttons[0][1]["value"]
        tap = fake.card_action_event(ALICE, DM, held, value)
        frame_id = await fake.push_event(tap, kind="card")
        await asyncio.wait_for(running.inbound.holding.wait(), 5)
        assert frame_id not in fake.acks, "the tap was answered before it was durable"
        running.inbound.release.set()
        await fake.wait_until(lambda: fake.acked(frame_id), 5)
        [tapped] = running.inbound.messages
        assert (tapped.content, tapped.sender_id, tapped.chat_id) == ("Deny", ALICE, DM)
        assert tapped.metadata[CALLBACK] == {"data": "refund:42:no", "message_id": held}

        await channel.remove_buttons(DM, held)
        assert (fake.messages[held].buttons, fake.messages[held].text) == (
            [],
            "Approve the refund?",
        )


async def test_an_action_on_a_card_of_no_button_of_ours_is_acknowledged_and_dropped(
    fake: FakeFeishu,
) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        tap = fake.card_action_event(ALICE, DM, "om_elsewhere", {"key": "other"})
        frame_id = await fake.push_event(tap, kind="card")
        await fake.wait_until(lambda: fake.acked(frame_id), 5)
        assert running.inbound.messages == []


def lookups(fake: FakeFeishu) -> list[str]:
    """The messages the channel looked up (GET im/v1/messages/{id}), in order."""
    prefix = "/open-apis/im/v1/messages/"
    return [
        c.path.removeprefix(prefix) for c in fake.calls if c.method == "GET" and prefix in c.path
    ]


async def test_a_users_reaction_to_a_card_the_channel_sent_is_passed_on(fake: FakeFeishu) -> None:
    async with run_feishu(fake, inbound_reactions=True) as running:
        await fake.wait_connected()
        held = await running.channel.send_with_id(
            OutboundMessage(channel="feishu", chat_id=DM, content="The refund is done.")
        )
        assert held is not None
        thumbs = fake.reaction_event(ALICE, held, "THUMBSUP")
        frames = [
            await fake.push_event(event)
            for event in (thumbs, thumbs, fake.reaction_event(ALICE, held, "JIAYI"))
        ]
        await fake.wait_until(lambda: all(fake.acked(f) for f in frames), 5)

        first, again, cheer = running.inbound.messages
        assert (first.channel, first.sender_id, first.chat_id) == ("feishu", ALICE, DM)
        assert first.content == "[reaction 👍 to a message]"
        assert first.metadata == {REACTION: {"emoji": "👍", "message_id": held}}
        # Delivered twice: the same message id, which the gateway passes on once.
        assert first.message_id == again.message_id == f"reaction:{thumbs['header']['event_id']}"
        assert cheer.metadata[REACTION] == {"emoji": "JIAYI", "message_id": held}
        assert lookups(fake) == []


async def test_a_reaction_to_a_users_message_or_by_an_app_is_not_passed_on(
    fake: FakeFeishu,
) -> None:
    async with run_feishu(fake, inbound_reactions=True) as running:
        await fake.wait_connected()
        asked = fake.message_event(ALICE, DM, "refund please")
        theirs = asked["event"]["message"]["message_id"]
        held = await running.channel.send_with_id(
            OutboundMessage(channel="feishu", chat_id=DM, content="Done.")
        )
        assert held is not None
        events = [
            asked,
            fake.reaction_event(ALICE, theirs, "THUMBSUP"),
            fake.reaction_event(MALLORY, theirs, "HEART"),
            fake.reaction_event(ALICE, held, "GLANCE", operator_type="app"),
        ]
        frames = [await fake.push_event(event) for event in events]
        await fake.wait_until(lambda: all(fake.acked(f) for f in frames), 5)

        assert [m.content for m in running.inbound.messages] == ["refund please"]
        # A message found to be someone else's is looked up once.
        assert lookups(fake) == [theirs]


async def test_a_reaction_to_a_card_sent_before_a_restart_is_looked_up(fake: FakeFeishu) -> None:
    held = await sent_before_a_restart(fake, GROUP, "Sent before the restart.")
    async with run_feishu(fake, inbound_reactions=True) as running:
        await fake.wait_connected()
        frames = [
            await fake.push_event(fake.reaction_event(ALICE, held, kind))
            for kind in ("THUMBSUP", "DONE")
        ]
        await fake.wait_until(lambda: all(fake.acked(f) for f in frames), 5)

        assert [(m.chat_id, m.metadata[REACTION]) for m in running.inbound.messages] == [
            (GROUP, {"emoji": "👍", "message_id": held}),
            (GROUP, {"emoji": "✅", "message_id": held}),
        ]
        assert lookups(fake) == [held]


async def test_a_lookup_that_can_pass_leaves_the_reaction_to_be_delivered_again(
    fake: FakeFeishu,
) -> None:
    held = await sent_before_a_restart(fake, DM, "Sent before the restart.")
    async with run_feishu(fake, inbound_reactions=True) as running:
        await fake.wait_connected()
        fake.rate_limit_next("get")
        thumbs = fake.reaction_event(ALICE, held, "THUMBSUP")
        refused = await fake.push_event(thumbs)
        redelivered = await fake.push_event(thumbs)
        await fake.wait_until(lambda: fake.acked(redelivered), 5)
        assert refused not in fake.acks
        [reaction] = running.inbound.messages
        assert reaction.metadata[REACTION] == {"emoji": "👍", "message_id": held}


async def test_without_inbound_reactions_a_reaction_is_neither_looked_up_nor_passed_on(
    fake: FakeFeishu,
) -> None:
    async with run_feishu(fake) as running:
        await fake.wait_connected()
        held = await running.channel.send_with_id(
            OutboundMessage(channel="feishu", chat_id=DM, content="Done.")
        )
        assert held is not None
        frames = [
            await fake.push_event(fake.reaction_event(ALICE, message_id, "THUMBSUP"))
            for message_id in (held, "om_sent_before_a_restart")
        ]
        await fake.wait_until(lambda: all(fake.acked(f) for f in frames), 5)
        assert running.inbound.messages == []
        assert lookups(fake) == []
