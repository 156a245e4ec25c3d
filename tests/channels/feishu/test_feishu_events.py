"""Reading Feishu's `im.message.receive_v1` and `im.message.reaction.created_v1` events into
the gateway's messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bus import REACTION
from channels.feishu.channel import emoji_of_type, emoji_type
from channels.feishu.events import (
    MalformedEvent,
    Reaction,
    Resource,
    read_envelope,
    read_message,
    read_reaction,
)

BOT = "ou_bot"


def event(message: dict[str, Any], *, sender_type: str = "user") -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {"event_id": "ev-1", "event_type": "im.message.receive_v1", "token": "t"},
        "event": {
            "sender": {"sender_id": {"open_id": "ou_alice"}, "sender_type": sender_type},
            "message": {"message_id": "om_1", "chat_id": "oc_1", "chat_type": "p2p"} | message,
        },
    }


def text(content: str, **extra: Any) -> dict[str, Any]:
    return {"message_type": "text", "content": json.dumps({"text": content})} | extra


def test_a_text_message_becomes_an_inbound_message() -> None:
    received = read_message(read_envelope(event(text("hi there"))), BOT, require_mention=True)
    assert received is not None
    inbound = received.message
    assert (inbound.channel, inbound.sender_id, inbound.chat_id) == ("feishu", "ou_alice", "oc_1")
    assert (inbound.content, inbound.message_id) == ("hi there", "ev-1")
    assert inbound.metadata["feishu_message_id"] == "om_1"


def test_mentions_are_resolved_and_the_bot_mention_dropped() -> None:
    mentions = [
        {"key": "@_user_1", "id": {"open_id": BOT}, "name": "Bot"},
        {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "Bob"},
    ]
    message = text("@_user_1 ask @_user_2 please", chat_type="group", mentions=mentions)
    received = read_message(read_envelope(event(message)), BOT, require_mention=True)
    assert received is not None
    inbound = received.message
    assert inbound.content == "ask @Bob please"


def test_group_messages_without_a_mention_are_skipped_unless_configured() -> None:
    envelope = read_envelope(event(text("chatter", chat_type="group")))
    assert read_message(envelope, BOT, require_mention=True) is None
    assert read_message(envelope, BOT, require_mention=False) is not None


def test_rich_text_posts_are_read_as_lines() -> None:
    post = {
        "title": "Plan",
        "content": [
            [{"tag": "text", "text": "first "}, {"tag": "a", "text": "link"}],
            [{"tag": "text", "text": "second"}],
        ],
    }
    message = {"message_type": "post", "content": json.dumps(post)}
    received = read_message(read_envelope(event(message)), BOT, require_mention=True)
    assert received is not None
    inbound = received.message
    assert inbound.content == "Plan\nfirst link\nsecond"


def test_bots_other_events_and_unreadable_types_are_skipped() -> None:
    assert (
        read_message(read_envelope(event(text("x"), sender_type="app")), BOT, require_mention=True)
        is None
    )
    sticker = {"message_type": "sticker", "content": json.dumps({"file_key": "sticker"})}
    assert read_message(read_envelope(event(sticker)), BOT, require_mention=True) is None
    other = event(text("x")) | {"header": {"event_id": "e", "event_type": "im.chat.updated_v1"}}
    assert read_message(read_envelope(other), BOT, require_mention=True) is None


def test_files_are_read_as_resources_with_their_name_and_duration() -> None:
    voice = {"message_type": "audio", "content": json.dumps({"file_key": "f1", "duration": 4200})}
    received = read_message(read_envelope(event(voice)), BOT, require_mention=True)
    assert received is not None
    assert received.message.content == ""
    assert received.resource == Resource("f1", "file", "audio", duration_s=4.2)
    image = {"message_type": "image", "content": json.dumps({"image_key": "img_v2_1"})}
    received = read_message(read_envelope(event(image)), BOT, require_mention=True)
    assert received is not None
    assert received.resource == Resource("img_v2_1", "image", "image")
    plan = {"file_key": "f2", "file_name": "plan.pdf"}
    document = {"message_type": "file", "content": json.dumps(plan)}
    received = read_message(read_envelope(event(document)), BOT, require_mention=True)
    assert received is not None
    assert received.resource == Resource("f2", "file", "file", name="plan.pdf")
    video = {"file_key": "f3", "image_key": "img_c", "file_name": "a.mp4", "duration": 1000}
    clip = {"message_type": "media", "content": json.dumps(video)}
    received = read_message(read_envelope(event(clip)), BOT, require_mention=True)
    assert received is not None
    assert received.resource == Resource("f3", "file", "video", name="a.mp4", duration_s=1.0)


def test_a_file_message_without_its_key_is_malformed() -> None:
    keyless = {"message_type": "image", "content": json.dumps({})}
    with pytest.raises(MalformedEvent, match="image_key"):
        read_message(read_envelope(event(keyless)), BOT, require_mention=True)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        {"schema": "1.0", "header": {}},
        {"schema": "2.0", "header": {"event_type": "x"}},
    ],
)
def test_malformed_envelopes_are_refused(payload: object) -> None:
    with pytest.raises(MalformedEvent):
        read_envelope(payload)


def test_a_message_without_ids_or_with_broken_content_is_malformed() -> None:
    broken = event({"message_type": "text", "content": "{not json"})
    with pytest.raises(MalformedEvent):
        read_message(read_envelope(broken), BOT, require_mention=True)
    anonymous = event(text("x"))
    anonymous["event"]["sender"] = {}
    with pytest.raises(MalformedEvent):
        read_message(read_envelope(anonymous), BOT, require_mention=True)


def reaction_event(event_body: dict[str, Any]) -> dict[str, Any]:
    """A reaction event as Feishu's documentation shows one (its operator a user)."""
    return {
        "schema": "2.0",
        "header": {
            "event_id": "5e3702a84e847582be8db7fb73283c02",
            "event_type": "im.message.reaction.created_v1",
            "create_time": "1608725989000",
            "token": "t",
        },
        "event": {
            "message_id": "om_dc13264520392913993dd051dba21dcf",
            "reaction_type": {"emoji_type": "THUMBSUP"},
            "operator_type": "user",
            "user_id": {
                "union_id": "on_8ed6aa67826108097d9ee143816345",
                "user_id": "e33ggbyz",
                "open_id": "ou_84aad35d084aa403a838cf73ee18467",
            },
            "action_time": "1626375887000",
        }
        | event_body,
    }


def test_a_users_reaction_is_read_with_its_message_and_emoji_type() -> None:
    reaction = read_reaction(read_envelope(reaction_event({})))
    assert reaction == Reaction(
        event_id="5e3702a84e847582be8db7fb73283c02",
        message_id="om_dc13264520392913993dd051dba21dcf",
        emoji_type="THUMBSUP",
        open_id="ou_84aad35d084aa403a838cf73ee18467",
    )
    inbound = reaction.message("oc_1", "👍")
    assert (inbound.channel, inbound.sender_id, inbound.chat_id) == (
        "feishu",
        "ou_84aad35d084aa403a838cf73ee18467",
        "oc_1",
    )
    assert inbound.content == "[reaction 👍 to a message]"
    assert inbound.message_id == "reaction:5e3702a84e847582be8db7fb73283c02"
    assert inbound.metadata == {
        REACTION: {"emoji": "👍", "message_id": "om_dc13264520392913993dd051dba21dcf"}
    }


def test_an_apps_reaction_and_other_events_are_not_reactions() -> None:
    by_app = reaction_event({"operator_type": "app", "app_id": "cli_9f53"})
    del by_app["event"]["user_id"]
    assert read_reaction(read_envelope(by_app)) is None
    assert read_reaction(read_envelope(event(text("x")))) is None


@pytest.mark.parametrize("missing", ["message_id", "reaction_type", "user_id"])
def test_a_reaction_without_its_message_emoji_or_user_is_malformed(missing: str) -> None:
    broken = reaction_event({})
    del broken["event"][missing]
    with pytest.raises(MalformedEvent):
        read_reaction(read_envelope(broken))


def test_feishus_emoji_types_read_back_as_the_emoji_they_stand_for() -> None:
    assert [emoji_of_type(kind) for kind in ("THUMBSUP", "HEART", "GLANCE", "DONE")] == [
        "👍",
        "❤️",
        "👀",
        "✅",
    ]
    # A type with no emoji known here reads as its name.
    assert emoji_of_type("JIAYI") == "JIAYI"
    for emoji in ("👍", "❤️", "🎉", "💯"):
        kind = emoji_type(emoji)
        assert kind is not None
        assert emoji_of_type(kind) == emoji
