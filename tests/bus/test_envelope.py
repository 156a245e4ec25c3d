"""InboundMessage and OutboundMessage on the wire."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from bus import InboundMessage, OutboundMessage, SessionKey


def test_inbound_round_trips() -> None:
    message = InboundMessage(
        channel="telegram",
        sender_id="42|alice",
        chat_id="-100123",
        content="привет 👋",
        timestamp=datetime(2025, 6, 1, tzinfo=UTC),
        media=["/data/media/voice.ogg"],
        metadata={"sender_user_id": "42", "nested": {"a": [1, 2]}},
        message_id="777",
    )
    assert InboundMessage.from_json(message.to_json()) == message


def test_inbound_without_optional_fields() -> None:
    message = InboundMessage.from_json(
        '{"channel": "slack", "sender_id": "U1", "chat_id": "C1", "content": "hi"}'
    )
    assert message.media == []
    assert message.metadata == {}
    assert message.message_id is None
    data = json.loads(message.to_json())
    assert "media" not in data
    assert "metadata" not in data
    assert "message_id" not in data


def test_inbound_session_key() -> None:
    message = InboundMessage(channel="discord", sender_id="u", chat_id="guild:1", content="x")
    assert message.session_key() == SessionKey.parse("discord:guild:1")
    key = message.session_key(profile="work", topic="research")
    assert str(key) == "work:discord:guild:1#research"


def test_outbound_round_trips_with_stream_fields() -> None:
    message = OutboundMessage(
        channel="discord",
        chat_id="1",
        content="final",
        reply_to="99",
        media=["a.png"],
        metadata={"k": "v"},
        stream_id="s-1",
        delivery_id="turn-1",
    )
    restored = OutboundMessage.from_json(message.to_json())
    assert restored == message


def test_outbound_defaults_are_left_out() -> None:
    message = OutboundMessage(channel="api", chat_id="c", content="done")
    assert json.loads(message.to_json()) == {"channel": "api", "chat_id": "c", "content": "done"}
    restored = OutboundMessage.from_json(message.to_json())
    assert restored.stream_id is None


def test_a_reply_recorded_before_typed_events_still_reads() -> None:
    # Journals written before snapshots had their own type carry `stream_final`: ignored.
    recorded = '{"channel": "api", "chat_id": "c", "content": "x", "stream_id": "s", '
    restored = OutboundMessage.from_json(recorded + '"stream_final": true}')
    assert (restored.content, restored.stream_id) == ("x", "s")
