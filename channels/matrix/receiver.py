"""What one `/sync` response means: invites accepted, messages published, in order.

A message is published with its event id as `message_id` and its room as the chat, and only
once `inbound.send` returned is it counted (the caller then advances the `since` token). In
rooms of more than two members only messages that mention the bot are taken (`require_mention`).
Invites from allowed users are accepted (`auto_join`); files allowed users post are downloaded
(`media.py`). An encrypted room cannot be read (no
end-to-end encryption here): it gets one clear notice per run and a warning in the log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import structlog
from nio import (
    AsyncClient,
    ErrorResponse,
    MemoryDownloadResponse,
    MessageDirection,
    RoomMessage,
    RoomMessagesResponse,
    SyncResponse,
)

from bus import (
    DELETE,
    EDIT,
    REACTION,
    REPLY_TO,
    InboundMessage,
    InboundSender,
    quoted,
    reaction_note,
)
from channels.errors import ChannelError
from channels.lifecycle.bounded import InboundDedup, RecentMap
from channels.matrix.content import Content
from channels.matrix.errors import CHANNEL, matrix_call, translate
from channels.matrix.inbound import MatrixPost, invites, room_posts
from channels.media_files import MediaStore, safe_name, safe_suffix, save_within
from channels.stopping import until_taken

# Files users post in Matrix (`m.image`, `m.file`, `m.audio`, `m.video`), fetched for the agent.
#
# Each is downloaded through the homeserver (authenticated media, `mxc://` URIs) and saved under
# `{data_dir}/media/matrix/<room>/` by `channels.media_files`, off the event loop. Only
# allowed senders' files are fetched; one over the profile's limit (its `info.size`), refused or
# timed out is named in the message's text instead.
MAX_DOWNLOAD_BYTES = 25 * 1024 * 1024
_DEFAULT_SUFFIX = {"m.image": ".jpg", "m.video": ".mp4", "m.audio": ".ogg", "m.file": ""}


def local_path(store: MediaStore, post: MatrixPost) -> Path:
    suffix = safe_suffix(post.file_name) or _DEFAULT_SUFFIX.get(post.msgtype, "")
    room = safe_name(post.room_id, trim_ends="._", max_chars=None)
    name = safe_name(post.event_id, trim_ends="._", max_chars=None, fallback="event")
    return store.root / room / f"{name}{suffix}"


async def download(
    client: AsyncClient, post: MatrixPost, store: MediaStore, max_bytes: int
) -> str | None:
    """The saved file's path, or None when it is over `max_bytes` once read; raises
    `ChannelError` when the server refuses it."""
    assert post.media_url is not None  # only posts with a file are downloaded
    async with matrix_call("download", store.timeout_s):
        response = await client.download(mxc=post.media_url)
    if not isinstance(response, MemoryDownloadResponse):
        raise ChannelError(f"the server refused the download: {response}", channel=CHANNEL)
    return await save_within(
        local_path(store, post),
        bytes(response.body),
        max_bytes,
        channel=CHANNEL,
        event_id=post.event_id,
    )


log = structlog.get_logger(__name__)

ENCRYPTED_NOTICE = (
    "🔒 This room is end-to-end encrypted, and this bot cannot read encrypted messages. "
    "Please write to it in a room without encryption."
)

#: Events asked for per `/messages` page when a room's gap is read back.
BACKFILL_PAGE = 100
#: Most events read back for one room's gap: a bot away for weeks answers the newest of them.
MAX_BACKFILL_EVENTS = 5_000

#: Sends `content` to a room with a transaction id; returns the event id.
RoomSend = Callable[[str, Content, str], Awaitable[str]]


@dataclass(eq=False)
class SyncHandler:
    client: Callable[[], AsyncClient]
    user_id: str
    #: Where the files users post are kept, and how long one download may take.
    media: MediaStore
    _: KW_ONLY
    allowed: Callable[[str], bool]
    #: The profile's `max_media_bytes`, as the channel has it now.
    max_media_bytes: Callable[[], int]
    send: RoomSend
    require_mention: bool
    auto_join: bool
    timeout_s: float
    _dedup: InboundDedup = field(
        default_factory=lambda: InboundDedup(max_entries=10_000, ttl_s=3600.0),
        init=False,
        repr=False,
    )
    _noticed_rooms: set[str] = field(default_factory=set, init=False, repr=False)
    #: (room, event id) -> (text, sender) of the messages lately seen, the bot's own too: a
    #: reply quotes the text of the one it answers.
    _seen: RecentMap[tuple[str, str], tuple[str, str]] = field(
        default_factory=lambda: RecentMap(10_000), init=False, repr=False
    )
    #: (room, event id) -> the root of the thread a post was written in: its answer goes there.
    _threads: RecentMap[tuple[str, str], str] = field(
        default_factory=lambda: RecentMap(10_000), init=False, repr=False
    )

    def thread_of(self, room_id: str, event_id: str) -> str | None:
        """The thread the post `event_id` was written in, if it was in one (lately)."""
        return self._threads.get((room_id, event_id))

    async def handle(
        self, response: SyncResponse, inbound: InboundSender, since: str | None
    ) -> int:
        """Handle a sync response's invites and messages; how many messages were published.

        `since` is the token the sync was asked from: a room whose timeline the server cut
        (`limited`) is read back from its `prev_batch` to there first, so nothing sent between
        two syncs, or while the daemon was away, is skipped.
        """
        await self.accept_invites(response)
        published = 0
        for room_id, info in response.rooms.join.items():
            events = list(info.timeline.events)
            if info.timeline.limited and info.timeline.prev_batch and since is not None:
                events = await self._missed(room_id, info.timeline.prev_batch, since) + events
            published += await self._handle_room(room_id, events, inbound)
        return published

    async def _handle_room(self, room_id: str, events: list[Any], inbound: InboundSender) -> int:
        published = 0
        for event in events:
            if isinstance(event, RoomMessage) and isinstance(event.source.get("content"), dict):
                body = event.source["content"].get("body")
                if isinstance(body, str):
                    self._seen.remember((room_id, event.event_id), (body, event.sender))
        for post in room_posts(room_id, events, self.user_id):
            if post.event_id in self._dedup:
                continue
            if post.thread_root is not None:
                self._threads.remember((room_id, post.event_id), post.thread_root)
            if post.encrypted:
                await self._notice_encrypted(post)
            elif post.reacts_to is not None and not self._on_the_bots(post):
                pass  # a reaction to someone else's message is not addressed to the bot
            elif self._addressed(post):
                message = _to_inbound(post, self.user_id, self._seen)
                if post.media_url is not None and self.allowed(post.sender):
                    message = await self._receive_file(post, message)
                await self._publish(inbound, message)
                published += 1
            self._dedup.seen(post.event_id)
        return published

    async def _receive_file(self, post: MatrixPost, message: InboundMessage) -> InboundMessage:
        """The message with its file saved, or named in its text when it is over the limit,
        refused or timed out."""
        intake = self.media.intake(message, self.max_media_bytes())
        fetch = partial(download, self.client(), post, self.media, intake.max_bytes)
        await intake.take(
            fetch,
            name=post.file_name,
            mime=post.mime,
            size=post.file_size,
            kind="file" if post.msgtype == "m.file" else None,
            duration_s=post.duration_s,
        )
        return intake.message()

    async def _missed(self, room_id: str, prev_batch: str, since: str) -> list[Any]:
        """The events a limited timeline left out, oldest first, paged back to `since`.

        A failed page raises, so the sync is asked again from the same `since` and the gap is
        read again; nothing of it is skipped.
        """
        events: list[Any] = []
        token = prev_batch
        while len(events) < MAX_BACKFILL_EVENTS:
            async with matrix_call("messages", self.timeout_s):
                page = await self.client().room_messages(
                    room_id, token, end=since, direction=MessageDirection.back, limit=BACKFILL_PAGE
                )
            if not isinstance(page, RoomMessagesResponse):
                raise translate(page, "messages")
            events.extend(page.chunk)
            if not page.chunk or not page.end or page.end == token:
                break
            token = page.end
        else:
            log.warning(
                "matrix.gap_unfilled",
                room_id=room_id,
                read=len(events),
                detail=f"over {MAX_BACKFILL_EVENTS} events were missed; older ones are skipped",
            )
        log.info("matrix.gap_read", room_id=room_id, events=len(events))
        events.reverse()
        return events

    def _on_the_bots(self, reaction: MatrixPost) -> bool:
        """Whether a reaction may be on one of the bot's messages: it is, or its message is
        older than what this channel remembers."""
        assert reaction.reacts_to is not None
        _, sender = self._seen.get((reaction.room_id, reaction.reacts_to), ("", ""))
        return sender in ("", self.user_id)

    def _addressed(self, post: MatrixPost) -> bool:
        if not self.require_mention or post.mentions_bot:
            return True
        room = self.client().rooms.get(post.room_id)
        return room is None or room.member_count <= 2

    async def _publish(self, inbound: InboundSender, message: InboundMessage) -> None:
        """Until the message is durable; a full backlog is waited out, as a poller does."""
        await until_taken(lambda: inbound.send(message), event="matrix.backpressure")

    async def accept_invites(self, response: SyncResponse) -> None:
        for invite in invites(response, self.user_id):
            if not self.auto_join or not self.allowed(invite.inviter):
                log.info("matrix.invite_ignored", room_id=invite.room_id, inviter=invite.inviter)
                continue
            async with matrix_call("join", self.timeout_s):
                joined = await self.client().join(invite.room_id)
            if isinstance(joined, ErrorResponse):
                log.warning("matrix.join_failed", room_id=invite.room_id, error=str(joined))
            else:
                log.info("matrix.joined", room_id=invite.room_id, inviter=invite.inviter)

    async def _notice_encrypted(self, post: MatrixPost) -> None:
        log.warning("matrix.encrypted_room", room_id=post.room_id, sender=post.sender)
        if post.room_id in self._noticed_rooms:
            return
        self._noticed_rooms.add(post.room_id)
        notice: Content = {"msgtype": "m.notice", "body": ENCRYPTED_NOTICE}
        try:
            await self.send(post.room_id, notice, f"encrypted-notice.{post.event_id}")
        except ChannelError as error:
            log.warning("matrix.encrypted_notice_failed", room_id=post.room_id, error=str(error))


def _to_inbound(
    post: MatrixPost, bot_user_id: str, seen: RecentMap[tuple[str, str], tuple[str, str]]
) -> InboundMessage:
    """The bus message of a post: an edit or a redaction names the event it changes; a reply
    carries the event it answers quoted, a reaction names the emoji and the event it is on
    (each with its text when this channel saw it)."""
    metadata: dict[str, object] = {"msgtype": post.msgtype}
    content = post.body
    if post.reacts_to is not None:
        text, _ = seen.get((post.room_id, post.reacts_to), ("", ""))
        metadata[REACTION] = {"emoji": post.body, "message_id": post.reacts_to}
        content = reaction_note(post.body, text)
    if post.edits is not None:
        metadata[EDIT] = {"message_id": post.edits}
    if post.redacts is not None:
        metadata[DELETE] = {"message_id": post.redacts}
    if post.replies_to is not None:
        text, sender = seen.get((post.room_id, post.replies_to), ("", ""))
        metadata[REPLY_TO] = quoted(post.replies_to, text, from_bot=sender == bot_user_id)
    return InboundMessage(
        channel=CHANNEL,
        sender_id=post.sender,
        chat_id=post.room_id,
        content=content,
        timestamp=post.sent_at,
        message_id=post.event_id,
        metadata=metadata,
    )
