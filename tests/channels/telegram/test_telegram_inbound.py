"""Receiving through the real python-telegram-bot, long-polling the fake Bot API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest

from bus import InboundMessage, InboundSender, create_bus
from channels.errors import FatalChannelError
from channels.health import HealthStatus
from channels.telegram.channel import DEFAULT_COMMANDS
from tests.channels.telegram.conftest import WAIT_S, ChannelFactory, running
from tests.fakes.telegram_server import FakeTelegram

BOT = "@octos_test_bot"


async def test_a_private_message_is_published_with_ids_and_metadata(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        sent = fake.push_message(42, "hello there", username="alice", first_name="Alice")
        inbound = await run.next_inbound()

    assert inbound.channel == "telegram"
    assert inbound.sender_id == "42|alice"
    assert inbound.chat_id == "42"
    assert inbound.content == "hello there"
    assert inbound.message_id == f"42:{sent['message_id']}"
    assert inbound.metadata["chat_type"] == "private"
    assert inbound.metadata["username"] == "alice"
    assert inbound.metadata["telegram_message_id"] == sent["message_id"]
    assert inbound.media == []


async def test_a_sender_without_username_is_known_by_id(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        fake.push_message(77, "hi", username=None)
        inbound = await run.next_inbound()
    assert inbound.sender_id == "77"
    assert "username" not in inbound.metadata


async def test_start_checks_the_token_and_publishes_the_commands(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        assert (await run.channel.health_check()).status is HealthStatus.HEALTHY
    [get_me] = fake.calls("getMe")
    [set_commands] = fake.calls("setMyCommands")
    assert get_me.at < set_commands.at
    published = [(c["command"], c["description"]) for c in set_commands.params["commands"]]
    assert published == list(DEFAULT_COMMANDS)
    assert [c["command"] for c in fake.state.commands][:4] == ["new", "s", "switch", "sessions"]


async def test_a_rejected_token_is_fatal_and_the_channel_down(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel(token="999:not-the-right-token")
    with pytest.raises(FatalChannelError) as raised:
        await asyncio.wait_for(channel.start(_null_sender()), WAIT_S)
    assert "not-the-right-token" not in str(raised.value)
    health = await channel.health_check()
    assert health.status is HealthStatus.DOWN
    assert fake.calls("getMe")[0].status == 401
    assert fake.calls("getUpdates") == []
    await channel.stop()


async def test_in_a_group_only_messages_for_the_bot_go_through(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    group = -100500
    async with running(make_channel(require_mention=True), fake) as run:
        fake.push_message(group, "just chatting", user_id=5, chat_type="supergroup")
        fake.push_message(group, f"{BOT} what is 2+2?", user_id=5, chat_type="supergroup")
        mention = await run.next_inbound()
        fake.push_message(group, "/help@other_bot", user_id=5, chat_type="supergroup")
        fake.push_message(group, f"/status{BOT} now", user_id=5, chat_type="supergroup")
        command = await run.next_inbound()
        reply_target = fake.state.bot_message(group, {}, {"text": "earlier answer"}, [], "")
        fake.push_message(
            group,
            "and then?",
            user_id=5,
            chat_type="supergroup",
            reply_to_message_id=reply_target["message_id"],
        )
        reply = await run.next_inbound()
        await fake.wait_until(lambda: not fake.pending_update_ids)
        assert run.queued_inbound() == 0

    assert mention.content == "what is 2+2?"
    assert mention.chat_id == str(group)
    assert mention.metadata["chat_type"] == "supergroup"
    assert command.content == "/status now"
    assert reply.content == "and then?"
    assert reply.metadata["reply_to"] == {
        "message_id": str(reply_target["message_id"]),
        "text": "earlier answer",
        "from": "bot",
    }


async def test_without_require_mention_every_group_message_goes_through(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(require_mention=False), fake) as run:
        fake.push_message(-7, "anyone here?", user_id=5, chat_type="group")
        inbound = await run.next_inbound()
    assert inbound.content == "anyone here?"


async def test_a_mention_after_astral_characters_is_cut_by_utf16_offsets(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        fake.push_message(-9, f"😀🇩🇪 {BOT} 你好", user_id=5, chat_type="group")
        inbound = await run.next_inbound()
    assert inbound.content == "😀🇩🇪 你好"


async def test_a_photo_is_downloaded_under_the_data_dir(
    fake: FakeTelegram, make_channel: ChannelFactory, tmp_path: Path
) -> None:
    picture = b"\x89PNG fake picture bytes"
    async with running(make_channel(), fake) as run:
        fake.push_message(42, caption="look at this", photo=picture)
        inbound = await run.next_inbound()

    assert inbound.content == "look at this"
    [path] = inbound.media
    saved = Path(path)
    assert await asyncio.to_thread(saved.read_bytes) == picture
    assert saved.parent == tmp_path / "media" / "telegram" / "42"
    # The largest size is the one fetched, not the thumbnail.
    [get_file] = fake.calls("getFile")
    assert not str(get_file.params["file_id"]).endswith("-small")


async def test_a_document_keeps_its_name_and_a_strangers_files_are_not_fetched(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(allow=["@alice"]), fake) as run:
        fake.push_message(42, document=("report 2024.pdf", b"%PDF-1.7"), username="alice")
        allowed = await run.next_inbound()
        fake.push_message(66, document=("virus.exe", b"MZ"), username="mallory")
        stranger = await run.next_inbound()

    [path] = allowed.media
    assert Path(path).name.endswith("-report_2024.pdf")
    assert await asyncio.to_thread(Path(path).read_bytes) == b"%PDF-1.7"
    assert stranger.sender_id == "66|mallory"
    assert stranger.media == []
    assert len(fake.calls("getFile")) == 1


async def test_malformed_updates_are_skipped_and_polling_goes_on(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        fake.push_raw_update({"message": {"text": "no chat, no date"}})
        fake.push_raw_update({"message": "not an object"})
        fake.push_raw_update("not even an update")
        fake.push_message(42, "still here")
        inbound = await run.next_inbound()
        await fake.wait_until(lambda: not fake.pending_update_ids)
        assert run.queued_inbound() == 0
        assert not run.task.done()

    assert inbound.content == "still here"


async def test_a_garbled_answer_backs_off_and_polling_recovers(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        fake.respond_next_raw("getUpdates", b"<html>bad gateway</html>", status=502)
        fake.respond_next_raw("getUpdates", b"{not json", status=200)
        fake.drop_connections()  # ends the poll in progress, so the next ones meet the garbage
        fake.push_message(42, "after the storm")
        inbound = await run.next_inbound()
        assert (await run.channel.health_check()).status is HealthStatus.HEALTHY

    assert inbound.content == "after the storm"
    statuses = [call.status for call in fake.calls("getUpdates")]
    assert 502 in statuses


async def test_health_is_degraded_while_polling_fails(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    async with running(channel, fake):
        fake.fail_next("getUpdates", 502, "Bad Gateway")
        fake.drop_connections()  # the poll in progress fails; the next one meets the 502

        def polling_again_after_the_502() -> bool:
            calls = fake.calls("getUpdates")
            failed = [i for i, call in enumerate(calls) if call.status == 502]
            return bool(failed) and len(calls) > failed[0] + 1 and fake.long_polls_waiting == 1

        await fake.wait_until(polling_again_after_the_502)
        # Healthy again only once a poll succeeds; this one is still being held open.
        health = await channel.health_check()
        assert health.status is HealthStatus.DEGRADED
        assert "Bad Gateway" in health.reason
        fake.push_message(42, "back")
        await fake.wait_until(lambda: not fake.pending_update_ids)
        assert (await channel.health_check()).status is HealthStatus.HEALTHY


async def test_a_dropped_connection_is_reconnected_and_nothing_is_handled_twice(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        fake.push_message(42, "one")
        first = await run.next_inbound()
        await fake.wait_until(lambda: fake.long_polls_waiting > 0)
        assert fake.drop_connections() == 1
        fake.push_message(42, "two")
        second = await run.next_inbound()
        await fake.wait_until(lambda: not fake.pending_update_ids)
        assert run.queued_inbound() == 0

    assert [first.content, second.content] == ["one", "two"]
    assert first.message_id != second.message_id


async def test_an_update_delivered_twice_is_published_once(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    """A server that lost a confirmation sends an update again; the channel keeps its offset."""
    async with running(make_channel(), fake) as run:
        sent = fake.push_message(42, "once")
        # The same update twice in one answer (no await between: one batch).
        fake.push_update({"update_id": fake.pending_update_ids[-1], "message": sent})
        first = await run.next_inbound()
        fake.push_message(42, "next")
        following = await run.next_inbound()
        await fake.wait_until(lambda: not fake.pending_update_ids)
        assert run.queued_inbound() == 0
    assert [first.content, following.content] == ["once", "next"]


async def test_stop_confirms_the_offset_so_a_new_instance_sees_nothing_old(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    async with running(make_channel(), fake) as run:
        fake.push_message(42, "handled before the restart")
        await run.next_inbound()
    assert fake.pending_update_ids == []

    async with running(make_channel(), fake) as again:
        fake.push_message(42, "new after the restart")
        inbound = await again.next_inbound()
        assert again.queued_inbound() == 0
    assert inbound.content == "new after the restart"


class StuckAfterOne:
    """A bus end that takes one message, then blocks (a full queue) until cancelled."""

    def __init__(self) -> None:
        self.received: list[InboundMessage] = []
        self.stuck = asyncio.Event()

    async def send(self, message: InboundMessage) -> None:
        if self.received:
            self.stuck.set()
            await asyncio.Event().wait()
        self.received.append(message)


async def test_cancelling_start_ends_it_within_a_second_confirming_only_what_was_handled(
    fake: FakeTelegram, make_channel: ChannelFactory
) -> None:
    channel = make_channel()
    bus = StuckAfterOne()
    task = asyncio.create_task(channel.start(cast(InboundSender, bus)), name="test:start")
    await fake.wait_until(lambda: fake.long_polls_waiting > 0)
    fake.push_message(42, "handled")
    fake.push_message(42, "interrupted")  # same batch: no await in between
    await asyncio.wait_for(bus.stuck.wait(), WAIT_S)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1.0)
    await channel.stop()

    assert [m.content for m in bus.received] == ["handled"]
    # The way out confirmed the first update only; the second waits for the next run.
    assert len(fake.pending_update_ids) == 1
    async with running(make_channel(), fake) as again:
        redelivered = await again.next_inbound()
    assert redelivered.content == "interrupted"


async def test_stop_is_idempotent_and_start_after_stop_returns_at_once(
    make_channel: ChannelFactory, fake: FakeTelegram
) -> None:
    channel = make_channel()
    await channel.stop()
    await channel.stop()
    await asyncio.wait_for(channel.start(_null_sender()), WAIT_S)
    assert fake.calls("getMe") == []


def _null_sender() -> InboundSender:
    _agent, publisher = create_bus()
    return publisher.inbound_sender()
