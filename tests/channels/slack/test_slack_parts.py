"""The Slack channel's parts on their own: error translation, event parsing, the thread book."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.slack_response import SlackResponse

from bus import ANSWERS, OutboundMessage
from channels.errors import (
    AuthError,
    ChannelError,
    MessageTooLong,
    RateLimited,
    TransientError,
)
from channels.slack.channel import ThreadBook
from channels.slack.errors import translate_api_error
from channels.slack.inbound import MalformedEvent, clean_text, parse_event

BOT = "UBOT000001"


def api_error(status: int, data: Any, headers: dict[str, str] | None = None) -> SlackApiError:
    response = SlackResponse(
        client=None,
        http_verb="POST",
        api_url="https://slack.com/api/chat.postMessage",
        req_args={},
        data=data,
        headers=headers or {},
        status_code=status,
    )
    return SlackApiError("failed", response)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize(
    ("status", "data", "headers", "expected"),
    [
        (429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "12"}, RateLimited),
        (200, {"ok": False, "error": "msg_too_long"}, {}, MessageTooLong),
        (200, {"ok": False, "error": "invalid_auth"}, {}, AuthError),
        (200, {"ok": False, "error": "account_inactive"}, {}, AuthError),
        (200, {"ok": False, "error": "internal_error"}, {}, TransientError),
        (502, "<html>bad gateway</html>", {}, TransientError),
        (200, {"ok": False, "error": "cant_update_message"}, {}, ChannelError),
    ],
)
def test_api_errors_translate_to_what_the_retry_policy_acts_on(
    status: int, data: Any, headers: dict[str, str], expected: type[ChannelError]
) -> None:
    error = translate_api_error(api_error(status, data, headers), "chat.postMessage")
    assert type(error) is expected
    assert error.channel == "slack"


def test_a_rate_limit_carries_retry_after_or_a_default() -> None:
    with_header = translate_api_error(api_error(429, {"ok": False}, {"Retry-After": "12"}), "x")
    without = translate_api_error(api_error(200, {"ok": False, "error": "ratelimited"}), "x")
    assert isinstance(with_header, RateLimited)
    assert isinstance(without, RateLimited)
    assert (with_header.retry_after_s, without.retry_after_s) == (12.0, 1.0)


def callback(**event: Any) -> dict[str, Any]:
    base = {
        "type": "message",
        "user": "UALICE0001",
        "text": "hi",
        "ts": "1.000001",
        "channel": "C1",
    }
    return {"type": "event_callback", "event_id": "Ev1", "event": {**base, **event}}


@pytest.mark.parametrize(
    "event",
    [
        {"subtype": "message_changed"},
        {"subtype": "channel_join"},
        {"subtype": ["not", "a", "string"]},
        {"bot_id": "BOTHER0001"},
        {"user": BOT},
        {"text": "   "},
        {"type": "reaction_added"},
    ],
)
def test_events_not_addressed_to_the_bot_are_passed_over(event: dict[str, Any]) -> None:
    assert parse_event(callback(**event), BOT) is None


@pytest.mark.parametrize(
    "event", [{"user": None}, {"channel": 5}, {"ts": "soon"}, {"files": {}}, {"text": 3}]
)
def test_events_without_what_a_message_carries_are_malformed(event: dict[str, Any]) -> None:
    with pytest.raises(MalformedEvent):
        parse_event(callback(**event), BOT)


def test_a_shared_file_without_a_url_is_left_out() -> None:
    post = parse_event(
        callback(subtype="file_share", files=[{"id": "F1"}, {"id": "F2", "url_private": "u"}]),
        BOT,
    )
    assert post is not None
    assert [file.id for file in post.files] == ["F2"]


def test_the_bots_mention_is_removed_and_entities_decoded() -> None:
    text = f"<@{BOT}> is 1 &lt; 2 &amp;&amp; <@{BOT}|octos> see <@UOTHER0001>"
    assert clean_text(text, BOT) == "is 1 < 2 && see <@UOTHER0001>"


def outbound(
    chat_id: str, reply_to: str | None = None, metadata: dict[str, Any] | None = None
) -> OutboundMessage:
    return OutboundMessage(
        channel="slack", chat_id=chat_id, content="x", reply_to=reply_to, metadata=metadata or {}
    )


def test_the_thread_book_knows_where_each_answer_goes() -> None:
    book = ThreadBook()
    book.remember("C1", "1.000002", "1.000001")  # a post inside a thread
    book.remember("D1", "2.000001", None)  # a DM outside a thread

    assert book.thread_for(outbound("C1", "1.000002")) == "1.000001"
    assert book.thread_for(outbound("C1", metadata={ANSWERS: ["1.000002"]})) == "1.000001"
    assert book.thread_for(outbound("D1", "2.000001")) is None
    # Posts it never saw: a thread on the post in a channel, plainly in a DM.
    assert book.thread_for(outbound("C1", "9.000001")) == "9.000001"
    assert book.thread_for(outbound("D1", "9.000001")) is None
    assert book.thread_for(outbound("C1")) is None
    assert book.thread_for(outbound("D1", "2.000001", {"thread_ts": "7.000001"})) == "7.000001"


def test_the_thread_book_is_bounded() -> None:
    book = ThreadBook(max_entries=2)
    for n in range(1, 4):
        book.remember("D1", f"{n}.000000", f"{n}.000000")
    assert len(book) == 2
    assert book.thread_for(outbound("D1", "1.000000")) is None  # forgotten: a DM, plainly
    assert book.thread_for(outbound("D1", "3.000000")) == "3.000000"
