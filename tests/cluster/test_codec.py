"""The envelope's JSON body and headers, both ways, and what an unreadable message says."""

from __future__ import annotations

import pytest

from bus import (
    ButtonsUsed,
    InboundMessage,
    OutboundMessage,
    ReactionChanged,
    StreamSnapshot,
    TypingStarted,
    TypingStopped,
)
from gateway.cluster.codec import (
    INBOUND_ID,
    LIVE_AFTER,
    LIVE_KIND,
    MSG_ID,
    PROFILE,
    CodecError,
    InboundEnvelope,
    LiveSignal,
    OutboundEnvelope,
    decode_live_signal,
    live_signal_message,
    platform_id,
)


def inbound(**fields: object) -> InboundMessage:
    values: dict[str, object] = {
        "channel": "telegram",
        "sender_id": "7",
        "chat_id": "chat.with*odd>chars",
        "content": "héllo 👋",
        "message_id": "m1",
        "media": ["/tmp/a.png"],
        "metadata": {"k": [1, 2]},
    }
    values.update(fields)
    return InboundMessage.model_validate(values)


def test_an_inbound_envelope_round_trips() -> None:
    envelope = InboundEnvelope("main", "id1", inbound(), request=True, reply_subject="X.reply.a")
    headers = envelope.headers("msg-1")
    assert headers[MSG_ID] == "msg-1"
    decoded = InboundEnvelope.decode(headers, envelope.body())
    assert decoded == envelope
    shown = InboundEnvelope(
        "main", "id2", inbound(), ingress="in-a", shows_typing=True, buttons_attached=True
    )
    assert InboundEnvelope.decode(shown.headers("msg-2"), shown.body()) == shown


@pytest.mark.parametrize(
    "signal",
    [
        StreamSnapshot(
            OutboundMessage(channel="telegram", chat_id="c", content="so far", stream_id="t1")
        ),
        TypingStarted("telegram", "c"),
        TypingStopped("telegram", "c"),
        ReactionChanged("telegram", "c", "42", "👀"),
        ReactionChanged("slack", "C1", "1700000000.000100", "👀", removed=True),
        ButtonsUsed("discord", "c", "99"),
    ],
)
def test_every_live_event_round_trips(signal: LiveSignal) -> None:
    headers, body = live_signal_message("main", signal, after="turn-1")
    assert headers[LIVE_AFTER] == "turn-1"
    assert decode_live_signal(headers, body) == ("main", signal)


def test_a_live_event_of_the_wrong_shape_is_a_codec_error() -> None:
    headers = {PROFILE: "main", LIVE_KIND: "reaction"}
    with pytest.raises(CodecError, match="not a readable reaction event"):
        decode_live_signal(headers, b'{"channel": "telegram", "chat_id": "c"}')
    with pytest.raises(CodecError, match="unknown live event kind"):
        decode_live_signal({PROFILE: "main", LIVE_KIND: "wave"}, b"{}")


def test_an_outbound_envelope_round_trips() -> None:
    reply = OutboundMessage(
        channel="api", chat_id="c", content="answer", reply_to="m1", delivery_id="t1"
    )
    envelope = OutboundEnvelope("main", reply)
    assert OutboundEnvelope.decode(envelope.headers("t1"), envelope.body()) == envelope


def test_a_message_without_our_headers_or_with_bad_json_is_a_codec_error() -> None:
    body = InboundEnvelope("main", "id1", inbound()).body()
    with pytest.raises(CodecError, match="Octos-Profile"):
        InboundEnvelope.decode({INBOUND_ID: "x"}, body)
    with pytest.raises(CodecError, match="not a readable InboundMessage"):
        InboundEnvelope.decode({PROFILE: "main", INBOUND_ID: "x"}, b"{not json")
    with pytest.raises(CodecError, match="inbound message without the Octos-Inbound-Id header"):
        InboundEnvelope.decode({PROFILE: "main"}, body)
    with pytest.raises(CodecError, match="Octos-Profile"):
        OutboundEnvelope.decode(None, b"{}")
    with pytest.raises(CodecError, match="live event without the Octos-Profile header"):
        decode_live_signal({LIVE_KIND: "reaction"}, b"{}")


def test_the_platform_id_is_stable_header_safe_and_needs_a_native_id() -> None:
    first = platform_id("main", inbound())
    assert first == platform_id("main", inbound(content="edited text"))
    assert first is not None
    assert first.isalnum()
    assert platform_id("other", inbound()) != first
    assert platform_id("main", inbound(message_id=None)) is None
