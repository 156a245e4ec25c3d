"""`/v1/messages` refusals that need no running profile: the token, `allow_local_send`, and
the cluster's 501 (the sending itself is tested end to end in tests/e2e/test_owner_sends.py)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.daemon.http_server import MessagesRoutes
from gateway.turn.outbox import Outbox

BODY = {"profile": "p", "channel": "telegram", "chat_id": "1", "text": "hi"}


def app_with(*, token: str | None, allow_local: bool, cluster: bool) -> web.Application:
    def no_profiles() -> dict[str, Outbox | None]:
        return {}

    app = web.Application()
    MessagesRoutes(no_profiles, token=token, allow_local=allow_local, cluster=cluster).mount(app)
    return app


async def status_of(app: web.Application, headers: dict[str, str]) -> int:
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        response = await client.post("/v1/messages", json=BODY, headers=headers)
        return response.status


async def test_without_a_token_configured_nothing_is_let_in_even_on_loopback() -> None:
    assert await status_of(app_with(token=None, allow_local=False, cluster=False), {}) == 401


async def test_allow_local_send_lets_loopback_in_without_the_token() -> None:
    app = app_with(token="t", allow_local=True, cluster=False)
    # Let in: the unknown profile is the refusal, not the token.
    assert await status_of(app, {}) == 404


async def test_a_wrong_token_is_401_and_the_right_one_is_let_in() -> None:
    app = app_with(token="right", allow_local=False, cluster=False)
    assert await status_of(app, {"Authorization": "Bearer wrong"}) == 401
    assert await status_of(app, {"Authorization": "Bearer right"}) == 404


async def test_in_a_cluster_the_endpoint_says_it_is_not_available_yet() -> None:
    app = app_with(token="t", allow_local=False, cluster=True)
    assert await status_of(app, {"Authorization": "Bearer t"}) == 501
