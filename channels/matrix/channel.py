"""The Matrix channel: a matrix-nio client on `/sync` long polling, edits for streaming.

`start()` checks the access token (`whoami`; a refused token, or one of another user, is fatal),
then syncs until `stop()`. The `since` token is kept in the channel's data directory
(`since_path`) and advanced only once every event of a sync response was handled: published
messages are durable in the gateway by then. A first start without a token skips the backlog;
after that nothing is skipped: a room whose sync timeline the server cut is read back page by
page (`receiver.py`), up to 5,000 events per room per gap.

Each message is published with its event id as `message_id`, the room as the chat. In rooms of
more than two members only messages that mention the bot are taken (`require_mention`);
invites from allowed users are accepted (`auto_join`); see `receiver.py`. An encrypted room
cannot be read: it gets one clear notice and a log line.

Replies are `m.room.message` with the Markdown as `body` and its HTML as `formatted_body`, sent
with a transaction id derived from the reply's `delivery_id`, so a resend after a crash is the
same event. Streamed replies are edited (`m.replace`); typing shows while a turn runs. A
question asked in a thread (`m.thread`) is answered in that thread. A reaction is an
`m.reaction` annotation; taking it back redacts that event, so its event id is remembered.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import structlog
from nio import (
    AsyncClient,
    AsyncClientConfig,
    ErrorResponse,
    RoomRedactResponse,
    RoomSendResponse,
    SyncResponse,
    UploadResponse,
    WhoamiResponse,
)

from bus import Attachment, AttachmentKind, InboundSender, OutboundMessage
from channels.base import FORMATTED
from channels.errors import (
    AuthError,
    FatalChannelError,
    RateLimited,
    TransientError,
)
from channels.health import ChannelHealth
from channels.lifecycle.bounded import RecentMap
from channels.lifecycle.run_state import CredentialsCheck, RunStateChannel
from channels.matrix.content import (
    MAX_CONTENT_BYTES,
    Content,
    canonical,
    decode,
    edit_content,
    encode,
)
from channels.matrix.errors import CHANNEL, matrix_call, translate
from channels.matrix.inbound import posts
from channels.matrix.receiver import MAX_DOWNLOAD_BYTES, SyncHandler
from channels.media_files import MediaStore, read_file
from channels.outbound.delivery import delivery_key
from channels.retry import backoff_delay_s, full_jitter
from channels.retry.pacing import RateLimits
from channels.split.limits import PlatformLimit
from config import MatrixConfig
from sessions.durable import read_state_json, write_state_json

# The `/sync` position, kept durably: where the channel resumes after a restart.
#
# The token is advanced only past events whose `inbound.send` returned (they are durable in the
# gateway), so a crash between receiving and storing re-reads those events, and the gateway's
# dedup by event id answers each once. Written atomically by `sessions.durable`, in a worker
# thread, never on the event loop.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def since_path(data_dir: Path, user_id: str) -> Path:
    return data_dir / "matrix" / f"{_UNSAFE.sub('_', user_id).strip('._') or 'bot'}.since.json"


def _read(path: Path) -> str | None:
    data = read_state_json(path, unreadable_event="matrix.since_unreadable")
    token = data.get("next_batch") if isinstance(data, dict) else None
    return token if isinstance(token, str) and token else None


def _write(path: Path, token: str) -> None:
    write_state_json(path, {"next_batch": token})


class SinceStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._saved: str | None = None

    async def load(self) -> str | None:
        self._saved = await asyncio.to_thread(_read, self.path)
        return self._saved

    async def save(self, token: str) -> None:
        if token == self._saved:
            return
        # Shielded: a cancellation mid-write must not leave the token behind the events.
        await asyncio.shield(asyncio.to_thread(_write, self.path, token))
        self._saved = token


# Matrix's send rates: each homeserver sets its own (Synapse's `rc_message`), and the
# client-server API publishes none, so the scheduler paces by the homeserver's refusals alone:
# a 429 `M_LIMIT_EXCEEDED` holds the room for its `retry_after_ms`
# (https://spec.matrix.org/latest/client-server-api/#rate-limiting).
RATE_LIMITS = RateLimits()


log = structlog.get_logger(__name__)

#: Keep the timeline of each room in a sync short; presence is not needed.
SYNC_FILTER = {"presence": {"types": []}, "room": {"timeline": {"limit": 50}}}


@dataclass(frozen=True, slots=True)
class _Reaction:
    """The bot's reaction of one emoji to one event: its event id while it stands, and how
    often it was taken back, which keeps each new reaction's transaction id new (the
    homeserver would answer a reused one with the redacted event)."""

    event_id: str | None
    removals: int


@dataclass(frozen=True, slots=True)
class MatrixTimeouts:
    """How long the channel waits on the homeserver; the tests shorten them."""

    #: How long one `/sync` long poll may wait for events (the request gets `request_s` more).
    sync_s: float = 30.0
    #: One client-server API call.
    request_s: float = 30.0


#: Synapse's default `max_upload_size` ("50M"); a homeserver may set its own (`m.upload.size`).
MAX_UPLOAD_BYTES = 50 * 1024 * 1024
_MSGTYPES: dict[AttachmentKind, str] = {
    "image": "m.image",
    "audio": "m.audio",
    "video": "m.video",
    "file": "m.file",
}


class MatrixChannel(RunStateChannel):
    name = CHANNEL
    rate_limits = RATE_LIMITS
    limit: ClassVar[PlatformLimit] = PlatformLimit(MAX_CONTENT_BYTES, "bytes")
    max_upload_bytes = MAX_UPLOAD_BYTES
    #: Synapse's default message rate limit is 0.2/s with a burst of 10: edits every 2 s.
    edit_interval_s: ClassVar[float] = 2.0

    def __init__(
        self,
        config: MatrixConfig,
        *,
        data_dir: Path,
        timeouts: MatrixTimeouts = MatrixTimeouts(),
    ) -> None:
        self._homeserver = config.homeserver.rstrip("/")
        self.user_id = user_id = config.user_id
        self._token = config.access_token.get_secret_value()
        self._timeouts = timeouts
        self._since = SinceStore(since_path(data_dir, user_id))
        self._handler = SyncHandler(
            self._nio,
            user_id,
            MediaStore(
                data_dir, CHANNEL, max_bytes=MAX_DOWNLOAD_BYTES, timeout_s=timeouts.request_s
            ),
            allowed=self.is_allowed,
            max_media_bytes=lambda: self.max_media_bytes,
            send=self._room_send,
            require_mention=config.require_mention,
            auto_join=config.auto_join,
            timeout_s=timeouts.request_s,
        )
        self._client: AsyncClient | None = None
        #: (room, event, emoji) -> the bot's reaction there.
        self._reactions: RecentMap[tuple[str, str, str], _Reaction] = RecentMap(10_000)
        super().__init__()
        self._trouble: str | None = None

    def supports_edit(self) -> bool:
        return True

    def format_outbound(self, content: str) -> str:
        return encode(content)

    def _nio(self) -> AsyncClient:
        if self._client is None:
            config = AsyncClientConfig(
                # No sleeping or retrying inside nio: the manager's retry policy is the one layer.
                max_limit_exceeded=0,
                max_timeouts=0,
                request_timeout=self._timeouts.request_s,
                encryption_enabled=False,
                store_sync_tokens=False,
            )
            client = AsyncClient(self._homeserver, self.user_id, config=config)
            client.access_token = self._token
            client.user_id = self.user_id
            self._client = client
        return self._client

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # Lifecycle

    async def start(self, inbound: InboundSender) -> None:
        try:
            await self._run_state.run_until_stopped(self._run(inbound), name="matrix-sync")
        finally:
            await asyncio.shield(self._close_client())

    async def stop(self) -> None:
        await super().stop()
        await self._close_client()

    async def health_check(self) -> ChannelHealth:
        trouble = self._trouble
        return self._run_state.health(None if trouble is None else ChannelHealth.degraded(trouble))

    async def probe(self) -> str | None:
        async with (
            self._probing(self._close_client),
            matrix_call("whoami", self._timeouts.request_s),
        ):
            response = await self._nio().whoami()
        if not isinstance(response, WhoamiResponse):
            raise translate(response, "whoami")
        if response.user_id != self.user_id:
            raise AuthError(
                f"the access token belongs to {response.user_id}, not {self.user_id}",
                channel=CHANNEL,
                suggestion="set user_id to the token's user, or use that user's token",
            )
        return f"{response.user_id} (device {response.device_id})"

    async def _run(self, inbound: InboundSender) -> None:
        await self._run_state.check_credentials(
            CredentialsCheck(self.probe, "the homeserver refused the credentials", CHANNEL)
        )
        since = await self._since.load()
        if since is None:
            since = await self._skip_backlog()
        self._run_state.receiving.set()
        log.info("matrix.receiving", user_id=self.user_id)
        failures = 0
        while True:
            try:
                response = await self._sync(since, self._timeouts.sync_s)
                published = await self._handler.handle(response, inbound, since)
            except (TransientError, RateLimited) as error:
                failures += 1
                self._trouble = f"sync failing: {error}"
                delay_s = (
                    error.retry_after_s
                    if isinstance(error, RateLimited)
                    else full_jitter(backoff_delay_s(failures, 1.0, 30.0))
                )
                log.warning("matrix.sync_failed", error=str(error), retry_in_s=round(delay_s, 2))
                await asyncio.sleep(delay_s)
                continue
            failures, self._trouble = 0, None
            since = str(response.next_batch)
            await self._since.save(since)
            if published:
                log.info("matrix.since_advanced", published=published, next_batch=since)

    async def _sync(self, since: str | None, timeout_s: float) -> SyncResponse:
        client = self._nio()
        async with matrix_call("sync", timeout_s + self._timeouts.request_s):
            response = await client.sync(
                timeout=int(timeout_s * 1000), since=since, sync_filter=SYNC_FILTER
            )
        if isinstance(response, SyncResponse):
            return response
        error = translate(response, "sync")
        if isinstance(error, AuthError):
            raise FatalChannelError(str(error), channel=CHANNEL) from error
        if isinstance(error, TransientError | RateLimited):
            raise error
        # Another refusal: back off and sync again.
        raise TransientError(str(error), channel=CHANNEL) from error

    async def _skip_backlog(self) -> str:
        """A first start: learn the rooms and accept invites, but answer nothing old."""
        response = await self._sync(None, 0.0)
        await self._handler.accept_invites(response)
        skipped = sum(1 for _ in posts(response, self.user_id))
        log.info("matrix.initial_sync", skipped_messages=skipped)
        token = str(response.next_batch)
        await self._since.save(token)
        return token

    # Outbound

    async def _room_send(
        self, room_id: str, content: Content, txn_id: str, event_type: str = "m.room.message"
    ) -> str:
        async with matrix_call("send", self._timeouts.request_s):
            response = await self._nio().room_send(room_id, event_type, content, tx_id=txn_id)
        if not isinstance(response, RoomSendResponse):
            raise translate(response, "send")
        return str(response.event_id)

    async def send(self, message: OutboundMessage) -> None:
        await self.send_with_id(message)

    async def send_with_id(self, message: OutboundMessage) -> str | None:
        if message.media:
            log.warning("matrix.media_not_sent", chat_id=message.chat_id, files=len(message.media))
        text = message.content
        content = decode(text) if message.metadata.get(FORMATTED) else None
        content = content or {"msgtype": "m.text", "body": text}
        if not str(content.get("body", "")).strip():
            return None
        answered = message.answered_ids()
        thread = self._handler.thread_of(message.chat_id, answered[0]) if answered else None
        if thread is not None:
            # Asked in a thread: answered in it (a reply to the question for older clients).
            content = {
                **content,
                "m.relates_to": {
                    "rel_type": "m.thread",
                    "event_id": thread,
                    "is_falling_back": True,
                    "m.in_reply_to": {"event_id": answered[0]},
                },
            }
        return await self._room_send(message.chat_id, content, delivery_key(message))

    async def send_attachment(
        self, chat_id: str, attachment: Attachment, *, reply_to: str | None, delivery_key: str
    ) -> str | None:
        """One file: uploaded to the media repository, then an `m.image`, `m.audio`, `m.video`
        or `m.file` event naming it (the same transaction id on a resend)."""
        data = await read_file(attachment.path, channel=CHANNEL, max_bytes=MAX_UPLOAD_BYTES)
        async with matrix_call("upload", self._timeouts.request_s):
            response, _keys = await self._nio().upload(
                io.BytesIO(data),
                content_type=attachment.mime,
                filename=attachment.name,
                filesize=len(data),
            )
        if not isinstance(response, UploadResponse):
            raise translate(response, "upload")
        content: Content = {
            "msgtype": _MSGTYPES[attachment.kind],
            "body": attachment.caption or attachment.name,
            "filename": attachment.name,
            "url": response.content_uri,
            "info": {"mimetype": attachment.mime, "size": len(data)},
        }
        return await self._room_send(chat_id, content, delivery_key)

    async def edit_message(self, chat_id: str, message_id: str, content: str) -> None:
        new = decode(content)
        digest = hashlib.sha256((message_id + canonical(new)).encode("utf-8")).hexdigest()
        await self._room_send(chat_id, edit_content(new, message_id), f"edit.{digest[:32]}")

    async def react_to_message(self, chat_id: str, message_id: str, emoji: str) -> None:
        key = (chat_id, message_id, emoji)
        known = self._reactions.get(key)
        if known is not None and known.event_id is not None:
            return
        removals = known.removals if known is not None else 0
        relation = {"rel_type": "m.annotation", "event_id": message_id, "key": emoji}
        event_id = await self._room_send(
            chat_id,
            {"m.relates_to": relation},
            f"react.{_digest(key)}.{removals}",
            event_type="m.reaction",
        )
        self._reactions.remember(key, _Reaction(event_id, removals))

    async def remove_reaction(self, chat_id: str, message_id: str, emoji: str) -> None:
        key = (chat_id, message_id, emoji)
        known = self._reactions.get(key)
        if known is None or known.event_id is None:
            log.warning("matrix.reaction_not_known", room_id=chat_id, event_id=message_id)
            return
        async with matrix_call("redact", self._timeouts.request_s):
            response = await self._nio().room_redact(
                chat_id, known.event_id, tx_id=f"unreact.{_digest(key)}.{known.removals}"
            )
        if not isinstance(response, RoomRedactResponse):
            raise translate(response, "redact")
        self._reactions.remember(key, _Reaction(None, known.removals + 1))

    async def send_typing(self, chat_id: str) -> None:
        await self._typing(chat_id, True)

    async def stop_typing(self, chat_id: str) -> None:
        await self._typing(chat_id, False)

    async def _typing(self, room_id: str, active: bool) -> None:
        async with matrix_call("typing", self._timeouts.request_s):
            response = await self._nio().room_typing(room_id, active, timeout=30_000)
        if isinstance(response, ErrorResponse):
            raise translate(response, "typing")


def _digest(parts: tuple[str, ...]) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()[:32]
