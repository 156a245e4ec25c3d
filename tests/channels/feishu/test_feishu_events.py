"""Reading Feishu's `im.message.receive_v1` events into the gateway's messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from channels.feishu.events import MalformedEvent, read_envelope, read_message

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
    inbound = read_message(read_envelope(event(text("hi there"))), BOT, require_mention=True)
    assert inbound is not None
    assert (inbound.channel, inbound.sender_id, inbound.chat_id) == ("feishu", "ou_alice", "oc_1")
    assert (inbound.content, inbound.message_id) == ("hi there", "ev-1")
    assert inbound.metadata["feishu_message_id"] == "om_1"


def test_mentions_are_resolved_and_the_bot_mention_dropped() -> None:
    mentions = [
        {"key": "@_user_1", "id": {"open_id": BOT}, "name": "Bot"},
        {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "Bob"},
    ]
    message = text("@_user_1 ask @_user_2 please", chat_type="group", mentions=mentions)
    inbound = read_message(read_envelope(event(message)), BOT, require_mention=True)
    assert inbound is not None
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
    inbound = read_message(read_envelope(event(message)), BOT, require_mention=True)
    assert inbound is not None
    assert inbound.content == "Plan\nfirst link\nsecond"


def test_bots_other_events_and_unreadable_types_are_skipped() -> None:
    assert (
        read_message(read_envelope(event(text("x"), sender_type="app")), BOT, require_mention=True)
        is None
    )
    image = {"message_type": "image", "content": json.dumps({"image_key": "img"})}
    assert read_message(read_envelope(event(image)), BOT, require_mention=True) is None
    other = event(text("x")) | {"header": {"event_id": "e", "event_type": "im.chat.updated_v1"}}
    assert read_message(read_envelope(other), BOT, require_mention=True) is None


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
