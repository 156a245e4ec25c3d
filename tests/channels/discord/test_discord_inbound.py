"""What the bot hears: DMs, mentions in servers, files; what it ignores; malformed events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels.media_info import MEDIA_DETAILS
from tests.channels.discord.conftest import (
    ALICE,
    DM_CHANNEL,
    GUILD,
    GUILD_CHANNEL,
    OTHER_BOT,
    RunningBot,
    run_bot,
)
from tests.fakes.discord_server import FakeAttachment, FakeDiscord


@pytest.fixture
async def open_bot(fake_discord: FakeDiscord, tmp_path: Path) -> AsyncIterator[RunningBot]:
    """A bot that answers every message in servers, mention or not."""
    async with run_bot(fake_discord, tmp_path, require_mention=False) as running:
        yield running


async def test_a_direct_message_is_published_with_its_ids(bot: RunningBot) -> None:
    pushed = await bot.fake.push_message(DM_CHANNEL, ALICE, "hello there")

    inbound = await bot.next_inbound()

    assert inbound.channel == "discord"
    assert inbound.content == "hello there"
    assert inbound.chat_id == str(DM_CHANNEL)
    assert inbound.message_id == pushed["id"]
    assert inbound.sender_id == f"{ALICE.id}|alice"
    assert inbound.metadata == {
        "guild_id": None,
        "is_dm": True,
        "sender_user_id": str(ALICE.id),
        "sender_name": "Alice",
    }
    assert inbound.media == []


async def test_the_sender_id_matches_an_allow_list_by_id_or_username(bot: RunningBot) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "hi")
    inbound = await bot.next_inbound()

    bot.channel.allow = type(bot.channel.allow)([str(ALICE.id)])
    assert bot.channel.is_allowed(inbound.sender_id)
    bot.channel.allow = type(bot.channel.allow)(["@alice"])
    assert bot.channel.is_allowed(inbound.sender_id)
    bot.channel.allow = type(bot.channel.allow)(["999"])
    assert not bot.channel.is_allowed(inbound.sender_id)


async def test_a_server_message_needs_a_mention_which_is_stripped(bot: RunningBot) -> None:
    fake = bot.fake
    await fake.push_message(GUILD_CHANNEL, ALICE, "talking among ourselves", guild_id=GUILD)
    pushed = await fake.push_message(
        GUILD_CHANNEL,
        ALICE,
        f"<@{fake.bot.id}> what is the weather?",
        guild_id=GUILD,
        mentions=[fake.bot],
    )

    inbound = await bot.next_inbound()

    assert inbound.message_id == pushed["id"]
    assert inbound.content == "what is the weather?"
    assert inbound.chat_id == str(GUILD_CHANNEL)
    assert inbound.metadata["guild_id"] == str(GUILD)
    assert inbound.metadata["is_dm"] is False
    assert bot.queued_inbound() == 0


async def test_a_nickname_mention_in_the_middle_is_stripped(bot: RunningBot) -> None:
    fake = bot.fake
    await fake.push_message(
        GUILD_CHANNEL,
        ALICE,
        f"hey <@!{fake.bot.id}> you there",
        guild_id=GUILD,
        mentions=[fake.bot],
    )

    assert (await bot.next_inbound()).content == "hey you there"


async def test_without_require_mention_every_server_message_is_answered(
    open_bot: RunningBot,
) -> None:
    await open_bot.fake.push_message(GUILD_CHANNEL, ALICE, "no mention here", guild_id=GUILD)

    inbound = await open_bot.next_inbound()

    assert inbound.content == "no mention here"
    assert inbound.metadata["is_dm"] is False


async def test_own_and_other_bots_messages_are_ignored(open_bot: RunningBot) -> None:
    fake = open_bot.fake
    await fake.push_message(DM_CHANNEL, fake.bot, "my own echo")
    await fake.push_message(GUILD_CHANNEL, fake.bot, "my own echo", guild_id=GUILD)
    await fake.push_message(GUILD_CHANNEL, OTHER_BOT, "beep", guild_id=GUILD, mentions=[fake.bot])
    await fake.push_message(DM_CHANNEL, ALICE, "a person")

    # Messages are handled in order: the first one published is the person's.
    assert (await open_bot.next_inbound()).content == "a person"
    assert open_bot.queued_inbound() == 0


async def test_an_attachment_is_downloaded_under_the_data_dir(bot: RunningBot) -> None:
    picture = bytes(range(256)) * 40
    await bot.fake.push_message(
        DM_CHANNEL,
        ALICE,
        "look at this",
        attachments=[FakeAttachment("../../cat photo.png", picture, "image/png")],
    )

    inbound = await bot.next_inbound()

    assert len(inbound.media) == 1
    saved = Path(inbound.media[0])
    assert await asyncio.to_thread(saved.read_bytes) == picture
    assert saved.parent == bot.data_dir / "media" / "discord" / str(DM_CHANNEL)
    assert saved.name.endswith("_cat_photo.png")


async def test_a_message_with_only_a_file_is_answered(bot: RunningBot) -> None:
    await bot.fake.push_message(
        DM_CHANNEL, ALICE, "", attachments=[FakeAttachment("notes.txt", b"remember the milk")]
    )

    inbound = await bot.next_inbound()

    assert inbound.content == ""
    saved = Path(inbound.media[0])
    assert await asyncio.to_thread(saved.read_bytes) == b"remember the milk"


async def test_a_malformed_message_event_is_skipped_and_the_next_one_arrives(
    bot: RunningBot,
) -> None:
    fake = bot.fake
    await fake.push_dispatch("MESSAGE_CREATE", {"id": "not-a-number", "channel_id": "1"})
    await fake.push_dispatch("MESSAGE_CREATE", {"content": "no ids at all"})
    await fake.push_dispatch("GUILD_CREATE", {"name": "no id"})
    await fake.push_message(DM_CHANNEL, ALICE, "still listening?")

    assert (await bot.next_inbound()).content == "still listening?"
    assert fake.identify_count == 1  # the same connection carried on


async def test_an_undecodable_frame_reconnects_and_messages_keep_arriving(
    bot: RunningBot,
) -> None:
    fake = bot.fake
    await fake.push_raw_frame("this is not JSON {")
    await fake.wait_until(lambda: fake.identify_count == 2 and fake.live_sessions)
    await fake.push_message(DM_CHANNEL, ALICE, "after the garbage")

    inbound = await bot.next_inbound()

    assert inbound.content == "after the garbage"
    assert bot.queued_inbound() == 0


async def test_a_photo_reaches_the_message_with_its_details(bot: RunningBot) -> None:
    await bot.fake.push_message(
        DM_CHANNEL, ALICE, "", attachments=[FakeAttachment("cat.png", b"\x89PNG...", "image/png")]
    )

    inbound = await bot.next_inbound()

    details = inbound.metadata[MEDIA_DETAILS][inbound.media[0]]
    assert details == {"name": "cat.png", "mime": "image/png"}


async def test_a_voice_message_carries_its_duration(bot: RunningBot) -> None:
    voice = FakeAttachment("voice-message.ogg", b"OggS...", "audio/ogg", duration_s=4.2)
    await bot.fake.push_message(DM_CHANNEL, ALICE, "", attachments=[voice])

    inbound = await bot.next_inbound()

    assert inbound.metadata[MEDIA_DETAILS][inbound.media[0]]["duration_s"] == 4.2


async def test_a_file_over_the_limit_is_named_and_not_downloaded(bot: RunningBot) -> None:
    bot.channel.max_media_bytes = 1000
    video = FakeAttachment("party.mp4", b"x" * 10, "video/mp4", stated_size=31 * 1024 * 1024)
    pushed = await bot.fake.push_message(DM_CHANNEL, ALICE, "look", attachments=[video])

    inbound = await bot.next_inbound()

    assert inbound.media == []
    assert (
        inbound.content
        == "look\n[video: party.mp4, 31 MB, not downloaded: larger than the 1000 bytes limit]"
    )
    assert inbound.message_id == pushed["id"]
    assert bot.fake.cdn_fetched == []


async def test_a_refused_download_is_named_and_the_message_still_arrives(bot: RunningBot) -> None:
    gone = FakeAttachment("gone.pdf", b"%PDF", "application/pdf", served=False)
    await bot.fake.push_message(DM_CHANNEL, ALICE, "see", attachments=[gone])

    inbound = await bot.next_inbound()

    assert inbound.media == []
    assert inbound.content.startswith(
        "see\n[file: gone.pdf, 4 bytes, not downloaded: Discord refused"
    )
