"""What the bot says: replies, edits, typing, reactions, embeds, files, long replies in chunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from bus import OutboundMessage
from channels.base import Embed, EmbedField
from channels.discord import DiscordChannel
from config import DiscordConfig
from tests.channels.discord.conftest import (
    ALICE,
    DM_CHANNEL,
    GUILD,
    GUILD_CHANNEL,
    RunningBot,
    run_bot,
)
from tests.fakes.discord_server import FakeDiscord

MESSAGES = r"/channels/\d+/messages"


def reply(chat_id: int, content: str, **fields: object) -> OutboundMessage:
    return OutboundMessage.model_validate(
        {"channel": "discord", "chat_id": str(chat_id), "content": content, **fields}
    )


def test_the_channel_declares_discords_limit_and_edit_rate() -> None:
    assert DiscordChannel.limit.max_units == 2000
    assert DiscordChannel.limit.unit == "chars"
    assert DiscordChannel.edit_interval_s == 1.0
    channel = DiscordChannel(DiscordConfig(token="t"), data_dir=Path("."))
    assert channel.name == "discord"
    assert channel.supports_edit()
    assert channel.limit.max_units == 2000


async def test_a_reply_references_the_triggering_message(bot: RunningBot) -> None:
    await bot.fake.push_message(GUILD_CHANNEL, ALICE, f"<@{bot.fake.bot.id}> hi", guild_id=GUILD)
    inbound = await bot.next_inbound()

    await bot.channel.send(reply(GUILD_CHANNEL, "hello Alice", reply_to=inbound.message_id))

    [request] = bot.fake.requests_to("POST", MESSAGES)
    assert request.json["content"] == "hello Alice"
    assert request.json["message_reference"]["message_id"] == int(inbound.message_id or "")
    assert request.json["message_reference"]["fail_if_not_exists"] is False
    # What the agent writes must never ping @everyone or a role.
    assert request.json["allowed_mentions"]["parse"] == ["users"]
    [sent] = bot.fake.bot_messages(GUILD_CHANNEL)
    assert sent["type"] == 19
    assert sent["referenced_message"]["id"] == inbound.message_id


async def test_a_message_without_reply_to_is_plain(bot: RunningBot) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "hi")
    await bot.next_inbound()

    await bot.channel.send(reply(DM_CHANNEL, "just saying"))

    [request] = bot.fake.requests_to("POST", MESSAGES)
    assert "message_reference" not in request.json
    assert [m["content"] for m in bot.fake.bot_messages(DM_CHANNEL)] == ["just saying"]


async def test_send_with_id_then_edits_and_finish_stream_in_place(bot: RunningBot) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "stream please")
    await bot.next_inbound()

    message_id = await bot.channel.send_with_id(reply(DM_CHANNEL, "Once"))
    assert message_id is not None
    await bot.channel.edit_message(str(DM_CHANNEL), message_id, "Once upon")
    await bot.channel.finish_stream(str(DM_CHANNEL), message_id, "Once upon a time.")

    edits = bot.fake.requests_to("PATCH", rf"/channels/{DM_CHANNEL}/messages/{message_id}")
    assert [r.json["content"] for r in edits] == ["Once upon", "Once upon a time."]
    [shown] = bot.fake.bot_messages(DM_CHANNEL)
    assert shown["id"] == message_id
    assert shown["content"] == "Once upon a time."
    assert shown["edited_timestamp"] is not None


async def test_delete_removes_the_message_and_a_second_delete_is_fine(bot: RunningBot) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "hi")
    await bot.next_inbound()
    message_id = await bot.channel.send_with_id(reply(DM_CHANNEL, "oops"))
    assert message_id is not None

    await bot.channel.delete_message(str(DM_CHANNEL), message_id)
    await bot.channel.delete_message(str(DM_CHANNEL), message_id)

    assert bot.fake.bot_messages(DM_CHANNEL) == []
    deletes = bot.fake.requests_to("DELETE", rf"/channels/{DM_CHANNEL}/messages/{message_id}")
    assert [r.status for r in deletes] == [204, 404]


async def test_typing_posts_to_the_typing_endpoint(bot: RunningBot) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "hi")
    await bot.next_inbound()

    await bot.channel.send_typing(str(DM_CHANNEL))
    await bot.channel.send_typing(str(DM_CHANNEL))
    # Discord has no "stop typing": the indicator lapses by itself, and nothing is posted.
    await bot.channel.stop_typing(str(DM_CHANNEL))

    typing = bot.fake.requests_to("POST", rf"/channels/{DM_CHANNEL}/typing")
    assert [r.status for r in typing] == [204, 204]
    assert bot.fake.requests_to("POST", MESSAGES) == []


async def test_reactions_are_added_and_removed(bot: RunningBot) -> None:
    pushed = await bot.fake.push_message(DM_CHANNEL, ALICE, "nice")
    await bot.next_inbound()

    await bot.channel.react_to_message(str(DM_CHANNEL), pushed["id"], "👍")
    reacted = bot.fake.message(pushed["id"])
    assert reacted is not None
    assert [r["emoji"]["name"] for r in reacted["reactions"]] == ["👍"]

    await bot.channel.remove_reaction(str(DM_CHANNEL), pushed["id"], "👍")
    assert bot.fake.message(pushed["id"])["reactions"] == []  # type: ignore[index]
    paths = [r.path for r in bot.fake.requests if "reactions" in r.path]
    assert paths == [f"/channels/{DM_CHANNEL}/messages/{pushed['id']}/reactions/👍/@me"] * 2


async def test_an_embed_is_a_real_discord_embed(bot: RunningBot) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "status?")
    await bot.next_inbound()

    message_id = await bot.channel.send_embed(
        str(DM_CHANNEL),
        Embed(
            "Status",
            "All systems go",
            fields=(
                EmbedField("Uptime", "3 days", inline=True),
                EmbedField("Queue", "empty", inline=False),
            ),
            color=0x00FF00,
        ),
    )

    [request] = bot.fake.requests_to("POST", MESSAGES)
    [embed] = request.json["embeds"]
    assert embed["title"] == "Status"
    assert embed["description"] == "All systems go"
    assert embed["color"] == 0x00FF00
    assert embed["fields"] == [
        {"name": "Uptime", "value": "3 days", "inline": True},
        {"name": "Queue", "value": "empty", "inline": False},
    ]
    assert bot.fake.bot_messages(DM_CHANNEL)[0]["id"] == message_id


async def test_media_paths_are_uploaded_as_multipart_files(bot: RunningBot, tmp_path: Path) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "send me the report")
    await bot.next_inbound()
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.7 fake report")
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG fake chart")

    await bot.channel.send(
        reply(DM_CHANNEL, "here you go", media=[str(report), str(chart)], reply_to=None)
    )

    [request] = bot.fake.requests_to("POST", MESSAGES)
    assert request.headers["Content-Type"].startswith("multipart/form-data")
    assert request.json["content"] == "here you go"
    assert [(f.filename, f.data) for f in request.files] == [
        ("report.pdf", b"%PDF-1.7 fake report"),
        ("chart.png", b"\x89PNG fake chart"),
    ]
    [sent] = bot.fake.bot_messages(DM_CHANNEL)
    assert [a["filename"] for a in sent["attachments"]] == ["report.pdf", "chart.png"]


async def test_more_than_ten_files_go_in_several_messages(bot: RunningBot, tmp_path: Path) -> None:
    await bot.fake.push_message(DM_CHANNEL, ALICE, "all the pictures")
    await bot.next_inbound()
    paths = []
    for index in range(12):
        path = tmp_path / f"p{index}.txt"
        path.write_text(str(index))
        paths.append(str(path))

    await bot.channel.send(reply(DM_CHANNEL, "twelve files", media=paths))

    uploads = bot.fake.requests_to("POST", MESSAGES)
    assert [len(r.files) for r in uploads] == [10, 2]
    assert [r.json.get("content") for r in uploads] == ["twelve files", None]


FAMILY = "👨‍👩‍👧"
FENCE = "```"


def long_mixed_reply() -> str:
    """About 10,000 characters: CJK prose with emoji, short code blocks, one longer than 2000."""
    paragraph = f"这是一个测试段落，包含中文和表情 😀👍🏽{FAMILY} 以及一些 English words. " * 6
    code = "```python\n" + "\n".join(f"print('第{i}行 ✨')" for i in range(40)) + "\n```"
    long_code = "```js\n" + "\n".join(f"console.log('第{i}行 🚀');" for i in range(110)) + "\n```"
    blocks = [paragraph, code, paragraph, long_code]
    while sum(len(block) + 2 for block in blocks) < 9_000:
        blocks += [paragraph, code]
    return "\n\n".join(blocks)


def without_markup(text: str) -> str:
    """The text with fence lines and all whitespace taken out, to compare content."""
    lines = [line for line in text.splitlines() if not line.startswith(FENCE)]
    return "".join("".join(lines).split())


async def test_a_ten_thousand_character_reply_arrives_in_chunks_that_fit(
    bot: RunningBot,
) -> None:
    coalesce = pytest.importorskip("channels.split")
    text = long_mixed_reply()
    assert 9_000 < len(text) <= 11_000
    await bot.fake.push_message(DM_CHANNEL, ALICE, "long please")
    await bot.next_inbound()

    for chunk in coalesce.split_message(text, bot.channel.limit):
        await bot.channel.send(reply(DM_CHANNEL, chunk))

    received = [r.json["content"] for r in bot.fake.requests_to("POST", MESSAGES)]
    assert all(r.status == 200 for r in bot.fake.requests)
    assert len(received) >= 5
    assert all(len(content) <= 2000 for content in received)
    # Every chunk closes the fences it opens: a split code block is closed and reopened.
    assert all(content.count(FENCE) % 2 == 0 for content in received)
    assert any(content.startswith("```js") for content in received[1:])
    # Nothing lost, no emoji sequence cut in two.
    assert "".join(map(without_markup, received)) == without_markup(text)
    assert sum(content.count(FAMILY) for content in received) == text.count(FAMILY)
    assert [m["content"] for m in bot.fake.bot_messages(DM_CHANNEL)] == received


async def test_edits_past_discords_budget_are_waited_out_and_all_land(tmp_path: Path) -> None:
    async with FakeDiscord(edit_budget=(2, 0.3)) as fake, run_bot(fake, tmp_path) as bot:
        await fake.push_message(DM_CHANNEL, ALICE, "stream fast")
        await bot.next_inbound()
        message_id = await bot.channel.send_with_id(reply(DM_CHANNEL, "1"))
        assert message_id is not None

        for snapshot in ("1 2", "1 2 3", "1 2 3 4"):
            await bot.channel.edit_message(str(DM_CHANNEL), message_id, snapshot)

        edits = fake.requests_to("PATCH", rf"/channels/{DM_CHANNEL}/messages/{message_id}")
        assert [r.status for r in edits] == [200, 200, 429, 200]
        assert [m["content"] for m in fake.bot_messages(DM_CHANNEL)] == ["1 2 3 4"]


async def test_a_resent_delivery_is_one_message_thanks_to_the_nonce(bot: RunningBot) -> None:
    # A reply delivered again after a crash carries the same delivery id: Discord answers the
    # repeated nonce with the message it already made.
    await bot.fake.push_message(DM_CHANNEL, ALICE, "hi")
    await bot.next_inbound()
    message = reply(DM_CHANNEL, "exactly once", delivery_id="0193-turn.0")
    first = await bot.channel.send_with_id(message)
    again = await bot.channel.send_with_id(message)

    assert first == again
    assert [m["content"] for m in bot.fake.bot_messages(DM_CHANNEL)] == ["exactly once"]
    requests = bot.fake.requests_to("POST", MESSAGES)
    assert [r.json["enforce_nonce"] for r in requests] == [True, True]
    assert len({r.json["nonce"] for r in requests}) == 1
    assert all(len(r.json["nonce"]) <= 25 for r in requests)
    other = await bot.channel.send_with_id(
        reply(DM_CHANNEL, "next part", delivery_id="0193-turn.1")
    )
    assert other != first
