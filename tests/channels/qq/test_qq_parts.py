"""The QQ channel's parts on their own: token cache, passive-reply book, webhook refusals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from bus import InboundRefused
from channels.qq.api import ReplyWindowClosed, access_token
from channels.qq.channel import MalformedEvent, PassiveReplies, parse_message, target
from channels.qq.webhook import QQWebhook
from tests.fakes import LocalHttpServer
from tests.fakes.qq_server import FakeQQ


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def test_the_token_is_cached_for_expires_in_and_refreshed_a_minute_early(
    http: aiohttp.ClientSession,
) -> None:
    clock = Clock()
    async with FakeQQ() as fake:
        token = access_token(
            lambda: http,
            token_url=fake.token_url,
            app_id=fake.app_id,
            app_secret=fake.app_secret,
            clock=clock,
        )
        first = await token.get()
        clock.now += 7200 - 61  # expires_in "7200", a string
        assert await token.get() == first
        clock.now += 2
        second = await token.get()
        assert second != first
        token.invalidate(second)
        assert await token.get() != second
        assert fake.token_requests == 3


def test_replies_close_after_the_window_and_after_five() -> None:
    clock = Clock()
    book = PassiveReplies(clock=clock)
    book.received("m-group", "group")
    book.received("m-c2c", "c2c")
    clock.now += 301
    with pytest.raises(ReplyWindowClosed, match="5 min"):
        book.next_seq("m-group", "group", None)
    assert [book.next_seq("m-c2c", "c2c", None) for _ in range(5)] == [1, 2, 3, 4, 5]
    with pytest.raises(ReplyWindowClosed, match="5 replies"):
        book.next_seq("m-c2c", "c2c", None)
    clock.now += 3600
    with pytest.raises(ReplyWindowClosed, match="60 min"):
        book.next_seq("m-c2c", "c2c", "turn.0")


def test_a_delivery_id_fixes_the_sequence() -> None:
    book = PassiveReplies()
    book.received("m", "c2c")
    assert book.next_seq("m", "c2c", "0193-abc.2") == 3
    assert book.next_seq("m", "c2c", "0193-abc.2") == 3  # a retry of the same part
    with pytest.raises(ReplyWindowClosed):
        book.next_seq("m", "c2c", "0193-abc.5")  # a sixth part


def test_a_reply_file_takes_a_sequence_clear_of_the_text_and_counts_as_a_reply() -> None:
    book = PassiveReplies()
    book.received("m", "c2c")
    texts = [book.next_seq("m", "c2c", f"turn.{part}") for part in range(3)]
    files = [book.next_seq("m", "c2c", f"turn.file{number}") for number in (1, 2)]
    assert (texts, files) == ([1, 2, 3], [11, 12])
    assert book.next_seq("m", "c2c", "turn.file2") == 12  # a retry of the same file
    with pytest.raises(ReplyWindowClosed, match="5 replies"):
        book.next_seq("m", "c2c", "turn.file3")


def test_events_and_chat_ids() -> None:
    assert parse_message({"op": 0, "t": "READY", "d": {}}) is None
    with pytest.raises(MalformedEvent, match="author"):
        parse_message({"op": 0, "t": "C2C_MESSAGE_CREATE", "d": {"id": "m1"}})
    assert target("group:G1") == ("group", "G1")
    with pytest.raises(ValueError, match="c2c:<openid>"):
        target("G1")


async def test_a_full_backlog_is_answered_429_with_retry_after(
    http: aiohttp.ClientSession,
) -> None:
    async with FakeQQ() as fake:
        webhook = QQWebhook(fake.app_secret)

        async def refuse(_payload: dict[str, object]) -> None:
            raise InboundRefused("chat", 7.0, "this chat's backlog is full")

        webhook.handle = refuse
        app = web.Application()
        app.router.add_post("/qq", webhook.handle_request)
        async with LocalHttpServer(app) as server:
            body = json.dumps(fake.c2c_message("alice", "hi")).encode()
            async with http.post(server.origin + "/qq", data=body, headers=fake.sign(body)) as r:
                assert r.status == 429
                assert r.headers["Retry-After"] == "7"
            webhook.handle = None
            async with http.post(server.origin + "/qq", data=body, headers=fake.sign(body)) as r:
                assert r.status == 503
            garbage = b"not json"
            async with http.post(
                server.origin + "/qq", data=garbage, headers=fake.sign(garbage)
            ) as r:
                assert r.status == 400
