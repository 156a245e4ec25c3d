"""Webhook mode: Telegram POSTs each update to the daemon's HTTP server.

Telegram proves a request is its own with the `X-Telegram-Bot-Api-Secret-Token` header, equal to
the `secret_token` given to setWebhook; it is compared in constant time. Telegram re-sends an
update until it gets a 2xx, so a malformed update is answered 200 (and logged) rather than
refused forever, and recent update ids are remembered so a re-sent update is handled once.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web
from telegram import Bot, Update

from bus import InboundRefused, PipeClosed
from channels.lifecycle.bounded import RecentMap
from channels.web.webhook import UnreadableJson, json_payload, refused_response

log = structlog.get_logger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class RecentIds:
    """A bounded memory of update ids already handled."""

    def __init__(self, capacity: int = 2048) -> None:
        self._ids: RecentMap[int, None] = RecentMap(capacity)

    def add(self, update_id: int) -> bool:
        """Remember `update_id`; False if it was already there."""
        if update_id in self._ids:
            return False
        self._ids.remember(update_id, None)
        return True

    def forget(self, update_id: int) -> None:
        """`update_id` was not taken after all: its retry must be handled."""
        self._ids.pop(update_id, None)


class WebhookReceiver:
    """The aiohttp handler of the webhook route; `handle` is set while the channel runs."""

    def __init__(self, bot: Bot, secret_token: str | None) -> None:
        self._bot = bot
        self._secret = secret_token.encode() if secret_token else None
        self._seen = RecentIds()
        self.handle: Callable[[Update], Awaitable[None]] | None = None

    def _authorised(self, request: web.Request) -> web.Response | None:
        if self._secret is None:  # never accept unsigned updates
            return _error(403, "webhook mode needs a secret_token")
        offered = request.headers.get(SECRET_HEADER)
        if offered is None:
            return _error(401, "missing secret token")
        if not offered.isascii() or not hmac.compare_digest(offered.encode(), self._secret):
            return _error(403, "wrong secret token")
        return None

    async def handle_request(self, request: web.Request) -> web.Response:
        refused = self._authorised(request)
        if refused is not None:
            log.warning("telegram.webhook_refused", status=refused.status, remote=request.remote)
            return refused
        handle = self.handle
        if handle is None:
            return _error(503, "channel not running")
        try:
            raw = json_payload(await request.read())
        except UnreadableJson:
            return _error(400, "body is not JSON")
        update = self._parse(raw)
        if update is None or not self._seen.add(update.update_id):
            return web.Response(text="ok")
        try:
            await handle(update)
        except InboundRefused as error:
            # The backlog is full and nothing was stored: Telegram retries later.
            self._seen.forget(update.update_id)
            return refused_response(error)
        except PipeClosed:
            self._seen.forget(update.update_id)
            return _error(503, "channel stopping")
        return web.Response(text="ok")

    def _parse(self, raw: object) -> Update | None:
        try:
            if not isinstance(raw, dict) or not isinstance(raw.get("update_id"), int):
                raise TypeError("an update must be an object with an integer update_id")
            return Update.de_json(raw, self._bot)
        except Exception as exc:  # supervision point: one malformed update
            log.warning(
                "telegram.malformed_update_skipped", error=repr(exc), payload=repr(raw)[:500]
            )
            return None


def _error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)
