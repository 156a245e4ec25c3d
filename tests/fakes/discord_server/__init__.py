"""A fake Discord on 127.0.0.1: the REST API subset discord.py uses, and a real gateway.

The real discord.py runs against it unchanged: its HTTP client, rate-limit handling, websocket,
zlib-stream decompression, heartbeats and RESUME do their real work; only the far end is ours.

    async with FakeDiscord() as fake:
        channel = DiscordChannel(DiscordConfig(token=fake.token, ...), data_dir=...)
        ...                                   # or a profile with api_base_url / gateway_url
        await fake.wait_ready()
        await fake.push_message(42, author=alice, content="hi")
        await fake.wait_until(lambda: fake.bot_messages(42))

REST (under `/api/v10`, any version): GET /users/@me, GET /oauth2/applications/@me, GET /gateway,
GET /gateway/bot, GET /channels/{id}, POST /users/@me/channels, POST /channels/{id}/messages
(JSON, or multipart with `payload_json` and `files[n]`), PATCH and DELETE a message, POST typing,
PUT and DELETE the bot's reactions, a message's button components (PATCH; refused as Discord
would past 5 rows of 5), and the answers to interactions (`POST /interactions/{id}/{token}/
callback`, once each; `push_tap` sends one). Answers are Discord's JSON shapes with
`Content-Type: application/json` exactly; content over 2000 characters and empty messages get
Discord's 400 errors. Files are served from `/attachments/...`, the fake's CDN. The gateway is
described in `gateway.py`.

Every REST request is recorded (`requests`, `requests_to`); failures are injected with
`fail_next` and `rate_limit_next`; edits past Discord's budget (5 per 5 s per channel, see
`edit_budget`) get a real 429; `drop_connections` cuts the gateway, `gateway_available`
refuses new connections, `gateway.identify_close_code` refuses IDENTIFY (4004, 4014);
`push_dispatch` and `push_raw_frame` send malformed events. A profile reaches it with
`api_base_url: fake.api_base_url` and `gateway_url: fake.gateway_url`, token `fake.token`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

from aiohttp import web

from channels.discord.routing import DiscordEndpoints
from tests.fakes import ServedFake
from tests.fakes.changes import Changes
from tests.fakes.discord_server.gateway import Gateway
from tests.fakes.discord_server.models import (
    DISCORD_EPOCH_MS,
    EditBudget,
    FakeAttachment,
    FakeUser,
    JsonObject,
    RecordedFile,
    RecordedRequest,
    Snowflakes,
)
from tests.fakes.discord_server.rest import Failure, RestApi
from tests.fakes.discord_server.world import World

__all__ = [
    "DISCORD_EPOCH_MS",
    "FakeAttachment",
    "FakeDiscord",
    "FakeUser",
    "RecordedFile",
    "RecordedRequest",
]


class FakeDiscord(ServedFake):
    def __init__(
        self,
        *,
        token: str = "fake-discord-token",
        bot: FakeUser | None = None,
        heartbeat_interval_ms: int = 41_250,
        edit_budget: tuple[int, float] | None = (5, 5.0),
    ) -> None:
        """`edit_budget`: (edits, seconds) per channel before a 429, as Discord; None: no limit."""
        ids = Snowflakes()
        bot = bot or FakeUser(id=ids.next(), username="octos-bot", bot=True)
        self._world = World(token=token, bot=bot, ids=ids)
        self._changes = Changes()
        self.rest = RestApi(
            self._world,
            lambda: self.gateway_url,
            self._changes.notify,
            edit_budget=None if edit_budget is None else EditBudget(*edit_budget),
        )
        self.gateway = Gateway(
            self._world,
            lambda: self.gateway_url,
            self._changes.notify,
            heartbeat_interval_ms=heartbeat_interval_ms,
        )
        ServedFake.__init__(self, self._application())

    def _application(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get("/gateway", self.gateway.handle)
        app.router.add_get("/attachments/{key:.+}", self.rest.cdn_file)
        app.router.add_route("*", r"/api/v{version:\d+}/{tail:.*}", self.rest.handle)
        return app

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        self._world.origin = self.origin
        return self

    async def _before_shutdown(self) -> None:
        await self.gateway.close_all()

    # Addresses and identity

    @property
    def token(self) -> str:
        return self._world.token

    @property
    def bot(self) -> FakeUser:
        return self._world.bot

    @property
    def base_url(self) -> str:
        return self.origin

    @property
    def api_base_url(self) -> str:
        return f"{self.origin}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self._server.port}/gateway"

    def endpoints(self) -> DiscordEndpoints:
        return DiscordEndpoints(api_base_url=self.api_base_url, gateway_url=self.gateway_url)

    def new_id(self) -> int:
        return self._world.ids.next()

    # What happened

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.rest.requests

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        """Recorded requests with this method whose path matches the regex `path` in full."""
        pattern = re.compile(path)
        return [r for r in self.requests if r.method == method and pattern.fullmatch(r.path)]

    @property
    def cdn_fetched(self) -> list[str]:
        """The CDN keys of the files fetched, in order."""
        return self._world.cdn_fetched

    def bot_messages(self, channel_id: int) -> list[JsonObject]:
        """What the bot posted in a channel and has not deleted, oldest first."""
        return self._world.bot_messages(channel_id)

    def message(self, message_id: int | str) -> JsonObject | None:
        return self._world.messages.get(int(message_id))

    @property
    def identify_payloads(self) -> list[JsonObject]:
        return self.gateway.identify_payloads

    @property
    def connect_queries(self) -> list[dict[str, str]]:
        """The query of each accepted gateway connection (`v`, `encoding`, `compress`)."""
        return self.gateway.connect_queries

    @property
    def refused_count(self) -> int:
        """Gateway connections refused while `gateway_available` was False."""
        return self.gateway.refused_count

    @property
    def identify_count(self) -> int:
        return len(self.gateway.identify_payloads)

    @property
    def resume_count(self) -> int:
        return self.gateway.resume_count

    @property
    def live_sessions(self) -> list[str]:
        return self.gateway.live_sessions

    # Waiting

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        """Wait until `predicate()` is true; it is checked after every change the fake sees."""
        await self._changes.wait_until(predicate, timeout_s)

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Wait until a client's session is open (identified or resumed)."""
        await self.wait_until(lambda: self.live_sessions, timeout_s)

    # The world

    async def add_guild(
        self, guild_id: int, channel_ids: Sequence[int], *, name: str = "octos test server"
    ) -> None:
        """A server the bot is in; sessions get its GUILD_CREATE (in READY if none yet)."""
        guild = self._world.add_guild(guild_id, channel_ids, name)
        await self.gateway.dispatch("GUILD_CREATE", self._world.guild_create(guild))

    async def push_message(
        self,
        channel_id: int,
        author: FakeUser,
        content: str,
        *,
        guild_id: int | None = None,
        mentions: Sequence[FakeUser] = (),
        attachments: Sequence[FakeAttachment] = (),
    ) -> JsonObject:
        """A user writes in a channel (a DM without `guild_id`): MESSAGE_CREATE to the bot."""
        await self._ensure_channel(channel_id, author, guild_id)
        message = self._world.create_message(
            channel_id, author, content, mentions=mentions, attachments=attachments
        )
        await self.push_dispatch("MESSAGE_CREATE", message)
        return message

    async def post_while_offline(
        self, channel_id: int, author: FakeUser, content: str, *, guild_id: int | None = None
    ) -> JsonObject:
        """A user writes while the bot is not connected: the message is only in the history."""
        await self._ensure_channel(channel_id, author, guild_id)
        return self._world.create_message(channel_id, author, content)

    async def _ensure_channel(
        self, channel_id: int, author: FakeUser, guild_id: int | None
    ) -> None:
        if guild_id is None:
            if channel_id not in self._world.channels:
                self._world.add_dm_channel(channel_id, author)
            return
        guild = self._world.guilds.get(guild_id)
        if guild is None:
            await self.add_guild(guild_id, [channel_id])
        elif channel_id not in guild.channel_ids:
            await self.add_guild(guild_id, [*guild.channel_ids, channel_id], name=guild.name)

    def interaction_answer(self, interaction_id: str) -> JsonObject | None:
        """The bot's answer to an interaction (`{"type": 6}`: a deferred update), or None."""
        return self._world.interaction_answers.get(interaction_id)

    async def push_tap(
        self,
        channel_id: int,
        message_id: int | str,
        custom_id: str,
        user: FakeUser,
        *,
        interaction_id: str | None = None,
        as_shown: JsonObject | None = None,
    ) -> str:
        """`user` taps the button `custom_id` under a message (as it is now, or `as_shown`: an
        app still showing it): INTERACTION_CREATE of a component; the interaction's id. The
        same `interaction_id` again is Discord delivering that tap twice."""
        message = copy.deepcopy(as_shown or self._world.messages[int(message_id)])
        interaction_id = interaction_id or str(self._world.ids.next())
        token = f"fake-interaction-token-{interaction_id}"
        self._world.interactions[interaction_id] = token
        channel = self._world.channels[channel_id]
        data: JsonObject = {
            "id": interaction_id,
            "application_id": str(self.bot.id),
            "type": 3,
            "data": {"custom_id": custom_id, "component_type": 2},
            "channel_id": str(channel_id),
            "channel": channel,
            "token": token,
            "version": 1,
            "message": message,
            "locale": "en-US",
            "app_permissions": "0",
            "entitlements": [],
            "authorizing_integration_owners": {},
            "context": 1 if channel.get("guild_id") is None else 0,
            "attachment_size_limit": 25 * 1024 * 1024,
        }
        if channel.get("guild_id") is None:
            data["user"] = user.payload()
        else:
            data["guild_id"] = channel["guild_id"]
            data["member"] = {
                "user": user.payload(),
                "roles": [],
                "joined_at": "2026-01-01T00:00:00+00:00",
                "deaf": False,
                "mute": False,
                "permissions": "0",
            }
        await self.push_dispatch("INTERACTION_CREATE", data)
        return interaction_id

    async def push_dispatch(self, event: str, data: Any) -> None:
        """A dispatch event, well-formed or not, to every session (kept for RESUME)."""
        if not self.gateway.sessions:
            raise RuntimeError("no gateway session: await fake.wait_ready() first")
        await self.gateway.dispatch(event, data)

    async def push_raw_frame(self, text: str) -> None:
        """A frame outside the protocol (not JSON, say) on every open connection."""
        for connection in list(self.gateway.connections):
            await connection.send_text(text)

    # Failures

    def fail_next(
        self,
        method: str,
        path: str,
        status: int,
        *,
        body: JsonObject | str | None = None,
        headers: Mapping[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """The next `times` requests with this method and path (a regex) get this answer."""
        answer = {"message": f"{status}: injected failure", "code": 0} if body is None else body
        self.rest.failures.append(
            Failure(method, re.compile(path), status, answer, dict(headers or {}), times)
        )

    def rate_limit_next(
        self,
        method: str,
        path: str,
        *,
        retry_after_s: float = 0.05,
        via: bool = True,
        is_global: bool = False,
        times: int = 1,
    ) -> None:
        """A 429 as Discord sends it; without `via` it looks like Cloudflare's."""
        headers = {"Retry-After": f"{retry_after_s:g}", "X-RateLimit-Scope": "user"}
        if via:
            headers["Via"] = "1.1 google"
        body = {
            "message": "You are being rate limited.",
            "retry_after": retry_after_s,
            "global": is_global,
        }
        self.fail_next(method, path, 429, body=body, headers=headers, times=times)

    async def drop_connections(self) -> None:
        """Cut every gateway connection without a close frame; sessions stay resumable."""
        for connection in list(self.gateway.connections):
            connection.abort()

    @property
    def gateway_available(self) -> bool:
        return self.gateway.available

    @gateway_available.setter
    def gateway_available(self, available: bool) -> None:
        self.gateway.available = available
