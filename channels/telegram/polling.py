"""Long polling of getUpdates, with offsets, so that no update is handled twice.

Telegram keeps an update until a later getUpdates asks for an offset past it. The poller asks
for `offset = last handled + 1`, so a crash, a dropped connection or a restart re-delivers only
what was never handled, and on the way out it confirms the offset with one last, non-waiting
call. Errors back off from 5 s, doubling to 60 s (octos' figures); a rejected token ends polling.

PTB parses a whole batch at once and fails it all on one malformed update. `UpdatesRequest`
uses PTB's documented `parse_json_payload` hook to take such updates out of the batch (logged,
and remembered so the offset still moves past them).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

import structlog
from aiohttp import web
from telegram import Bot, Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

from bus import InboundRefused, PipeClosed
from channels.errors import ChannelError, FatalChannelError, RateLimited
from channels.health import ChannelHealth
from channels.lifecycle.bounded import RecentMap
from channels.retry import Backoff
from channels.stopping import sleep_unless_set, until_stopped
from channels.telegram.errors import CHANNEL, is_fatal_at_start, translate
from channels.web.webhook import UnreadableJson, json_payload, refused_response

log = structlog.get_logger(__name__)

T = TypeVar("T")

ALLOWED_UPDATES = ("message", "edited_message", "callback_query")
#: With the profile's `inbound_reactions`: Telegram sends reactions only when asked (and in
#: groups only to a bot that is an administrator).
ALLOWED_WITH_REACTIONS = (*ALLOWED_UPDATES, "message_reaction")
#: The last calls on the way out (confirming the offset, deleting the webhook) must not hold
#: up a shutdown: a cancelled channel ends within a second.
GOODBYE_TIMEOUT_S = 0.75


class UpdatesRequest(HTTPXRequest):
    """The HTTP client of getUpdates; drops updates PTB could not parse from each batch."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._skipped: list[int] = []

    def parse_json_payload(self, payload: bytes) -> dict[str, Any]:  # type: ignore[override]
        data: dict[str, Any] = super().parse_json_payload(payload)
        result = data.get("result")
        if data.get("ok") is True and isinstance(result, list):
            data["result"] = [item for item in result if self._parses(item)]
        return data

    def _parses(self, item: object) -> bool:
        update_id = item.get("update_id") if isinstance(item, dict) else None
        try:
            if not isinstance(item, dict) or not isinstance(update_id, int):
                raise TypeError("an update must be an object with an integer update_id")
            Update.de_json(item, None)
        except Exception as exc:  # supervision point: one malformed update
            log.warning(
                "telegram.malformed_update_skipped",
                update_id=update_id,
                error=repr(exc),
                payload=repr(item)[:500],
            )
            if isinstance(update_id, int):
                self._skipped.append(update_id)
            return False
        return True

    def take_skipped(self) -> list[int]:
        skipped, self._skipped = self._skipped, []
        return skipped


@dataclass(eq=False)
class UpdatePoller:
    bot: Bot
    request: UpdatesRequest
    _: KW_ONLY
    poll_timeout_s: float
    backoff: Backoff
    on_health: Callable[[ChannelHealth], None]
    confirm_timeout_s: float = GOODBYE_TIMEOUT_S
    allowed_updates: tuple[str, ...] = ALLOWED_UPDATES
    #: The next update id to ask for; everything below it has been handled.
    next_offset: int | None = field(default=None, init=False)
    _asked_offset: int | None = field(default=None, init=False, repr=False)

    async def run(
        self, handle: Callable[[Update], Awaitable[None]], stopping: asyncio.Event
    ) -> None:
        delay_s = self.backoff.initial_s
        while not stopping.is_set():
            try:
                updates = await until_stopped(self._fetch(), stopping, name="telegram:poll-request")
            except FatalChannelError:
                raise
            except ChannelError as exc:
                wait_s = delay_s
                if isinstance(exc, RateLimited):
                    wait_s = max(wait_s, exc.retry_after_s)
                self.on_health(ChannelHealth.degraded(f"polling failed: {exc}"))
                log.warning("telegram.poll_failed", error=str(exc), retry_in_s=wait_s)
                if await sleep_unless_set(stopping, wait_s):
                    return
                delay_s = self.backoff.next(delay_s)
                continue
            if updates is None:
                return
            delay_s = self.backoff.initial_s
            self.on_health(ChannelHealth.healthy())
            try:
                await self._handle_batch(updates, handle, stopping)
            except InboundRefused as refused:
                # The gateway's backlog is full: stop polling for a while. The offset stays
                # before the refused update, so Telegram hands it (and what follows) over again.
                wait_s = refused.retry_after_s or self.backoff.initial_s
                log.warning("telegram.poll_paused", reason=refused.message, retry_in_s=wait_s)
                if await sleep_unless_set(stopping, wait_s):
                    return

    async def _handle_batch(
        self,
        updates: tuple[Update, ...],
        handle: Callable[[Update], Awaitable[None]],
        stopping: asyncio.Event,
    ) -> None:
        """Handle in order, moving the offset past each; what is left is asked for again."""
        for update in updates:
            if stopping.is_set():
                return
            # Below the offset is a re-delivery (a server that lost our confirmation).
            if self.next_offset is None or update.update_id >= self.next_offset:
                await handle(update)
            self._advance(update.update_id)
        for update_id in self.request.take_skipped():
            self._advance(update_id)

    async def _fetch(self) -> tuple[Update, ...]:
        offset = self.next_offset
        try:
            updates = await self.bot.get_updates(
                offset=offset,
                # Whole seconds, as Telegram takes them; 0 would turn long polling into a busy loop.
                timeout=max(1, round(self.poll_timeout_s)),
                allowed_updates=self.allowed_updates,
            )
        except TelegramError as exc:
            if is_fatal_at_start(exc):
                raise FatalChannelError(f"getUpdates: {exc.message}", channel=CHANNEL) from exc
            raise translate(exc, "getUpdates") from exc
        self._asked_offset = offset
        return updates

    def _advance(self, update_id: int) -> None:
        if self.next_offset is None or update_id >= self.next_offset:
            self.next_offset = update_id + 1

    async def confirm(self) -> None:
        """Tell Telegram everything below `next_offset` is handled (runs on the way out)."""
        if self.next_offset is None or self.next_offset == self._asked_offset:
            return
        try:
            async with asyncio.timeout(self.confirm_timeout_s):
                await self.bot.get_updates(
                    offset=self.next_offset,
                    limit=1,
                    timeout=0,
                    allowed_updates=self.allowed_updates,
                )
        except (TelegramError, TimeoutError) as exc:
            log.warning("telegram.offset_not_confirmed", offset=self.next_offset, error=repr(exc))
            return
        self._asked_offset = self.next_offset
        log.debug("telegram.offset_confirmed", offset=self.next_offset)


# Webhook mode: Telegram POSTs each update to the daemon's HTTP server.
#
# Telegram proves a request is its own with the `X-Telegram-Bot-Api-Secret-Token` header, equal to
# the `secret_token` given to setWebhook; it is compared in constant time. Telegram re-sends an
# update until it gets a 2xx, so a malformed update is answered 200 (and logged) rather than
# refused forever, and recent update ids are remembered so a re-sent update is handled once.
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
