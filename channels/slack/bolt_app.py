"""The slack-bolt `AsyncApp` the channel receives through, and its webhook handler.

Bolt does the protocol's work: it verifies HTTP-mode signatures (v0 HMAC, 5-minute window,
constant-time), answers `url_verification` challenges, drops the bot's own events, and routes
`message` and `app_mention` events, and the `block_actions` payloads of button taps, to the
channel's listeners. Every other event gets a listener that does nothing, so it is answered
200 and not sent again.

Bolt authorizes each event with the identity the channel got from its own `auth.test` instead
of calling auth.test itself: its per-request web clients would read HTTPS_PROXY and ignore
NO_PROXY (see socket_mode.py), and the first events would race to call it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.context.ack.async_ack import AsyncAck
from slack_bolt.response import BoltResponse
from slack_sdk.web.async_client import AsyncWebClient

from channels.errors import ChannelError
from channels.slack.errors import CHANNEL
from channels.slack.inbound import is_malformed_callback

log = structlog.get_logger(__name__)

EventListener = Callable[[dict[str, Any]], Awaitable[None]]
#: A listener of `block_actions` payloads: the body, and Bolt's `ack` to call once it is taken.
ActionListener = Callable[[dict[str, Any], AsyncAck], Awaitable[None]]
WebhookHandler = Callable[[web.Request], Awaitable[web.Response]]


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is, from `auth.test`."""

    user_id: str
    bot_id: str | None
    team_id: str | None


def build_app(
    *,
    base_url: str,
    proxy: str | None,
    signing_secret: str,
    bot_token: str,
    identity: Callable[[], BotIdentity | None],
    take_event: EventListener,
    take_action: ActionListener,
) -> AsyncApp:
    """The app; `take_event(body)` gets each `message`, `app_mention` and `reaction_added`
    event callback, `take_action(body, ack)` each `block_actions` payload (a tap on a button).

    `process_before_response` is on: the listener runs before Slack is answered, so an event
    is taken before Slack hears it was received, and Bolt starts no task of its own.
    """

    async def authorize(enterprise_id: str | None, team_id: str | None) -> AuthorizeResult:
        bot = identity()
        if bot is None:
            # Bolt answers 500: Slack sends the event again once the channel has started.
            raise ChannelError("the Slack channel has not authenticated yet", channel=CHANNEL)
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=bot.team_id or team_id,
            bot_user_id=bot.user_id,
            bot_id=bot.bot_id,
            bot_token=bot_token,
        )

    # Bolt's own client only seeds the per-request clients its context offers listeners; no
    # listener here calls the Web API through them, so it carries no token.
    bolt_client = AsyncWebClient(base_url=base_url, proxy=proxy, retry_handlers=[])
    bolt_client.proxy = proxy
    app = AsyncApp(
        name="octos-slack",
        client=bolt_client,
        before_authorize=_skip_malformed_callbacks,
        authorize=authorize,
        signing_secret=signing_secret,
        process_before_response=True,
    )
    app.event("message")(take_event)
    app.event("app_mention")(take_event)
    app.event("reaction_added")(take_event)
    app.event(re.compile(".*"))(_ignore_event)

    # Every button's payload, the bot's or a link's: each must be acknowledged.
    @app.action(re.compile(".*"))
    async def take_action_payload(body: dict[str, Any], ack: AsyncAck) -> None:
        await take_action(body, ack)

    return app


def webhook_handler(app: AsyncApp, accepting: Callable[[], bool]) -> WebhookHandler:
    """The aiohttp handler of HTTP mode's events route: what Bolt cannot parse is refused
    before it reaches Bolt (its verifier would fail on it with a 500, and Slack retry it)."""

    async def handle(request: web.Request) -> web.Response:
        if not accepting():
            # Slack retries a 503; the retry finds the channel running (or is dropped as a dup).
            return web.json_response({"error": "not receiving"}, status=503)
        if not _is_integer(request.headers.get("X-Slack-Request-Timestamp", "")):
            return web.json_response({"error": "invalid request"}, status=401)
        if not request.headers.get("X-Slack-Signature", "").isascii():
            # Bolt compares it with hmac.compare_digest, which fails on non-ASCII text (500).
            return web.json_response({"error": "invalid signature"}, status=401)
        try:
            bolt_request = await to_bolt_request(request)
        except (ValueError, AttributeError, TypeError, RecursionError) as error:
            # Bolt's parser takes any JSON (or form payload) for an object: a list or a number
            # fails inside it with AttributeError; JSON nested too deeply, with RecursionError.
            log.warning("slack.webhook_body_refused", error=str(error))
            return web.json_response({"error": "invalid body"}, status=400)
        if not isinstance(bolt_request.body, dict):
            log.warning("slack.webhook_body_refused")
            return web.json_response({"error": "invalid body"}, status=400)
        if not isinstance(bolt_request.body.get("event", {}), dict):
            # Bolt's own self-event filter reads body["event"] as an object, whatever the type.
            log.warning("slack.webhook_event_refused")
            return web.json_response({"error": "invalid body"}, status=400)
        response = await app.async_dispatch(bolt_request)
        return await to_aiohttp_response(response)

    return handle


async def _skip_malformed_callbacks(
    body: dict[str, Any], next: Callable[[], Awaitable[None]]
) -> BoltResponse | None:
    """Bolt middleware, after the signature check: answer a malformed callback 200 (Slack would
    only send it again) instead of letting Bolt's middleware fail on it with a 500."""
    if is_malformed_callback(body):
        log.warning("slack.event_callback_malformed", event_id=body.get("event_id"))
        return BoltResponse(status=200, body="")
    await next()
    return None


async def _ignore_event() -> None:
    return None


def _is_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True
