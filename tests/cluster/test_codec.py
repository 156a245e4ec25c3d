"""The envelope's JSON body and headers, both ways, and what an unreadable message says."""

from __future__ import annotations

import pytest

from bus import InboundMessage, OutboundMessage
from gateway.cluster.codec import (
    INBOUND_ID,
    MSG_ID,
    PROFILE,
    CodecError,
    InboundEnvelope,
    OutboundEnvelope,
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
    with pytest.raises(CodecError, match="Octos-Profile"):
        OutboundEnvelope.decode(None, b"{}")


def test_the_platform_id_is_stable_header_safe_and_needs_a_native_id() -> None:
    first = platform_id("main", inbound())
    assert first == platform_id("main", inbound(content="edited text"))
    assert first is not None
    assert first.isalnum()
    assert platform_id("other", inbound()) != first
    assert platform_id("main", inbound(message_id=None)) is None
