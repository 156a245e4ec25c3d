"""A full gateway backlog: waited out by socket channels, answered 429/503 by webhooks."""

from __future__ import annotations

import asyncio

from bus import InboundMessage, InboundRefused, PipeClosed
from channels.stopping import until_taken
from channels.web.webhook import hand_over
from tests.channels.refusing_sender import RefusingSender

MESSAGE = InboundMessage(channel="test", sender_id="u1", chat_id="c1", content="hi")


async def test_a_refused_message_is_offered_again_until_taken() -> None:
    sender = RefusingSender(2, retry_after_s=0.001)
    assert await until_taken(lambda: sender.send(MESSAGE), event="test.refused") is True
    assert (sender.refusals, sender.taken) == (0, [MESSAGE])


async def test_stopping_during_the_pause_gives_up_without_taking() -> None:
    sender = RefusingSender(1, retry_after_s=3600.0)
    stopping = asyncio.Event()
    stopping.set()
    taken = await until_taken(lambda: sender.send(MESSAGE), event="test.refused", stopping=stopping)
    assert (taken, sender.taken) == (False, [])


async def test_a_durable_hand_over_leaves_the_answer_to_the_webhook() -> None:
    sender = RefusingSender(0)
    assert await hand_over(sender.send(MESSAGE), event="test.deferred") is None
    assert sender.taken == [MESSAGE]


async def test_a_full_backlog_is_answered_with_retry_after() -> None:
    async def refuse(scope: str) -> None:
        raise InboundRefused("chat" if scope == "chat" else "global", 2.5, "full")

    for scope, status in (("chat", 429), ("global", 503)):
        answer = await hand_over(refuse(scope), event="test.deferred")
        assert answer is not None
        assert (answer.status, answer.headers["Retry-After"]) == (status, "3")


async def test_a_stopping_gateway_is_answered_503() -> None:
    async def closed() -> None:
        raise PipeClosed("stopping")

    answer = await hand_over(closed(), event="test.deferred")
    assert answer is not None
    assert (answer.status, answer.text) == (503, "channel stopping")
