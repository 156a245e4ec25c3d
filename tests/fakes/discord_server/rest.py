"""The fake's REST API: the routes discord.py calls, recorded, with injectable failures."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.discord_server.models import (
    EditBudget,
    FakeAttachment,
    FakeUser,
    JsonObject,
    RecordedFile,
    RecordedRequest,
    content_problem,
    json_response,
    now_iso,
    unknown,
)
from tests.fakes.discord_server.world import World

Handler = Callable[..., Awaitable[web.Response]]


@dataclass
class Failure:
    method: str
    path: re.Pattern[str]
    status: int
    body: JsonObject | str
    headers: dict[str, str]
    remaining: int

    def answer(self) -> web.Response:
        self.remaining -= 1
        if isinstance(self.body, str):
            return web.Response(status=self.status, text=self.body, headers=self.headers)
        return json_response(self.body, self.status, self.headers)


class RestApi:
    def __init__(
        self,
        world: World,
        gateway_url: Callable[[], str],
        on_change: Callable[[], Awaitable[None]],
        *,
        edit_budget: EditBudget | None,
    ) -> None:
        self.world = world
        self.edit_budget = edit_budget
        self.requests: list[RecordedRequest] = []
        self.failures: list[Failure] = []
        self._by_nonce: dict[str, int] = {}
        self._query: Mapping[str, str] = {}
        self._gateway_url = gateway_url
        self._on_change = on_change

    async def handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["tail"]
        body, files = await _read_body(request)
        response = self._injected_failure(request.method, path)
        if response is None:
            if request.headers.get("Authorization") != f"Bot {self.world.token}":
                response = json_response({"message": "401: Unauthorized", "code": 0}, 401)
            else:
                self._query = request.query
                response = await self._route(request.method, path, body, files)
        self.requests.append(
            RecordedRequest(
                request.method, path, dict(request.headers), body, tuple(files), response.status
            )
        )
        await self._on_change()
        return response

    async def cdn_file(self, request: web.Request) -> web.Response:
        self.world.cdn_fetched.append(request.match_info["key"])
        hosted = self.world.cdn.get(request.match_info["key"])
        if hosted is None:
            return web.Response(status=404)
        data, content_type = hosted
        return web.Response(body=data, headers={"Content-Type": content_type})

    def _injected_failure(self, method: str, path: str) -> web.Response | None:
        for failure in self.failures:
            if failure.remaining > 0 and failure.method == method and failure.path.fullmatch(path):
                return failure.answer()
        return None

    async def _route(
        self, method: str, path: str, body: Any, files: list[RecordedFile]
    ) -> web.Response:
        for route_method, pattern, handler in self._routes():
            match = re.fullmatch(pattern, path)
            if match and route_method == method:
                return await handler(body, files, *match.groups())
        return json_response({"message": "404: Not Found", "code": 0}, 404)

    def _routes(self) -> Iterator[tuple[str, str, Handler]]:
        yield "GET", r"/users/@me", self._get_me
        yield "GET", r"/oauth2/applications/@me", self._get_application
        yield "GET", r"/gateway", self._get_gateway
        yield "GET", r"/gateway/bot", self._get_gateway_bot
        yield "POST", r"/users/@me/channels", self._create_dm
        yield "GET", r"/channels/(\d+)", self._get_channel
        yield "POST", r"/channels/(\d+)/messages", self._create_message
        yield "GET", r"/channels/(\d+)/messages", self._list_messages
        yield "PATCH", r"/channels/(\d+)/messages/(\d+)", self._edit_message
        yield "DELETE", r"/channels/(\d+)/messages/(\d+)", self._delete_message
        yield "POST", r"/channels/(\d+)/typing", self._typing
        yield "PUT", r"/channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._react
        yield "POST", r"/interactions/(\d+)/([^/]+)/callback", self._answer_interaction
        yield "DELETE", r"/channels/(\d+)/messages/(\d+)/reactions/([^/]+)/@me", self._unreact

    async def _list_messages(self, _body: Any, _files: Any, channel_id: str) -> web.Response:
        """Channel history as Discord serves it: with `after`, the `limit` messages right after
        it, newest first (discord.py reverses them for `oldest_first`)."""
        if int(channel_id) not in self.world.channels:
            return unknown("Channel", 10003)
        after = int(self._query.get("after", "0"))
        limit = min(100, int(self._query.get("limit", "50")))
        newer = sorted(
            (m for m in self.world.messages.values() if m["channel_id"] == channel_id),
            key=lambda m: int(m["id"]),
        )
        chosen = [m for m in newer if int(m["id"]) > after][:limit]
        return json_response(list(reversed(chosen)))

    async def _get_me(self, _body: Any, _files: Any) -> web.Response:
        return json_response(self.world.bot_payload())

    async def _get_application(self, _body: Any, _files: Any) -> web.Response:
        return json_response(self.world.application())

    async def _get_gateway(self, _body: Any, _files: Any) -> web.Response:
        return json_response({"url": self._gateway_url()})

    async def _get_gateway_bot(self, _body: Any, _files: Any) -> web.Response:
        limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
        return json_response(
            {"url": self._gateway_url(), "shards": 1, "session_start_limit": limit}
        )

    async def _create_dm(self, body: Any, _files: Any) -> web.Response:
        user_id = int(body["recipient_id"])
        channel = self.world.dm_channel_with(user_id)
        if channel is None:
            recipient = FakeUser(id=user_id, username=f"user{user_id}")
            channel = self.world.add_dm_channel(self.world.ids.next(), recipient)
        return json_response(channel)

    async def _get_channel(self, _body: Any, _files: Any, channel_id: str) -> web.Response:
        channel = self.world.channels.get(int(channel_id))
        return json_response(channel) if channel is not None else unknown("Channel", 10003)

    async def _create_message(
        self, body: Any, files: list[RecordedFile], channel_id: str
    ) -> web.Response:
        if int(channel_id) not in self.world.channels:
            return unknown("Channel", 10003)
        body = body or {}
        content = body.get("content") or ""
        embeds = body.get("embeds") or []
        if problem := content_problem(content, has_other_parts=bool(embeds or files)):
            return problem
        nonce = body.get("nonce") if body.get("enforce_nonce") else None
        earlier = self.world.messages.get(self._by_nonce.get(str(nonce), 0))
        if nonce is not None and earlier is not None:
            # Discord answers a repeated nonce with the message it already created.
            return json_response(earlier)
        message = self.world.create_message(
            int(channel_id),
            self.world.bot,
            content,
            attachments=[FakeAttachment(f.filename, f.data, f.content_type) for f in files],
            embeds=embeds,
            reference=body.get("message_reference"),
        )
        if nonce is not None:
            self._by_nonce[str(nonce)] = int(message["id"])
        return json_response(message)

    async def _edit_message(
        self, body: Any, _files: Any, channel_id: str, message_id: str
    ) -> web.Response:
        message = self.world.message_in(channel_id, message_id)
        if message is None:
            return unknown("Message", 10008)
        if message["author"]["id"] != str(self.world.bot.id):
            refusal = {"message": "Cannot edit a message authored by another user", "code": 50005}
            return json_response(refusal, 403)
        if self.edit_budget is not None and (limited := self.edit_budget.refusal(channel_id)):
            return limited
        if "content" in body:
            content = body["content"] or ""
            if problem := content_problem(content, has_other_parts=True):
                return problem
            message["content"] = content
        if "embeds" in body:
            message["embeds"] = body["embeds"] or []
        if "components" in body:
            if problem := components_problem(body["components"] or []):
                return problem
            message["components"] = body["components"] or []
        message["edited_timestamp"] = now_iso()
        return json_response(message)

    async def _answer_interaction(
        self, body: Any, _files: Any, interaction_id: str, token: str
    ) -> web.Response:
        if self.world.interactions.get(interaction_id) != token:
            return json_response({"message": "Unknown interaction", "code": 10062}, 404)
        if interaction_id in self.world.interaction_answers:
            already = {"message": "Interaction has already been acknowledged.", "code": 40060}
            return json_response(already, 400)
        if not isinstance(body, dict) or body.get("type") not in (4, 5, 6, 7):
            return json_response({"message": "Invalid Form Body", "code": 50035}, 400)
        self.world.interaction_answers[interaction_id] = body
        return web.Response(status=204)

    async def _delete_message(
        self, _body: Any, _files: Any, channel_id: str, message_id: str
    ) -> web.Response:
        if self.world.message_in(channel_id, message_id) is None:
            return unknown("Message", 10008)
        del self.world.messages[int(message_id)]
        return web.Response(status=204)

    async def _typing(self, _body: Any, _files: Any, channel_id: str) -> web.Response:
        if int(channel_id) not in self.world.channels:
            return unknown("Channel", 10003)
        return web.Response(status=204)

    async def _react(
        self, _body: Any, _files: Any, channel_id: str, message_id: str, emoji: str
    ) -> web.Response:
        message = self.world.message_in(channel_id, message_id)
        if message is None:
            return unknown("Message", 10008)
        reactions: list[JsonObject] = message.setdefault("reactions", [])
        if not any(r["emoji"]["name"] == emoji for r in reactions):
            reactions.append({"count": 1, "me": True, "emoji": {"id": None, "name": emoji}})
        return web.Response(status=204)

    async def _unreact(
        self, _body: Any, _files: Any, channel_id: str, message_id: str, emoji: str
    ) -> web.Response:
        message = self.world.message_in(channel_id, message_id)
        if message is None:
            return unknown("Message", 10008)
        message["reactions"] = [
            r for r in message.get("reactions", []) if r["emoji"]["name"] != emoji
        ]
        return web.Response(status=204)


async def _read_body(request: web.Request) -> tuple[Any, list[RecordedFile]]:
    if request.content_type != "multipart/form-data":
        raw = await request.read()
        return (json.loads(raw) if raw else None), []
    body: Any = None
    files: list[RecordedFile] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        assert isinstance(part, BodyPartReader)
        data = bytes(await part.read())
        if part.name == "payload_json":
            body = json.loads(data)
        else:
            content_type = part.headers.get("Content-Type", "application/octet-stream")
            files.append(RecordedFile(part.name or "", part.filename or "", data, content_type))
    return body, files


def components_problem(rows: Any) -> web.Response | None:
    """Discord's 400 for components it would refuse: at most 5 action rows of at most 5
    buttons, each with a label and either a unique `custom_id` or (link style 5) a `url`."""
    invalid = json_response({"message": "Invalid Form Body", "code": 50035}, 400)
    if not isinstance(rows, list) or len(rows) > 5:
        return invalid
    custom_ids: set[str] = set()
    for row in rows:
        buttons = row.get("components") if isinstance(row, dict) else None
        if row.get("type") != 1 or not isinstance(buttons, list) or not 1 <= len(buttons) <= 5:
            return invalid
        for button in buttons:
            if not isinstance(button, dict) or button.get("type") != 2 or not button.get("label"):
                return invalid
            if button.get("style") == 5:
                if not button.get("url") or "custom_id" in button:
                    return invalid
            elif not button.get("custom_id") or button["custom_id"] in custom_ids:
                return invalid
            else:
                custom_ids.add(button["custom_id"])
    return None
