"""Matrix in: /sync long polling, the durable since token, mentions, invites, encryption."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bus import InboundRefused
from channels.matrix import ENCRYPTED_NOTICE
from channels.matrix.channel import since_path
from channels.media_info import MEDIA_DETAILS
from tests.channels.matrix.conftest import (
    ALICE,
    BOB,
    MALLORY,
    WAIT_S,
    RunningMatrix,
    run_channel,
)
from tests.fakes.matrix_server import FakeMatrix


def stored_since(running: RunningMatrix) -> str | None:
    path = since_path(running.data_dir, running.fake.bot_user_id)
    if not path.exists():
        return None
    return str(json.loads(path.read_text())["next_batch"])


async def test_a_first_start_skips_the_backlog_and_takes_new_messages(
    fake: FakeMatrix, tmp_path: Path
) -> None:
    room = fake.create_room([ALICE])
    fake.say(room, ALICE, "said before the bot ever ran")
    running = await run_channel(fake, tmp_path)
    try:
        event_id = fake.say(room, ALICE, "hello bot")
        [message] = await running.inbound.wait_for(1)
        assert message.channel == "matrix"
        assert message.content == "hello bot"
        assert (message.sender_id, message.chat_id) == (ALICE, room)
        assert message.message_id == event_id
    finally:
        await running.stop()


async def test_the_since_token_advances_only_once_the_events_are_durable(
    matrix: RunningMatrix,
) -> None:
    fake, room = matrix.fake, matrix.fake.create_room([ALICE])
    await matrix.fake.wait_until(lambda: stored_since(matrix) == fake.next_batch)
    before = stored_since(matrix)
    matrix.inbound.hold = asyncio.Event()
    fake.say(room, ALICE, "hold on")
    await asyncio.wait_for(matrix.inbound.entered.wait(), WAIT_S)
    assert stored_since(matrix) == before, "advanced past an event that is not durable yet"
    matrix.inbound.hold.set()
    await matrix.inbound.wait_for(1)
    await fake.wait_until(lambda: stored_since(matrix) != before)
    assert stored_since(matrix) == fake.next_batch


async def test_a_restart_resumes_from_the_stored_token_without_answering_twice(
    fake: FakeMatrix, tmp_path: Path
) -> None:
    room = fake.create_room([ALICE])
    first = await run_channel(fake, tmp_path)
    fake.say(room, ALICE, "one")
    await first.inbound.wait_for(1)
    await fake.wait_until(lambda: stored_since(first) == fake.next_batch)
    await first.stop()
    fake.say(room, ALICE, "two, while the bot was down")
    second = await run_channel(fake, tmp_path)
    try:
        [message] = await second.inbound.wait_for(1)
        assert message.content == "two, while the bot was down"
    finally:
        await second.stop()


async def test_in_a_group_only_mentions_are_taken_in_a_direct_chat_everything(
    matrix: RunningMatrix,
) -> None:
    fake = matrix.fake
    group = fake.create_room([ALICE, BOB])
    direct = fake.create_room([ALICE])
    fake.say(group, ALICE, "talking to bob")
    fake.say(group, BOB, "hey octos, a question", mention_bot=True)
    fake.say(group, ALICE, f"and {fake.bot_user_id} by name")
    fake.say(direct, ALICE, "just us")
    messages = await matrix.inbound.wait_for(3)
    assert [m.content for m in messages] == [
        "hey octos, a question",
        f"and {fake.bot_user_id} by name",
        "just us",
    ]


async def test_notices_edits_and_the_bot_s_own_messages_are_not_taken(
    matrix: RunningMatrix,
) -> None:
    fake, room = matrix.fake, matrix.fake.create_room([ALICE])
    fake.say(room, ALICE, "a bot's notice", msgtype="m.notice")
    fake.say(room, fake.bot_user_id, "my own words")
    fake.say(room, ALICE, "the real one")
    [message] = await matrix.inbound.wait_for(1)
    assert message.content == "the real one"


async def test_a_reaction_to_the_bot_s_message_is_taken_with_its_text(
    matrix: RunningMatrix,
) -> None:
    fake, room = matrix.fake, matrix.fake.create_room([ALICE, BOB])
    answer = fake.say(room, fake.bot_user_id, "The refund is done. " + "x" * 200)
    asked = fake.say(room, ALICE, "thanks, bot", mention_bot=True)
    fake.react(room, BOB, asked, "👍")  # on Alice's message: not the bot's to answer
    reaction_id = fake.react(room, ALICE, answer, "🎉")
    [thanks, reaction] = await matrix.inbound.wait_for(2)
    assert thanks.content == "thanks, bot"
    assert reaction.content == "[reaction 🎉 to: The refund is done. " + "x" * 80 + "]"
    assert reaction.metadata["reaction"] == {"emoji": "🎉", "message_id": answer}
    assert (reaction.sender_id, reaction.message_id) == (ALICE, reaction_id)


async def test_an_allowed_user_s_invite_is_accepted_a_stranger_s_ignored(
    matrix: RunningMatrix,
) -> None:
    fake = matrix.fake
    welcome = fake.create_room([ALICE], with_bot=False)
    unknown = fake.create_room([MALLORY], with_bot=False)
    fake.invite_bot(unknown, MALLORY)
    fake.invite_bot(welcome, ALICE)
    await fake.wait_until(lambda: fake.joins == [welcome])
    fake.say(welcome, ALICE, "thanks for joining")
    [message] = await matrix.inbound.wait_for(1)
    assert message.chat_id == welcome
    assert fake.joins == [welcome]


async def test_an_encrypted_room_gets_one_clear_notice(matrix: RunningMatrix) -> None:
    fake = matrix.fake
    room = fake.create_room([ALICE], encrypted=True)
    fake.say_encrypted(room, ALICE)
    fake.say_encrypted(room, ALICE)
    plain = fake.create_room([ALICE])
    fake.say(plain, ALICE, "after the secrets")
    await matrix.inbound.wait_for(1)
    assert fake.shown(room) == [ENCRYPTED_NOTICE]
    assert [m.content for m in matrix.inbound.messages] == ["after the secrets"]
    [notice] = fake.bot_events(room)
    assert notice["content"]["msgtype"] == "m.notice"


async def test_a_full_backlog_is_waited_out_and_the_message_kept(matrix: RunningMatrix) -> None:
    fake, room = matrix.fake, matrix.fake.create_room([ALICE])
    matrix.inbound.refuse_next = InboundRefused("chat", 0.05, "backlog full")
    fake.say(room, ALICE, "still there after the wait")
    [message] = await matrix.inbound.wait_for(1)
    assert message.content == "still there after the wait"
    assert matrix.inbound.refuse_next is None


async def test_a_stop_before_an_event_was_durable_gets_it_again_with_the_same_id(
    fake: FakeMatrix, tmp_path: Path
) -> None:
    room = fake.create_room([ALICE])
    first = await run_channel(fake, tmp_path)
    first.inbound.hold = asyncio.Event()
    event_id = fake.say(room, ALICE, "caught mid-flight")
    await asyncio.wait_for(first.inbound.entered.wait(), WAIT_S)
    await first.stop()  # the send never returned: the token must not have moved past it
    second = await run_channel(fake, tmp_path)
    try:
        [message] = await second.inbound.wait_for(1)
        assert (message.content, message.message_id) == ("caught mid-flight", event_id)
    finally:
        await second.stop()


async def test_a_rate_limited_sync_waits_the_server_s_time_and_goes_on(
    matrix: RunningMatrix,
) -> None:
    fake, room = matrix.fake, matrix.fake.create_room([ALICE])
    fake.rate_limit_next("sync", retry_after_ms=50)
    fake.say(room, ALICE, "after the pause")
    [message] = await matrix.inbound.wait_for(1)
    assert message.content == "after the pause"
    assert [c.status for c in fake.calls_to("GET", "/sync")].count(429) == 1


async def test_files_are_downloaded_for_allowed_senders_only(matrix: RunningMatrix) -> None:
    fake = matrix.fake
    direct = fake.create_room([ALICE])
    fake.say_file(direct, ALICE, b"\x89PNG alice's picture", name="cat.png")
    stranger = fake.create_room([MALLORY])
    fake.say_file(stranger, MALLORY, b"mallory's", name="evil.png")
    alice, mallory = await matrix.inbound.wait_for(2)
    assert alice.content == "[m.image] cat.png"
    [path] = alice.media
    assert path.endswith(".png")
    assert Path(path).read_bytes() == b"\x89PNG alice's picture"  # noqa: ASYNC240
    assert mallory.media == []
    assert len(fake.downloads) == 1


async def stopped_while_alice_says(fake: FakeMatrix, tmp_path: Path, texts: list[str]) -> str:
    """The channel ran in a room with Alice, then was stopped while she said `texts`."""
    room = fake.create_room([ALICE])
    first = await run_channel(fake, tmp_path)
    fake.say(room, ALICE, "before the stop")
    await first.inbound.wait_for(1)
    await fake.wait_until(lambda: stored_since(first) == fake.next_batch)
    await first.stop()
    for text in texts:
        fake.say(room, ALICE, text)
    return room


async def test_more_messages_than_a_sync_timeline_holds_are_all_read_in_order(
    fake: FakeMatrix, tmp_path: Path
) -> None:
    texts = [f"missed {n}" for n in range(1, 131)]
    await stopped_while_alice_says(fake, tmp_path, texts)
    second = await run_channel(fake, tmp_path)
    try:
        messages = await second.inbound.wait_for(len(texts))
        assert [m.content for m in messages] == texts
        assert fake.message_pages >= 1, "the sync's timeline was never cut: nothing was tested"
    finally:
        await second.stop()


async def test_a_page_of_the_gap_that_fails_is_read_again_and_nothing_skipped(
    fake: FakeMatrix, tmp_path: Path
) -> None:
    texts = [f"missed {n}" for n in range(1, 81)]
    await stopped_while_alice_says(fake, tmp_path, texts)
    fake.fail_next("messages", 502, "M_UNKNOWN", "Bad Gateway")
    second = await run_channel(fake, tmp_path)
    try:
        messages = await second.inbound.wait_for(len(texts))
        assert [m.content for m in messages] == texts
        assert [c.status for c in fake.calls_to("GET", "/messages")].count(502) == 1
    finally:
        await second.stop()


async def test_an_image_keeps_its_details_and_audio_its_duration(matrix: RunningMatrix) -> None:
    fake = matrix.fake
    room = fake.create_room([ALICE])
    fake.say_file(room, ALICE, b"\x89PNG", name="cat.png")
    fake.say_file(room, ALICE, b"OggS", name="voice.ogg", mimetype="audio/ogg", duration_ms=4200)

    picture, voice = await matrix.inbound.wait_for(2)

    [picture_path] = picture.media
    assert picture.metadata[MEDIA_DETAILS][picture_path] == {
        "name": "cat.png",
        "mime": "image/png",
    }
    [voice_path] = voice.media
    assert voice.metadata[MEDIA_DETAILS][voice_path]["duration_s"] == 4.2


async def test_a_file_over_the_limit_is_named_and_not_downloaded(matrix: RunningMatrix) -> None:
    matrix.channel.max_media_bytes = 1000
    fake = matrix.fake
    room = fake.create_room([ALICE])
    fake.say_file(
        room, ALICE, b"x", name="film.zip", mimetype="application/zip", stated_size=31 << 20
    )

    [message] = await matrix.inbound.wait_for(1)

    assert message.media == []
    assert message.content == (
        "[m.file] film.zip\n"
        "[file: film.zip, 31 MB, not downloaded: larger than the 1000 bytes limit]"
    )
    assert fake.downloads == []
