"""Events in over Socket Mode: who is answered, where, once, and what the agent reads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bus import OutboundMessage
from channels.base import FORMATTED
from channels.media_info import MEDIA_DETAILS
from tests.channels.slack.conftest import ALICE, BOB, DM, GENERAL, RunningSlack


def reply(to_chat: str, text: str, reply_to: str | None) -> OutboundMessage:
    return OutboundMessage(channel="slack", chat_id=to_chat, content=text, reply_to=reply_to)


async def test_a_dm_is_published_and_answered_plainly(slack: RunningSlack) -> None:
    inbound = await slack.say(DM, ALICE, "hello &amp; welcome", channel_type="im")

    assert inbound.channel == "slack"
    assert (inbound.sender_id, inbound.chat_id) == (ALICE, DM)
    assert inbound.content == "hello & welcome"
    assert inbound.message_id == slack.fake.messages[DM][0]["ts"]
    assert inbound.metadata["is_dm"] is True
    assert inbound.metadata["thread_ts"] is None

    ts = await slack.channel.send_with_id(reply(DM, "hi Alice", inbound.message_id))

    [answer] = slack.fake.bot_messages(DM)
    assert answer["ts"] == ts
    assert answer["text"] == "hi Alice"
    assert "thread_ts" not in answer


async def test_a_channel_message_is_answered_in_a_thread_on_it(slack: RunningSlack) -> None:
    inbound = await slack.say(GENERAL, ALICE, "what is the plan?")
    assert inbound.metadata["thread_ts"] == inbound.message_id

    await slack.channel.send(reply(GENERAL, "this is the plan", inbound.message_id))

    [answer] = slack.fake.bot_messages(GENERAL)
    assert answer["thread_ts"] == inbound.message_id


async def test_a_post_inside_a_thread_is_answered_in_that_thread(slack: RunningSlack) -> None:
    root = await slack.say(GENERAL, ALICE, "first")
    inner = await slack.say(GENERAL, BOB, "a follow-up", thread_ts=root.message_id)
    assert inner.message_id != root.message_id

    await slack.channel.send(reply(GENERAL, "answer", inner.message_id))
    # Later chunks of a long reply carry no reply_to; the answered ids say where they go.
    await slack.channel.send(
        OutboundMessage(
            channel="slack",
            chat_id=GENERAL,
            content="more",
            metadata={"octos.answers": [inner.message_id]},
        )
    )

    threads = [m.get("thread_ts") for m in slack.fake.bot_messages(GENERAL)]
    assert threads == [root.message_id, root.message_id]


async def test_a_mention_is_stripped_and_answered_in_a_thread(slack: RunningSlack) -> None:
    mention = slack.fake.mention_of(
        slack.fake.user_message(GENERAL, ALICE, f"<@{slack.fake.bot_user_id}> summarise <#C1|x>")
    )
    await slack.fake.push_event(mention)

    inbound = await slack.next_inbound()
    assert inbound.content == "summarise <#C1|x>"
    assert inbound.metadata["thread_ts"] == inbound.message_id


async def test_a_mention_arriving_as_both_events_is_published_once(slack: RunningSlack) -> None:
    post = slack.fake.user_message(GENERAL, ALICE, f"<@{slack.fake.bot_user_id}> hi")
    await slack.push_and_ack(post)
    await slack.push_and_ack(slack.fake.mention_of(post))
    await slack.fake.push_event(slack.fake.user_message(GENERAL, BOB, "next"))

    first = await slack.next_inbound()
    second = await slack.next_inbound()
    assert (first.sender_id, first.content) == (ALICE, "hi")
    assert (second.sender_id, second.content) == (BOB, "next")


async def test_a_retried_event_is_published_once(slack: RunningSlack) -> None:
    post = slack.fake.user_message(DM, ALICE, "once", channel_type="im")
    event_id = await slack.push_and_ack(post)
    await slack.push_and_ack(post, event_id=event_id, retry_attempt=1)
    await slack.fake.push_event(slack.fake.user_message(DM, ALICE, "twice", channel_type="im"))

    assert (await slack.next_inbound()).content == "once"
    assert (await slack.next_inbound()).content == "twice"


async def test_every_envelope_is_acknowledged(slack: RunningSlack) -> None:
    fake = slack.fake
    post = fake.user_message(GENERAL, ALICE, "hello")
    edited = fake.user_message(GENERAL, ALICE, "hello!")
    edited["subtype"] = "message_changed"
    envelopes = [
        await fake.push_event(post),
        await fake.push_event(post, event_id="EvDUPLICATE"),
        await fake.push_event({"type": "reaction_added", "user": ALICE, "reaction": "eyes"}),
        await fake.push_event(edited),
        await fake.push_event(fake.user_message(GENERAL, fake.bot_user_id, "own")),
    ]
    await fake.wait_until(lambda: all(fake.acked(envelope) for _, envelope in envelopes))
    assert len(fake.acks) == len(envelopes)


async def test_the_bots_own_and_other_bots_messages_are_ignored(slack: RunningSlack) -> None:
    fake = slack.fake
    own = fake.user_message(GENERAL, fake.bot_user_id, "my own answer")
    other_bot = fake.user_message(GENERAL, "UHELPER001", "a bot's post")
    other_bot["bot_id"] = "BHELPER001"
    other_bot["subtype"] = "bot_message"
    changed = fake.user_message(GENERAL, ALICE, "edited")
    changed["subtype"] = "message_changed"
    for event in (own, other_bot, changed):
        await slack.push_and_ack(event)
    await fake.push_event(fake.user_message(GENERAL, ALICE, "a person"))

    assert (await slack.next_inbound()).content == "a person"
    assert slack.agent.inbound_depth() == 0


async def test_malformed_envelopes_and_events_are_skipped(slack: RunningSlack) -> None:
    fake = slack.fake
    await fake.push_raw("this is not json")
    await fake.push_raw('{"type": "events_api", "envelope_id": "broken"')
    await fake.push_raw(json.dumps({"type": "events_api", "envelope_id": "E1", "payload": 7}))
    no_channel = fake.user_message(GENERAL, ALICE, "lost")
    del no_channel["channel"]
    bad_ts = fake.user_message(GENERAL, ALICE, "when?")
    bad_ts["ts"] = "yesterday"
    bad_files = fake.user_message(GENERAL, ALICE, "files?")
    bad_files["files"] = "not a list"
    wrong_text = fake.user_message(GENERAL, ALICE, "x")
    wrong_text["text"] = {"nested": True}
    for event in (no_channel, bad_ts, bad_files, wrong_text):
        await slack.push_and_ack(event)
    not_an_event = {**fake.event_callback({}), "event": "nonsense"}
    envelope = {"envelope_id": "E2", "type": "events_api", "payload": not_an_event}
    await fake.push_envelope(envelope)
    await fake.wait_until(lambda: fake.acked("E2"))

    assert (await slack.say(GENERAL, ALICE, "still here")).content == "still here"
    assert slack.agent.inbound_depth() == 0
    assert fake.open_connections == 1


async def test_shared_files_are_saved_under_the_data_dir(slack: RunningSlack) -> None:
    fake = slack.fake
    report = fake.host_file("report 2024.txt", b"quarterly numbers")
    missing = fake.host_file("gone.txt", b"")
    missing["url_private_download"] = f"{fake.origin}/files-pri/{fake.team_id}-FNOPE/gone.txt"

    inbound = await slack.say(DM, ALICE, "see attached", channel_type="im", files=[report, missing])

    [saved] = inbound.media
    path = Path(saved)
    assert await asyncio.to_thread(path.read_bytes) == b"quarterly numbers"
    assert path.parent == slack.data_dir / "media" / "slack" / DM
    assert path.name == f"{report['id']}_report_2024.txt"


async def test_raw_text_is_sent_escaped_and_formatted_text_as_mrkdwn(slack: RunningSlack) -> None:
    await slack.channel.send(reply(DM, "a <b> & **c**", None))
    rendered = slack.channel.format_outbound("a <b> & **c**")
    await slack.channel.send(
        OutboundMessage(channel="slack", chat_id=DM, content=rendered, metadata={FORMATTED: True})
    )

    plain, formatted = slack.fake.calls("chat.postMessage")
    assert (plain.params["text"], plain.params["mrkdwn"]) == ("a &lt;b&gt; &amp; **c**", False)
    assert (formatted.params["text"], formatted.params["mrkdwn"]) == (
        "a &lt;b&gt; &amp; *c*",
        True,
    )


async def test_a_shared_photo_reaches_the_message_with_its_details(slack: RunningSlack) -> None:
    photo = slack.fake.host_file("cat.png", b"\x89PNG...", "image/png")

    inbound = await slack.say(DM, ALICE, "", channel_type="im", files=[photo])

    [saved] = inbound.media
    assert inbound.metadata[MEDIA_DETAILS][saved] == {"name": "cat.png", "mime": "image/png"}


async def test_an_audio_clip_carries_its_duration(slack: RunningSlack) -> None:
    clip = slack.fake.host_file("audio_message.mp4", b"....ftypM4A", "video/mp4")
    clip.update(subtype="slack_audio", duration_ms=4200)

    inbound = await slack.say(DM, ALICE, "", channel_type="im", files=[clip])

    [saved] = inbound.media
    assert inbound.metadata[MEDIA_DETAILS][saved]["duration_s"] == 4.2
    assert inbound.metadata[MEDIA_DETAILS][saved]["mime"] == "audio/mp4"


async def test_a_file_over_the_limit_is_named_and_not_downloaded(slack: RunningSlack) -> None:
    slack.channel.max_media_bytes = 1000
    video = slack.fake.host_file("party.mp4", b"x" * 10, "video/mp4")
    video["size"] = 31 * 1024 * 1024

    inbound = await slack.say(DM, ALICE, "look", channel_type="im", files=[video])

    assert inbound.media == []
    assert inbound.content == (
        "look\n[video: party.mp4, 31 MB, not downloaded: larger than the 1000 bytes limit]"
    )
    assert slack.fake.downloaded == []


async def test_a_refused_download_is_named_in_the_text(slack: RunningSlack) -> None:
    gone = slack.fake.host_file("gone.pdf", b"%PDF", "application/pdf")
    gone["url_private_download"] = f"{slack.fake.origin}/files-pri/{slack.fake.team_id}-FNOPE/x"

    inbound = await slack.say(DM, ALICE, "see", channel_type="im", files=[gone])

    assert inbound.media == []
    assert inbound.content == "see\n[file: gone.pdf, 4 bytes, not downloaded: HTTP 404]"


def reaction_added(
    user: str, name: str, *, item_user: str, ts: str = "1700000000.000100"
) -> dict[str, object]:
    item = {"type": "message", "channel": GENERAL, "ts": ts}
    return {"type": "reaction_added", "user": user, "reaction": name, "item_user": item_user,
            "item": item, "event_ts": "1700000001.000200"}  # fmt: skip


async def test_a_reaction_to_the_bots_message_is_published_as_a_reaction(
    slack: RunningSlack,
) -> None:
    fake = slack.fake
    # A reaction to another user's message is not addressed to the bot.
    await slack.push_and_ack(reaction_added(ALICE, "+1", item_user=BOB))
    event_id = await slack.push_and_ack(reaction_added(ALICE, "+1", item_user=fake.bot_user_id))
    await slack.push_and_ack(reaction_added(BOB, "partyparrot", item_user=fake.bot_user_id))

    thumbs = await slack.next_inbound()
    assert (thumbs.sender_id, thumbs.chat_id) == (ALICE, GENERAL)
    assert thumbs.content == "[reaction 👍 to a message]"
    assert thumbs.metadata["reaction"] == {"emoji": "👍", "message_id": "1700000000.000100"}
    # The event's id is the dedup id: Slack's retry of it is the same reaction.
    assert thumbs.message_id == f"reaction:{event_id}"
    custom = await slack.next_inbound()
    assert custom.content == "[reaction :partyparrot: to a message]"
    assert slack.agent.inbound_depth() == 0
