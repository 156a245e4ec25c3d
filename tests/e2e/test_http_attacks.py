"""The daemon's HTTP surface under attack: every route it serves, through a real HTTP client.

One daemon serves the API channel (with a token), the health server, a Telegram webhook and a
Slack HTTP events route; the attack corpus (`tests/support/attack_corpus.py`) runs over each
route, and the API's own attacks (reply leaks, unservable input, browser attacks) follow.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from bus import Message, SessionKey
from sessions import SessionStore
from tests.e2e.conftest import WAIT_S, running_daemon
from tests.e2e.slack_profiles import WEBHOOK_PATH as SLACK_PATH
from tests.e2e.slack_profiles import slack_http_profile
from tests.e2e.telegram_profiles import telegram_profile
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram
from tests.support.attack_corpus import (
    REFUSED,
    Outcome,
    Route,
    json_error,
    run_fixed_corpus,
    run_random_corpus,
    send,
)
from tests.support.daemon import DaemonProcess, free_port
from tests.support.sse import streamed_events

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TOKEN = "attack-test-token"
TELEGRAM_SECRET = "telegram-secret_123"
TELEGRAM_PATH = "/telegram/webhook"
REPLY_TIMEOUT_S = 2.0
RANDOM_EXAMPLES = 25


def api_profile(port: int) -> str:
    return f"""\
queue_mode: followup
agent: {{type: echo, delay_s: 0.05, pieces: 4}}
channels:
  - type: api
    port: {port}
    auth_token: {TOKEN}
    cors_origins: ["https://app.example"]
"""


def slow_profile(port: int, *, delay_s: float, reply_timeout_s: float) -> str:
    return f"""\
agent: {{type: echo, delay_s: {delay_s}, pieces: 3}}
channels:
  - type: api
    port: {port}
    reply_timeout_s: {reply_timeout_s}
"""


@dataclass
class Surface:
    daemon: DaemonProcess
    telegram: FakeTelegram
    slack: FakeSlack
    api_url: str
    slow_url: str
    late_url: str
    data_dir: Path

    def api(self, path: str) -> str:
        return self.api_url + path


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def surface(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Surface]:
    directory = tmp_path_factory.mktemp("attacks")
    api_port, slow_port, late_port = free_port(), free_port(), free_port()
    async with FakeTelegram() as telegram, FakeSlack() as slack:
        profiles = {
            "web": api_profile(api_port),
            # Replies take 1.5 s (a turn still running while another request comes) ...
            "slow": slow_profile(slow_port, delay_s=0.5, reply_timeout_s=WAIT_S),
            # ... or 4 s, longer than the reply timeout.
            "late": slow_profile(late_port, delay_s=2.0, reply_timeout_s=REPLY_TIMEOUT_S),
            "hook": telegram_profile(telegram, 4201, path=TELEGRAM_PATH, secret=TELEGRAM_SECRET),
            "events": slack_http_profile(slack, '"U0ALICE"'),
        }
        await leave_a_session_of_a_future_schema(directory / "data" / "web")
        async with running_daemon(directory, profiles) as daemon:
            # Each API profile (web, slow, late) logs it once its listener is bound.
            await daemon.wait_logged("api.web_chat_ready", more_than=2)
            await telegram.wait_for_calls("setWebhook")
            await daemon.wait_log(lambda e: e.get("event") == "slack.receiving")
            yield Surface(
                daemon,
                telegram,
                slack,
                f"http://127.0.0.1:{api_port}",
                f"http://127.0.0.1:{slow_port}",
                f"http://127.0.0.1:{late_port}",
                directory / "data",
            )


def telegram_sign(body: bytes, at: float) -> Mapping[str, str]:
    del body, at  # Telegram's secret is a fixed header, not a signature of the body
    return {"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET}


def routes(surface: Surface) -> dict[str, Route]:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    http = surface.daemon.http_url

    def slack_sign(body: bytes, at: float) -> Mapping[str, str]:
        return surface.slack.sign(body, timestamp=int(at))

    return {
        "api chat": Route("POST", surface.api("/v1/chat"), base_headers=auth),
        "api sessions": Route("GET", surface.api("/v1/sessions"), base_headers=auth),
        "api messages": Route("GET", surface.api("/v1/sessions/x/messages"), base_headers=auth),
        "api page": Route("GET", surface.api("/")),
        "healthz": Route("GET", http + "/healthz"),
        "readyz": Route("GET", http + "/readyz"),
        "metrics": Route("GET", http + "/metrics"),
        "unknown path": Route("POST", http + "/nothing/here"),
        "telegram webhook": Route(
            "POST",
            http + TELEGRAM_PATH,
            sign=telegram_sign,
            signature_headers=("X-Telegram-Bot-Api-Secret-Token",),
        ),
        "slack events": Route(
            "POST",
            http + SLACK_PATH,
            sign=slack_sign,
            signature_headers=("X-Slack-Signature",),
            timestamped=True,
        ),
    }


ROUTES = [
    "api chat",
    "api sessions",
    "api messages",
    "api page",
    "healthz",
    "readyz",
    "metrics",
    "unknown path",
    "telegram webhook",
    "slack events",
]
FORGERIES = ("forged signature", "missing signature", "stale signature", "non-ascii signature")


@pytest.mark.parametrize("name", ROUTES)
async def test_hostile_requests_never_get_a_5xx_or_a_hang(surface: Surface, name: str) -> None:
    route = routes(surface)[name]
    genuine = b'{"chat_id": "corpus", "content": "hello"}' if name == "api chat" else b"{}"
    outcomes = await run_fixed_corpus(route, genuine)
    assert outcomes["evil host"].status == 421
    for case in FORGERIES:
        if case in outcomes:
            assert outcomes[case].status in REFUSED, outcomes[case]
    sent = await run_random_corpus(route, examples=RANDOM_EXAMPLES)
    assert sent == RANDOM_EXAMPLES


async def post_chat(
    url: str, body: Mapping[str, Any] | bytes, headers: Mapping[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    all_headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        **(headers or {}),
    }
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http,
        http.post(url + "/v1/chat", data=data, headers=all_headers) as response,
    ):
        return response.status, await response.json(content_type=None)


def turn_started_for(chat: str) -> Any:
    return lambda e: (
        e.get("event") == "turn.started" and str(e.get("session", "")).endswith(f":api:{chat}")
    )


async def test_a_client_id_reused_by_another_chat_never_gets_the_first_chats_reply(
    surface: Surface,
) -> None:
    victim = asyncio.create_task(
        post_chat(
            surface.slow_url,
            {"chat_id": "victim", "content": "victim private text", "client_message_id": "42"},
        )
    )
    await surface.daemon.wait_log(turn_started_for("victim"))
    status, attacker = await post_chat(
        surface.slow_url,
        {"chat_id": "attacker", "content": "attacker text", "client_message_id": "42"},
    )
    victim_status, victim_body = await victim
    assert (status, attacker["chat_id"], attacker["reply"]) == (200, "attacker", "attacker text")
    assert (victim_status, victim_body["reply"]) == (200, "victim private text")
    assert attacker["session"] == "slow:api:attacker"


async def test_replies_go_to_their_own_chat_when_client_ids_collide(surface: Surface) -> None:
    bodies = [
        {"chat_id": f"collide-{n}", "content": f"text of chat {n}", "client_message_id": "7"}
        for n in range(4)
    ]
    answers = await asyncio.gather(*(post_chat(surface.api_url, body) for body in bodies))
    for body, (status, answer) in zip(bodies, answers, strict=True):
        assert status == 200
        assert (answer["chat_id"], answer["reply"]) == (body["chat_id"], body["content"])


async def test_a_retry_while_waiting_and_after_the_reply_gets_the_same_reply(
    surface: Surface,
) -> None:
    body = {"chat_id": "retrier", "content": "answer me once", "client_message_id": "r-1"}
    first, second = await asyncio.gather(
        post_chat(surface.api_url, body), post_chat(surface.api_url, body)
    )
    assert first == second
    assert first[0] == 200
    assert first[1]["reply"] == "answer me once"
    assert await post_chat(surface.api_url, body) == first


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        (b'{"chat_id": "s1", "content": "bad \\ud800 text"}', "surrogate"),
        (b'{"chat_id": "s2\\udfff", "content": "hi"}', "surrogate"),
        (b'{"chat_id": "s3", "content": "hi", "client_message_id": "\\ud800"}', "surrogate"),
        (b'{"chat_id": "s4", "content": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested"),
        (b'"just a string"', "must be a JSON object"),
        (b"{not json", "not valid JSON"),
    ],
)
async def test_unservable_input_is_refused_at_once_as_json_400(
    surface: Surface, raw: bytes, complaint: str
) -> None:
    # A 400 is the answer of the request itself, not of a turn (which would be a reply or,
    # once the reply timeout passed, a 504).
    status, body = await post_chat(surface.api_url, raw)
    assert (status, complaint in body["error"]) == (400, True), body
    # Nothing was stored for it.
    names = [path.name for path in surface.data_dir.rglob("*s1*")] + [
        path.name for path in surface.data_dir.rglob("*s4*")
    ]
    assert names == []


async def test_a_large_valid_body_is_read_whole(surface: Surface) -> None:
    content = "word " * 160_000  # 800 KB, under the default 1 MB limit
    status, body = await post_chat(surface.api_url, {"chat_id": "large", "content": content})
    assert status == 200
    assert body["reply"] == content


async def test_a_non_ascii_authorization_header_is_401_json(surface: Surface) -> None:
    status, body = await post_chat(
        surface.api_url,
        {"chat_id": "auth", "content": "hi"},
        {"Authorization": "Bearer caf\u00e9-token"},
    )
    assert status == 401
    assert "token" in body["error"]


async def test_browser_attacks_are_refused(surface: Surface) -> None:
    chat = {"chat_id": "browser", "content": "hi"}
    status, body = await post_chat(surface.api_url, chat, {"Host": "rebind.evil.example"})
    assert status == 421
    assert "allowed_hosts" in body["error"]
    status, body = await post_chat(surface.api_url, chat, {"Origin": "https://evil.example"})
    assert status == 403
    assert "cors_origins" in body["error"]
    status, body = await post_chat(surface.api_url, chat, {"Content-Type": "text/plain"})
    assert status == 415
    assert "application/json" in body["error"]
    # The page's own origin and a listed one are served.
    own = {"Origin": surface.api_url}
    assert (await post_chat(surface.api_url, chat, own))[0] == 200
    assert (await post_chat(surface.api_url, chat, {"Origin": "https://app.example"}))[0] == 200
    # The health server checks Host too.
    outcome = await send(
        Route("GET", surface.daemon.http_url + "/metrics"), "rebind", None, {"Host": "evil.example"}
    )
    assert outcome.status == 421
    assert "http.allowed_hosts" in json_error(outcome)["error"]
    # ... and answers to the host name of a channel's webhook_url (a proxy keeping the Host).
    public = await send(
        Route("GET", surface.daemon.http_url + "/healthz"),
        "public",
        None,
        {"Host": "bot.example.com"},
    )
    assert public.status == 200


async def test_a_late_reply_is_a_json_504_with_a_reason(surface: Surface) -> None:
    # Three words, three pieces, two pauses: the turn takes 4 s; the channel gives up after its
    # 2 s reply timeout.
    status, body = await post_chat(surface.late_url, {"chat_id": "late", "content": "a slow one"})
    assert status == 504
    assert f"no reply within {REPLY_TIMEOUT_S:g} s" in body["error"]


async def sse_events(url: str, body: Mapping[str, Any]) -> list[tuple[str, str]]:
    events: list[tuple[str, str]] = []
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http,
        http.post(url + "/v1/chat", json={**body, "stream": True}) as response,
    ):
        assert response.status == 200
        async for kind, data in streamed_events(response):
            events.append((kind, data["text"]))
    return events


async def test_a_stream_whose_reply_is_late_or_stopped_ends_with_error(surface: Surface) -> None:
    events = await sse_events(surface.late_url, {"chat_id": "late-stream", "content": "a b c"})
    assert events[-1][0] == "error"
    assert "no reply within" in events[-1][1]
    # A turn cancelled by "stop": its stream still ends.
    stream = asyncio.create_task(
        sse_events(surface.late_url, {"chat_id": "stopped", "content": "x y z"})
    )
    await surface.daemon.wait_log(turn_started_for("stopped"))
    await post_chat(surface.late_url, {"chat_id": "stopped", "content": "stop"})
    events = await stream
    assert events[-1][0] in ("error", "done")
    assert all(kind == "snapshot" for kind, _text in events[:-1])


async def leave_a_session_of_a_future_schema(profile_dir: Path) -> None:
    """What a newer build left behind (before this daemon started: it owns its directory)."""
    key = SessionKey.for_chat("web", "api", "future")
    async with SessionStore(profile_dir) as store:
        await store.append(key, Message.user("written by a newer build"))
        path = store.path_for(key)
    head, *rest = path.read_text().splitlines(keepends=True)
    path.write_text(json.dumps({**json.loads(head), "schema_version": 99}) + "\n" + "".join(rest))


async def test_a_session_file_of_a_future_schema_is_a_json_409(surface: Surface) -> None:
    outcome: Outcome = await send(
        Route("GET", surface.api("/v1/sessions/future/messages")),
        "future schema",
        None,
        {"Authorization": f"Bearer {TOKEN}"},
    )
    assert outcome.status == 409
    assert "schema_version 99" in json_error(outcome)["error"]


@pytest.mark.parametrize(
    "chat",
    ["%ED%A0%80", "%FF", "..%2F..%2Fetc%2Fpasswd", "%00", "a%23topic", "x" * 300, "y" * 9000],
)
async def test_hostile_chat_ids_in_the_messages_path_are_answered_in_time(
    surface: Surface, chat: str
) -> None:
    url = surface.api(f"/v1/sessions/{chat}/messages")
    outcome = await send(
        Route("GET", url), f"chat {chat[:20]}", None, {"Authorization": f"Bearer {TOKEN}"}
    )
    assert outcome.status in (200, 400, 404, 414, 431, 0), outcome
    if outcome.status == 200:
        assert json.loads(outcome.body)["messages"] == []
