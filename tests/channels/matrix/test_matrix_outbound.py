"""Matrix out: HTML replies, idempotent transaction ids, edits, typing, typed errors."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from bus import OutboundMessage
from channels.base import FORMATTED
from channels.errors import AuthError, ChannelError, FatalChannelError, RateLimited
from channels.health import HealthStatus
from channels.matrix.content import MAX_CONTENT_BYTES, MAX_EVENT_BYTES, decode, size_of
from channels.outbound.delivery import fit_chunks
from channels.split import BREAK_WINDOW
from tests.channels.matrix.conftest import ALICE, WAIT_S, RunningMatrix, make_channel
from tests.fakes.matrix_server import FakeMatrix
from tests.support.inbound import RecordingInbound


def formatted(matrix: RunningMatrix, room: str, text: str, **fields: object) -> OutboundMessage:
    """What the manager hands the channel: the text through `format_outbound`, flagged."""
    return OutboundMessage(
        channel="matrix",
        chat_id=room,
        content=matrix.channel.format_outbound(text),
        metadata={FORMATTED: True},
        **fields,
    )


async def test_a_reply_has_the_markdown_as_body_and_its_html_as_formatted_body(
    matrix: RunningMatrix,
) -> None:
    room = matrix.fake.create_room([ALICE])
    event_id = await matrix.channel.send_with_id(formatted(matrix, room, "**bold** and `code`"))
    [event] = matrix.fake.bot_events(room)
    assert event["event_id"] == event_id
    content = event["content"]
    assert content["msgtype"] == "m.text"
    assert content["body"] == "**bold** and `code`"
    assert content["format"] == "org.matrix.custom.html"
    assert content["formatted_body"] == "<p><strong>bold</strong> and <code>code</code></p>"


async def test_raw_html_in_the_agent_s_text_is_escaped(matrix: RunningMatrix) -> None:
    room = matrix.fake.create_room([ALICE])
    await matrix.channel.send(formatted(matrix, room, "<script>alert(1)</script> *hi*"))
    [event] = matrix.fake.bot_events(room)
    assert "<script>" not in event["content"]["formatted_body"]


async def test_a_resend_with_the_same_delivery_id_is_the_same_event(
    matrix: RunningMatrix,
) -> None:
    room = matrix.fake.create_room([ALICE])
    part = formatted(matrix, room, "exactly once", delivery_id="turn-3.0")
    first = await matrix.channel.send_with_id(part)
    second = await matrix.channel.send_with_id(part)  # a crash and a re-delivery
    assert first == second
    assert matrix.fake.shown(room) == ["exactly once"]
    other = formatted(matrix, room, "the next part", delivery_id="turn-3.0")
    await matrix.channel.send(other)
    assert matrix.fake.shown(room) == ["exactly once", "the next part"]


async def test_an_edit_replaces_the_message_with_a_star_fallback(matrix: RunningMatrix) -> None:
    room = matrix.fake.create_room([ALICE])
    event_id = await matrix.channel.send_with_id(formatted(matrix, room, "Hello"))
    assert event_id is not None
    await matrix.channel.edit_message(
        room, event_id, matrix.channel.format_outbound("Hello *world*")
    )
    _original, edit = matrix.fake.bot_events(room)
    content = edit["content"]
    assert content["m.relates_to"] == {"rel_type": "m.replace", "event_id": event_id}
    assert content["body"] == "* Hello *world*"
    assert content["m.new_content"]["body"] == "Hello *world*"
    assert content["m.new_content"]["formatted_body"] == "<p>Hello <em>world</em></p>"
    assert matrix.fake.shown(room) == ["Hello *world*"]


async def test_unformatted_text_is_sent_as_a_plain_body(matrix: RunningMatrix) -> None:
    room = matrix.fake.create_room([ALICE])
    await matrix.channel.send(OutboundMessage(channel="matrix", chat_id=room, content="*plain*"))
    [event] = matrix.fake.bot_events(room)
    assert event["content"] == {"msgtype": "m.text", "body": "*plain*"}


async def test_every_part_and_every_edit_of_a_huge_reply_fits_the_event_limit(
    matrix: RunningMatrix,
) -> None:
    room = matrix.fake.create_room([ALICE])
    text = "\n\n".join(['Ünïcødé & <tags> "quotes" 字字字 👨‍👩‍👧‍👦 ' * 40] * 120)
    chunks = fit_chunks(matrix.channel, text, max_chunks=None)
    assert len(chunks) > 1
    for chunk in chunks:
        message = OutboundMessage(
            channel="matrix", chat_id=room, content=chunk.formatted, metadata={FORMATTED: True}
        )
        event_id = await matrix.channel.send_with_id(message)
        assert event_id is not None
        await matrix.channel.edit_message(room, event_id, chunk.formatted)
    assert matrix.fake.event_sizes
    assert max(matrix.fake.event_sizes) <= MAX_EVENT_BYTES
    shown = "".join(matrix.fake.shown(room))
    assert "".join(shown.split()) == "".join(text.split())


_PROSE = "the quick brown fox jumps over the lazy dog, and **then** more"


def _prose_reply(size: int) -> str:
    """A long answer as an agent writes one: paragraphs of Markdown prose."""
    words = itertools.cycle(_PROSE.split(" "))
    paragraphs: list[str] = []
    while sum(len(p) + 2 for p in paragraphs) < size:
        length = 20 + len(paragraphs) * 37 % 100
        paragraphs.append(" ".join(next(words) for _ in range(length)) + ".")
    return "\n\n".join(paragraphs)


def _code_reply(size: int) -> str:
    lines = itertools.count()
    body: list[str] = []
    while sum(len(line) + 1 for line in body) < size:
        n = next(lines)
        body.append(f"    value_{n} = compute(value_{n - 1}) + 1 < 2 & 3")
    return "```python\n" + "\n".join(body) + "\n```"


async def send_fitted(matrix: RunningMatrix, room: str, text: str) -> list[int]:
    """The reply as delivery sends it: fitted to the channel, each part one event; their sizes."""
    for chunk in fit_chunks(matrix.channel, text, max_chunks=None):
        await matrix.channel.send(
            OutboundMessage(
                channel="matrix", chat_id=room, content=chunk.formatted, metadata={FORMATTED: True}
            )
        )
    return list(matrix.fake.event_sizes)


@pytest.mark.parametrize(
    "reply",
    # Each fits 3 events (body and HTML together), and a splitter that fills them needs no more.
    [_prose_reply(58_000), _code_reply(59_000)],
    ids=["58 KB of prose", "59 KB code block"],
)
async def test_a_long_reply_takes_as_few_events_as_fit(matrix: RunningMatrix, reply: str) -> None:
    room = matrix.fake.create_room([ALICE])
    sizes = await send_fitted(matrix, room, reply)
    assert len(sizes) == 3, sizes
    assert max(sizes) <= MAX_EVENT_BYTES
    # Every part but the last is filled to the break window: none is a sliver.
    parts = [
        size_of(decode(c.formatted)) for c in fit_chunks(matrix.channel, reply, max_chunks=None)
    ]
    assert all(size >= MAX_CONTENT_BYTES * (1 - BREAK_WINDOW) for size in parts[:-1]), parts
    assert max(parts) <= MAX_CONTENT_BYTES
    assert _visible_code("".join(matrix.fake.shown(room))) == _visible_code(reply)


def _visible_code(text: str) -> str:
    """The text without whitespace or fence lines (a split block is closed and reopened)."""
    return "".join(text.replace("```python", "").replace("```", "").split())


async def test_m_limit_exceeded_is_a_rate_limit_with_the_server_s_wait(
    matrix: RunningMatrix,
) -> None:
    room = matrix.fake.create_room([ALICE])
    matrix.fake.rate_limit_next("send", retry_after_ms=2500)
    with pytest.raises(RateLimited) as limited:
        await matrix.channel.send(formatted(matrix, room, "slow down"))
    assert limited.value.retry_after_s == 2.5
    await matrix.channel.send(formatted(matrix, room, "slow down"))
    assert matrix.fake.shown(room) == ["slow down"]


async def test_a_room_the_bot_is_not_in_is_a_typed_refusal(matrix: RunningMatrix) -> None:
    with pytest.raises(ChannelError) as refused:
        await matrix.channel.send(formatted(matrix, "!nowhere:fake.local", "hello?"))
    assert "M_FORBIDDEN" in str(refused.value)


async def test_typing_starts_and_stops(matrix: RunningMatrix) -> None:
    room = matrix.fake.create_room([ALICE])
    await matrix.channel.send_typing(room)
    await matrix.channel.stop_typing(room)
    assert matrix.fake.typing == [(room, True), (room, False)]


async def test_a_reaction_is_an_annotation_and_is_taken_back_by_a_redaction(
    matrix: RunningMatrix,
) -> None:
    room = matrix.fake.create_room([ALICE])
    question = matrix.fake.say(room, ALICE, "refund?")
    await matrix.channel.react_to_message(room, question, "👀")
    # The manager's retry of a call that did reach the homeserver adds nothing.
    await matrix.channel.react_to_message(room, question, "👀")
    assert matrix.fake.bot_reactions(room) == [(question, "👀")]
    await matrix.channel.remove_reaction(room, question, "👀")
    assert matrix.fake.bot_reactions(room) == []
    # Reacting again after the redaction is a new event, not the redacted one answered again.
    await matrix.channel.react_to_message(room, question, "👀")
    assert matrix.fake.bot_reactions(room) == [(question, "👀")]
    assert len(matrix.fake.calls_to("PUT", "/redact/")) == 1


async def test_probe_names_the_bot_and_health_is_healthy(matrix: RunningMatrix) -> None:
    assert await matrix.channel.probe() == "@octos:fake.local (device FAKEDEVICE)"
    assert (await matrix.channel.health_check()).status is HealthStatus.HEALTHY


async def test_a_wrong_token_is_fatal_and_marks_the_channel_down(
    fake: FakeMatrix, tmp_path: Path
) -> None:
    channel = make_channel(fake, tmp_path, access_token="revoked")
    with pytest.raises(AuthError):
        await channel.probe()
    with pytest.raises(FatalChannelError) as fatal:
        await asyncio.wait_for(channel.start(RecordingInbound()), WAIT_S)
    assert "access_token" in str(fatal.value)
    assert (await channel.health_check()).status is HealthStatus.DOWN
    await channel.stop()


async def test_a_token_of_another_user_is_fatal(fake: FakeMatrix, tmp_path: Path) -> None:
    channel = make_channel(fake, tmp_path, user_id="@someone-else:fake.local")
    with pytest.raises(FatalChannelError) as fatal:
        await asyncio.wait_for(channel.start(RecordingInbound()), WAIT_S)
    assert "belongs to @octos:fake.local" in str(fatal.value)
    await channel.stop()


async def test_probe_outside_start_leaves_no_client_open(fake: FakeMatrix, tmp_path: Path) -> None:
    channel = make_channel(fake, tmp_path)
    assert await channel.probe() == "@octos:fake.local (device FAKEDEVICE)"
    assert channel._client is None
