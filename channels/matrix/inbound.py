"""What a `/sync` response holds for the channel: messages, invites, encrypted rooms.

Built from matrix-nio's parsed sync response. Messages come per joined room in timeline order;
the bot's own events are left out. Notices (`m.notice`) are what bots send each other and are
not answered, as the spec recommends. An `m.room.encrypted` event cannot be read (this gateway
has no end-to-end encryption): it is reported so the room gets a clear notice.

A user's edit (`m.replace`) is a post naming the event it edits (`edits`), its text the
`m.new_content`; a redaction of a user's message is a post with no text naming the event
redacted (`redacts`). A reply (`m.in_reply_to`) names the event it answers, and a post in a
thread (`m.thread`) the thread's root, where its answer goes. A reaction (`m.reaction`, an
`m.annotation` relation) is a post whose body is the emoji, naming the event it reacts to
(`reacts_to`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from nio import (
    InviteMemberEvent,
    MegolmEvent,
    ReactionEvent,
    RedactionEvent,
    RoomMessage,
    SyncResponse,
)

#: Message types answered; anything else (files, locations) is described by its `body`.
TEXT_TYPES = frozenset({"m.text", "m.emote"})
#: Message types whose `url` is a file to fetch for the agent.
MEDIA_TYPES = frozenset({"m.image", "m.file", "m.audio", "m.video"})


@dataclass(frozen=True, slots=True)
class MatrixPost:
    event_id: str
    room_id: str
    sender: str
    body: str
    msgtype: str
    timestamp_ms: int
    #: The bot was mentioned: in `m.mentions`, by its user id, or by a link to it.
    mentions_bot: bool
    encrypted: bool = False
    #: The `mxc://` URI of a file the message carries (images, files, audio, video).
    media_url: str | None = None
    file_name: str | None = None
    #: What the event's `info` states of the file: type, size, and length (audio, video).
    mime: str | None = None
    file_size: int | None = None
    duration_s: float | None = None
    #: The event this one edits (`m.replace`), or redacts (a redaction: `body` empty).
    edits: str | None = None
    redacts: str | None = None
    #: The event this one replies to (`m.in_reply_to`), and the root of its thread.
    replies_to: str | None = None
    thread_root: str | None = None
    #: The event this reaction (`m.reaction`: `body` is the emoji) is on.
    reacts_to: str | None = None

    @property
    def sent_at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)


@dataclass(frozen=True, slots=True)
class Invite:
    room_id: str
    inviter: str


def invites(response: SyncResponse, bot_user_id: str) -> list[Invite]:
    found = []
    for room_id, info in response.rooms.invite.items():
        for event in info.invite_state:
            if (
                isinstance(event, InviteMemberEvent)
                and event.state_key == bot_user_id
                and event.membership == "invite"
            ):
                found.append(Invite(room_id, event.sender))
                break
    return found


def posts(response: SyncResponse, bot_user_id: str) -> Iterator[MatrixPost]:
    for room_id, info in response.rooms.join.items():
        yield from room_posts(room_id, info.timeline.events, bot_user_id)


def room_posts(room_id: str, events: Iterable[object], bot_user_id: str) -> Iterator[MatrixPost]:
    """The messages among one room's events (a sync's timeline or a page of `/messages`)."""
    for event in events:
        if getattr(event, "sender", bot_user_id) == bot_user_id:
            continue
        if isinstance(event, MegolmEvent) or _event_type(event) == "m.room.encrypted":
            yield MatrixPost(
                event_id=str(getattr(event, "event_id", "")),
                room_id=room_id,
                sender=str(getattr(event, "sender", "")),
                body="",
                msgtype="m.room.encrypted",
                timestamp_ms=int(getattr(event, "server_timestamp", 0)),
                mentions_bot=False,
                encrypted=True,
            )
        elif isinstance(event, RoomMessage):
            post = _message(room_id, event.source, bot_user_id)
            if post is not None:
                yield post
        elif isinstance(event, ReactionEvent) and event.reacts_to and event.key:
            yield MatrixPost(
                event_id=event.event_id,
                room_id=room_id,
                sender=event.sender,
                body=event.key,
                msgtype="m.reaction",
                timestamp_ms=int(event.server_timestamp),
                # Whether it is on the bot's message is the receiver's to tell (what it saw).
                mentions_bot=True,
                reacts_to=event.reacts_to,
            )
        elif isinstance(event, RedactionEvent) and event.redacts:
            yield MatrixPost(
                event_id=event.event_id,
                room_id=room_id,
                sender=event.sender,
                body="",
                msgtype="m.room.redaction",
                timestamp_ms=int(event.server_timestamp),
                mentions_bot=True,
                redacts=event.redacts,
            )


def _event_type(event: object) -> str:
    source = getattr(event, "source", None)
    return str(source.get("type", "")) if isinstance(source, dict) else ""


def _message(room_id: str, source: dict[str, Any], bot_user_id: str) -> MatrixPost | None:
    content = source.get("content")
    if not isinstance(content, dict):
        return None
    msgtype = content.get("msgtype")
    body = content.get("body")
    if not isinstance(msgtype, str) or not isinstance(body, str) or msgtype == "m.notice":
        return None
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    edits = _event_id(relates) if relates.get("rel_type") == "m.replace" else None
    if edits is not None:
        new = content.get("m.new_content")
        if not isinstance(new, dict) or not isinstance(new.get("body"), str):
            return None
        content, body = new, new["body"]
        msgtype = str(new.get("msgtype", msgtype))
    thread_root = _event_id(relates) if relates.get("rel_type") == "m.thread" else None
    in_reply_to = relates.get("m.in_reply_to")
    replies_to = _event_id(in_reply_to) if isinstance(in_reply_to, dict) else None
    if thread_root is not None and relates.get("is_falling_back"):
        replies_to = None  # the thread's fallback for older clients, not a quote
    text = body if msgtype in TEXT_TYPES else f"[{msgtype}] {body}"
    if replies_to is not None:
        text = _without_reply_fallback(text)
    url = content.get("url")
    media_url = url if msgtype in MEDIA_TYPES and isinstance(url, str) else None
    if media_url is not None and not media_url.startswith("mxc://"):
        media_url = None
    return MatrixPost(
        event_id=str(source.get("event_id", "")),
        room_id=room_id,
        sender=str(source.get("sender", "")),
        body=text,
        msgtype=msgtype,
        timestamp_ms=int(source.get("origin_server_ts", 0)),
        mentions_bot=_mentions(content, bot_user_id),
        media_url=media_url,
        file_name=body if media_url else None,
        **(_file_info(content.get("info")) if media_url else {}),
        edits=edits,
        replies_to=replies_to,
        thread_root=thread_root,
    )


def _event_id(relation: dict[str, Any]) -> str | None:
    event_id = relation.get("event_id")
    return event_id if isinstance(event_id, str) and event_id else None


def _without_reply_fallback(text: str) -> str:
    """The reply's own text: older clients put the quoted message first, as `> ` lines."""
    lines = text.split("\n")
    if not lines or not lines[0].startswith("> "):
        return text
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()


def _file_info(info: object) -> dict[str, Any]:
    """`mime`, `file_size` and `duration_s` from an `m.image`/`m.audio`/... event's `info`."""
    if not isinstance(info, dict):
        return {}
    mime, size, duration_ms = info.get("mimetype"), info.get("size"), info.get("duration")
    return {
        "mime": mime if isinstance(mime, str) else None,
        "file_size": size if isinstance(size, int) and not isinstance(size, bool) else None,
        "duration_s": duration_ms / 1000
        if isinstance(duration_ms, int | float) and not isinstance(duration_ms, bool)
        else None,
    }


def _mentions(content: dict[str, Any], bot_user_id: str) -> bool:
    mentions = content.get("m.mentions")
    if isinstance(mentions, dict):
        user_ids = mentions.get("user_ids")
        if isinstance(user_ids, list) and bot_user_id in user_ids:
            return True
    formatted = content.get("formatted_body")
    if isinstance(formatted, str) and f"matrix.to/#/{bot_user_id}" in formatted:
        return True
    return bot_user_id in str(content.get("body", ""))
