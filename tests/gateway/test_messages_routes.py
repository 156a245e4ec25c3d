"""`/v1/messages` refusals that need no running profile: the token, `allow_local_send`, and a
database that is away (the sending itself is tested end to end in tests/e2e/test_owner_sends.py
and, in a cluster, tests/e2e/test_cluster_owner_sends.py)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.daemon.http_server import MessagesRoutes
from gateway.turn.journal import OwnerSend
from gateway.turn.outbox import Cancelled, SendRequest, Sends
from sessions.errors import SessionError

BODY = {"profile": "p", "channel": "telegram", "chat_id": "1", "text": "hi"}


def app_with(
    *, token: str | None, allow_local: bool, profiles: dict[str, Sends | None] | None = None
) -> web.Application:
    def outboxes() -> dict[str, Sends | None]:
        return profiles or {}

    app = web.Application()
    MessagesRoutes(outboxes, token=token, allow_local=allow_local).mount(app)
    return app


class DatabaseAway:
    """A cluster's sends while PostgreSQL is away: every call fails."""

    def __init__(self) -> None:
        self.knows_channel: Callable[[str], bool] = lambda _channel: True

    async def take(self, request: SendRequest) -> tuple[OwnerSend, str]:
        raise SessionError("the database is away")

    async def find(self, send_id: str) -> OwnerSend | None:
        raise SessionError("the database is away")

    async def listed(self) -> list[OwnerSend]:
        raise SessionError("the database is away")

    async def cancel(self, send_id: str) -> Cancelled:
        raise SessionError("the database is away")


async def status_of(app: web.Application, headers: dict[str, str]) -> int:
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.post("/v1/messages", json=BODY, headers=headers)
        return response.status


async def test_without_a_token_configured_nothing_is_let_in_even_on_loopback() -> None:
    assert await status_of(app_with(token=None, allow_local=False), {}) == 401


async def test_allow_local_send_lets_loopback_in_without_the_token() -> None:
    app = app_with(token="t", allow_local=True)
    # Let in: the unknown profile is the refusal, not the token.
    assert await status_of(app, {}) == 404


async def test_a_wrong_token_is_401_and_the_right_one_is_let_in() -> None:
    app = app_with(token="right", allow_local=False)
    assert await status_of(app, {"Authorization": "Bearer wrong"}) == 401
    assert await status_of(app, {"Authorization": "Bearer right"}) == 404


async def test_a_database_that_is_away_is_503_and_nothing_is_taken() -> None:
    app = app_with(token="t", allow_local=False, profiles={"p": DatabaseAway()})
    assert await status_of(app, {"Authorization": "Bearer t"}) == 503
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.get("/v1/messages/msg_1", headers={"Authorization": "Bearer t"})
        assert response.status == 503
