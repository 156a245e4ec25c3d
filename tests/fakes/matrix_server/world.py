"""The fake homeserver's world: rooms, members and the event stream a `/sync` reads.

Tests build it directly (`create_room`, `say`, `invite_bot`, ...); the HTTP side in
`__init__.py` serves it to matrix-nio. Every change wakes whoever waits for one.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

JsonObject = dict[str, Any]
SERVER = "fake.local"


@dataclass
class _Room:
    room_id: str
    members: dict[str, str] = field(default_factory=dict)  # user -> join | invite
    encrypted: bool = False


@dataclass(frozen=True, slots=True)
class _Entry:
    position: int
    room_id: str
    event: JsonObject
    #: "timeline" or "invite" (stripped state shown to the invited bot).
    kind: str


class MatrixWorld:
    def __init__(self, bot_user_id: str) -> None:
        self.bot_user_id = bot_user_id
        self.media: dict[str, tuple[bytes, str]] = {}
        self._rooms: dict[str, _Room] = {}
        self._entries: list[_Entry] = []
        self._ids = itertools.count(1)
        self._changed = asyncio.Event()
        #: `/messages` pages served: a limited timeline's gap read back.
        self.message_pages = 0

    def _position(self) -> int:
        return self._entries[-1].position if self._entries else 0

    @property
    def next_batch(self) -> str:
        """The `next_batch` a sync would answer now: the position of the newest event."""
        return f"s{self._position()}"

    def _append(self, room_id: str, event: JsonObject, kind: str = "timeline") -> None:
        self._entries.append(_Entry(self._position() + 1, room_id, event, kind))
        self._notify()

    def _notify(self) -> None:
        """Wake every waiter; each checks its own condition again."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _wait_for(self, predicate: Callable[[], object]) -> None:
        while not predicate():
            await self._changed.wait()

    async def wait_until(self, predicate: Callable[[], object], timeout_s: float = 10.0) -> None:
        """Wait until `predicate()` is true; checked after every change the fake sees."""
        async with asyncio.timeout(timeout_s):
            await self._wait_for(predicate)

    def _event(self, room_id: str, sender: str, kind: str, content: JsonObject) -> JsonObject:
        return {
            "type": kind,
            "event_id": f"${next(self._ids)}:{SERVER}",
            "sender": sender,
            "room_id": room_id,
            "origin_server_ts": int(time.time() * 1000),
            "content": content,
            "unsigned": {},
        }

    def _member_event(self, room_id: str, user: str, membership: str, by: str) -> JsonObject:
        event = self._event(room_id, by, "m.room.member", {"membership": membership})
        event["state_key"] = user
        return event

    def create_room(
        self, members: Sequence[str], *, with_bot: bool = True, encrypted: bool = False
    ) -> str:
        """A room the bot is in (unless `with_bot` is False) with `members` joined."""
        room_id = f"!room{next(self._ids)}:{SERVER}"
        room = _Room(room_id, encrypted=encrypted)
        self._rooms[room_id] = room
        for user in [*members, *([self.bot_user_id] if with_bot else [])]:
            room.members[user] = "join"
            self._append(room_id, self._member_event(room_id, user, "join", user))
        if encrypted:
            event = self._event(
                room_id, members[0], "m.room.encryption", {"algorithm": "m.megolm.v1.aes-sha2"}
            )
            event["state_key"] = ""
            self._append(room_id, event)
        return room_id

    def invite_bot(self, room_id: str, inviter: str) -> None:
        self._rooms[room_id].members[self.bot_user_id] = "invite"
        stripped = {
            "type": "m.room.member",
            "state_key": self.bot_user_id,
            "sender": inviter,
            "content": {"membership": "invite"},
        }
        self._append(room_id, stripped, kind="invite")

    def say(
        self,
        room_id: str,
        sender: str,
        body: str,
        *,
        mention_bot: bool = False,
        msgtype: str = "m.text",
    ) -> str:
        content: JsonObject = {"msgtype": msgtype, "body": body}
        if mention_bot:
            content["m.mentions"] = {"user_ids": [self.bot_user_id]}
        event = self._event(room_id, sender, "m.room.message", content)
        self._append(room_id, event)
        return str(event["event_id"])

    def say_file(
        self,
        room_id: str,
        sender: str,
        data: bytes,
        *,
        name: str,
        mimetype: str = "image/png",
        duration_ms: int | None = None,
        stated_size: int | None = None,
    ) -> str:
        """An `m.image`, `m.audio` (with `info.duration`, in ms) or `m.file` for anything else,
        whose bytes the fake serves."""
        media_id = f"media{next(self._ids)}"
        self.media[media_id] = (data, mimetype)
        major = mimetype.partition("/")[0]
        msgtype = {"image": "m.image", "audio": "m.audio"}.get(major, "m.file")
        info: JsonObject = {
            "mimetype": mimetype,
            "size": len(data) if stated_size is None else stated_size,
        }
        if duration_ms is not None:
            info["duration"] = duration_ms
        content = {
            "msgtype": msgtype,
            "body": name,
            "url": f"mxc://{SERVER}/{media_id}",
            "info": info,
        }
        event = self._event(room_id, sender, "m.room.message", content)
        self._append(room_id, event)
        return str(event["event_id"])

    def react(self, room_id: str, sender: str, event_id: str, key: str) -> str:
        """`sender`'s reaction `key` to the event `event_id` (an `m.annotation`)."""
        relation = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
        event = self._event(room_id, sender, "m.reaction", {"m.relates_to": relation})
        self._append(room_id, event)
        return str(event["event_id"])

    def say_encrypted(self, room_id: str, sender: str) -> str:
        content = {
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": "AwgAEnAC...",
            "sender_key": "senderkey",
            "session_id": "session",
            "device_id": "ALICEDEVICE",
        }
        event = self._event(room_id, sender, "m.room.encrypted", content)
        self._append(room_id, event)
        return str(event["event_id"])

    # What the test reads

    def bot_events(self, room_id: str) -> list[JsonObject]:
        return [
            e.event
            for e in self._entries
            if e.room_id == room_id
            and e.kind == "timeline"
            and e.event["sender"] == self.bot_user_id
            and e.event["type"] == "m.room.message"
        ]

    def bot_reactions(self, room_id: str) -> list[tuple[str, str]]:
        """The bot's reactions standing in the room: (event reacted to, key), redacted ones
        left out."""
        bot = [
            e.event
            for e in self._entries
            if e.room_id == room_id and e.event.get("sender") == self.bot_user_id
        ]
        redacted = {e.get("redacts") for e in bot if e["type"] == "m.room.redaction"}
        return [
            (e["content"]["m.relates_to"]["event_id"], e["content"]["m.relates_to"]["key"])
            for e in bot
            if e["type"] == "m.reaction" and e["event_id"] not in redacted
        ]

    def shown(self, room_id: str) -> list[str]:
        """Each bot message's text as a client shows it: its latest edit applied."""
        shown: dict[str, str] = {}
        for event in self.bot_events(room_id):
            content = event["content"]
            relates = content.get("m.relates_to") or {}
            if relates.get("rel_type") == "m.replace":
                if relates.get("event_id") in shown:
                    shown[relates["event_id"]] = content["m.new_content"]["body"]
            else:
                shown[event["event_id"]] = content["body"]
        return list(shown.values())

    # What a sync answers

    def _sync_body(self, since: int, timeline_limit: int | None = None) -> JsonObject:
        """A sync from position `since`; each room's timeline keeps its newest
        `timeline_limit` events and says it was cut (`limited`, `prev_batch`), as Synapse does."""
        join: dict[str, JsonObject] = {}
        invite: dict[str, JsonObject] = {}
        for entry in self._entries:
            if entry.position <= since:
                continue
            room = self._rooms[entry.room_id]
            membership = room.members.get(self.bot_user_id)
            if entry.kind == "invite":
                if membership == "invite":
                    invite[entry.room_id] = {"invite_state": {"events": [entry.event]}}
                continue
            if membership != "join":
                continue
            section = join.setdefault(entry.room_id, self._joined_section(room))
            section["timeline"]["events"].append(
                {k: v for k, v in entry.event.items() if k != "room_id"}
            )
            section["timeline"]["positions"].append(entry.position)
        for section in join.values():
            timeline = section["timeline"]
            positions = timeline.pop("positions")
            if timeline_limit is not None and len(positions) > timeline_limit:
                timeline["events"] = timeline["events"][-timeline_limit:]
                timeline["limited"] = True
                timeline["prev_batch"] = f"s{positions[-timeline_limit] - 1}"
        return {
            "next_batch": f"s{self._position()}",
            "rooms": {"join": join, "invite": invite, "leave": {}},
            "presence": {"events": []},
            "account_data": {"events": []},
            "to_device": {"events": []},
            "device_one_time_keys_count": {},
        }

    def _messages_body(self, room_id: str, start: int, end: int, limit: int) -> JsonObject:
        """`GET /rooms/{room}/messages?dir=b`: the room's events at positions in (end, start],
        newest first, `limit` at most; `end` is left out once the page reaches `end`."""
        found = [
            entry
            for entry in reversed(self._entries)
            if entry.room_id == room_id
            and entry.kind == "timeline"
            and end < entry.position <= start
        ][:limit]
        self.message_pages += 1
        body: JsonObject = {"chunk": [entry.event for entry in found], "start": f"s{start}"}
        if len(found) == limit:
            body["end"] = f"s{found[-1].position - 1}"
        return body

    @staticmethod
    def _joined_section(room: _Room) -> JsonObject:
        joined = sum(1 for m in room.members.values() if m == "join")
        invited = sum(1 for m in room.members.values() if m == "invite")
        return {
            "timeline": {"events": [], "limited": False, "prev_batch": "p0", "positions": []},
            "state": {"events": []},
            "ephemeral": {"events": []},
            "account_data": {"events": []},
            "summary": {"m.joined_member_count": joined, "m.invited_member_count": invited},
            "unread_notifications": {"notification_count": 0, "highlight_count": 0},
        }
