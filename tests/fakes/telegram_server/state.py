"""What the fake Telegram remembers: chats, messages, files, commands, queued updates.

Objects are kept in the Bot API's own JSON shapes (User, Chat, Message, File), so what the fake
returns is what python-telegram-bot would get from Telegram.
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.telegram_server.markup import MarkupError, utf16_len, visible_text

TEXT_LIMIT = 4096
CAPTION_LIMIT = 1024


class ApiError(Exception):
    """An error answer: non-2xx, `{"ok": false, "error_code", "description"}`."""

    def __init__(self, status: int, description: str, retry_after: float | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": self.status,
            "description": self.description,
        }
        if self.retry_after is not None:
            body["parameters"] = {"retry_after": self.retry_after}
        return body


@dataclass
class UploadedFile:
    filename: str
    content_type: str
    data: bytes


@dataclass
class RecordedRequest:
    """One request as the fake received it; `params` decoded from JSON, form or multipart."""

    method: str
    params: dict[str, Any]
    files: dict[str, UploadedFile]
    at: float
    status: int = 200


@dataclass
class StoredFile:
    file_id: str
    file_unique_id: str
    file_path: str
    data: bytes
    extra: dict[str, Any] = field(default_factory=dict)

    def as_file(self) -> dict[str, Any]:
        return {
            "file_id": self.file_id,
            "file_unique_id": self.file_unique_id,
            "file_size": len(self.data),
            **self.extra,
        }


class BotState:
    def __init__(self, bot_user: dict[str, Any]) -> None:
        self.bot_user = bot_user
        self.chats: dict[int, dict[str, Any]] = {}
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}
        self.reactions: dict[tuple[int, int], list[Any]] = {}
        self.files: dict[str, StoredFile] = {}
        self.commands: list[dict[str, Any]] = []
        self.webhook: dict[str, Any] | None = None
        #: Queued updates (id, payload) not yet confirmed by an offset.
        self.pending: list[tuple[int, object]] = []
        #: How many getUpdates answers carried each update id.
        self.delivered: dict[int, int] = {}
        #: Callback queries (button taps) sent to the bot -> how often it answered each.
        self.callback_queries: dict[str, int] = {}
        self._message_ids: dict[int, itertools.count[int]] = {}
        self.update_ids = itertools.count(100_001)
        self._file_ids = itertools.count(1)

    def chat(
        self, chat_id: int, chat_type: str | None = None, user: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if chat_id not in self.chats:
            kind = chat_type or ("private" if chat_id > 0 else "supergroup")
            chat: dict[str, Any] = {"id": chat_id, "type": kind}
            if kind == "private" and user is not None:
                chat["first_name"] = user["first_name"]
                if "username" in user:
                    chat["username"] = user["username"]
            elif kind != "private":
                chat["title"] = f"Group {abs(chat_id)}"
            self.chats[chat_id] = chat
        return self.chats[chat_id]

    def next_message_id(self, chat_id: int) -> int:
        return next(self._message_ids.setdefault(chat_id, itertools.count(1)))

    def add_file(
        self, data: bytes, folder: str, *, suffix: str = "", file_name: str | None = None
    ) -> StoredFile:
        number = next(self._file_ids)
        stored = StoredFile(
            file_id=f"FILE-{number}",
            file_unique_id=f"uniq{number}",
            file_path=f"{folder}/file_{number}{suffix or _suffix(file_name)}",
            data=data,
        )
        self.files[stored.file_id] = stored
        return stored

    def file_at(self, path: str) -> StoredFile | None:
        return next((f for f in self.files.values() if f.file_path == path), None)

    def message(self, params: dict[str, Any], missing: str) -> dict[str, Any]:
        message = self.messages.get((chat_id_of(params), int_param(params.get("message_id"))))
        if message is None:
            raise ApiError(400, f"Bad Request: {missing}")
        return message

    def bot_message(
        self,
        chat_id: int,
        params: dict[str, Any],
        fields: dict[str, Any],
        entities: list[dict[str, Any]],
        entities_key: str,
    ) -> dict[str, Any]:
        """Store and return a message the bot sends, honouring `reply_parameters` and
        `message_thread_id` (a message with neither lands in a forum's General topic)."""
        message: dict[str, Any] = {
            "message_id": 0,
            "from": self.bot_user,
            "chat": self.chat(chat_id),
            "date": int(time.time()),
            **fields,
        }
        topic = params.get("message_thread_id")
        reply = params.get("reply_parameters")
        if isinstance(reply, dict):
            original = self.messages.get((chat_id, int_param(reply.get("message_id"))))
            if original is not None:
                message["reply_to_message"] = original
                # A reply lands in the topic of the message it answers.
                topic = topic or original.get("message_thread_id")
            elif not reply.get("allow_sending_without_reply"):
                raise ApiError(400, "Bad Request: message to be replied not found")
        if topic:
            message["message_thread_id"] = int_param(topic)
            message["is_topic_message"] = True
        if entities:
            message[entities_key] = entities
        if isinstance(params.get("reply_markup"), dict):
            message["reply_markup"] = params["reply_markup"]
        message["message_id"] = self.next_message_id(chat_id)
        self.messages[(chat_id, message["message_id"])] = message
        return message

    def bot_messages(self, chat_id: int) -> list[dict[str, Any]]:
        bot_id = self.bot_user["id"]
        return [
            message
            for (chat, _), message in sorted(self.messages.items())
            if chat == chat_id and message["from"]["id"] == bot_id
        ]


def chat_id_of(params: dict[str, Any]) -> int:
    value = params.get("chat_id")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
        return int(value)
    raise ApiError(400, "Bad Request: chat not found")


def int_param(value: object, default: int = 0) -> int:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int):
        return value
    try:
        return int(str(value))
    except ValueError:
        return default


def checked_text(
    text: object, parse_mode: object, limit: int, *, caption: bool = False
) -> tuple[str, list[dict[str, Any]]]:
    """The visible text and entities of a text to send, or the error Telegram would answer."""
    if not isinstance(text, str) or not text:
        raise ApiError(400, "Bad Request: message text is empty")
    try:
        visible, entities = visible_text(text, parse_mode if isinstance(parse_mode, str) else None)
    except MarkupError as exc:
        raise ApiError(400, f"Bad Request: can't parse entities: {exc}") from exc
    if not visible.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    if utf16_len(visible) > limit:
        what = "message caption is too long" if caption else "message is too long"
        raise ApiError(400, f"Bad Request: {what}")
    return visible, entities


def detect_entities(text: str) -> list[dict[str, Any]]:
    """The mention and command entities Telegram finds in a user's text by itself."""
    entities = []
    for match in re.finditer(r"(?<![\w/@])(/[A-Za-z0-9_]{1,32}(?:@\w{3,32})?|@\w{4,32})", text):
        kind = "bot_command" if match.group().startswith("/") else "mention"
        entities.append(
            {
                "type": kind,
                "offset": utf16_len(text[: match.start()]),
                "length": utf16_len(match.group()),
            }
        )
    return entities


def _suffix(file_name: str | None) -> str:
    if file_name and "." in file_name:
        return "." + re.sub(r"[^A-Za-z0-9]", "", file_name.rsplit(".", 1)[1])[:10]
    return ""
