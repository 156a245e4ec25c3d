"""The Socket Mode connection: slack-bolt's aiohttp handler, opened and closed as a unit.

`SocketConnection` asks `apps.connections.open` (on the Web API base of the client it is given)
for a websocket URL, connects, and hands every envelope to the Bolt app. From then on the
SDK keeps the connection: it pings every `ping_interval_s`, and after a drop, a `disconnect`
message or a stale connection it opens a new URL and reconnects by itself.

Each envelope is acknowledged after Bolt has dispatched it, which for an event only queues it
for the channel (quick, well within Slack's 3 seconds). Envelopes Bolt has no listener for are
acknowledged too, so Slack does not send them again; only an envelope the channel could not take
(Bolt answers 5xx, e.g. the queue stayed full) is left unacknowledged for Slack to re-deliver.

slack_sdk reads HTTPS_PROXY whenever it is given no proxy and ignores NO_PROXY; `proxy_for`
decides with NO_PROXY, and the decision is set on the clients after they are built.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import KW_ONLY, dataclass, field
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

import structlog
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import run_async_bolt_app
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.errors import TransientError
from channels.slack.errors import CHANNEL, slack_call

log = structlog.get_logger(__name__)

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url`, honouring NO_PROXY; loopback never proxied."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in _LOOPBACK_HOSTS:
        return None
    proxies = urllib.request.getproxies_environment()
    if not proxies or bool(urllib.request.proxy_bypass(host)):
        return None
    scheme = "https" if parts.scheme in ("https", "wss") else "http"
    return proxies.get(scheme) or proxies.get("https") or proxies.get("http") or None


class _Handler(AsyncSocketModeHandler):
    """Bolt's Socket Mode handler, acknowledging every envelope the channel has taken."""

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        response = await run_async_bolt_app(self.app, req)
        if response.status >= 500:
            log.warning(
                "slack.envelope_not_taken",
                envelope_id=req.envelope_id,
                status=response.status,
            )
            return
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))


@dataclass(eq=False)
class SocketConnection:
    """`async with SocketConnection(...)`: connected on entry, closed (every SDK task ended)
    on exit."""

    app: AsyncApp
    app_token: str
    web_client: AsyncWebClient
    _: KW_ONLY
    ping_interval_s: float
    connect_timeout_s: float
    close_timeout_s: float = 5.0
    _handler: _Handler | None = field(default=None, init=False, repr=False)

    async def __aenter__(self) -> Self:
        # The SDK client starts its message loop and aiohttp session as it is built: in here.
        handler = _Handler(
            self.app,
            self.app_token,
            web_client=self.web_client,
            ping_interval=self.ping_interval_s,
        )
        self._handler = handler
        client = handler.client
        client.proxy = self.web_client.proxy
        try:
            async with slack_call("apps.connections.open", self.connect_timeout_s):
                client.wss_uri = await client.issue_new_wss_url()
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    await handler.connect_async()  # type: ignore[no-untyped-call]
            except TimeoutError as error:
                raise TransientError(
                    f"no Socket Mode connection within {self.connect_timeout_s:g} s",
                    channel=CHANNEL,
                ) from error
        except BaseException:
            await self.close()
            raise
        log.info("slack.socket_mode_connected")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def is_connected(self) -> bool:
        handler = self._handler
        return handler is not None and await handler.client.is_connected()

    async def close(self) -> None:
        """Close the websocket and the SDK's session; wait for its background tasks to end."""
        handler, self._handler = self._handler, None
        if handler is None:
            return
        client = handler.client
        try:
            async with asyncio.timeout(self.close_timeout_s):
                await handler.close_async()  # type: ignore[no-untyped-call]
        except TimeoutError:
            log.warning("slack.socket_mode_close_timed_out", timeout_s=self.close_timeout_s)
        finally:
            await _settle(
                [
                    client.message_processor,
                    client.current_session_monitor,
                    client.message_receiver,
                ],
                self.close_timeout_s,
            )


async def _settle(futures: list[asyncio.Future[None] | None], timeout_s: float) -> None:
    """Cancel the SDK's loops and wait (bounded) until they have ended."""
    pending = [future for future in futures if future is not None and not future.done()]
    for future in pending:
        future.cancel()
    if pending:
        await asyncio.wait(pending, timeout=timeout_s)
