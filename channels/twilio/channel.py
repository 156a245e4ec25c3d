"""Twilio SMS and MMS: a signed form webhook in, the Messages API out.

`start()` takes the webhooks `web_routes()` gives the daemon's HTTP server until `stop()`, from
the start, while it checks the credentials (fetching the account; a refused token is fatal, so
the channel is Down rather than restarted forever). Each inbound message is handed to the
gateway with its `MessageSid` as `message_id`; Twilio is answered only after that returns (the
message is durable). MMS attachments are downloaded with basic auth (`account_sid:auth_token`),
for allowed senders only. Carrier keywords (STOP, HELP, ...) are Twilio's: acknowledged, never
answered.

Replies go out through the twilio library's async client, pointed at `api_base_url`: one
`POST /2010-04-01/Accounts/{sid}/Messages.json` per chunk of at most 1,600 characters; a
token rejected while sending makes the channel Down too. SMS has no edits and no typing
indicator; the agent's Markdown is sent as plain text. Outbound media must be public URLs
(Twilio fetches them).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import aiohttp
import structlog
from aiohttp import web
from twilio.rest import Client

from bus import Attachment, InboundMessage, InboundSender, OutboundMessage
from channels.errors import AuthError, FatalChannelError
from channels.lifecycle.bounded import InboundDedup
from channels.lifecycle.run_state import CredentialsCheck, RunStateChannel
from channels.markup.plain import render_phone_text
from channels.media_files import MediaIntake, MediaStore
from channels.media_links import link_to
from channels.retry.pacing import RateLimits
from channels.split.limits import PLATFORM_LIMITS, PlatformLimit
from channels.twilio.http import CHANNEL, TwilioHttp, basic_auth_header, twilio_call
from channels.twilio.webhook import Sms, TwilioSignature, TwilioWebhook
from config import TwilioConfig

# Twilio's send rates: Twilio paces the sending itself, so the scheduler only obeys refusals.
#
# Twilio error 30001 / 21611 (https://www.twilio.com/docs/api/errors/30001): "Twilio queues
# messages based on the sending rate of a sender or an account. For example a US long code number
# can send one message segment per second"; what exceeds it waits in Twilio's queue (up to 10
# hours), it is not refused. A 429 (error 20429, too many concurrent requests) holds the account.
RATE_LIMITS = RateLimits()


log = structlog.get_logger(__name__)

CREDENTIALS_REFUSED = "Twilio refused the credentials"


def _same_origin(url: str, other: str) -> bool:
    first, second = urlsplit(url), urlsplit(other)
    return (first.scheme, first.netloc) == (second.scheme, second.netloc)


class TwilioChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PLATFORM_LIMITS["twilio"]
    #: Twilio's "Accepted content types for media": "the total size of all media ... must be
    #: 5 MB or less" for an MMS.
    max_upload_bytes = 5 * 1024 * 1024

    def __init__(
        self, config: TwilioConfig, *, data_dir: Path, request_timeout_s: float = 30.0
    ) -> None:
        """`config` validated: exactly one of `from_number` and `messaging_service_sid`."""
        self._account_sid = config.account_sid
        self._auth_token = auth_token = config.auth_token.get_secret_value()
        self._sender: dict[str, Any] = (
            {"from_": config.from_number}
            if config.from_number is not None
            else {"messaging_service_sid": config.messaging_service_sid}
        )
        self._webhook_path = config.webhook_path
        self._api_base_url = config.api_base_url.rstrip("/")
        self._stranger_notice = config.stranger_notice
        self._timeout_s = request_timeout_s
        self._media = MediaStore(data_dir, CHANNEL)
        self._webhook = TwilioWebhook(
            TwilioSignature(auth_token, config.public_url),
            self._take,
            lambda: self._run_state.inbound is not None,
        )
        self._recent = InboundDedup(max_entries=10_000, ttl_s=3600.0)
        self._client: Client | None = None
        self._http: TwilioHttp | None = None
        super().__init__()

    def format_outbound(self, content: str) -> str:
        return render_phone_text(content, "sms")

    # Lifecycle

    async def start(self, inbound: InboundSender) -> None:
        """Check the credentials, then take webhooks until `stop()`, cancellation or a
        rejected token."""
        await self._run_state.serve(
            inbound,
            CredentialsCheck(self.probe, CREDENTIALS_REFUSED, CHANNEL),
            task_name="twilio-auth-watch",
            path=self._webhook_path,
        )

    def _credentials_dead(self, error: AuthError) -> FatalChannelError:
        return self._run_state.refused(CREDENTIALS_REFUSED, error, channel=CHANNEL)

    async def stop(self) -> None:
        """Stop taking webhooks and close the HTTP client; idempotent."""
        await super().stop()
        http, self._http, self._client = self._http, None, None
        if http is not None:
            await http.close()

    async def probe(self) -> str | None:
        client = self._rest()
        async with twilio_call("fetch account", self._timeout_s):
            account = await client.api.v2010.accounts(self._account_sid).fetch_async()
        sender = self._sender.get("from_") or self._sender.get("messaging_service_sid")
        return f"{account.friendly_name} ({self._account_sid}), sending as {sender}"

    def _rest(self) -> Client:
        """The REST client, made inside the event loop (its aiohttp session needs one)."""
        if self._client is None:
            self._http = TwilioHttp(self._timeout_s)
            client = Client(
                self._account_sid, self._auth_token, self._account_sid, http_client=self._http
            )
            # Nothing but api_base_url decides where requests go (TWILIO_EDGE would rewrite it).
            client.edge = client.region = None
            client.api.base_url = self._api_base_url
            self._client = client
        return self._client

    # Inbound

    def web_routes(self) -> list[web.RouteDef]:
        return [web.post(self._webhook_path, self._webhook.handle)]

    async def _take(self, sms: Sms) -> None:
        """One signed inbound message: returns once the gateway has it (or it needs nothing)."""
        inbound = self._run_state.receiver(CHANNEL)
        if sms.is_carrier_keyword:
            log.info("twilio.carrier_keyword", sid=sms.sid, keyword=sms.body.strip().upper())
            return
        if sms.sid in self._recent:
            log.debug("twilio.duplicate_webhook", sid=sms.sid)
            return
        allowed = self.is_allowed(sms.sender)
        if not allowed and not self._stranger_notice:
            log.info("twilio.stranger_ignored", sid=sms.sid, sender=sms.sender)
            self._recent.seen(sms.sid)
            return
        received = InboundMessage(
            channel=CHANNEL,
            sender_id=sms.sender,
            chat_id=sms.sender,
            content=sms.body,
            metadata={"to": sms.to},
            message_id=sms.sid,
        )
        # A stranger's files are not fetched: the dispatcher will refuse the message.
        if sms.media_urls and allowed:
            received = await self._receive_media(sms, received)
        await inbound.send(received)
        self._recent.seen(sms.sid)

    async def _receive_media(self, sms: Sms, received: InboundMessage) -> InboundMessage:
        """The message with its MMS media saved; Twilio states no size beforehand, so the limit
        is kept while each one is read."""
        intake = MediaIntake(received, self.max_media_bytes, timeout_s=self._media.timeout_s)
        auth = {"Authorization": basic_auth_header(self._account_sid, self._auth_token)}
        async with aiohttp.ClientSession() as session:
            for index, (url, mime) in enumerate(zip(sms.media_urls, sms.media_types, strict=True)):
                fetch = partial(
                    self._media.fetch,
                    session,
                    url,
                    chat_id=sms.sender,
                    name=f"{sms.sid}-{index}",
                    # The credentials go only to Twilio's own API host.
                    headers=auth if _same_origin(url, self._api_base_url) else None,
                    max_bytes=self.max_media_bytes,
                )
                await intake.take(fetch, mime=mime or None)
        return intake.message()

    # Outbound

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """One file as an MMS: Twilio fetches it (`MediaUrl`) from the gateway's signed
        `/media` link, which must be public (`http.public_url`); without one, the default."""
        url = link_to(attachment, self.media_links)
        if url is None or not url.startswith("https://"):
            return await super().send_attachment(
                chat_id, attachment, reply_to=reply_to, delivery_key=delivery_key
            )
        mms = OutboundMessage(
            channel=self.name, chat_id=chat_id, content=attachment.caption, media=[url]
        )
        await self.send(mms)
        return None

    async def send(self, message: OutboundMessage) -> None:
        media_urls = [item for item in message.media if item.startswith(("https://", "http://"))]
        if len(media_urls) < len(message.media):
            log.warning(
                "twilio.media_needs_public_url",
                skipped=len(message.media) - len(media_urls),
                hint="Twilio fetches MMS media itself: pass https:// URLs, not local paths",
            )
        if not message.content.strip() and not media_urls:
            return
        extra: dict[str, Any] = {"media_url": media_urls} if media_urls else {}
        client = self._rest()
        try:
            async with twilio_call("messages.create", self._timeout_s):
                await client.messages.create_async(
                    to=message.chat_id, body=message.content, **self._sender, **extra
                )
        except AuthError as error:
            # The token was revoked or rotated while running: the channel is Down.
            self._credentials_dead(error)
            raise
